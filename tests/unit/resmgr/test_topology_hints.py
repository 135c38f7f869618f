"""Topology hints in the topology-aware policy (`policy.topology_aware.hints`).

The scenario is nri-plugins' n4c16/test18-strict-alignment on the same machine shape
(`small()`: node2 = 4-5,12-13, node3 = 6-7,14-15) and their default configuration
(``reservedResources.cpu: 750m``, ``preferIsolatedCPUs: false``), with their test hint
annotation written as they write it (including its stray closing brace).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    ContainerInfo,
    HintSource,
    QoSClass,
    TopologyHint,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.hints import (
    PICK_BY_HINTS,
    STRICT_HINTS,
    TEST_HINTS,
    TOPOLOGY_HINTS,
    container_hints,
)
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small

CONFIG = {"preferIsolatedCPUs": False}
BE = QoSClass.BEST_EFFORT


def strict_on_node(pod: str, node: int) -> dict[str, str]:
    c = f"{pod}c0"
    return {
        f"{STRICT_HINTS}/container.{c}": "true",
        f"{TEST_HINTS}/container.{c}": f'{{ test: {{ NUMAs: "{node}" }} }} }}',
    }


def place(
    policy: TopologyAwarePolicy, state: TopologyAwareState, c: ContainerInfo
) -> tuple[TopologyAwareState, IDSet, IDSet]:
    d = policy.allocate(state, c)
    assert d.assignment is not None
    policy.check(d.state)
    return d.state, d.assignment.cpus, d.assignment.mems


def test_n4c16_test18_strict_alignment() -> None:
    """n4c16/test18-strict-alignment: pods 0-7 (the machine has no isolated CPUs)."""
    topo = small()
    policy = TopologyAwarePolicy(topology=topo, config=CONFIG)
    st_ = policy.initial_state()
    node2, node3 = topo.node_cpus(2), topo.node_cpus(3)

    st_, cpus, mems = place(
        policy, st_, ctr("pod0c0", pod="pod0", milli=1000, ann=strict_on_node("pod0", 2))
    )
    assert cpus <= node2 and mems == IDSet([2])
    st_, cpus, mems = place(
        policy, st_, ctr("pod1c0", pod="pod1", milli=1000, ann=strict_on_node("pod1", 3))
    )
    assert cpus <= node3 and mems == IDSet([3])
    st_, cpus, mems = place(
        policy, st_, ctr("pod2c0", pod="pod2", milli=1000, ann=strict_on_node("pod2", 2))
    )
    assert cpus <= node2 and mems == IDSet([2])

    # 3 CPUs do not fit in node2 any more: the strict hint fails the container
    with pytest.raises(
        AllocationError,
        match=r"pod default/pod3 container pod3c0: .*fail "
        r"strict hint test \(cpus 4-5,12-13, nodes 2\)",
    ):
        policy.allocate(st_, ctr("pod3c0", pod="pod3", milli=3000, ann=strict_on_node("pod3", 2)))

    # an unmet preference for isolated CPUs is no strict requirement
    ann = {
        **strict_on_node("pod5", 2),
        "prefer-isolated-cpus.resource-policy.nri.io/container.pod5c0": "true",
    }
    st_, cpus, mems = place(policy, st_, ctr("pod5c0", pod="pod5", milli=1000, ann=ann))
    assert cpus <= node2 and mems == IDSet([2])

    # required isolated CPUs, none on the machine: the container fails (pod4, and pod6
    # where the pod-level preference is off but the container requires them)
    iso = "isolated-cpus.resource-policy.nri.io"
    for pod, extra in [
        ("pod4", {f"require-{iso}/container.pod4c0": "true"}),
        ("pod6", {f"prefer-{iso}/pod": "false", f"require-{iso}/container.pod6c0": "true"}),
    ]:
        with pytest.raises(AllocationError, match=rf"pod default/{pod} .*isolated CPUs"):
            policy.allocate(
                st_,
                ctr(f"{pod}c0", pod=pod, milli=1000, ann={**strict_on_node(pod, 2), **extra}),
            )

    # pod7: the container's preference beats the pod's requirement, so it places on node 2
    ann = {
        **strict_on_node("pod7", 2),
        f"prefer-{iso}/container.pod7c0": "true",
        f"require-{iso}/pod": "true",
    }
    st_, cpus, mems = place(policy, st_, ctr("pod7c0", pod="pod7", milli=1000, ann=ann))
    assert cpus <= node2 and mems == IDSet([2])


def device(node: int, cpus: str = "", source: HintSource = HintSource.DEVICES) -> TopologyHint:
    return TopologyHint(
        provider=f"/sys/devices/pci0000:00/dev-on-{node}",
        source=source,
        cpus=IDSet.parse(cpus),
        nodes=IDSet([node]),
    )


def test_a_device_hint_steers_the_pool_without_strictness() -> None:
    topo = small()
    policy = TopologyAwarePolicy(topology=topo, config=CONFIG)
    c = replace(ctr("gpu", milli=2000), topology_hints=(device(3),))
    _, cpus, mems = place(policy, policy.initial_state(), c)
    assert cpus <= topo.node_cpus(3) and mems == IDSet([3])
    # without the hint the same request goes elsewhere (node0, lowest index)
    _, cpus, _ = place(policy, policy.initial_state(), ctr("gpu", milli=2000))
    assert not cpus <= topo.node_cpus(3)


def test_a_device_hint_that_cannot_fit_falls_back_unless_strict() -> None:
    topo = small()
    policy = TopologyAwarePolicy(topology=topo, config=CONFIG)
    # node3 has 4 CPUs, and nobody shares them, so 4 would fit there (the shared-pool
    # rule lets a grant take a pool's last shared CPUs); 5 cannot
    big = replace(ctr("big", milli=5000), topology_hints=(device(3),))
    _, cpus, _ = place(policy, policy.initial_state(), big)  # a package pool
    assert len(cpus) == 5
    strict = replace(big, pod=replace(big.pod, annotations={STRICT_HINTS: "true"}))
    with pytest.raises(AllocationError, match="fail strict hint"):
        policy.allocate(policy.initial_state(), strict)


def test_annotations_select_hint_sources() -> None:
    topo = small()
    hints = (device(1, source=HintSource.MOUNTS), device(3))

    def chosen(value: str | None) -> list[str]:
        ann = {TOPOLOGY_HINTS: value} if value is not None else {}
        c = replace(ctr("c", ann=ann), topology_hints=hints)
        return [str(h.nodes) for h in container_hints(c, topo).hints]

    assert chosen(None) == ["1", "3"]
    assert chosen("true") == ["1", "3"]
    assert chosen("false") == []
    assert chosen("none") == []
    assert chosen("devices") == ["3"]
    assert chosen("mounts") == ["1"]
    assert chosen("devices,mounts") == ["1", "3"]
    assert chosen("pod-resources") == []
    with pytest.raises(
        AnnotationError,
        match=r"topologyhints.resource-policy.nri.io has unknown "
        r"type 'disks'",
    ):
        chosen("disks")


def test_pick_by_hints_takes_the_hinted_cpus() -> None:
    topo = small()
    policy = TopologyAwarePolicy(topology=topo, config=CONFIG)
    hint = device(3, cpus="7,15")  # one core of node3
    plain = replace(ctr("c", milli=2000), topology_hints=(hint,))
    picked = replace(plain, pod=replace(plain.pod, annotations={PICK_BY_HINTS: "true"}))
    _, cpus, _ = place(policy, policy.initial_state(), picked)
    assert cpus == IDSet.parse("7,15")
    _, cpus, _ = place(policy, policy.initial_state(), plain)
    assert cpus <= topo.node_cpus(3)  # the node, but not necessarily those CPUs


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[1, 2]", r"expected a mapping of hint names"),
        ("{a: 3}", r"hint 'a': expected a mapping"),
        ("{a: {NUMAs: x}}", r"a.NUMAs is 'x'; expected a kernel id list"),
        ("{a: {NUMAs: [1, 2]}}", r"a.NUMAs is \"\['1', '2'\]\"; expected a kernel id list"),
        ("{a: {Cores: 1}}", r"hint 'a' has unknown fields \['cores'\]"),
        ("{a: [", r"expected YAML"),
        ("[" * 5000, r"expected YAML"),  # deeper than the composer's recursion
        ("{a: " * 3000, r"expected YAML"),
        ("{a: {NUMAs: " + "1" * 5000 + "}}", r"a.NUMAs is '1{37}\.\.\.'; expected a kernel id"),
        ("{a: {NUMAs: 0-8191}}", r"a.NUMAs is '0-8191'; expected ids of this machine \(0-3\)"),
        ("{a: {CPUs: '16'}}", r"a.CPUs is '16'; expected ids of this machine \(0-15\)"),
    ],
)
def test_malformed_test_hints_fail_the_container(value: str, message: str) -> None:
    c = ctr("c", ann={TEST_HINTS: value})
    with pytest.raises(AnnotationError, match=message):
        container_hints(c, small())


def test_sockets_and_cpus_hints() -> None:
    topo = small()
    c = ctr("c", ann={TEST_HINTS: "{s: {Sockets: '1'}, c: {CPUs: '2-3'}}"})
    got = {h.provider: (str(h.cpus), str(h.nodes)) for h in container_hints(c, topo).hints}
    assert got == {"s": ("4-7,12-15", "2-3"), "c": ("2-3", "1")}


# -- properties ---------------------------------------------------------------------------


@given(
    sizes=st.lists(st.sampled_from([0, 500, 1000, 2000, 3000]), min_size=1, max_size=8),
    nodes=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    strict=st.lists(st.booleans(), min_size=1, max_size=8),
)
def test_strict_grants_are_aligned_and_invariants_hold(
    sizes: list[int], nodes: list[int], strict: list[bool]
) -> None:
    topo = small()
    policy = TopologyAwarePolicy(topology=topo, config=CONFIG)
    state = policy.initial_state()
    for i, milli in enumerate(sizes):
        node = nodes[i % len(nodes)]
        is_strict = strict[i % len(strict)]
        ann = {STRICT_HINTS: "true"} if is_strict else {}
        c = replace(
            ctr(
                f"c{i}", pod=f"p{i}", milli=milli, qos=QoSClass.GUARANTEED if milli else BE, ann=ann
            ),
            topology_hints=(device(node),),
        )
        try:
            d = policy.allocate(state, c)
        except AllocationError:
            continue
        assert d.assignment is not None
        policy.check(d.state)
        if is_strict:
            assert d.assignment.cpus <= topo.node_cpus(node)
            assert d.assignment.mems <= IDSet([node])
        elif not d.assignment.cpus <= topo.node_cpus(node):
            # placed off the hinted node only when no aligned placement exists
            strict_c = replace(c, pod=replace(c.pod, annotations={STRICT_HINTS: "true"}))
            with pytest.raises(AllocationError):
                policy.allocate(state, strict_c)
        state = d.state
