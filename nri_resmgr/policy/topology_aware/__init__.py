"""The topology-aware policy (nri-plugins' model, re-designed as pure functions).

Modules, in reading order: `config` (keys and defaults), `pools` (the pool tree),
`preferences` (what a container asks for), `state` (grants and the supply they leave),
`offers` (what a pool would grant), `rendering` (grants to assignments), `invariants`
(what must hold after every decision), `scoring` (the documented sort key), `reports`
(what a rebuild reads from the runtime's reports), `placement` (candidate pools, their
ranked offers, the fallbacks), `rebuild` (the state rebuilt from the runtime's reports),
`policy` (the `Policy[S]` protocol and its hooks), `explain` (why a pool won).
"""

from nri_resmgr.policy.base import PolicyRecord, ResourceKind
from nri_resmgr.policy.topology_aware.config import (
    NOT_IMPLEMENTED,
    SPEC_MODEL,
    TopologyAwareConfig,
)
from nri_resmgr.policy.topology_aware.invariants import InvariantError, check_invariants
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree, build_pool_tree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest, container_request
from nri_resmgr.policy.topology_aware.state import Grant, TopologyAwareState

__all__ = [
    "RECORD",
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

#: the registration (the ``nri_resmgr.policies`` entry point names it)
RECORD = PolicyRecord(
    TopologyAwarePolicy,
    spec_model=SPEC_MODEL,
    not_implemented=NOT_IMPLEMENTED,
    resource=ResourceKind("TopologyAwarePolicy", "topologyawarepolicies"),
)
