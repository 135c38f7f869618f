"""The pod annotation: koordinator's `node.koordinator.sh/resctrl`, parsed (pure).

`parse_pod_resctrl` turns the annotation's JSON into a `PodResctrl` (LLC ranges, MB
percentages), matching keys as koordinator's Go decoder does; `plan.plan_pod_group` turns
that into schemata text.  Errors are `AnnotationError`s naming the pod and the key.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nri_resmgr.limits import load_annotation_json
from nri_resmgr.model import AnnotationError

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PodResctrl:
    """Parsed `node.koordinator.sh/resctrl`: LLC ranges and MB percentages."""

    llc_range: tuple[int, int] | None = None
    llc_per_cache: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    mb_percent: int | None = None
    mb_per_cache: Mapping[int, int] = field(default_factory=dict)


def _want(cond: bool, subject: str, expected: str, found: object) -> None:
    if not cond:
        raise AnnotationError(f"{subject}: expected {expected}; found {found!r}")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_range(value: object, subject: str) -> tuple[int, int]:
    _want(
        isinstance(value, list) and len(value) == 2 and all(_int(v) for v in value),
        subject,
        "[start, end] integer percentages",
        value,
    )
    assert isinstance(value, list)
    lo, hi = value
    _want(0 <= lo < hi <= 100, subject, "0 <= start < end <= 100", value)
    return (lo, hi)


def _parse_percent(value: object, subject: str) -> int:
    _want(
        _int(value) and 0 < value <= 100,  # type: ignore[operator]
        subject,
        "an integer percentage 1-100",
        value,
    )
    assert isinstance(value, int)
    return value


def _fields(
    obj: object,
    names: Collection[str],
    *,
    subject: str,
    expected: str,
    required: Collection[str] = (),
) -> dict[str, object]:
    """The members of JSON object `obj` by field name, keys matched as Go's encoding/json
    matches them (koordinator decodes the annotation with it): case-insensitively, so
    ``LLC``, ``llc`` and ``Llc`` all name ``llc``.  Where Go would quietly let a later key
    overwrite an earlier one (``"LLC"`` and ``"llc"`` in one object), this refuses both, as
    it refuses keys that name no field.  Case folding is Python's `str.casefold`, which
    agrees with Go's folding on every character of the field names used here."""
    _want(isinstance(obj, dict), subject, expected, obj)
    assert isinstance(obj, dict)
    by_fold = {name.casefold(): name for name in names}
    out: dict[str, object] = {}
    keys: dict[str, str] = {}
    for key, value in obj.items():
        name = by_fold.get(key.casefold())
        if name is None:
            raise AnnotationError(f"{subject}: expected {expected}; found key {key!r}")
        if name in keys:
            raise AnnotationError(
                f"{subject}: expected one key for {name} (keys match case-insensitively); "
                f"found {keys[name]!r} and {key!r}"
            )
        keys[name] = key
        out[name] = value
    missing = [n for n in required if n not in out]
    if missing:
        raise AnnotationError(f"{subject}: expected {expected}; found {obj!r}")
    return out


def _parse_per_cache(items: object, subject: str, key: str) -> dict[int, Any]:
    _want(isinstance(items, list), subject, "a list of {cacheID, " + key + "}", items)
    assert isinstance(items, list)
    out: dict[int, Any] = {}
    for i, item in enumerate(items):
        where = f"{subject}[{i}]"
        fields = _fields(
            item,
            ("cacheID", key),
            subject=where,
            expected=f"an object with cacheID and {key}",
            required=("cacheID", key),
        )
        cid = fields["cacheID"]
        _want(_int(cid) and cid >= 0, f"{where}.cacheID", "a cache id", cid)  # type: ignore[operator]
        assert isinstance(cid, int)
        _want(cid not in out, f"{where}.cacheID", "each cache id once", cid)
        out[cid] = fields[key]
    return out


def _parse_section(
    doc: Mapping[str, object],
    name: str,
    key: str,
    example: str,
    parse: Callable[[object, str], _T],
    subject: str,
) -> tuple[_T | None, dict[int, _T]]:
    """One resource of the annotation (``llc`` or ``mb``): its machine-wide ``schemata``
    value and its ``schemataPerCache`` values, each read with `parse`."""
    raw = doc.get(name)
    if raw is None:
        return None, {}
    section = _fields(
        raw,
        ("schemata", "schemataPerCache"),
        subject=f"{subject} {name}",
        expected="an object with schemata and/or schemataPerCache",
    )
    whole = None
    if "schemata" in section:
        sch = _fields(
            section["schemata"],
            (key,),
            subject=f"{subject} {name}.schemata",
            expected=example,
            required=(key,),
        )
        whole = parse(sch[key], f"{subject} {name}.schemata.{key}")
    per: dict[int, _T] = {}
    if "schemataPerCache" in section:
        raw = _parse_per_cache(
            section["schemataPerCache"], f"{subject} {name}.schemataPerCache", key
        )
        per = {
            cid: parse(v, f"{subject} {name}.schemataPerCache cacheID {cid}")
            for cid, v in raw.items()
        }
    return whole, per


def parse_pod_resctrl(value: str, *, subject: str) -> PodResctrl:
    """Parse the koordinator resctrl annotation JSON; AnnotationError names `subject`."""
    doc = load_annotation_json(value, where=subject)
    doc = _fields(doc, ("llc", "mb"), subject=subject, expected="an object with llc and/or mb")
    llc_range, llc_per = _parse_section(
        doc, "llc", "range", '{"range": [start, end]}', _parse_range, subject
    )
    mb_percent, mb_per = _parse_section(
        doc, "mb", "percent", '{"percent": N}', _parse_percent, subject
    )
    return PodResctrl(
        llc_range=llc_range, llc_per_cache=llc_per, mb_percent=mb_percent, mb_per_cache=mb_per
    )
