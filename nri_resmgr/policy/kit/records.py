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
`encode`, `encode_block` and `decode` (`nri_resmgr.runtime.record_store` writes and reads
the file).  The form is JSON lines: a header line (format name, schema version, the scope
the records belong to, their count and the SHA-256 of the base), the base (one line per
container), then a journal: one block line per committed decision since the base was
written (`encode_block`: the records it changed and the ids it removed, with the SHA-256
of its own text), so that a decision appends what it changed instead of rewriting every
line.  A record whose only change is its CPUs is written as a *move* in the block: its id
under its new CPUs (``"moved": {"<cpus>": [ids]}``), not its whole line: an exclusive
decision changes the CPUs of every shared container of its pool and nothing else of their
records (at 10,000 live, 2,475 lines of about 370 bytes each per decision, which also made
the file compact every other decision).  `decode` applies the blocks in order over the
base; a block's moves apply after its removals and lines, to records it already has.
Schema version 2, the same form without moves, is still read.  A last line without its
newline is the torn tail of an append cut short (a kill -9 in the write) and is not read:
the records are then those of the decision before, which the restart rule already allows
(a record counts only where the runtime's report equals it).  Any other problem refuses
the whole file with a `RecordError` naming it (unknown format or version, a scope of
another policy or configuration, a wrong count or checksum of the base or of a block, a
line that is not a record, more than `MAX_RECORDS` or `MAX_BYTES`): a corrupt or foreign
file is a condition to log, never a crash.
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
    "READ_VERSIONS",
    "SCHEMA_VERSION",
    "Meaning",
    "MeaningFields",
    "PlacementRecord",
    "RecordError",
    "decode",
    "encode",
    "encode_block",
    "encode_head",
    "encode_line",
    "encode_meaning",
    "encode_tail",
]

#: the format name in the header: a file without it is not ours
FORMAT = "nri-resmgr placement records"
#: the schema this code writes (2: the `LAYOUT` record; 3: a block's moves) ...
SCHEMA_VERSION = 3
#: ... and those it reads (2's files are 3's without moves); any other is refused
READ_VERSIONS = (2, 3)
#: the id the policy's layout record is filed under (module docstring)
LAYOUT = ContainerID("@layout")
#: at most this many records (one per live container) ...
MAX_RECORDS = 100_000
#: ... and this many bytes in the file
MAX_BYTES = 64 * 1024 * 1024

#: a placement's meaning: the policy's own fields, flat JSON scalars
Meaning = Mapping[str, int | str | bool]
#: a meaning's value types, as a tuple: ``isinstance`` with the union made it anew for
#: each of a record's dozen values (2.6 µs a record, at every restart's decode)
_FLAT = (int, str, bool)


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


def encode_meaning(meaning: Meaning) -> str:
    """A meaning's JSON, as `encode_line` writes it (the store keeps it per container and
    encodes it again only when the meaning changed)."""
    return json.dumps(dict(meaning), separators=(",", ":"), sort_keys=True)


def encode_line(record: PlacementRecord, meaning: str | None = None) -> str:
    """One record's line (no newline): JSON with sorted keys and no spaces, built from
    its parts (`meaning`: `encode_meaning` of the record's, when the caller has it); the
    store keeps lines, so only changed records are encoded again."""
    return encode_head(record.cpus) + encode_tail(record, meaning)


def encode_head(cpus: CPUSet) -> str:
    """The start of a record's line (`encode_line`): its CPUs, the first key (a move of
    `encode_block` is filed under the same head)."""
    return _HEAD + _string(str(cpus))


#: what every line starts with, before its CPUs' JSON string
_HEAD = '{"cpus":'


def encode_tail(record: PlacementRecord, meaning: str | None = None) -> str:
    """The rest of a record's line after `encode_head` (id, meaning, memory nodes): the
    store keeps it per container, since an exclusive decision changes the CPUs of its
    pool's shared containers and nothing else of their records."""
    return (
        ',"id":' + _string(record.container_id)
        + ',"meaning":' + (encode_meaning(record.meaning) if meaning is None else meaning)
        + ',"mems":' + _string(str(record.mems)) + "}"
    )  # fmt: skip


#: a string as JSON (what `json.dumps` writes for one)
_string = json.encoder.encode_basestring_ascii


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


#: a block line is `{"sha256":"<hex>","block":<payload>}`, the digest of the payload's
#: text: checked on the bytes as written, without encoding the payload again
_BLOCK_HEAD = '{"sha256":"'
_BLOCK_MID = '","block":'
_DIGEST_LEN = 64


