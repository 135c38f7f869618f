"""Property tests of the balloons policy: random create/delete sequences.

After every step: the invariants hold (`check_invariants`: no CPU in two balloons,
sizes within minCPUs..maxCPUs and following the requests, members only in balloons of
their own type, composites split over their components), the updates are exactly the
other containers whose rendering changed (render-everything oracle), and every
container is in a balloon of the type `balloon_type_of` gives it.  At the end a rebuild
from the rendered cpusets moves nothing, and a second rebuild from the first one's
result moves nothing either.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import AllocationError, AnnotationError, ContainerID, ContainerInfo
from nri_resmgr.policy.balloons import BALLOON_ANNOTATION, BalloonsState, balloon_type_of
from nri_resmgr.policy.decide import diff_updates
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, policy

CONFIGS: list[dict[str, Any]] = [
    {
        "reservedResources": {"cpu": "1"},
        "allocatorTopologyBalancing": True,
        "loadClasses": [{"name": "membw", "level": "l2cache", "overloadsLevelInBalloon": True}],
        "balloonTypes": [
            {"name": "full", "minCPUs": 1, "maxCPUs": 4, "namespaces": ["full"]},
            {
                "name": "new",
                "preferNewBalloons": True,
                "maxBalloons": 3,
                "namespaces": ["new"],
                "preferCloseToDevices": ["/sys/devices/system/node/node1"],
                "loads": ["membw"],
            },
            {
                "name": "grp",
                "groupBy": "${pod/labels/app}",
                "shareIdleCPUsInSame": "numa",
                "namespaces": ["grp"],
            },
        ],
    },
    {
        "reservedResources": {"cpu": "cpuset:0,16"},
        "balloonTypes": [
            {
                "name": "spread",
                "preferSpreadingPods": True,
                "minBalloons": 2,
                "minCPUs": 1,
                "maxCPUs": 3,
                "namespaces": ["full", "new"],
            },
            {
                "name": "ns",
                "preferPerNamespaceBalloon": True,
                "preferSpreadOnPhysicalCores": True,
                "namespaces": ["grp"],
            },
            {
                "name": "duo",
                "components": [{"balloonType": "ns"}, {"balloonType": "spread"}],
                "minCPUs": 2,
                "namespaces": ["other"],
            },
            {"name": "default", "shareIdleCPUsInSame": "system", "minCPUs": 1},
        ],
    },
    {
        # composites: nested, balance-balloons, minCPUs and limits on both levels, and a
        # composite reserved balloon (their test16's)
        "reservedResources": {"cpu": "1"},
        "allocatorTopologyBalancing": True,
        "balloonTypes": [
            {"name": "reserved", "components": [{"balloonType": "leafb"}]},
            {"name": "leafa", "maxCPUs": 3, "namespaces": ["full"]},
            {"name": "leafb", "preferSpreadOnPhysicalCores": True, "minCPUs": 1},
            {"name": "leafc", "preferSpreadOnPhysicalCores": True, "maxCPUs": 3},
            {
                # components sized alike: a rebuild cannot tell which one a composite
                # without CPUs of its own had (policy docstring)
                "name": "pair",
                "components": [{"balloonType": "leafa"}, {"balloonType": "leafc"}],
                "componentCreation": "balance-balloons",
                "preferNewBalloons": True,
                "maxCPUs": 3,
                "namespaces": ["new"],
            },
            {
                "name": "trio",
                "components": [
                    {"balloonType": "pair"},
                    {"balloonType": "leafa"},
                    {"balloonType": "leafb"},
                ],
                "minCPUs": 2,
                "minBalloons": 1,
                "groupBy": "${pod/labels/app}",
                "shareIdleCPUsInSame": "numa",
                "namespaces": ["grp", "other"],
            },
        ],
    },
]

CONTAINER = st.builds(
    lambda name, pod, ns, milli, app, ann: bctr(
        name,
        pod=f"pod{pod}",
        ns=ns,
        milli=milli,
        labels={"app": f"a{app}"},
        ann={BALLOON_ANNOTATION: "full"} if ann else None,
    ),
    name=st.sampled_from(["c0", "c1"]),
    pod=st.integers(0, 5),
    ns=st.sampled_from(["full", "new", "grp", "other", "kube-system"]),
    milli=st.sampled_from([0, 100, 500, 1000, 1500, 2500]),
    app=st.integers(0, 2),
    ann=st.booleans(),
)

STEPS = st.lists(st.tuples(st.booleans(), CONTAINER), min_size=1, max_size=25)


def _rebuilt_from(p: Any, state: BalloonsState, cs: dict[ContainerID, ContainerInfo]) -> Any:
    rendered = p.render(state)
    reported = [
        replace(c, current_cpus=rendered[c.id].cpus, current_mems=rendered[c.id].mems)
        for c in cs.values()
    ]
    return p.rebuild(reported), reported


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(CONFIGS), steps=STEPS)
def test_random_sequences_keep_the_invariants(
    config: dict[str, Any], steps: list[tuple[bool, ContainerInfo]]
) -> None:
    p = policy(config)
    state = p.initial_state()
    live: dict[ContainerID, ContainerInfo] = {}
    for delete, c in steps:
        before = p.render(state)
        if delete and live:
            cid = sorted(live)[len(c.pod.name) % len(live)]
            d = p.release(state, cid)
            del live[cid]
        else:
            if c.id in live:
                continue
            try:
                d = p.allocate(state, c)
            except (AllocationError, AnnotationError):
                continue
            live[c.id] = c
            assert d.assignment is not None
        p.check(d.state)
        after = p.render(d.state)
        subject = d.assignment.container_id if d.assignment else None
        assert d.updates == diff_updates(before, after, skip={subject} if subject else ())
        for cid, c2 in live.items():
            m = d.state.members[cid]
            assert d.state.balloons[m.balloon].type == balloon_type_of(c2, p.config).name
        state = d.state
    first, reported = _rebuilt_from(p, state, live)
    p.check(first.state)
    assert first.updates == ()
    again = [replace(c, current_cpus=p.render(first.state)[c.id].cpus) for c in reported]
    second = p.rebuild(again)
    assert second.updates == ()
    for cid in list(live):
        state = p.release(state, cid).state
        p.check(state)
    # back to the balloons of the start (instance numbers may differ)
    assert _sizes(state) == _sizes(p.initial_state())


def _sizes(state: BalloonsState) -> list[tuple[str, int]]:
    return sorted((b.type, len(b.cpus)) for b in state.balloons.values())


#: hyperthreads hidden by a type and by the annotation, with shared idle CPUs
HIDDEN: dict[str, Any] = {
    "reservedResources": {"cpu": "1"},
    "balloonTypes": [
        {"name": "full", "hideHyperthreads": True, "minCPUs": 2, "namespaces": ["full"]},
        {"name": "new", "preferNewBalloons": True, "namespaces": ["new"]},
        {"name": "grp", "groupBy": "${pod/labels/app}", "namespaces": ["grp"]},
        {"name": "default", "shareIdleCPUsInSame": "numa"},
    ],
}

CPUS = st.one_of(
    st.none(),
    st.lists(st.integers(0, 31), min_size=1, max_size=32).map(
        lambda ids: ",".join(str(i) for i in sorted(set(ids)))
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from([*CONFIGS, HIDDEN]),
    reported=st.lists(st.tuples(CONTAINER, CPUS), min_size=1, max_size=20),
)
def test_rebuild_from_any_reported_cpusets_settles(
    config: dict[str, Any], reported: list[tuple[ContainerInfo, str | None]]
) -> None:
    """A Synchronize reporting any cpusets (stale, overlapping, hostile) gives a state
    that keeps the invariants, and rebuilding from that state's rendering moves nothing:
    the restart rule's fixed point."""
    p = policy(config)
    seen: dict[ContainerID, ContainerInfo] = {}
    for c, cpus in reported:
        if c.id not in seen:
            seen[c.id] = replace(c, current_cpus=IDSet.parse(cpus) if cpus else None)
    try:
        first = p.rebuild(list(seen.values()))
    except (AllocationError, AnnotationError):
        return
    p.check(first.state)
    rendered = p.render(first.state)
    again = [
        replace(c, current_cpus=rendered[c.id].cpus, current_mems=rendered[c.id].mems)
        for c in seen.values()
        if c.id in rendered
    ]
    second = p.rebuild(again)
    p.check(second.state)
    assert second.updates == (), [str(u.container_id) for u in second.updates]
    # the same CPUs and memory for everyone (instance numbers may be given anew)
    final = p.render(second.state)
    assert {c.id: (final[c.id].cpus, final[c.id].mems) for c in again} == {
        c.id: (rendered[c.id].cpus, rendered[c.id].mems) for c in again
    }
