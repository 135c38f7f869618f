"""nri-plugins' CPU allocator (`nri_resmgr.policy.cpu_allocator`): its single-thread step
(their ``takeIdleThreads``) taken by a plain key when no CPU priority is preferred picks
exactly what their comparison picks, on machines of one to four packages."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_resmgr.policy.cpu_allocator import CPUAllocator, _Pick
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology

MACHINES: dict[str, Topology] = {
    spec: load_topology(spec)
    for spec in (
        "packages=1,cores=4,threads=2",
        "packages=2,cores=6,threads=2",
        "packages=4,cores=3,threads=2",
        "packages=2,cores=8,threads=1",
    )
}


def _single_threads(
    topo: Topology, free: set[int], taken: set[int], count: int, *, ranked: bool
) -> tuple[set[int], int]:
    pick = _Pick(CPUAllocator.of(topo), IDSet(free), count, "none")
    pick.taken = set(taken)
    if ranked:
        pick._idle_threads_ranked()
    else:
        pick._idle_threads_unranked()
    return pick.taken, pick.count


@settings(max_examples=300)
@given(data=st.data())
def test_unranked_single_threads_pick_what_the_comparison_picks(data: st.DataObject) -> None:
    spec = data.draw(st.sampled_from(sorted(MACHINES)), label="machine")
    topo = MACHINES[spec]
    online = sorted(topo.online_cpus())
    free = data.draw(st.sets(st.sampled_from(online)), label="free")
    taken = data.draw(st.sets(st.sampled_from(online)), label="taken") - free
    count = data.draw(st.integers(1, len(online)), label="count")
    ranked = _single_threads(topo, free, taken, count, ranked=True)
    unranked = _single_threads(topo, free, taken, count, ranked=False)
    assert unranked == ranked, f"{spec}: free {sorted(free)} taken {sorted(taken)} count {count}"


def test_a_thread_goes_to_the_package_holding_the_result_and_a_broken_core() -> None:
    """Two packages of six two-thread cores (core n is threads n and n+12; package 1 is
    6-11 and 18-23): with CPU 7 taken, one more thread comes from package 1, though
    package 0 has lower ids, and from its core with one free thread (9, whose sibling
    21 is not free), though 6 is lower."""
    topo = MACHINES["packages=2,cores=6,threads=2"]
    free = {0, 1, 2, 6, 18, 9, 10, 22, 11, 23}
    got, left = _single_threads(topo, free, {7}, 1, ranked=False)
    assert (got, left) == ({7, 9}, 0)


@settings(max_examples=200)
@given(data=st.data())
def test_whole_packages_and_cores_without_a_priority_go_by_id(data: st.DataObject) -> None:
    """With no priority preferred, the order of idle packages and cores (their
    comparison, then the id) is the ids' alone, which `by_preference` takes unsorted."""
    topo = MACHINES[data.draw(st.sampled_from(sorted(MACHINES)), label="machine")]
    online = sorted(topo.online_cpus())
    sets = data.draw(
        st.dictionaries(
            st.sampled_from(online), st.sets(st.sampled_from(online), min_size=1), max_size=12
        ),
        label="sets",
    )
    pick = _Pick(CPUAllocator.of(topo), IDSet(online), 1, "none")
    cpusets = {k: IDSet(v) for k, v in sets.items()}
    assert pick.by_preference(cpusets) == pick.ranked(cpusets)


def test_the_allocators_core_table_is_the_topologys() -> None:
    # the allocator looks a CPU's core up in its own table (built once per machine)
    for topo in MACHINES.values():
        alloc = CPUAllocator.of(topo)
        for cpu in topo.online_cpus():
            assert alloc.siblings(cpu) == topo.siblings(cpu)
        assert set(alloc.cores) == set(topo.online_cpus())
