"""The topology-aware policy (nri-plugins' model, re-designed as pure functions).

Modules, in reading order: `config` (keys and defaults), `pools` (the pool tree),
`preferences` (what a container asks for), `supply` (state, grants, offers, rendering,
invariants), `scoring` (the documented sort key), `policy` (the `Policy` protocol).
"""

from nri_resmgr.policy.topology_aware.config import TopologyAwareConfig
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree, build_pool_tree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest, container_request
from nri_resmgr.policy.topology_aware.supply import (
    Grant,
    InvariantError,
    TopologyAwareState,
    check_invariants,
)

__all__ = [
    "ContainerRequest",
    "Grant",
    "InvariantError",
    "Pool",
    "PoolTree",
    "TopologyAwareConfig",
    "TopologyAwarePolicy",
    "TopologyAwareState",
    "build_pool_tree",
    "check_invariants",
    "container_request",
]
