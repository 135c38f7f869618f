"""Random create/remove sequences for the topology-aware policy's property tests.

`SYNTHETIC` names the synthetic machines the sequences run on (two packages, one
package, dies with split L3 and isolated CPUs, PMEM and HBM nodes); `OPS` draws a
sequence of `Op`\\ s (create or remove one of ten slots, every QoS class, whole and
fractional requests, memory, the CPU and memory annotations, kube-system and init
containers); `make` turns an `Op` into the `ContainerInfo` the policy is given, and `exercise` runs
a sequence holding the policy to its rules after every step (invariants, updates exactly
for the containers whose rendering changed, a rebuild from its own rendering moving
nobody, the initial state once everything is removed).  `Node` is a policy and its
state stepped like a node (create, delete, look), with the invariants checked after
every step; `guaranteed` and `besteffort` are the containers it is given most.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hypothesis import strategies as st

from nri_resmgr.model import (
    AllocationError,
    Assignment,
    ContainerInfo,
    ContainerKind,
    Decision,
    QoSClass,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.offers import Offer, make_offer
from nri_resmgr.policy.topology_aware.pools import Pool
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_PRESERVE,
    MEMORY_TYPE,
    PREFER_ISOLATED,
    PREFER_SHARED,
    ContainerRequest,
)
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from tests.support.builders import ctr, small, with_current
from tests.support.restart_rule import assert_restart_exact

__all__ = [
    "ANNOTATIONS",
    "OPS",
    "SYNTHETIC",
    "Node",
    "Op",
    "besteffort",
    "exercise",
    "guaranteed",
    "make",
]

SYNTHETIC = {
    "2s2n2c2t": {"packages": 2, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"},
    "1s1n4c2t": {"packages": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"},
    "1s2d-l3-isolated": {
        "packages": 1,
        "dies": 2,
        "nodes": 1,
        "cores": 4,
        "threads": 2,
        "l3_per_die": 2,
        "isolated": "3,7,11,15",
        "memory": "2G",
    },
    "pmem-hbm": {
        "packages": 1,
        "nodes": 2,
        "cores": 3,
        "threads": 2,
        "memory": "2G",
        "extra_memory_nodes": [
            {"kind": "pmem", "memory": "8G", "attach": 0},
            {"kind": "hbm", "memory": "1G", "attach": 1},
        ],
    },
}

ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [
            PREFER_ISOLATED,
            PREFER_SHARED,
            HIDE_HYPERTHREADS,
            MEMORY_TYPE,
            CPU_PRESERVE,
            MEMORY_PRESERVE,
        ]
    ),
    st.sampled_from(["true", "false"]),
    max_size=2,
).map(
    lambda d: {
        k: ("dram,pmem" if v == "true" else "mixed") if k == MEMORY_TYPE else v
        for k, v in d.items()
    }
)


@dataclass(frozen=True)
class Op:
    create: bool
    slot: int
    qos: QoSClass
    milli: int
    system: bool
    init: bool
    memory: int
    annotations: dict[str, str]


OPS = st.lists(
    st.builds(
        Op,
        create=st.booleans() | st.just(True),
        slot=st.integers(0, 9),
        qos=st.sampled_from(list(QoSClass)),
        milli=st.sampled_from([0, 250, 1000, 1500, 2000, 2500, 3000, 4000, 6000]),
        system=st.sampled_from([False, False, False, True]),
        init=st.booleans(),
        memory=st.sampled_from([0, 0, 256 << 20, 1 << 30]),
        annotations=ANNOTATIONS,
    ),
    max_size=25,
)


def make(op: Op) -> ContainerInfo:
    name = f"c{op.slot}"
    return ctr(
        name,
        pod=f"pod{op.slot % 5}",
        ns="kube-system" if op.system else "default",
        qos=op.qos,
        milli=0 if op.qos is QoSClass.BEST_EFFORT else op.milli,
        mem=op.memory if op.qos is not QoSClass.BEST_EFFORT else None,
        ann=op.annotations,
        kind=ContainerKind.INIT if op.init else ContainerKind.APP,
        cid=name,
    )


def exercise(topology: Topology, config: Mapping[str, object], ops: list[Op]) -> None:
    """Run `ops` on a fresh policy, checking its rules after every step (module docstring)."""
    p = TopologyAwarePolicy(topology=topology, config=config)
    s = p.initial_state()
    live: dict[str, ContainerInfo] = {}
    for op in ops:
        c = make(op)
        before = p.render(s)
        if op.create and c.id not in live:
            try:
                d = p.allocate(s, c)
            except AllocationError:
                continue
            live[c.id] = c
            assert d.assignment == p.render(d.state)[c.id]
        elif not op.create and c.id in live:
            d = p.release(s, live.pop(c.id).id)
        else:
            continue
        s = d.state
        p.check(s)
        after = p.render(s)
        changed = {
            cid
            for cid in before.keys() & after.keys()
            if (before[cid].cpus, before[cid].mems) != (after[cid].cpus, after[cid].mems)
        }
        assert {u.container_id for u in d.updates} == changed
    # the runtime reports exactly what we rendered: rebuilding moves nobody
    rendered = p.render(s)
    reported = [with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in live.values()]
    again = p.rebuild(reported)
    p.check(again.state)
    assert again.updates == (), again.reason
    assert_restart_exact(p, s, list(live.values()))  # issue 24: with records, exact
    for c in live.values():
        s = p.release(s, c.id).state
    assert s == p.initial_state()


class Node:
    """A policy and its state, stepped like a node: create, delete, look."""

    def __init__(
        self, config: Mapping[str, object] | None = None, topology: Topology | None = None
    ) -> None:
        self.topology = topology or small()
        self.policy = TopologyAwarePolicy(topology=self.topology, config=config or {})
        self.state: TopologyAwareState = self.policy.initial_state()
        self.live: dict[str, ContainerInfo] = {}
        self.last: Decision[TopologyAwareState] | None = None

    def create(self, *containers: ContainerInfo) -> None:
        for c in containers:
            self.last = self.policy.allocate(self.state, c)
            self.state = self.last.state
            self.policy.check(self.state)
            self.live[c.name] = c

    def delete(self, *names: str) -> None:
        for name in names:
            c = self.live.pop(name)
            self.state = self.policy.release(self.state, c.id).state
            self.policy.check(self.state)

    def a(self, name: str) -> Assignment:
        return self.policy.render(self.state)[self.live[name].id]

    def cpus(self, name: str) -> CPUSet:
        return self.a(name).cpus

    def nodes(self, name: str) -> set[int]:
        return {self.topology.cpu(c).node_id for c in self.cpus(name)}

    def cores(self, name: str) -> int:
        return len(self.topology.cores_of(self.cpus(name)))

    def rebuilt_moves_nobody(self) -> None:
        rendered = self.policy.render(self.state)
        reports = [
            with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in self.live.values()
        ]
        again = self.policy.rebuild(reports)
        assert again.updates == (), again.reason
        assert again.state == self.state


def guaranteed(name: str, milli: int, pod: str | None = None) -> ContainerInfo:
    """A Guaranteed container of `milli` CPU (its pod `pod`, by default its own name)."""
    return ctr(name, pod=pod or name, milli=milli, cid=name)


def besteffort(name: str, pod: str | None = None, ns: str = "default") -> ContainerInfo:
    """A BestEffort container (its pod `pod`, by default its own name, in namespace `ns`)."""
    return ctr(name, pod=pod or name, qos=QoSClass.BEST_EFFORT, ns=ns, cid=name)


def plain_offer(
    p: TopologyAwarePolicy,
    s: TopologyAwareState,
    pool: Pool,
    c: ContainerInfo,
    request: ContainerRequest,
) -> Offer | str:
    """`make_offer` of `pool` for `c`'s `request` on `s`, as a creation asks it (no CPUs
    preferred, the policy's priorities): an `Offer`, or why the pool refuses."""
    return make_offer(
        tree=p.tree,
        topology=p.topology,
        allocator=p.allocator,
        supply=s.supply,
        pool=pool,
        container_id=c.id,
        pod_id=c.pod.id,
        namespace=c.namespace,
        request=request,
        prefer=(),
        priorities=p.priorities,
    )
