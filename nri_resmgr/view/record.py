"""The daemon's record of the last decision per container, bounded, for `explain --url`.

Theory of operation: the pipeline calls `DecisionRecord.note` after it commits a
CreateContainer or UpdateContainer decision (`Pipeline(on_decision=...)`).  The record
keeps, per container id, one `DecisionNote`: which event, when, the assignment (kind,
pool, CPUs, memory nodes), the policy's reason (at most `MAX_REASON` characters) and the
containers the decision updated (their count, and at most `MAX_UPDATED` of their ids).  A
note holds small strings, the text ones interned (`sys.intern`): the shared containers
of a pool have the same kind, pool, CPUs, memory nodes and reason, so their notes hold
one copy of each; a note is then its own slots and clock reading, about 150 bytes per
container (docs/benchmarks.md, "RSS at 1,000 live").  At most `max_containers` notes are
kept, the oldest dropped first, so containers the record never hears removed (it is not
told of releases) cannot make it grow without bound; readers show the notes of live
containers only.  Work per note is O(1) plus the `MAX_UPDATED` ids: nothing on the event
path walks the record.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nri_resmgr.model import ContainerID, ContainerInfo, Decision

__all__ = ["MAX_REASON", "MAX_UPDATED", "DecisionNote", "DecisionRecord"]

#: characters of the policy's reason kept (a fallback reason quotes every pool's)
MAX_REASON = 512
#: ids of updated containers kept per note
MAX_UPDATED = 16
#: notes kept at most (a node runs far fewer containers)
DEFAULT_MAX_CONTAINERS = 10_000


@dataclass(frozen=True, slots=True)
class DecisionNote:
    """The last decision about one container (module docstring)."""

    event: str
    at: float
    kind: str
    pool: str
    cpus: str
    mems: str
    reason: str
    updates: int
    updated: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "at": self.at,
            "kind": self.kind,
            "pool": self.pool,
            "cpus": self.cpus,
            "mems": self.mems,
            "reason": self.reason,
            "updates": self.updates,
            "updated": list(self.updated),
        }


class DecisionRecord:
    """Per container id, its last `DecisionNote` (module docstring)."""

    def __init__(
        self,
        *,
        max_containers: int = DEFAULT_MAX_CONTAINERS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_containers = max_containers
        self._clock = clock
        self._notes: dict[ContainerID, DecisionNote] = {}

    def __len__(self) -> int:
        return len(self._notes)

    def note(self, event: str, container: ContainerInfo, decision: Decision) -> None:
        """Keep `decision` as the last one about `container` (the pipeline's hook)."""
        a = decision.assignment
        reason = decision.reason
        if len(reason) > MAX_REASON:
            reason = f"{reason[:MAX_REASON]}... ({len(reason) - MAX_REASON} more)"
        note = DecisionNote(
            event=event,
            at=self._clock(),
            kind=sys.intern(str(a.kind)) if a is not None else "",
            pool=sys.intern(str(a.pool)) if a is not None else "",
            cpus=sys.intern(str(a.cpus)) if a is not None else "",
            mems=sys.intern(str(a.mems)) if a is not None else "",
            reason=sys.intern(reason),
            updates=len(decision.updates),
            updated=tuple(str(u.container_id) for u in decision.updates[:MAX_UPDATED]),
        )
        self._notes.pop(container.id, None)  # re-inserted: the newest is last
        self._notes[container.id] = note
        while len(self._notes) > self.max_containers:
            del self._notes[next(iter(self._notes))]

    def get(self, cid: ContainerID) -> DecisionNote | None:
        return self._notes.get(cid)

    def as_dict(self, live: Mapping[ContainerID, ContainerInfo]) -> dict[str, Any]:
        """The notes of the `live` containers, with their names, for ``/decisions.json``."""
        out = []
        for cid, info in live.items():
            note = self._notes.get(cid)
            names = {
                "id": str(cid),
                "namespace": info.pod.namespace,
                "pod": info.pod.name,
                "name": info.name,
            }
            out.append({**names, "decision": note.as_dict() if note is not None else None})
        return {"containers": out, "kept": len(self._notes)}
