"""Resource policies: pure functions of (state, event) -> Decision."""

from nri_resmgr.policy.base import Policy, PolicyFactory

__all__ = ["Policy", "PolicyFactory"]
