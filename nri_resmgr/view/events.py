"""Events on the pod: each placement, fallback and refusal, coalesced and rate limited.

Theory of operation: the daemon tells Kubernetes what it did to a pod as Events on the
pod (``kubectl describe pod`` lists them).  This module is the pure core; the shell that
posts them is `nri_resmgr.kube.pod_events`.

- A decision becomes a `PodNote` about one container: `placement_note` for a committed
  create or update (reason ``Placed``, type Normal, the message says what it holds:
  ``exclusive CPUs 4-5 on NUMA node 1``; reason ``PlacementFallback``, type Warning, when
  the policy's `fallback` hook says the placement is not what the container asked for),
  `refusal_note` for a creation the daemon refused (``PlacementRefused``, Warning, the
  error's message).
- `EventQueue.offer` (O(1), on the event loop) coalesces notes into one pending event per
  pod and reason: the newest message of each of its containers, and the count of notes.
  At most `EventsConfig.max_pending` events wait; a note about another pod while they all
  wait is dropped and counted (`EventQueue.dropped`), so the queue never grows without
  bound however fast containers come and go, and offering never waits.
- `EventQueue.take` hands out the events whose first note is `coalesce_seconds` old, as
  many as a token bucket allows (`rate` per second, up to `burst` at once); the rest keep
  waiting, and keep coalescing.  The shell calls it now and then and posts what it gets
  off the event loop.

The clock is a parameter (seconds, monotonic), so the rules are tested without sleeping.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from nri_resmgr.model import Assignment, ContainerInfo, CPUKind, Decision, ResmgrError
from nri_resmgr.policy.base import Policy

__all__ = [
    "MAX_CONTAINERS_SHOWN",
    "MAX_MESSAGE",
    "EventQueue",
    "EventType",
    "EventsConfig",
    "PodEvent",
    "PodNote",
    "PodRef",
    "Reason",
    "decision_note",
    "describe_placement",
    "placement_note",
    "refusal_note",
]

#: characters of an event's message (Kubernetes keeps up to 1 kiB of it in practice)
MAX_MESSAGE = 1024
#: containers whose messages one pending event keeps (the newest; the count says more)
MAX_CONTAINERS_SHOWN = 16


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Reason(enum.StrEnum):
    PLACED = "Placed"
    FALLBACK = "PlacementFallback"
    REFUSED = "PlacementRefused"


class EventsConfig(BaseModel):
    """The ``events`` section of the daemon's configuration: Events on the pods."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    enabled: bool = True
    #: events posted per second at most, on average
    rate: float = Field(default=5.0, gt=0)
    #: events posted at once at most (the token bucket's size)
    burst: int = Field(default=20, ge=1)
    #: events waiting to be posted at most; notes about other pods beyond it are dropped
    max_pending: int = Field(default=256, ge=1, alias="maxPending")
    #: seconds an event waits for more notes about its pod before it is posted
    coalesce_seconds: float = Field(default=1.0, ge=0, alias="coalesceSeconds")


@dataclass(frozen=True, slots=True)
class PodRef:
    """The pod an event is about (its involvedObject)."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PodNote:
    """One fact about one container of a pod."""

    pod: PodRef
    container: str
    type: EventType
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class PodEvent:
    """One event to post: a pod, a reason, its containers' newest messages, a count."""

    pod: PodRef
    type: EventType
    reason: Reason
    message: str
    #: notes coalesced into it
    count: int
    #: clock readings of its first and last note
    first: float
    last: float


def _nodes(mems: str) -> str:
    plural = "s" if ("," in mems or "-" in mems) else ""
    return f"NUMA node{plural} {mems}"


def describe_placement(a: Assignment) -> str:
    """What a container holds, in words: ``exclusive CPUs 4-5 on NUMA node 1 (pool X)``."""
    pinned = a.kind is not CPUKind.NONE and bool(a.cpus)
    text = f"{a.kind} CPUs {a.cpus}" if pinned else "CPUs not pinned"
    if a.mems:
        text += f" on {_nodes(str(a.mems))}"
    if a.pool:
        text += f" (pool {a.pool})"
    return text


def _pod_of(info: ContainerInfo) -> PodRef:
    return PodRef(namespace=info.pod.namespace, name=info.pod.name, uid=info.pod.uid)


