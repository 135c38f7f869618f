"""Resource policies: pure functions of (state, event) -> Decision."""

from nri_resmgr.policy.base import Policy, PolicyFactory
from nri_resmgr.policy.registry import PolicySource, available_policies, load_policy

__all__ = ["Policy", "PolicyFactory", "PolicySource", "available_policies", "load_policy"]
