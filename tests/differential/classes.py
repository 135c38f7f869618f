"""The documented difference classes: which divergences from nri-plugins are on purpose.

Theory of operation: a divergence (one container whose placement differs after a step) is
a failure unless it belongs to a class listed here. Each `DiffClass` names one bullet of
a policy's "Differences from nri-plugins" section in docs/policies.md (the bullet carries
``(differential class `NAME`)``; `tests/differential/test_classes.py` checks that the
classes here and the markers there are the same set, per policy) and a predicate over the
`Context` of the divergence that recognises exactly that difference, no more: a predicate
names the container kind, the side that differs and how, so a class is no free pass for
other divergences on the same container. Each class has a test there showing one case
it recognises and a near miss it does not.

`classify` returns the first class whose predicate holds, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nri_resmgr.topology.model import Topology
from tests.differential.gen import Ctr, Pod
from tests.differential.plugins import Placement

__all__ = ["CLASSES", "Context", "DiffClass", "classify"]

Held = Placement | str


@dataclass(frozen=True, slots=True)
class Context:
    """What a class may look at: the machine, the container, both placements (or
    refusals) now and after the previous step, and whether this step restarted the
    plugins."""

    machine: Topology
    policy: str
    pod: Pod
    ctr: Ctr
    ours: Held
    theirs: Held
    before: tuple[Held, Held] | None
    after_restart: bool


@dataclass(frozen=True, slots=True)
class DiffClass:
    name: str
    policy: str
    doc: str  # one line: what differs
    holds: Callable[[Context], bool]


def _shared_refused(c: Context) -> bool:
    """Ours refuses a shared container (one not asking for whole CPUs) that theirs leaves
    unpinned: on every online CPU, or with no cpuset at all."""
    shared = c.ctr.cpu_limit != c.ctr.cpu_request or c.ctr.cpu_request % 1000 != 0
    if not (shared and isinstance(c.ours, str) and isinstance(c.theirs, Placement)):
        return False
    return c.theirs.cpus in ("", str(c.machine.online_cpus()))


def _restart_keeps(c: Context) -> bool:
    """A restart: ours keeps the container where it was, theirs moves it."""
    if not c.after_restart or c.before is None:
        return False
    ours_before, theirs_before = c.before
    return (
        c.ours == ours_before
        and c.theirs != theirs_before
        and ours_before == theirs_before
    )


def _maxcpus_honoured(c: Context) -> bool:
    """Ours refuses a container no balloon can take within maxCPUs; theirs puts it in a
    balloon clamped at maxCPUs (it counts every free CPU as room when maxCPUs is more)."""
    return (
        isinstance(c.ours, str)
        and "maxCPUs is" in c.ours
        and isinstance(c.theirs, Placement)
        and bool(c.theirs.cpus)
    )


CLASSES: tuple[DiffClass, ...] = (
    DiffClass(
        "shared-refused",
        "topology-aware",
        "a shared container finding no shared CPU: refused here, run elsewhere there",
        _shared_refused,
    ),
    DiffClass(
        "restart-keeps-placements",
        "topology-aware",
        "after a restart ours keeps a container where both had it, theirs moves it",
        _restart_keeps,
    ),
    DiffClass(
        "restart-keeps-placements",
        "balloons",
        "after a restart ours keeps a container where both had it, theirs moves it",
        _restart_keeps,
    ),
    DiffClass(
        "maxcpus-honoured",
        "balloons",
        "a container beyond every balloon's maxCPUs: refused here, overcommitted there",
        _maxcpus_honoured,
    ),
)


def classify(c: Context) -> str | None:
    """The documented class of a divergence, or None."""
    for cls in CLASSES:
        if cls.policy == c.policy and cls.holds(c):
            return cls.name
    return None
