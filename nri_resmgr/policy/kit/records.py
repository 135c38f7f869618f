"""Placement records: what a placement means, kept so a restart need not guess it.

Theory of operation: a rebuild from bare cpusets must guess what each placement meant
(which pool, exclusive or shared, which grant), and each ambiguity is a move waiting for
the right machine (issue 24).  So after every committed decision the daemon keeps, per
container, a `PlacementRecord`: the cpuset and memory nodes it was given and its
*meaning*, the policy's own flat fields (`Policy.record`).  At Synchronize the records are
read back and used by one rule (`nri_resmgr.policy.kit.rebuild.restart`): a record counts
only for a container whose reported cpuset and memory nodes equal what it holds, and the
state the policy restores from them (`Policy.restore`) must render exactly the reports and
pass the policy's invariants.  The runtime's report always wins; a record is a reading of
it, never a substitute.

A policy whose state holds CPUs no container record holds (the balloons policy: the
reserved balloon, ``minBalloons`` balloons, which component a composite has) also keeps
one *layout* record (`Policy.record_layout`), filed under the id `LAYOUT`, which no
runtime gives a container (their ids are hexadecimal); its cpuset and memory nodes are
empty, as no container reports them.  The restart hands it to `Policy.restore` with the
matched container records, and the same checks (invariants, the report rendered
exactly) decide whether it counts.

This module is the pure half: the values and the one text form of a set of records,
`encode` and `decode` (`nri_resmgr.runtime.record_store` writes and reads the file).  The
form is JSON lines: a header line (format name, schema version, the scope the records
belong to, their count and the SHA-256 of the body), then one line per container.
`decode` refuses with a `RecordError` naming the file's problem (unknown format or
version, a scope of another policy or configuration, a wrong count or checksum, a line
that is not a record, more than `MAX_RECORDS` or `MAX_BYTES`): a corrupt or foreign file
is a condition to log, never a crash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nri_resmgr.model import ContainerID, ResmgrError
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError, NodeSet

__all__ = [
    "FORMAT",
    "LAYOUT",
    "MAX_BYTES",
    "MAX_RECORDS",
    "SCHEMA_VERSION",
    "Meaning",
    "MeaningFields",
    "PlacementRecord",
    "RecordError",
    "decode",
    "encode",
    "encode_line",
]

#: the format name in the header: a file without it is not ours
FORMAT = "nri-resmgr placement records"
#: the schema this code reads and writes; any other is refused (2: the `LAYOUT` record)
SCHEMA_VERSION = 2
#: the id the policy's layout record is filed under (module docstring)
LAYOUT = ContainerID("@layout")
#: at most this many records (one per live container) ...
MAX_RECORDS = 100_000
#: ... and this many bytes in the file
MAX_BYTES = 64 * 1024 * 1024

#: a placement's meaning: the policy's own fields, flat JSON scalars
Meaning = Mapping[str, int | str | bool]


class RecordError(ResmgrError):
    """Records that cannot be used (a corrupt or foreign file, a meaning a policy
    cannot read); the restart goes through the rebuild."""


@dataclass(frozen=True, slots=True)
class PlacementRecord:
    """One container's placement as the daemon gave it, and what it meant."""

    container_id: ContainerID
    #: the cpuset and memory nodes the runtime was told (empty: none set)
    cpus: CPUSet
    mems: NodeSet
    meaning: Meaning


class MeaningFields:
    """A meaning's fields read by type, for the policies' `Policy.restore`: each one
    missing or of another type is a `RecordError` naming `subject` and the field, and
    `all_read` refuses the fields not read (a record of another shape)."""

    def __init__(self, subject: str, meaning: Meaning) -> None:
        self.subject, self.meaning = subject, meaning
        self.read: set[str] = set()

    def all_read(self) -> None:
        """Raise `RecordError` naming the fields of the meaning not read so far."""
        extra = sorted(set(self.meaning) - self.read)
        if extra:
            raise RecordError(f"{self.subject}: unexpected record fields {extra[:5]}")

    def _get(self, key: str, kind: type) -> object:
        self.read.add(key)
        value = self.meaning.get(key)
        if type(value) is not kind:
            raise RecordError(
                f"{self.subject}: record field {key} {value!r}; expected a {kind.__name__}"
            )
        return value

    def integer(self, key: str) -> int:
        value = self._get(key, int)
        assert isinstance(value, int)
        return value

    def flag(self, key: str) -> bool:
        return self._get(key, bool) is True

    def text(self, key: str) -> str:
        return str(self._get(key, str))

    def ids(self, key: str) -> IDSet:
        """An id set's field (`IDSet` text form)."""
        text = self.text(key)
        try:
            return IDSet.parse(text)
        except IDSetError as exc:
            raise RecordError(f"{self.subject}: record field {key}: {exc}") from exc


