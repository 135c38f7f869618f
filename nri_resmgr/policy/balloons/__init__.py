"""The balloons policy (nri-plugins' model, re-designed as pure functions).

Modules, in reading order: `spec` (the ``BalloonsPolicy`` spec model, the keys
accepted without effect), `config` (the spec validated and applied to the machine),
`matching` (expressions, annotations: which balloon type), `memzone` (a container's
memory zone, which only widens), `state` (balloons and their members), `allocation`
(nri-plugins' CPU tree: which CPUs a balloon takes and gives back), `hints` (each
type's tree options), `sizing` (balloon sizes, composites, the initial state),
`views` (what containers see, rendering), `placement` (the fill chain), `rebuild`
(the state after a restart), `outputs` (CPU classes, interrupts, the report),
`invariants` (what must hold after every decision), `policy` (the `Policy[S]`
protocol, delegating to the others).
"""

from nri_resmgr.policy.balloons.config import resolve_config
from nri_resmgr.policy.balloons.invariants import InvariantError, check_invariants
from nri_resmgr.policy.balloons.matching import BALLOON_ANNOTATION, balloon_type_of
from nri_resmgr.policy.balloons.policy import BalloonReport, BalloonsPolicy
from nri_resmgr.policy.balloons.spec import (
    NOT_IMPLEMENTED,
    SPEC_MODEL,
    BalloonsConfig,
    BalloonType,
)
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
