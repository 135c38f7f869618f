"""The placement records in the daemon's state directory (issue 24).

Theory of operation: the pipeline keeps one `RecordStore`.  After every committed
decision it hands the store what the decision changed (`keep`: the committed state, the
assignments of the containers it changed, the id released); the store keeps one encoded
line per container and writes only what changed since its last write: one journal block
appended to the file (`nri_resmgr.policy.kit.records.encode_block`), so a decision costs
O(what it changed), not O(live containers).  A record whose meaning and memory nodes are
those of its last line is kept as that line's tail and a head of its CPUs, one head
object for every record of one CPU set: an exclusive decision changes the CPUs of every
shared container of its pool, and nothing else of their records, so those are stored as
one dictionary entry each and written as moves (the block names their ids under the new
CPUs), not as new lines.  At 10,000 live (2,475 such records per exclusive decision,
lines of about 370 bytes) this cut the after-reply work's peak allocation from 3.2 to
0.7 MiB (tracemalloc) and, with no compaction after every other exclusive decision, its
CPU by a third (docs/benchmarks.md, wt-exf).

When the write happens: without `defer`, `keep` writes at once, before the caller
answers.  The daemon passes `defer` (its event loop's ``call_soon``): `keep` then only
queues the commit (the states are immutable, so nothing is copied but the changed
assignments), and the first commit of an event-loop turn asks `defer` for one `flush`,
which runs after the handler's step, the one that writes the reply.  The records are
made (`Policy.record`, encoded) and written there, so a reply does not wait for them,
and a burst of events answered in one turn is one append.  A `load`, `close` or a
pipeline's replacement flushes what is queued first.

When the journal's bytes have grown past the base's (the live records as last
compacted, plus `SLACK` lines of their mean size), the next write compacts: the whole
file (header and one line per live record) is written to a temporary file in the same
directory and renamed over the old one, so the file stays within about twice the live
set and a compaction's O(live) cost is spread over at least as many bytes appended.
(Counted in entries, as until wt-exf, a move would weigh as much as a line: at 10,000
live the store compacted 3.7 MB after every other exclusive decision.)  The first write
of a store (after a start or a rebuild's `replace`) and the write after a failed append
compact too: appends go only to a file this store wrote whole, so a torn tail left by an
earlier process is never followed by a block.

What a kill leaves: a kill -9 during a compaction leaves the old file whole (a left-over
temporary file is never read); during an append, a last line without its newline, which
`decode` does not read (the records of the write before).  The file is not fsync'ed:
a killed daemon's writes stay in the page cache, and a crash of the machine that could
lose them also ends the containers the records are about; whatever such a crash leaves is
refused by the checksums (the base's and each block's) and the restart rebuilds.  (The
writer thread of the first version fsync'ed a rewrite of every record after each
decision: 4-15 ms of the 2-CPU machine per decision, which tripled the decision rows of
`bench.goals`.)

So the file may lag the runtime by the decisions of the last event-loop turn: a kill -9
after a reply and before the turn's flush (or during its append) leaves the records of
the turn before.  No order can make a record wrong: a record counts only where the
runtime reports exactly its cpuset and memory nodes
(`nri_resmgr.policy.kit.rebuild.restart`), so a lagging record of a container that moved
since is unmatched and the restart rebuilds, with the cause in its reason; a container
created in the lost turn has no record and is placed on the restored state as a
creation would place it, and a record of a container removed in it names no reported
container and is dropped (docs/architecture.md, "State and restarts").

Reading (`load`) never raises: a missing file is no records; an unreadable, oversized,
corrupt or foreign one (`nri_resmgr.policy.kit.records.decode`: format, schema version,
scope, count, checksums) is logged as a warning naming the file and the problem, and is
no records.  A failed write is logged too; the records on disk are then dropped
(removed), so that a restart rebuilds rather than reads an old file, and the store tries
again (a compaction) only after as many changes as a compaction would wait for, so an
unwritable directory costs a warning per compaction interval, not per decision.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_resmgr.model import Assignment, ContainerID, PolicyState
from nri_resmgr.ops.logs import EventLog
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.kit.rebuild import records_of
from nri_resmgr.policy.kit.records import (
    MAX_BYTES,
    MAX_RECORDS,
    Meaning,
    PlacementRecord,
    RecordError,
    decode,
    encode,
    encode_block,
    encode_head,
    encode_meaning,
    encode_tail,
)
from nri_resmgr.topology.cpuset import CPUSet, NodeSet

__all__ = ["RECORD_FILE", "SLACK", "Defer", "RecordStore"]

#: the records' file name in the state directory
RECORD_FILE = "placements.jsonl"


#: journal entries (records put or removed) allowed beyond the live records before the
#: next write compacts
SLACK = 64

#: how `keep` puts a write off (the daemon's ``loop.call_soon``): it is handed `flush`
Defer = Callable[[Callable[[], None]], object]


@dataclass(frozen=True, slots=True)
class _Commit:
    """One committed decision, queued until the next write makes its records."""

    policy: Policy[Any]
    state: PolicyState
    #: the assignments of the containers it changed (every one when `full`)
    assignments: Mapping[ContainerID, Assignment]
    full: bool
    gone: ContainerID | None


class RecordStore:
    """The placement records of one pipeline, on disk at `path` (module docstring)."""

    def __init__(
        self, path: Path, *, scope: str, log: EventLog, defer: Defer | None = None
    ) -> None:
        self.path = path
        #: puts a write off until the reply is sent (module docstring); None: write at once
        self.defer = defer
        #: commits kept since the last write, in order, and whether a flush is put off
        self._pending: list[_Commit] = []
        self._deferred = False
        #: whose records these are: the policy, its configuration and the machine
        self.scope = scope
        self.log = log
        #: every live record's line as its head (`encode_head`, one object per CPU set
        #: in a change) and its tail (`encode_tail`) with the meaning and memory nodes it
        #: encodes: a record whose meaning and nodes equal the last (the same objects,
        #: for a policy that keeps them) keeps its tail (module docstring)
        self._heads: dict[ContainerID, str] = {}
        self._tails: dict[ContainerID, tuple[Meaning, NodeSet, str]] = {}
        #: since the last write: records changed (written whole), records whose only
        #: change is their CPUs (written as moves), records forgotten: the next block
        self._put: dict[ContainerID, None] = {}
        self._moved: dict[ContainerID, None] = {}
        self._gone: set[ContainerID] = set()
        #: the next write compacts (nothing of this store's on disk, or not appendable)
        self._whole = True
        #: bytes appended since the last compaction, the base's bytes then, and the
        #: file's size
        self._journal = 0
        self._base = 0
        self._size = 0
        #: changes let pass since a failed write (None: the last write did not fail)
        self._waited: int | None = None

    def load(self) -> dict[ContainerID, PlacementRecord]:
        """The records on disk for this scope; {} when there are none or they cannot be
        used (logged); what is queued is written first."""
        if self._pending:
            self.flush()
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self.log.warning("placement records not read", path=str(self.path), error=str(exc))
            return {}
        try:
            return decode(data, scope=self.scope, source=str(self.path))
        except RecordError as exc:
            self.log.warning("placement records not used", path=str(self.path), error=str(exc))
            return {}

    def keep(
        self,
        policy: Policy,
        state: PolicyState,
        assignments: Mapping[ContainerID, Assignment],
        *,
        changed: Iterable[ContainerID],
        full: bool,
        gone: ContainerID | None,
    ) -> None:
        """After a commit: the records of `changed` (of every one of `assignments` when
        `full`) as `policy` records them in `state`, `gone`'s forgotten; written now,
        or queued for the one write `defer` puts off (module docstring)."""
        if full:
            self._pending.clear()  # a rebuild's records replace every earlier one
            some = dict(assignments)
        else:
            some = {cid: assignments[cid] for cid in changed if cid in assignments}
        self._pending.append(_Commit(policy, state, some, full, gone))
        if self.defer is None:
            self.flush()
        elif not self._deferred:
            self._deferred = True
            self.defer(self.flush)

    def _make(self, commit: _Commit) -> None:
        """The records of one queued commit, taken into the lines to write."""
        records = records_of(commit.policy, commit.state, commit.assignments)
        if commit.full:
            self.replace(records)
            return
        dropped = [cid for cid in commit.assignments if cid not in records]
        gone = [commit.gone] if commit.gone is not None else []
        self.change(records, gone=[*dropped, *gone])

    def replace(self, records: Mapping[ContainerID, PlacementRecord]) -> None:
        """Keep exactly `records` (after a rebuild); the next write compacts."""
        self._heads.clear()
        self._tails.clear()
        self._put.clear()
        self._moved.clear()
        self._gone.clear()
        self.change(records)
        self._whole = True

    def change(
        self, records: Mapping[ContainerID, PlacementRecord], gone: Iterable[ContainerID] = ()
    ) -> None:
        """Keep `records` (new or changed) and forget the records of `gone`."""
        heads, tails, put, moved = self._heads, self._tails, self._put, self._moved
        for cid in gone:
            tails.pop(cid, None)
            if heads.pop(cid, None) is not None:
                put.pop(cid, None)
                moved.pop(cid, None)
                self._gone.add(cid)
        cpus: CPUSet | None = None
        head = ""
        for cid, r in records.items():
            if r.cpus is not cpus:  # one head for a run of records of one CPU set
                cpus, head = r.cpus, encode_head(r.cpus)
            kept = tails.get(cid)
            if (
                kept is not None
                and (kept[0] is r.meaning or kept[0] == r.meaning)
                and (kept[1] is r.mems or kept[1] == r.mems)
            ):
                if heads[cid] == head:
                    continue  # the same line
                heads[cid] = head
                if cid not in put:  # a line not yet written stays one
                    moved[cid] = None
            else:
                tails[cid] = (r.meaning, r.mems, encode_tail(r, encode_meaning(r.meaning)))
                heads[cid] = head
                put[cid] = None
                moved.pop(cid, None)
            self._gone.discard(cid)

    def flush(self) -> None:
        """Make the queued commits' records and write what changed since the last write
        (module docstring)."""
        self._deferred = False
        pending, self._pending = self._pending, []
        for commit in pending:
            self._make(commit)
        entries = len(self._put) + len(self._moved) + len(self._gone)
        if not entries and not self._whole:
            return
        if self._waited is not None and self._waited + entries < len(self._heads) + SLACK:
            self._waited += entries  # after a failed write: wait for the compaction point
            self._clear()
            return
        if self._whole or not self._append():
            self._compact()
        self._clear()

    def _clear(self) -> None:
        self._put.clear()
        self._moved.clear()
        self._gone.clear()

    def _line(self, cid: ContainerID) -> str:
        return self._heads[cid] + self._tails[cid][2]

    def _block(self) -> bytes:
        """This write's journal block (`encode_block`), its moves grouped by head."""
        heads = self._heads
        by_head: dict[str, list[ContainerID]] = {}
        for cid in self._moved:
            head = heads[cid]
            ids = by_head.get(head)
            if ids is None:
                by_head[head] = [cid]
            else:
                ids.append(cid)
        lines = map(self._line, self._put)
        return (encode_block(lines, self._gone, by_head.items()) + "\n").encode()

    def _append(self) -> bool:
        """This write's block appended to the file; False when it must compact instead
        (the journal past the base, module docstring)."""
        data = self._block()
        slack = SLACK * self._base // max(len(self._heads), 1)
        if self._journal + len(data) > self._base + slack or self._size + len(data) > MAX_BYTES:
            return False
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                written = os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            self.log.warning("placement records not appended", path=str(self.path), error=str(exc))
            return False
        if written != len(data):  # a torn tail: compact over it
            return False
        self._journal += written
        self._size += written
        return True

    def _compact(self) -> None:
        """Every live record written whole and atomically; a failure logged and the
        file dropped."""
        self._whole = True
        lines = list(map(self._line, self._heads))
        if len(lines) > MAX_RECORDS:
            self._drop(f"{len(lines)} records; at most {MAX_RECORDS} are kept")
            return
        data = encode(self.scope, lines)
        if len(data) > MAX_BYTES:
            self._drop(f"{len(data)} bytes; at most {MAX_BYTES} are kept")
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            self._drop(f"not written: {exc}")
            return
        self._whole = False
        self._journal = 0
        self._base = self._size = len(data)
        self._waited = None

    def _drop(self, why: str) -> None:
        self.log.warning("placement records dropped", path=str(self.path), error=why)
        self._waited = 0
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            self.log.warning("placement records not removed", path=str(self.path), error=str(exc))
