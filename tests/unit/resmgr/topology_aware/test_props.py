"""Property tests of the topology-aware policy on synthetic and real machines.

Random create/delete sequences (every QoS class, whole and fractional requests, the
CPU and memory annotations, kube-system containers) must keep the allocator's
invariants after every step (`check_invariants`), report as updates exactly the other
containers whose rendering changed, rebuild from their own rendering without a single
update, and return to the initial state once everything is deleted.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import (
    QoSClass,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from tests.support.builders import (
    snapshot,
    snapshot_names,
    topo,
    with_current,
)
from tests.support.requirements import require_topologies
from tests.support.topology_aware import OPS, SYNTHETIC, Op, exercise, make


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
