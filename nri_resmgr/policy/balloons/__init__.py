"""The balloons policy (nri-plugins' model, re-designed as pure functions).

Modules, in reading order: `config` (the ``BalloonsPolicy`` spec, the keys accepted
without effect), `matching` (expressions, annotations: which balloon type), `memzone` (a
container's memory zone, which only widens), `state` (balloons and their members),
`invariants` (what must hold after every decision), `policy` (the `Policy[S]` protocol:
filling, inflating, deflating, rebuild, and the report and CPU class hooks).
"""

from nri_resmgr.policy.balloons.config import (
    NOT_IMPLEMENTED,
    SPEC_MODEL,
    BalloonsConfig,
    BalloonType,
    resolve_config,
)
from nri_resmgr.policy.balloons.invariants import InvariantError, check_invariants
from nri_resmgr.policy.balloons.matching import BALLOON_ANNOTATION, balloon_type_of
from nri_resmgr.policy.balloons.policy import BalloonReport, BalloonsPolicy
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState, Member
from nri_resmgr.policy.base import PolicyRecord, ResourceKind

__all__ = [
    "BALLOON_ANNOTATION",
    "RECORD",
    "Balloon",
    "BalloonReport",
    "BalloonType",
    "BalloonsConfig",
    "BalloonsPolicy",
    "BalloonsState",
    "InvariantError",
    "Member",
    "balloon_type_of",
    "check_invariants",
    "resolve_config",
]

#: the registration (the ``nri_resmgr.policies`` entry point names it)
RECORD = PolicyRecord(
    BalloonsPolicy,
    spec_model=SPEC_MODEL,
    not_implemented=NOT_IMPLEMENTED,
    resource=ResourceKind("BalloonsPolicy", "balloonspolicies"),
)
