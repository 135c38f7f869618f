"""Ours with one rule of theirs (`shadow.Shadow`), without Go: the counterfactuals that
recognise classes `memory-kind-by-size` (the kinds move a container's CPUs too) and
`burstable-memory-by-limit`.

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
from tests.conformance.harness_pods import make_container, make_pod
from tests.differential.classes import Context, _reserved_cpus, classify
from tests.differential.gen import CreatePod, Ctr, DeletePod, Pod
from tests.differential.machines import TA_CONFIG, Machine, random_machine, shipped
from tests.differential.plugins import Held, Placement
from tests.differential.profile import make_case
from tests.differential.run import ctr_json, pod_json
from tests.differential.shadow import (
    AS_IS,
    LIMITS_AS_REQUESTS,
    REFUSED,
    THEIR_KINDS,
    THEIR_RESERVED,
    Shadow,
    applies,
    kind_by_size,
    their_kinds,
)

MACHINE = random_machine(48)
POD = Pod("p0", "default", "guaranteed", (Ctr("p0c0", 800, 800, None, 64 << 20),))
THEIRS = Placement("0-7,48-55", "0")
OURS = Placement("24-31,72-79", "3,6")


def _shadow_with_the_container() -> tuple[Shadow, str]:
    shadow = Shadow(MACHINE.topology, TA_CONFIG, THEIR_KINDS)
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
        Shadow(random_machine(1).topology, TA_CONFIG, THEIR_KINDS)


def _ctx(**kw: object) -> Context:
    base = Context(
        machine=MACHINE.topology, policy="topology-aware", pod=POD, ctr=POD.containers[0],
        ours=OURS, theirs=THEIRS, before=None, after_restart=False, shadows={THEIR_KINDS: THEIRS},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_the_class_takes_other_cpus_when_the_shadow_agrees_with_theirs() -> None:
    assert classify(_ctx()) == "memory-kind-by-size"


@pytest.mark.parametrize(
    "near_miss",
    [
        {"shadows": {}},  # no shadow (after a restart): CPUs differ, no class
        {"shadows": {THEIR_KINDS: OURS}},  # the renaming does not move it: not the cause
        {"shadows": {THEIR_KINDS: Placement("0-7,48-55", "0,6")}},  # close is not enough
        {"shadows": {THEIR_KINDS: REFUSED}},
    ],
)
def test_the_class_needs_the_shadow_to_hold_exactly_theirs(near_miss: dict[str, object]) -> None:
    assert classify(_ctx(**near_miss)) is None


def test_another_rules_shadow_is_its_own_class() -> None:
    assert classify(_ctx(shadows={LIMITS_AS_REQUESTS: THEIRS})) == "burstable-memory-by-limit"


def _replay_to(machine: Machine, variant: str, target: str) -> tuple[Held | None, Held]:
    """The CI profile's case on `machine` through a shadow of `variant` and through our
    policy as it is, up to container `target`'s creation: where each holds it."""
    case = make_case(machine, "topology-aware", 1)
    shadows = (
        Shadow(machine.topology, TA_CONFIG, variant),
        Shadow(machine.topology, TA_CONFIG, AS_IS),
    )
    live: list[list[str]] = []
    for op in case.ops:
        if isinstance(op, CreatePod):
            pj = pod_json(op.pod)
            ids = []
            for c in (*op.pod.init, *op.pod.containers):
                cj = ctr_json(pj, c)
                for s in shadows:
                    s.create(pj, cj)
                if c.name == target:
                    held = [s.held(str(cj["id"])) for s in shadows]
                    assert held[1] is not None
                    return held[0], held[1]
                if c in op.pod.init:
                    for s in shadows:
                        s.remove(str(cj["id"]))
                else:
                    ids.append(str(cj["id"]))
            live.append(ids)
        elif isinstance(op, DeletePod) and live:
            for cid in live.pop(op.index % len(live)):
                for s in shadows:
                    s.remove(cid)
        else:
            raise AssertionError(f"{machine.name}: a restart before {target}")
    raise AssertionError(f"{machine.name}: no container {target}")


def test_burstable_limits_filling_a_node_move_an_init_container() -> None:
    """parity/n4c128, the CI profile's sequence: node 1 holds a Burstable container with
    a 1 GiB memory limit and no known request (and a 128 MiB Guaranteed one) when a
    Burstable init container with a 1 GiB limit comes. Theirs reserves the limits, so
    node 1 has no room for it and node 0 wins; ours counts no memory for the first and
    takes node 1 (more shared room). Ours counting the limits puts it on node 0."""
    machine = next(m for m in shipped() if m.name == "parity/n4c128")
    counted, plain = _replay_to(machine, LIMITS_AS_REQUESTS, "p7i0")
    assert counted == Placement("1,4-31", "0")
    assert plain == Placement("32-63", "1")


def test_their_reserved_capacity_rounds_up_to_the_same_cpus() -> None:
    """750m reserves one CPU on both sides; the shadow counts it as 1000m (theirs), so a
    kube-system container of 900m runs on it there, on the root's shared CPUs here."""
    machine = random_machine(1).topology
    assert applies(THEIR_RESERVED, machine, TA_CONFIG)
    counted, plain = (Shadow(machine, TA_CONFIG, v) for v in (THEIR_RESERVED, AS_IS))
    pod = make_pod(name="k", namespace="kube-system", qos="burstable")
    c = make_container(pod, name="k0", cpu_request_millis=900)
    for s in (counted, plain):
        s.create(pod, c)
    reserved = _reserved_cpus(machine)
    assert counted.held(str(c["id"])) == Placement(str(reserved), str(_mems(counted, c)))
    here = plain.held(str(c["id"]))
    assert isinstance(here, Placement) and here.cpus != str(reserved)


def _mems(s: Shadow, c: dict[str, object]) -> str:
    held = s.held(str(c["id"]))
    assert isinstance(held, Placement)
    return held.mems


def test_a_whole_reserved_quantity_has_no_reserved_shadow() -> None:
    whole = TA_CONFIG.replace("cpu: 750m", "cpu: 1000m")
    assert whole != TA_CONFIG
    assert not applies(THEIR_RESERVED, random_machine(1).topology, whole)
    with pytest.raises(ValueError, match=r"expected a fractional reservedResources\.cpu"):
        Shadow(random_machine(1).topology, whole, THEIR_RESERVED)
