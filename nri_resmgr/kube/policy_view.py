"""The one place the node report reads a policy's state: `read_node_use`.

Theory of operation: the NodeResourceTopology report (`nri_resmgr.kube.nrt`) needs a
policy-neutral `NodeUse`.  Most of it comes from what every policy already answers the
pipeline with: each container's `Assignment` says which CPUs it holds and how (an
EXCLUSIVE or ISOLATED assignment holds all its CPUs alone) and which memory nodes it is
pinned to.  Three facts only a policy knows are read here through the concrete policies'
typed public attributes (no ``getattr``):

- the reserved CPUs and the CPUs the policy manages (topology-aware: its pool tree;
  static: ``reserved``; balloons: ``reserved_home`` and ``availableResources``);
- the whole-CPU part of a MIXED container (topology-aware: its grant's ``exclusive``);
- the alignment it gives, as a kubelet topology manager policy and scope, and the pool
  zones it shows (topology-aware: one per pool, as nri-plugins names and fills them;
  balloons: one per balloon and shown container, `balloon_view`).

When the policy contract (`nri_resmgr.policy.base`) gets a report hook, this function is
what it returns for the built-in policies; the report reads nothing else.

The alignment mapping (documented in docs/operations.md, "NodeResourceTopology"):
topology-aware with ``pinCPU`` places each container in the smallest pool that holds it,
a NUMA node first: ``best-effort``/``container`` (it prefers one NUMA node and never
refuses for want of one).  Every other case (topology-aware without ``pinCPU``, static,
whose CPUs are the kubelet CPU manager's and know no NUMA, balloons, whose balloons are
sized and placed by type, none) is ``none``/``container``: a scheduler must not count on
NUMA alignment there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nri_resmgr.kube.balloon_view import balloon_zones
from nri_resmgr.kube.nrt import Alignment, Holding, NodeUse, PoolZone, quantity
from nri_resmgr.model import Assignment, ContainerInfo, CPUKind, MemoryKind, Pod, QoSClass
from nri_resmgr.policy.balloons.policy import BalloonsPolicy
from nri_resmgr.policy.balloons.state import BalloonsState
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree
from nri_resmgr.policy.topology_aware.state import TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.model import Topology

__all__ = ["pinned_bytes", "read_node_use"]

ALL_KINDS = frozenset(MemoryKind)
NOTHING: CPUSet = IDSet()


def pinned_bytes(container: ContainerInfo) -> int:
    """The memory a container pins where its memory nodes are set: a Guaranteed one its
    request (or limit), a Burstable one its request, a BestEffort one nothing."""
    req = container.request
    if container.qos_class is QoSClass.GUARANTEED:
        return req.memory_request or req.memory_limit or 0
    if container.qos_class is QoSClass.BURSTABLE:
        return req.memory_request or 0
    return 0


def read_node_use(
    topology: Topology,
    policy: object,
    state: object,
    containers: Sequence[tuple[ContainerInfo, Assignment | None]],
    *,
    pods: Iterable[Pod] = (),
) -> NodeUse:
    """The `NodeUse` of `policy` in `state` with `containers` (the pipeline's snapshot)."""
    ta_state = state if isinstance(state, TopologyAwareState) else None
    holdings = []
    for info, a in containers:
        if a is None:
            continue
        exclusive: CPUSet = NOTHING
        if a.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED):
            exclusive = a.cpus
        elif a.kind is CPUKind.MIXED and ta_state is not None and info.id in ta_state.grants:
            exclusive = ta_state.grants[info.id].exclusive
        memory = pinned_bytes(info) if a.mems else 0
        if not exclusive and not memory:
            continue  # takes nothing from a zone (most shared containers)
        holdings.append(
            Holding(
                namespace=info.pod.namespace,
                pod=info.pod.name,
                container=info.name,
                exclusive=exclusive,
                mems=a.mems,
                memory=memory,
            )
        )
    names = {(p.namespace, p.name) for p in pods} | {
        (i.pod.namespace, i.pod.name) for i, _ in containers
    }
    allowed, reserved = topology.online_cpus(), IDSet()
    alignment = Alignment()
    pools: tuple[PoolZone, ...] = ()
    name = "none"
    if isinstance(policy, TopologyAwarePolicy):
        name = policy.name
        allowed, reserved = policy.tree.root.cpus, policy.tree.reserved
        if policy.config.options.pin_cpu:
            alignment = Alignment("best-effort", "container")
        if ta_state is not None:
            pools = pool_zones(topology, policy.tree, ta_state)
    elif isinstance(policy, StaticPolicy):
        name, reserved = policy.name, policy.reserved
    elif isinstance(policy, BalloonsPolicy):
        name = policy.name
        allowed, reserved = policy.config.available, policy.reserved_home
        if isinstance(state, BalloonsState):
            pools = balloon_zones(topology, policy, state, containers)
    return NodeUse(
        policy=name,
        allowed=allowed,
        reserved=reserved,
        holdings=tuple(holdings),
        pods=tuple(sorted(names)),
        alignment=alignment,
        pools=pools,
    )