def encode_line(record: PlacementRecord) -> str:
    """One record's line (no newline); the store keeps lines, so only changed records
    are encoded again."""
    return json.dumps(
        {
            "id": record.container_id,
            "cpus": str(record.cpus),
            "mems": str(record.mems),
            "meaning": dict(record.meaning),
        },
        separators=(",", ":"),
        sort_keys=True,
    )


def encode(scope: str, lines: Iterable[str]) -> bytes:
    """The file's bytes: the header, then `lines` (from `encode_line`)."""
    lines = list(lines)
    body = "".join(line + "\n" for line in lines).encode()
    header = {
        "format": FORMAT,
        "version": SCHEMA_VERSION,
        "scope": scope,
        "count": len(lines),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    return json.dumps(header, sort_keys=True).encode() + b"\n" + body


def decode(data: bytes, *, scope: str, source: str) -> dict[ContainerID, PlacementRecord]:
    """The records in `data` (the bytes of `source`, a path for messages), for `scope`.

    Raises `RecordError` naming `source`, what was expected and what was found.
    """
    if len(data) > MAX_BYTES:
        raise RecordError(f"{source}: {len(data)} bytes; expected at most {MAX_BYTES}")
    head, sep, body = data.partition(b"\n")
    try:
        header = json.loads(head)
    except (ValueError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordError(f"{source}: expected a header line of {FORMAT!r}; found {head[:80]!r}")
    version = header.get("version")
    if version != SCHEMA_VERSION:
        raise RecordError(
            f"{source}: schema version {version!r}; expected {SCHEMA_VERSION} (a file of "
            "another nri-resmgr release is not read; the restart rebuilds from the runtime)"
        )
    if header.get("scope") != scope:
        raise RecordError(
            f"{source}: records of {header.get('scope')!r}; expected {scope!r} (another "
            "policy, configuration or machine)"
        )
    count = header.get("count")
    if not isinstance(count, int) or not 0 <= count <= MAX_RECORDS:
        raise RecordError(f"{source}: count {count!r}; expected 0 to {MAX_RECORDS}")
    digest = hashlib.sha256(body).hexdigest()
    if not sep or header.get("sha256") != digest:
        raise RecordError(
            f"{source}: body checksum {digest}; expected {header.get('sha256')!r} "
            "(a torn or edited file)"
        )
    lines = body.decode().splitlines()
    if len(lines) != count:
        raise RecordError(f"{source}: {len(lines)} records; expected {count}")
    out: dict[ContainerID, PlacementRecord] = {}
    #: each distinct id set parsed once (the shared containers of a pool hold one)
    parsed: dict[str, IDSet] = {}
    for n, line in enumerate(lines, start=2):
        record = _record(line, where=f"{source}:{n}", parsed=parsed)
        if record.container_id in out:
            raise RecordError(f"{source}:{n}: container {record.container_id} recorded twice")
        out[record.container_id] = record
    return out


def _record(line: str, *, where: str, parsed: dict[str, IDSet]) -> PlacementRecord:
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise RecordError(f"{where}: expected a JSON record; found {line[:80]!r}") from exc
    if not isinstance(doc, dict) or set(doc) != {"id", "cpus", "mems", "meaning"}:
        raise RecordError(f"{where}: expected keys cpus, id, meaning, mems; found {line[:80]!r}")
    cid, cpus, mems, meaning = doc["id"], doc["cpus"], doc["mems"], doc["meaning"]
    if not isinstance(cid, str) or not cid:
        raise RecordError(f"{where}: expected a container id; found {cid!r}")
    if not isinstance(meaning, dict) or not all(
        isinstance(k, str) and isinstance(v, int | str | bool) for k, v in meaning.items()
    ):
        raise RecordError(f"{where}: expected a meaning of flat fields; found {meaning!r}")
    try:
        return PlacementRecord(ContainerID(cid), _ids(cpus, parsed), _ids(mems, parsed), meaning)
    except IDSetError as exc:
        raise RecordError(f"{where}: {exc}") from exc


def _ids(text: object, parsed: dict[str, IDSet]) -> IDSet:
    if not isinstance(text, str):
        raise IDSetError(f"expected an id set; found {text!r}")
    ids = parsed.get(text)
    if ids is None:
        ids = parsed[text] = IDSet.parse(text)
    return ids
