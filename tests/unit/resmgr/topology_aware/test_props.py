"""Property tests of the topology-aware policy on synthetic and real machines.

Random create/delete sequences (every QoS class, whole and fractional requests, the
CPU and memory annotations, kube-system containers) must keep the allocator's
invariants after every step (`check_invariants`), report as updates exactly the other
containers whose rendering changed, rebuild from their own rendering without a single
update, and return to the initial state once everything is deleted.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import ContainerID, ContainerInfo, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from tests.support.builders import (
    ctr,
    snapshot,
    snapshot_names,
    topo,
    with_current,
)
from tests.support.requirements import require_topologies
from tests.support.restart_rule import assert_restart_exact
from tests.support.topology_aware import OPS, SYNTHETIC, Op, exercise, make

#: examples of the synthetic sequences; the long run (docs/architecture.md) sets more
EXAMPLES = int(os.environ.get("NRI_RESMGR_RESTART_EXAMPLES", "120"))


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, colocate=st.booleans(), fallback=st.booleans())
def test_synthetic_sequences(name: str, ops: list[Op], colocate: bool, fallback: bool) -> None:
    config = {"colocatePods": colocate, "fallbackToShared": fallback}
    exercise(topo(**SYNTHETIC[name]), config, ops)


@pytest.mark.parametrize("name", snapshot_names() or ["(no snapshots)"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
# a reserved request beyond the reserved capacity (2 CPUs: 2000m) ran on the root's
# shared CPUs; once the reserved container before it left, the rebuild put it on the
# reserved CPUs (server-2s-4n-2pmem-112t-isolated; test_rules has the focused case)
@example(
    ops=[
        Op(True, 0, QoSClass.GUARANTEED, 1000, True, False, 0, {}),
        Op(True, 0, QoSClass.GUARANTEED, 0, False, False, 0, {}),
        Op(True, 1, QoSClass.GUARANTEED, 1500, True, False, 0, {}),
        Op(False, 0, QoSClass.GUARANTEED, 0, False, False, 0, {}),
    ]
)
def test_real_machine_sequences(name: str, ops: list[Op]) -> None:
    require_topologies()
    exercise(snapshot(name), {"reservedResources": {"cpu": "2"}}, ops)


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data=st.data())
def test_rebuild_from_arbitrary_cpusets_is_valid(
    name: str, ops: list[Op], data: st.DataObject
) -> None:
    """Whatever the runtime reports (overlaps, stale CPUs), the rebuilt state is valid."""
    t = topo(**SYNTHETIC[name])
    p = TopologyAwarePolicy(topology=t, config={})
    cpus = [*sorted(t.online_cpus()), len(t.cpus) + 3]  # one CPU that does not exist
    containers = {}
    for op in ops:
        c = make(op)
        cur = data.draw(st.sets(st.sampled_from(cpus), max_size=6))
        containers[c.id] = with_current(c, type(t.online_cpus())(cur), None)
    d = p.rebuild(list(containers.values()))
    p.check(d.state)
    rendered = p.render(d.state)
    for c in containers.values():
        assert rendered[c.id].cpus <= t.online_cpus()
    # once the updates are applied, a second rebuild changes nothing (unless the first
    # had to overcommit someone or leave them untouched, who may fit now)
    if "left untouched" not in d.reason and "overcommitted" not in d.reason:
        applied = [
            with_current(c, rendered[c.id].cpus, rendered[c.id].mems)
            for c in containers.values()
        ]
        assert p.rebuild(applied).updates == ()


#: issue 24's scattered shared set: Burstable 1.5-CPU containers whose shared cpuset spans
#: nodes once grants have come and gone on an 80-CPU, 4-node machine (topology-aware
#: defaults); c8 ends on 32-33,40,72-73, CPUs of nodes 0 and 3.  ("+" creates, "-" deletes;
#: g<N>: Guaranteed N CPUs, b: Burstable 1500m.)
SCATTERED = (
    "+c1 g4, +c2 b, -c1, +c3 b, -c2, +c4 b, -c4, +c5 g2, -c5, +c6 b, +c7 g2, +c8 b, +c9 g4, "
    "+c10 g8, -c3, +c11 g8, +c12 g4, -c6, -c10, +c13 g8, +c14 g8, +c15 g4, +c16 g2, +c17 g4, "
    "-c9, +c18 g2, +c19 b, +c20 g2, +c21 g4, +c22 g4, +c23 g8, +c24 g8, +c25 g4, +c26 g4, "
    "-c13, +c28 b, +c29 g4, +c30 g2"
)


def test_scattered_shared_sets_survive_restarts() -> None:
    t = topo(packages=2, nodes=2, cores=10, threads=2, memory="4G")
    assert (len(t.online_cpus()), len(t.nodes)) == (80, 4)
    p = TopologyAwarePolicy(topology=t, config={})
    s = p.initial_state()
    live: dict[str, ContainerInfo] = {}
    for step in SCATTERED.split(", "):
        if step.startswith("-"):
            s = p.release(s, live.pop(step[1:]).id).state
            continue
        name, kind = step[1:].split()
        if kind == "b":
            c = ctr(name, pod=name, qos=QoSClass.BURSTABLE, milli=1500, cid=name)
        else:
            c = ctr(name, pod=name, qos=QoSClass.GUARANTEED, milli=1000 * int(kind[1:]), cid=name)
        s = p.allocate(s, c).state
        live[name] = c
    cpus = p.render(s)[ContainerID("c8")].cpus
    nodes = {n for n, node in t.nodes.items() if not cpus.isdisjoint(node.cpus)}
    assert (str(cpus), nodes) == ("32-33,40,72-73", {0, 3}), "the scattered case itself"
    assert_restart_exact(p, s, list(live.values()))
