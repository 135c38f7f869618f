"""Reading and parsing the YAML/JSON documents users hand over: configurations, scenarios.

Theory of operation
-------------------
A document a user names on the command line (``validate-config FILE``, ``run --config``,
``simulate --scenario``) or hands to the daemon as text is bounded where it enters, so
nothing downstream meets a shape it was not written for:

1. `read_document(path)` opens the file non-blocking (a FIFO cannot hang it), refuses
   anything but a regular file (``/dev/zero``, a FIFO, a directory), reads at most
   ``limits.max_bytes`` and decodes strict UTF-8 (a leading BOM is allowed).
2. `parse_document(text)` reads a JSON document with the C JSON parser (its recursion is
   guarded; depth and size are checked on the result).  Anything else is YAML: the YAML
   *event* stream, which PyYAML produces without recursion, is walked first, refusing
   nesting deeper than ``limits.max_depth`` and more than ``limits.max_nodes`` nodes,
   counting each alias as the size of what it refers to (so a "billion laughs" document
   of a few hundred bytes is refused too).  Only then is the document built (PyYAML's
   composer recurses once per level, which the depth bound keeps far from the
   interpreter's limit).  libyaml's parser is used where PyYAML has it.
3. The built value is checked for numbers no configuration means: ``.inf``, ``.nan``,
   ``1.0e400`` (infinite once parsed) and integers beyond 64 bits are refused with their
   path in the document.

Every problem is a `DocumentError` (a `ConfigError`) that keeps the source and the
problems apart, so a command can print one line per problem.  JSON is YAML here; an empty
document is None.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.model import ConfigError

__all__ = [
    "DEFAULT_LIMITS",
    "DocumentError",
    "DocumentLimits",
    "check_numbers",
    "load_document",
    "parse_document",
    "read_document",
]

#: libyaml's parser where PyYAML was built with it (ten times faster), else the pure one
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: the largest magnitude a number in a document may have (int64; every kernel and NRI
#: field these documents feed is at most 64 bits wide)
MAX_NUMBER = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """Bounds on one document (the defaults fit any real configuration many times over)."""

    max_bytes: int = 1 << 20
    max_depth: int = 64
    max_nodes: int = 200_000


DEFAULT_LIMITS = DocumentLimits()


class DocumentError(ConfigError):
    """A document that cannot be read or parsed; `problems` holds one message per line."""

    def __init__(self, source: str, problems: list[str] | tuple[str, ...]) -> None:
        self.source = source
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__(f"{source}: " + "; ".join(self.problems))


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_document(path: Path, *, limits: DocumentLimits = DEFAULT_LIMITS) -> str:
    """The text of the regular file `path`: at most ``limits.max_bytes``, strict UTF-8."""
    source = str(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise DocumentError(source, [f"cannot open: {exc.strerror or exc}"]) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise DocumentError(source, [f"expected a regular file, found {_kind(mode)}"])
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limits.max_bytes + 1)
        except OSError as exc:
            raise DocumentError(source, [f"cannot read: {exc.strerror or exc}"]) from exc
    if len(data) > limits.max_bytes:
        raise DocumentError(source, [f"expected at most {limits.max_bytes} bytes, found more"])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DocumentError(
            source,
            [
                f"expected UTF-8 text, found byte 0x{data[exc.start]:02x} at offset {exc.start} "
                f"(line {line})"
            ],
        ) from exc


def _check_shape(text: str, source: str, limits: DocumentLimits) -> None:
    """Refuse deep or (alias-)huge documents from the event stream, before building them."""
    depth = 0
    nodes = 0
    starts: list[tuple[str | None, int]] = []
    sizes: dict[str, int] = {}
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > limits.max_depth:
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise DocumentError(
                    source,
                    [
                        f"line {line}: expected nesting at most {limits.max_depth} levels deep, "
                        "found deeper"
                    ],
                )
            starts.append((event.anchor, nodes))
            nodes += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            anchor, first = starts.pop()
            if anchor is not None:
                sizes[anchor] = nodes - first
        elif isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for anchor, _first in starts):
                # a collection that holds itself: every walk over the value would loop
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise DocumentError(
                    source,
                    [
                        f"line {line}: expected aliases to finished values, found *"
                        f"{event.anchor} inside the value it names (a recursive value)"
                    ],
                )
            nodes += sizes.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        if nodes > limits.max_nodes:
            raise DocumentError(
                source,
                [
                    f"expected at most {limits.max_nodes} values (aliases counted as what they "
                    "repeat), found more"
                ],
            )


_NOT_JSON = object()


def _parse_json(text: str, source: str, limits: DocumentLimits) -> Any:
    """The value of a JSON document (C speed), bounded like YAML; `_NOT_JSON` if it is not.

    JSON is YAML, so a document that is not strict JSON (a YAML flow mapping, say) is
    left to the YAML parser.
    """
    try:
        data = json.loads(text)
    except RecursionError as exc:
        raise DocumentError(
            source, [f"expected nesting at most {limits.max_depth} levels deep, found deeper"]
        ) from exc
    except ValueError:
        return _NOT_JSON
    nodes = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise DocumentError(source, [f"expected at most {limits.max_nodes} values, found more"])
        if isinstance(item, dict | list):
            if depth > limits.max_depth:
                raise DocumentError(
                    source,
                    [f"expected nesting at most {limits.max_depth} levels deep, found deeper"],
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return data


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every (path, leaf) of a parsed document, without recursion."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            for key, sub in reversed(list(item.items())):
                stack.append((f"{where}.{key}" if where else str(key), sub))
        elif isinstance(item, list):
            for i in range(len(item) - 1, -1, -1):
                stack.append((f"{where}[{i}]", item[i]))
        else:
            yield where, item


def check_numbers(value: Any) -> list[str]:
    """One problem per number that is not finite or is beyond 64 bits, with its path."""
    problems = []
    for where, leaf in _walk(value, ""):
        if isinstance(leaf, bool):
            continue
        if isinstance(leaf, float) and not math.isfinite(leaf):
            problems.append(f"{where or '(document)'}: expected a finite number, found {leaf}")
        elif isinstance(leaf, int | float) and abs(leaf) > MAX_NUMBER:
            shown = str(leaf) if len(str(leaf)) <= 24 else f"a number of {len(str(leaf))} digits"
            problems.append(
                f"{where or '(document)'}: expected a number of magnitude at most 2**63-1, "
                f"found {shown}"
            )
    return problems


def parse_document(
    text: str, *, source: str = "<document>", limits: DocumentLimits = DEFAULT_LIMITS
) -> Any:
    """The value of one YAML/JSON document (None when empty), bounded as described above."""
    if len(text) > limits.max_bytes:
        raise DocumentError(
            source, [f"expected at most {limits.max_bytes} characters, found {len(text)}"]
        )
    if not text.strip():
        return None
    if text.lstrip()[:1] in ("{", "["):
        data = _parse_json(text, source, limits)
        if data is not _NOT_JSON:
            problems = check_numbers(data)
            if problems:
                raise DocumentError(source, problems)
            return data
    try:
        _check_shape(text, source, limits)
        data = yaml.load(text, Loader=_LOADER)  # a safe loader
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in (exc.problem or ""):
            # PyYAML >= 6.0.4 stops deep flow collections in its scanner, which reads
            # ahead of the events `_check_shape` counts: the same error, said the same way
            line = exc.problem_mark.line + 1 if exc.problem_mark else 0
            deep = f"expected nesting at most {limits.max_depth} levels deep, found deeper"
            raise DocumentError(source, [f"line {line}: {deep}"]) from exc
        detail = " ".join(str(exc).split())
        raise DocumentError(source, [f"expected YAML or JSON, found an error: {detail}"]) from exc
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise DocumentError(source, [f"expected YAML or JSON, found an error: {detail}"]) from exc
    except ValueError as exc:
        # e.g. an integer of more digits than int() converts
        raise DocumentError(source, [f"expected YAML or JSON values, found: {exc}"]) from exc
    problems = check_numbers(data)
    if problems:
        raise DocumentError(source, problems)
    return data


def load_document(path: Path, *, limits: DocumentLimits = DEFAULT_LIMITS) -> Any:
    """`parse_document` of `read_document`."""
    return parse_document(read_document(path, limits=limits), source=str(path), limits=limits)
