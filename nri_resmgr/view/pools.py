"""The node picture's reading of what a policy holds: the policy contract's `pool_cpus` hook.

Theory of operation: `pool_cpus` asks the policy (`nri_resmgr.policy.base.Policy.pool_cpus`,
whose default is what the live containers' assignments show) and re-exports the values
(`nri_resmgr.policy.pool_report`) under the picture's names.  Each built-in policy answers
in its own package; nothing here knows one policy from another.

Pure: no files, no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from nri_resmgr.model import Assignment, PolicyState
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.pool_report import BalloonCPUs, PoolCPUs

__all__ = ["BalloonCPUs", "PoolCPUs", "pool_cpus"]


def pool_cpus(policy: Policy, state: PolicyState, assignments: Iterable[Assignment]) -> PoolCPUs:
    """The reserved, shared and balloon CPUs of `policy` in `state`; `assignments` are the
    live containers' (the hook's default reads them)."""
    return policy.pool_cpus(state, assignments)
