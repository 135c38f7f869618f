"""Bounds on what the runtime and pod authors may send, and the bounded annotation reader.

Theory of operation
-------------------
Everything the daemon reads from the wire or from a pod is bounded where it enters, so
that no single message, container or annotation can cost unbounded time or memory, and
no exception from one container's input can reach further than that container:

* `Limits` is the ``limits:`` section of the daemon configuration (camelCase keys, safe
  defaults, unknown keys rejected).  The protocol bounds (`max_in_flight`,
  `max_rejected_pending`, `max_sync_chunks`, `max_sync_bytes`) are handed to
  `nri_api`'s stub and transport as plain constructor parameters; `nri_api` knows
  nothing of this module.  The input bounds (`max_cpu_id`, `max_cpuset_length`,
  `max_annotation_bytes`, `max_json_depth`) are applied by the adapter and by the
  readers of JSON annotations.
* `load_annotation_json` is the one way a JSON annotation is parsed.  It checks the size
  and the nesting depth *before* `json.loads` sees the text: the depth by one linear scan
  of the brackets outside strings.  Python's JSON decoder recurses once per level, so a
  5,000-deep ``[[[...]]]`` would otherwise raise `RecursionError`, which is no
  `ValueError` and escapes every handler written for bad input.
* `load_annotation_yaml` is the same for a YAML annotation (the policies' affinity
  rules): `documents.parse_document` within ``max_annotation_bytes``,
  ``max_json_depth`` and `MAX_YAML_VALUES` values, an alias counted as the values it
  repeats, so that a few kilobytes of ``&a``/``*a`` cannot expand to a billion strings.
* `shown` cuts a value quoted in an error message to a prefix: a 300 KB annotation is
  named, not copied into the log and the RPC reply.

Exceeding an input bound raises `AnnotationError` (a `ResmgrError`) naming the subject,
the annotation, the limit and what was found; the daemon turns it into an error for that
request only.  This module is pure: no IO.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from nri_resmgr.documents import DocumentError, DocumentLimits, parse_document
from nri_resmgr.model import AnnotationError
from nri_resmgr.topology.cpuset import MAX_ID

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_YAML_VALUES",
    "Limits",
    "json_depth",
    "load_annotation_json",
    "load_annotation_yaml",
    "shown",
]


_ALIASES: Final[dict[str, str]] = {
    "max_cpu_id": "maxCPUID",
    "max_cpuset_length": "maxCPUSetLength",
    "max_annotation_bytes": "maxAnnotationBytes",
    "max_json_depth": "maxJSONDepth",
    "max_sync_chunks": "maxSyncChunks",
    "max_sync_bytes": "maxSyncBytes",
    "max_in_flight": "maxRequestsInFlight",
    "max_rejected_pending": "maxRejectedPending",
}
"""Configuration keys (camelCase, with the usual capitals of CPU and JSON)."""


class Limits(BaseModel):
    """The ``limits:`` configuration section; see docs/daemon.md for the table."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, alias_generator=_ALIASES.__getitem__
    )

    #: largest CPU (and memory node) id accepted in a cpuset from the runtime
    max_cpu_id: int = Field(default=MAX_ID, ge=0, le=1 << 20)
    #: longest cpuset string accepted from the runtime, in characters
    max_cpuset_length: int = Field(default=16384, ge=1)
    #: largest JSON annotation value parsed, in bytes (Kubernetes allows 256 KiB in all)
    max_annotation_bytes: int = Field(default=256 * 1024, ge=1)
    #: deepest nesting of arrays and objects in a JSON annotation
    max_json_depth: int = Field(default=32, ge=1, le=500)
    #: Synchronize chunks (``more: true``) buffered before the last one arrives
    max_sync_chunks: int = Field(default=64, ge=1)
    #: bytes of Synchronize chunks buffered before the last one arrives
    max_sync_bytes: int = Field(default=32 << 20, ge=1)
    #: requests from the runtime being handled at once
    max_in_flight: int = Field(default=1024, ge=1)
    #: rejected ttrpc streams whose error reply is not written yet
    max_rejected_pending: int = Field(default=256, ge=1)


DEFAULT_LIMITS: Final = Limits()


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in `text`, ignoring brackets inside strings.

    A linear scan that never recurses; it does not validate the JSON.
    """
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}" and depth:
            depth -= 1
    return deepest


def load_annotation_json(text: str, *, where: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Parse a JSON annotation value within `limits` (any JSON value, as `json.loads`).

    `where` names it in errors (``pod ns/name container c: annotation KEY``).  Raises
    `AnnotationError` when the value is larger than ``max_annotation_bytes``, nested
    deeper than ``max_json_depth``, or not JSON.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_annotation_bytes:
        raise AnnotationError(
            f"{where}: expected at most {limits.max_annotation_bytes} bytes "
            f"(limits.maxAnnotationBytes), found {size}"
        )
    depth = json_depth(text)
    if depth > limits.max_json_depth:
        raise AnnotationError(
            f"{where}: expected JSON nested at most {limits.max_json_depth} deep "
            f"(limits.maxJSONDepth), found {depth}"
        )
    try:
        return json.loads(text)
    except ValueError as exc:
        raise AnnotationError(f"{where}: expected JSON; found {text[:80]!r} ({exc})") from exc


#: the most values (scalars and collections) a YAML annotation may hold, aliases counted
#: as what they repeat (a pod's affinity rules need tens)
MAX_YAML_VALUES: Final = 4096
#: the longest prefix of a value `shown` quotes
SHOWN_LENGTH: Final = 40


def shown(value: object, *, length: int = SHOWN_LENGTH, quote: str | None = None) -> str:
    """`value` quoted for an error message, cut to `length` characters and then followed
    by its size: ``repr`` (``'hbmx'``, control characters escaped), or between `quote`
    characters as they are (``"hbmx"``, for messages written that way)."""
    text = str(value)
    cut = text if len(text) <= length else text[:length]
    quoted = repr(cut) if quote is None else f"{quote}{cut}{quote}"
    return quoted if cut is text else f"{quoted}... ({len(text)} characters)"


def load_annotation_yaml(
    text: str, *, where: str, limits: Limits = DEFAULT_LIMITS, max_values: int = MAX_YAML_VALUES
) -> Any:
    """Parse a YAML (or JSON) annotation value within `limits` and `max_values` values.

    `where` names it in errors.  Raises `AnnotationError` when the value is larger,
    deeper or has more values (aliases counted as what they repeat) than that, holds
    more than one document, a number beyond 64 bits or not finite, or is not YAML.
    """
    bounds = DocumentLimits(
        max_bytes=limits.max_annotation_bytes,
        max_depth=limits.max_json_depth,
        max_nodes=max_values,
    )
    try:
        return parse_document(text, source=where, limits=bounds)
    except DocumentError as exc:
        raise AnnotationError(str(exc)) from exc