def encode_block(
    lines: Iterable[str],
    gone: Iterable[ContainerID],
    moved: Iterable[tuple[str, Iterable[ContainerID]]] = (),
) -> str:
    """One journal block's line (no newline): the records of `gone` forgotten, the
    records `lines` (from `encode_line`) kept and the records `moved` names given new
    CPUs, in that order, by one decision.  `moved` is a head (`encode_head` of the new
    CPUs) and the ids of the records whose only change is that they now have those CPUs
    (module docstring), one entry per head."""
    moves = ",".join(
        head[len(_HEAD) :] + ":[" + ",".join(map(_string, ids)) + "]" for head, ids in moved
    )
    payload = (
        '{"gone":' + json.dumps(sorted(gone))
        + (',"moved":{' + moves + "}" if moves else "")
        + ',"put":[' + ",".join(lines) + "]}"
    )  # fmt: skip
    digest = hashlib.sha256(payload.encode()).hexdigest()
    return _BLOCK_HEAD + digest + _BLOCK_MID + payload + "}"


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
    if version not in READ_VERSIONS or type(version) is not int:
        raise RecordError(
            f"{source}: schema version {version!r}; expected one of {READ_VERSIONS} (a file of "
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
    #: complete lines, then what follows the last newline (a torn append, not read)
    *complete, _torn = body.split(b"\n")
    base = complete[:count]
    digest = hashlib.sha256(b"".join(line + b"\n" for line in base)).hexdigest()
    if not sep or header.get("sha256") != digest:
        raise RecordError(
            f"{source}: body checksum {digest}; expected {header.get('sha256')!r} "
            "(a torn or edited file)"
        )
    if len(base) != count:
        raise RecordError(f"{source}: {len(base)} records; expected {count}")
    out: dict[ContainerID, PlacementRecord] = {}
    #: each distinct id set parsed once (the shared containers of a pool hold one)
    parsed: dict[str, IDSet] = {}
    try:
        for n, line in enumerate(base, start=2):
            record = _record(_json(line.decode(), f"{source}:{n}"), where=f"{source}:{n}",
                             parsed=parsed)  # fmt: skip
            if record.container_id in out:
                raise RecordError(f"{source}:{n}: container {record.container_id} recorded twice")
            out[record.container_id] = record
        for n, line in enumerate(complete[count:], start=count + 2):
            _apply(out, line.decode(), where=f"{source}:{n}", parsed=parsed, moves=version > 2)
    except UnicodeDecodeError as exc:
        raise RecordError(f"{source}: expected UTF-8 text; found {exc}") from exc
    if len(out) > MAX_RECORDS:
        raise RecordError(f"{source}: {len(out)} records; expected at most {MAX_RECORDS}")
    return out


def _apply(
    out: dict[ContainerID, PlacementRecord],
    line: str,
    *,
    where: str,
    parsed: dict[str, IDSet],
    moves: bool,
) -> None:
    """One journal block (`encode_block`) applied to `out` (`moves`: a schema that has
    them)."""
    end = len(_BLOCK_HEAD) + _DIGEST_LEN
    payload = line[end + len(_BLOCK_MID) : -1]
    if not (line.startswith(_BLOCK_HEAD) and line[end:].startswith(_BLOCK_MID)
            and line.endswith("}")):  # fmt: skip
        raise RecordError(f"{where}: expected a journal block; found {line[:80]!r}")
    digest = hashlib.sha256(payload.encode()).hexdigest()
    if line[len(_BLOCK_HEAD) : end] != digest:
        raise RecordError(
            f"{where}: block checksum {digest}; expected {line[len(_BLOCK_HEAD) : end]!r} "
            "(an edited file)"
        )
    doc = _json(payload, where)
    if not isinstance(doc, dict) or set(doc) - {"moved"} != {"gone", "put"}:
        raise RecordError(f"{where}: expected a block of gone and put; found {payload[:80]!r}")
    if "moved" in doc and not moves:
        raise RecordError(f"{where}: moves in a block of schema version 2; expected none")
    gone, put, moved = doc["gone"], doc["put"], doc.get("moved", {})
    if not isinstance(gone, list) or not all(isinstance(g, str) for g in gone):
        raise RecordError(f"{where}: expected the ids gone; found {gone!r:.80}")
    if not isinstance(put, list):
        raise RecordError(f"{where}: expected the records put; found {put!r:.80}")
    for cid in gone:
        out.pop(ContainerID(cid), None)
    for item in put:
        record = _record(item, where=where, parsed=parsed)
        out[record.container_id] = record
    if not isinstance(moved, dict):
        raise RecordError(f"{where}: expected the records moved by CPUs; found {moved!r:.80}")
    for cpus, ids in moved.items():
        if not isinstance(ids, list):
            raise RecordError(f"{where}: expected the ids moved to {cpus!r}; found {ids!r:.80}")
        try:
            to = _ids(cpus, parsed)
        except IDSetError as exc:
            raise RecordError(f"{where}: {exc}") from exc
        for cid in ids:
            was = out.get(ContainerID(cid)) if isinstance(cid, str) else None
            if was is None:
                raise RecordError(f"{where}: moved {cid!r}, which has no record; expected one")
            out[was.container_id] = PlacementRecord(was.container_id, to, was.mems, was.meaning)


def _json(line: str, where: str) -> object:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise RecordError(f"{where}: expected a JSON record; found {line[:80]!r}") from exc


def _record(doc: object, *, where: str, parsed: dict[str, IDSet]) -> PlacementRecord:
    if not isinstance(doc, dict) or set(doc) != {"id", "cpus", "mems", "meaning"}:
        found = json.dumps(doc)[:80]
        raise RecordError(f"{where}: expected keys cpus, id, meaning, mems; found {found!r}")
    cid, cpus, mems, meaning = doc["id"], doc["cpus"], doc["mems"], doc["meaning"]
    if not isinstance(cid, str) or not cid:
        raise RecordError(f"{where}: expected a container id; found {cid!r}")
    if not isinstance(meaning, dict) or not all(
        isinstance(k, str) and isinstance(v, _FLAT) for k, v in meaning.items()
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