def placement_note(info: ContainerInfo, a: Assignment | None, *, fallback: str) -> PodNote | None:
    """The note of a committed decision about `info` (None without an assignment);
    `fallback` is the policy's `fallback` hook's answer ("" : what it asked for)."""
    if a is None:
        return None
    where = describe_placement(a)
    if fallback:
        return PodNote(
            _pod_of(info), info.name, EventType.WARNING, Reason.FALLBACK, f"{where}: {fallback}"
        )
    return PodNote(_pod_of(info), info.name, EventType.NORMAL, Reason.PLACED, where)


def decision_note(policy: Policy, info: ContainerInfo, decision: Decision) -> PodNote | None:
    """The note of `policy`'s committed `decision` about `info` (the pipeline's hook):
    `placement_note`, a fallback when the policy's `fallback` hook names one."""
    try:
        why = policy.fallback(decision.state, info)
    except ResmgrError:  # the decision stands; its event only loses the fallback's words
        why = ""
    return placement_note(info, decision.assignment, fallback=why)


def refusal_note(pod: PodRef, container: str, error: str) -> PodNote:
    """The note of a creation the daemon refused with `error`."""
    return PodNote(pod, container, EventType.WARNING, Reason.REFUSED, error)


@dataclass(slots=True)
class _Pending:
    pod: PodRef
    type: EventType
    reason: Reason
    first: float
    last: float
    count: int = 0
    #: container name -> its newest message, oldest first
    messages: OrderedDict[str, str] = field(default_factory=OrderedDict)

    def add(self, note: PodNote, now: float) -> None:
        self.messages.pop(note.container, None)
        self.messages[note.container] = note.message
        while len(self.messages) > MAX_CONTAINERS_SHOWN:
            self.messages.popitem(last=False)
        self.count += 1
        self.last = now

    def event(self) -> PodEvent:
        text = "; ".join(f"container {c}: {m}" for c, m in self.messages.items())
        if len(text) > MAX_MESSAGE:
            cut = MAX_MESSAGE - 20
            text = f"{text[:cut]}... ({len(text) - cut} more)"
        return PodEvent(
            pod=self.pod,
            type=self.type,
            reason=self.reason,
            message=text,
            count=self.count,
            first=self.first,
            last=self.last,
        )


class EventQueue:
    """Pending pod events, coalesced per pod and reason, bounded, rate limited
    (module docstring)."""

    def __init__(self, config: EventsConfig | None = None) -> None:
        self.config = config or EventsConfig()
        self._pending: OrderedDict[tuple[str, str, str, Reason], _Pending] = OrderedDict()
        self._tokens = float(self.config.burst)
        self._refilled: float | None = None
        #: notes dropped because `max_pending` events were waiting
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._pending)

    def configure(self, config: EventsConfig) -> None:
        """Take a new configuration; pending events stay (turned off: they are dropped)."""
        self.config = config
        self._tokens = min(self._tokens, float(config.burst))
        if not config.enabled:
            self._pending.clear()

    def offer(self, note: PodNote | None, now: float) -> bool:
        """Coalesce `note` into its pod's pending event; False when it is dropped (off,
        or `max_pending` events about other pods wait).  O(1)."""
        if note is None or not self.config.enabled:
            return False
        key = (note.pod.namespace, note.pod.name, note.pod.uid, note.reason)
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= self.config.max_pending:
                self.dropped += 1
                return False
            pending = _Pending(note.pod, note.type, note.reason, first=now, last=now)
            self._pending[key] = pending
        pending.add(note, now)
        return True

    def _refill(self, now: float) -> None:
        if self._refilled is not None and now > self._refilled:
            gained = (now - self._refilled) * self.config.rate
            self._tokens = min(float(self.config.burst), self._tokens + gained)
        self._refilled = now if self._refilled is None else max(self._refilled, now)

    def take(self, now: float) -> list[PodEvent]:
        """The events due at `now` that the rate allows, oldest first; they leave the
        queue (a later note about the same pod starts a new one)."""
        self._refill(now)
        out: list[PodEvent] = []
        due = now - self.config.coalesce_seconds
        for key in list(self._pending):
            if self._tokens < 1:
                break
            pending = self._pending[key]
            if pending.first > due:
                continue
            del self._pending[key]
            self._tokens -= 1
            out.append(pending.event())
        return out

    def next_due(self) -> float | None:
        """The clock reading at which the oldest pending event is due (None: none wait)."""
        oldest = next(iter(self._pending.values()), None)  # kept in order of first notes
        return None if oldest is None else oldest.first + self.config.coalesce_seconds
