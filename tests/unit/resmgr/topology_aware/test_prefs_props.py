"""Property tests: the allocator's invariants hold with the ta-prefs annotations.

Random create/delete sequences as in `test_props` (invariants after
every step, updates = the containers whose rendering changed, a rebuild from our own
rendering moves nobody, releasing everything gives the initial state), on machines with
E-cores and isolated CPUs, with ``prefer-cpu-priority``, ``require-isolated-cpus`` and
affinity/anti-affinity among the annotations.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.affinity import AFFINITY, ANTI_AFFINITY
from nri_resmgr.policy.topology_aware.preferences import (
    HIDE_HYPERTHREADS,
    PREFER_ISOLATED,
    PREFER_SHARED,
    REQUIRE_ISOLATED,
)
from nri_resmgr.policy.topology_aware.priority import PREFER_CPU_PRIORITY
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import with_current
from tests.support.topology_aware import Op, exercise, make

GU = QoSClass.GUARANTEED
MACHINES = {
    "hybrid-isolated": {
        "packages": 1,
        "nodes": 2,
        "cores": 4,
        "threads": 2,
        "memory": "2G",
        "efficient_cpus": "2-3,6-7,10-11,14-15",
        "isolated": "1,9",
    },
    "n4c16-e-node": {
        "packages": 2,
        "nodes": 2,
        "cores": 2,
        "threads": 2,
        "memory": "2G",
        "efficient_cpus": "4-5,12-13",
        "isolated": "7,15",
    },
}

BOOL = st.sampled_from(["true", "false"])
#: simple-form affinities between the slots' containers (c0 .. c9)
PAIRS = st.dictionaries(
    st.sampled_from([f"c{i}" for i in range(10)]),
    st.lists(st.sampled_from([f"c{i}" for i in range(10)]), min_size=1, max_size=3),
    min_size=1,
    max_size=3,
).map(lambda d: "\n".join(f"{k}: [{', '.join(v)}]" for k, v in d.items()))
PREFS = st.fixed_dictionaries(
    {},
    optional={
        PREFER_CPU_PRIORITY: st.sampled_from(["high", "normal", "low", "default"]),
        REQUIRE_ISOLATED: BOOL,
        PREFER_ISOLATED: BOOL,
        PREFER_SHARED: BOOL,
        HIDE_HYPERTHREADS: BOOL,
        AFFINITY: PAIRS,
        ANTI_AFFINITY: PAIRS,
    },
)

OPS = st.lists(
    st.builds(
        Op,
        create=st.booleans() | st.just(True),
        slot=st.integers(0, 9),
        qos=st.sampled_from([GU, GU, QoSClass.BURSTABLE, QoSClass.BEST_EFFORT]),
        milli=st.sampled_from([0, 250, 1000, 1500, 2000, 3000]),
        system=st.just(False),
        init=st.just(False),
        memory=st.just(0),
        annotations=PREFS,
    ),
    max_size=20,
)


@pytest.mark.parametrize("name", list(MACHINES))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, fallback=st.booleans(), colocate=st.booleans())
def test_sequences_with_priorities_isolation_and_affinities(
    name: str, ops: list[Op], fallback: bool, colocate: bool
) -> None:
    config = {
        "fallbackToShared": fallback,
        "colocatePods": colocate,
        "colocateNamespaces": colocate,
    }
    exercise(build_topology(MACHINES[name]), config, ops)


@pytest.mark.parametrize("name", list(MACHINES))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data=st.data())
def test_rebuild_from_arbitrary_cpusets_with_preferences(
    name: str, ops: list[Op], data: st.DataObject
) -> None:
    """Whatever the runtime reports, the rebuilt state keeps the invariants, and once its
    updates are applied a second rebuild changes nothing (unless someone was
    overcommitted or left untouched)."""
    t = build_topology(MACHINES[name])
    p = TopologyAwarePolicy(topology=t, config={})
    cpus = sorted(t.online_cpus())
    containers = {}
    for op in ops:
        c = make(op)
        cur = data.draw(st.sets(st.sampled_from(cpus), max_size=6))
        containers[c.id] = with_current(c, IDSet(cur), None)
    d = p.rebuild(list(containers.values()))
    p.check(d.state)
    rendered = p.render(d.state)
    if "left untouched" not in d.reason and "overcommitted" not in d.reason:
        applied = [
            with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in containers.values()
        ]
        assert p.rebuild(applied).updates == (), d.reason
