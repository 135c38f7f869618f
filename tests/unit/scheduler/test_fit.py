"""The extender's decisions: what a pod needs, what a report offers, filter and score,
and that input it cannot read never fails a node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nri_resmgr.scheduler.fit import (
    MAX_SCORE,
    Offer,
    PodError,
    Strategy,
    Unjudged,
    filter_nodes,
    judge,
    node_offer,
    offers_of,
    pod_demand,
    prioritize,
)
from tests.unit.kube.test_nrt import pod as sim_pod
from tests.unit.kube.test_nrt import run


def container(name: str, cpu: str | None = None, memory: str | None = "1Gi",
              request_cpu: str | None = None) -> dict[str, Any]:  # fmt: skip
    limits = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    requests = {"cpu": request_cpu} if request_cpu is not None else {}
    return {"name": name, "resources": {"limits": limits, "requests": requests}}


def kpod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": list(containers), "initContainers": list(init)}}  # fmt: skip


def nrt(*zones: tuple[str, int, int], policy: str = "best-effort",
        scope: str = "container") -> dict[str, Any]:  # fmt: skip
    """An NRT object with NUMA zones (name, available CPUs, available GiB) of 4 CPUs, 4G."""
    return {
        "zones": [
            {"name": n, "type": "Node", "resources": [
                {"name": "cpu", "capacity": "4", "allocatable": "4", "available": str(c)},
                {"name": "memory", "capacity": "4Gi", "allocatable": "4Gi",
                 "available": f"{g}Gi"},
            ]}
            for n, c, g in zones
        ],
        "attributes": [{"name": "topologyManagerPolicy", "value": policy},
                       {"name": "topologyManagerScope", "value": scope}],
    }  # fmt: skip


def offer(obj: Mapping[str, Any]) -> Offer:
    got = node_offer("n", obj)
    assert isinstance(got, Offer), got
    return got


@pytest.mark.parametrize(
    ("pod", "qos", "cpus"),
    [
        pytest.param(kpod(container("a", "2")), "Guaranteed", [2], id="guaranteed"),
        pytest.param(kpod(container("a", "2", request_cpu="2000m")), "Guaranteed", [2],
                     id="equal-quantities-spelled-differently"),
        pytest.param(kpod(container("a", "1500m")), "Guaranteed", [0], id="fractional-shared"),
        pytest.param(kpod(container("a", "2", request_cpu="1")), "Burstable", [], id="burstable"),
        pytest.param(kpod(container("a", None, None)), "BestEffort", [], id="besteffort"),
        pytest.param(kpod(container("a", "2"), container("b", None)), "Burstable", [],
                     id="one-container-without-cpu-limit"),
    ],
)  # fmt: skip
def test_pod_demand(pod: dict[str, Any], qos: str, cpus: list[int]) -> None:
    d = pod_demand(pod)
    assert d.qos == qos
    assert [n.cpus for n in d.needs] == cpus


def test_pod_demand_names_what_it_cannot_read() -> None:
    with pytest.raises(PodError, match=r"pod ns/p container a cpu limit: 'lots'"):
        pod_demand(kpod(container("a", "lots")))


def test_container_scope_places_each_container_in_some_zone() -> None:
    two_by_two = pod_demand(kpod(container("a", "2", "1Gi"), container("b", "2", "1Gi")))
    assert judge(two_by_two, offer(nrt(("node-0", 3, 4), ("node-1", 2, 4)))).fits
    v = judge(two_by_two, offer(nrt(("node-0", 3, 4), ("node-1", 1, 4))))
    assert not v.fits
    assert "pod ns/p needs 4 exclusive CPUs" in v.reason and "node-1 1 CPUs" in v.reason
    # memory is pinned too: a zone with the CPUs but not the memory does not hold it
    big = pod_demand(kpod(container("a", "2", "3Gi")))
    assert not judge(big, offer(nrt(("node-0", 4, 2), ("node-1", 1, 4)))).fits


def test_pod_scope_and_unaligned_policies() -> None:
    d = pod_demand(kpod(container("a", "2"), container("b", "2")))
    zones = (("node-0", 3, 4), ("node-1", 3, 4))
    assert judge(d, offer(nrt(*zones, scope="container"))).fits
    assert not judge(d, offer(nrt(*zones, scope="pod"))).fits
    # a policy that does not align: the node's zones together
    assert judge(d, offer(nrt(("node-0", 2, 4), ("node-1", 2, 4), policy="none"))).fits
    assert not judge(d, offer(nrt(("node-0", 2, 4), ("node-1", 1, 4), policy="none"))).fits


def test_init_containers_must_fit_alone() -> None:
    d = pod_demand(kpod(container("a", "1"), init=(container("i", "4"),)))
    assert not judge(d, offer(nrt(("node-0", 3, 4), ("node-1", 3, 4)))).fits
    assert judge(d, offer(nrt(("node-0", 4, 4), ("node-1", 0, 4)))).fits


def test_legacy_topology_policies_are_read() -> None:
    obj = nrt(("node-0", 1, 4))
    obj["attributes"] = []
    obj["topologyPolicies"] = ["SingleNUMANodePodLevel"]
    got = offer(obj)
    assert (got.policy, got.scope) == ("single-numa-node", "pod")


def test_filter_fails_only_nodes_it_judged_too_small() -> None:
    pod = kpod(container("a", "3", "1Gi"))
    nrts = {
        "fits": nrt(("node-0", 1, 4), ("node-1", 3, 4)),
        "small": nrt(("node-0", 2, 4), ("node-1", 2, 4)),
        "pools-only": {"zones": [{"name": "socket #0", "type": "socket", "resources": []}]},
        "garbled": nrt(("node-0", 4, 4)) | {"zones": "x"},
        "bad-quantity": {"zones": [{"name": "node-0", "type": "Node", "resources": [
            {"name": "cpu", "allocatable": "4", "available": "four"}]}]},
    }  # fmt: skip
    nodes = [*nrts, "no-report"]
    got = filter_nodes(pod, nodes, offers_of(nodes, nrts))
    assert set(got.passed) == set(nodes) - {"small"}
    assert list(got.failed) == ["small"]
    assert set(got.unjudged) == {"pools-only", "garbled", "bad-quantity", "no-report"}
    assert "no NUMA zone with CPUs" in got.unjudged["pools-only"]
    assert "'four'" in got.unjudged["bad-quantity"]
    assert "no NodeResourceTopology object" in got.unjudged["no-report"]
    # a pod it cannot read passes everywhere
    bad = filter_nodes(kpod(container("a", "lots")), nodes, offers_of(nodes, nrts))
    assert bad.passed == tuple(nodes) and not bad.failed


def test_burstable_pods_fit_everywhere_with_no_opinion() -> None:
    pod = kpod(container("a", "2", request_cpu="1"))
    nrts = {"full": nrt(("node-0", 0, 0))}
    assert filter_nodes(pod, ["full"], offers_of(["full"], nrts)).passed == ("full",)
    assert prioritize(pod, ["full"], offers_of(["full"], nrts), Strategy.LEAST_ALLOCATED) == {
        "full": 0
    }


def test_scores_spread_or_pack() -> None:
    pod = kpod(container("a", "1", "1Gi"))
    nrts = {"empty": nrt(("node-0", 4, 4)), "busy": nrt(("node-0", 2, 2))}
    spread = prioritize(pod, list(nrts), offers_of(list(nrts), nrts), Strategy.LEAST_ALLOCATED)
    pack = prioritize(pod, list(nrts), offers_of(list(nrts), nrts), Strategy.MOST_ALLOCATED)
    assert spread["empty"] > spread["busy"]
    assert pack["busy"] > pack["empty"]
    assert all(0 <= s <= MAX_SCORE for s in (*spread.values(), *pack.values()))
    # the zone that holds it tightest is the one scored, not the emptiest
    two = {"two": nrt(("node-0", 4, 4), ("node-1", 1, 4))}
    tight = prioritize(pod, ["two"], offers_of(["two"], two),
                       Strategy.MOST_ALLOCATED)  # fmt: skip
    assert tight["two"] == 6  # node-1: no CPU and 3/4 of its memory left


def test_the_daemons_own_report_is_judged() -> None:
    """The simulator's NRT after a 3-CPU grant (CPU 0 reserved): node-0 has 3 CPUs, the
    other 1: a 3-CPU pod fits, a second 3-CPU container beside it does not."""
    result = run([sim_pod("g3", "3", "1G")], config={"reservedResources": {"cpu": "cpuset:0"}})
    obj = dict(result.steps[-1].nrt)
    got = offer(obj)
    assert sorted(z.cpus for z in got.zones) == [1, 3]
    assert judge(pod_demand(kpod(container("a", "3", "1Gi"))), got).fits
    two = pod_demand(kpod(container("a", "3", "1Gi"), container("b", "3", "1Gi")))
    assert not judge(two, got).fits


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)  # fmt: skip
ZONE = st.fixed_dictionaries({
    "name": st.text(max_size=4), "type": st.sampled_from(["Node", "socket", 3]),
    "resources": st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["cpu", "memory", "x"]),
        "available": JSON | st.sampled_from(["1", "2Gi", "-3", "1e400"]),
        "allocatable": JSON | st.sampled_from(["4", "4Gi"])}), max_size=3)})  # fmt: skip
NRT = JSON | st.fixed_dictionaries({"zones": st.lists(ZONE, max_size=3),
                                    "attributes": JSON, "topologyPolicies": JSON})  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(pod=JSON | st.just(kpod(container("a", "2"))), objs=st.lists(NRT, max_size=3))
@example(  # fields of the wrong shape (a list expected), found by this test
    pod={"spec": {"containers": 3, "initContainers": True}},
    objs=[{"zones": [{"type": "Node", "resources": 5}], "attributes": True}],
)
def test_bad_input_never_crashes_and_never_fails_an_unreadable_node(
    pod: Any, objs: list[Any]
) -> None:
    pod = pod if isinstance(pod, dict) else {"spec": pod}
    nodes = [f"n{i}" for i in range(len(objs))] + ["missing"]
    nrts = {f"n{i}": o for i, o in enumerate(objs) if isinstance(o, dict)}
    try:
        got = filter_nodes(pod, nodes, offers_of(nodes, nrts))
    except PodError:
        raise AssertionError("a pod error must pass the nodes, not raise") from None
    assert set(got.passed) | set(got.failed) == set(nodes)
    for node in got.failed:
        assert not isinstance(node_offer(node, nrts.get(node)), Unjudged)
    prioritize(pod, nodes, offers_of(nodes, nrts), Strategy.MOST_ALLOCATED)
