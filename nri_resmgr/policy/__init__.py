"""Resource policies: pure functions of (state, event) -> Decision.

`base.Policy` is the contract, `decide` the decision plumbing the policies share,
`common` the placement helpers; loading a policy by name is `nri_resmgr.policy_registry`.
"""

from nri_resmgr.policy.base import Policy, PolicyFactory

__all__ = ["Policy", "PolicyFactory"]
