"""Ours on their memory kinds (`relabel.Shadow`), without Go: the counterfactual that
recognises class `memory-kind-by-size` when the kinds move a container's CPUs too.

The case is `random/48`'s first container in the CI profile: a 800m Guaranteed container
on a machine whose 2G PMEM node (attached to node 3) nri-plugins calls HBM by its size
(the DRAM nodes have 16G). Ours puts it on node 3, the one node with PMEM near it (a
pool with every memory kind the container may use wins); theirs, with no PMEM anywhere,
on node 0. Ours given their names for the nodes puts it on node 0 as well.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import IDSet
from tests.conformance.harness import make_container, make_pod
from tests.differential.classes import Context, classify
from tests.differential.gen import Ctr, Pod
from tests.differential.machines import TA_CONFIG, random_machine
from tests.differential.plugins import Placement
from tests.differential.relabel import REFUSED, Shadow, kind_by_size, their_kinds

MACHINE = random_machine(48)
POD = Pod("p0", "default", "guaranteed", (Ctr("p0c0", 800, 800, None, 64 << 20),))
THEIRS = Placement("0-7,48-55", "0")
OURS = Placement("24-31,72-79", "3,6")


def _shadow_with_the_container() -> tuple[Shadow, str]:
    shadow = Shadow(MACHINE.topology, TA_CONFIG)
    pod = make_pod(name="p0", qos="guaranteed")
    c = make_container(
        pod, name="p0c0", cpu_request_millis=800, cpu_limit_millis=800,
        memory_limit=64 << 20,
    )
    shadow.create(pod, c)
    return shadow, str(c["id"])


def test_their_kinds_renames_the_small_pmem_node() -> None:
    topo = MACHINE.topology
    assert kind_by_size(topo) == IDSet({6})
    assert topo.node(6).kind is MemoryKind.PMEM
    relabelled = their_kinds(topo)
    assert relabelled is not None and relabelled.node(6).kind is MemoryKind.HBM
    assert their_kinds(random_machine(1).topology) is None


def test_the_shadow_places_the_container_as_theirs() -> None:
    shadow, cid = _shadow_with_the_container()
    assert shadow.held(cid) == THEIRS
    shadow.remove(cid)
    assert shadow.held(cid) is None
    shadow.restart()
    assert shadow.held(cid) is None


def test_a_shadow_needs_a_renamed_node() -> None:
    with pytest.raises(ValueError, match="expected a CPU-less node"):
        Shadow(random_machine(1).topology, TA_CONFIG)


def _ctx(**kw: object) -> Context:
    base = Context(
        machine=MACHINE.topology, policy="topology-aware", pod=POD, ctr=POD.containers[0],
        ours=OURS, theirs=THEIRS, before=None, after_restart=False, relabelled=THEIRS,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_the_class_takes_other_cpus_when_the_shadow_agrees_with_theirs() -> None:
    assert classify(_ctx()) == "memory-kind-by-size"


@pytest.mark.parametrize(
    "near_miss",
    [
        {"relabelled": None},  # no shadow (after a restart): CPUs differ, no class
        {"relabelled": OURS},  # the renaming does not move it: not the cause
        {"relabelled": Placement("0-7,48-55", "0,6")},  # close is not enough
        {"relabelled": REFUSED},
    ],
)
def test_the_class_needs_the_shadow_to_hold_exactly_theirs(near_miss: dict[str, object]) -> None:
    assert classify(_ctx(**near_miss)) is None
