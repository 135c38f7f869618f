"""Resource policies: pure functions of (state, event) -> Decision.

`base.Policy` is the contract (with the defaults of its optional hooks) and
`base.PolicyRecord` a policy's one registration; `kit` holds what the policies share;
loading a policy by name is `nri_resmgr.policy_registry`.
"""

from nri_resmgr.policy.base import Policy, PolicyRecord

__all__ = ["Policy", "PolicyRecord"]
