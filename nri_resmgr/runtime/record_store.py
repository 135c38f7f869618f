"""The placement records in the daemon's state directory (issue 24).

Theory of operation: the pipeline keeps one `RecordStore`.  After every committed
decision it hands the store the records of the containers the decision changed (and the
ids of those released); the store keeps one encoded line per container, so a decision
costs the lines it changed; the file is written by one writer thread, off the event
path (an fsync'ed write of 1,000 records took 4-15 ms on the 2-CPU test machine, ten
times a decision): `flush` hands it the lines kept now and returns, and the writer
writes the latest lines it was handed (writes asked for while it writes coalesce).  The
file is written atomically: a temporary file in the same directory is written and
fsync'ed, renamed over the old one, and the directory fsync'ed; a kill at any point
leaves the old file or the new one whole, never a mix, and a left-over temporary file
is never read.  `sync` waits for the writer (`load` does, and tests).

So the file may lag the runtime by the decisions of the last write or two, and a kill
-9 after a reply and before its record leaves records of the decision before.  No order
can make a record wrong: a record counts only where the runtime reports exactly its
cpuset and memory nodes (`nri_resmgr.policy.kit.rebuild.restart`), so a lagging record
of a container that moved since is unmatched and the restart rebuilds, with the cause
in its reason (docs/architecture.md, "State and restarts").

Reading (`load`) never raises: a missing file is no records; an unreadable, oversized,
corrupt or foreign one (`nri_resmgr.policy.kit.records.decode`: format, schema version,
scope, count, checksum) is logged as a warning naming the file and the problem, and is no
records.  A failed write is logged too; the records on disk are then dropped (removed),
so that a restart rebuilds rather than reads an old file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from nri_resmgr.model import Assignment, ContainerID, PolicyState
from nri_resmgr.ops.logs import EventLog
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.kit.rebuild import records_of
from nri_resmgr.policy.kit.records import (
    MAX_BYTES,
    MAX_RECORDS,
    PlacementRecord,
    RecordError,
    decode,
    encode,
    encode_line,
)

__all__ = ["RECORD_FILE", "RecordStore"]

#: the records' file name in the state directory
RECORD_FILE = "placements.jsonl"


class RecordStore:
    """The placement records of one pipeline, on disk at `path` (module docstring)."""

    def __init__(self, path: Path, *, scope: str, log: EventLog) -> None:
        self.path = path
        #: whose records these are: the policy, its configuration and the machine
        self.scope = scope
        self.log = log
        self._lines: dict[ContainerID, str] = {}
        #: written since the last change (nothing to write)
        self._clean = False
        #: the writer thread and what it shares with the event path: the lines to write
        #: next (None: nothing new), and how many flushes were asked and written
        self._cond = threading.Condition()
        self._writer: threading.Thread | None = None
        self._pending: list[str] | None = None
        self._wanted = 0
        self._written = 0

    def load(self) -> dict[ContainerID, PlacementRecord]:
        """The records on disk for this scope (after this store's own pending write);
        {} when there are none or they cannot be used (logged)."""
        self.sync()
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
        `full`) as `policy` records them in `state`, `gone`'s forgotten, written."""
        if full:
            self.replace(records_of(policy, state, assignments))
        else:
            some = {cid: assignments[cid] for cid in changed if cid in assignments}
            records = records_of(policy, state, some)
            dropped = [cid for cid in some if cid not in records]
            self.change(records, gone=[*dropped, *([gone] if gone is not None else [])])
        self.flush()

    def replace(self, records: Mapping[ContainerID, PlacementRecord]) -> None:
        """Keep exactly `records` (after a rebuild)."""
        self._lines = {cid: encode_line(r) for cid, r in records.items()}
        self._clean = False

    def change(
        self, records: Mapping[ContainerID, PlacementRecord], gone: Iterable[ContainerID] = ()
    ) -> None:
        """Keep `records` (new or changed) and forget the records of `gone`."""
        for cid in gone:
            if self._lines.pop(cid, None) is not None:
                self._clean = False
        for cid, r in records.items():
            line = encode_line(r)
            if self._lines.get(cid) != line:
                self._lines[cid] = line
                self._clean = False

    def flush(self) -> None:
        """Hand the records kept now to the writer (module docstring); returns at once."""
        if self._clean:
            return
        self._clean = True
        with self._cond:
            self._wanted += 1
            self._pending = list(self._lines.values())
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name="placement-records", daemon=True
                )
                self._writer.start()
            self._cond.notify_all()

    def sync(self, timeout: float = 30.0) -> bool:
        """Wait until every record handed to the writer is on disk (or dropped); False
        when `timeout` seconds pass first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._written >= self._wanted, timeout)

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                lines, wanted, self._pending = self._pending, self._wanted, None
            assert lines is not None
            self._write(lines)
            with self._cond:
                self._written = wanted
                self._cond.notify_all()

    def _write(self, lines: list[str]) -> None:
        """`lines` written atomically; a failure logged and the file dropped."""
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
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.path.parent)
        except OSError as exc:
            self._drop(f"not written: {exc}")

    def _drop(self, why: str) -> None:
        self.log.warning("placement records dropped", path=str(self.path), error=why)
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            self.log.warning("placement records not removed", path=str(self.path), error=str(exc))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