# -- topology-aware pool zones, as nri-plugins shows them -------------------------------

#: nri-plugins' pool kinds, the zone types (`Pool.level` -> type)
_POOL_TYPES = {
    "system": "virtual node",
    "package": "socket",
    "die": "die",
    "numa": "numa node",
    "l3cache": "L3 cache",
}


def pool_zone_name(topology: Topology, tree: PoolTree, pool: Pool) -> str:
    """nri-plugins' name of `pool`: ``root``, ``socket #P``, ``die #P/D``,
    ``NUMA node #N``, ``<parent>/L3 cache #L``."""
    if pool.parent is None:
        return "root"
    cpu = topology.cpu(min(pool.cpus)) if pool.cpus else None
    if cpu is None:
        return pool.name
    if pool.level == "package":
        return f"socket #{cpu.package_id}"
    if pool.level == "die":
        return f"die #{cpu.package_id}/{cpu.die_id}"
    if pool.level == "numa":
        return f"NUMA node #{cpu.node_id}"
    if pool.level == "l3cache":
        parent = pool_zone_name(topology, tree, tree.pools[pool.parent])
        return f"{parent}/L3 cache #{cpu.l3_id}"
    return pool.name


def pool_zones(
    topology: Topology, tree: PoolTree, state: TopologyAwareState
) -> tuple[PoolZone, ...]:
    """A zone per pool: its memory and CPU capacity and what is free, its ``memory set``,
    ``shared cpuset`` (the shared CPUs left), ``reserved cpuset`` and ``isolated cpuset``
    (when it has any), as nri-plugins' topology-aware policy reports its pools."""
    supply = state.supply
    out = []
    for p in tree.pools:
        i = p.index
        memory = p.memory_of(ALL_KINDS)
        cpus = 1000 * len(p.sharable | p.reserved)
        attributes = [
            ("memory set", str(p.mems_of(ALL_KINDS))),
            ("shared cpuset", str(supply.shared[i])),
        ]
        if p.reserved:
            attributes.append(("reserved cpuset", str(p.reserved)))
        if p.isolated:
            attributes.append(("isolated cpuset", str(p.isolated)))
        out.append(
            PoolZone(
                name=pool_zone_name(topology, tree, p),
                type=_POOL_TYPES.get(p.level, p.level),
                parent=(
                    pool_zone_name(topology, tree, tree.pools[p.parent])
                    if p.parent is not None
                    else ""
                ),
                resources={
                    "memory": (
                        str(memory),
                        str(memory),
                        str(max(memory - supply.memory[i], 0)),
                    ),
                    "cpu": (
                        quantity(cpus),
                        quantity(cpus),
                        quantity(max(1000 * len(supply.shared[i]) - supply.demand[i], 0)),
                    ),
                },
                attributes=tuple(attributes),
            )
        )
    return tuple(out)
