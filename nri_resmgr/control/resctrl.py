"""Plugin-managed RDT: resctrl class groups, per-pod groups, monitoring (Linux resctrl).

Theory of operation
-------------------
The kernel's resctrl file system (`Documentation/arch/x86/resctrl.rst`) exposes each
allocation class (CLOSID) as a directory with a `schemata` file, for example::

    L3:0=ff0;1=ff0
    MB:0=50;1=50

and describes the hardware under `info/`.  This module works in three steps, and only the
last one touches files:

1. **Discover** (`read_info(root)`): cache resources `info/{L3,L3CODE,L3DATA,L2,L2CODE,L2DATA}`
   (`cbm_mask`, `min_cbm_bits`, `num_closids`, `shareable_bits`, `sparse_masks` when the
   kernel has it), memory bandwidth `info/MB` (`bandwidth_gran`, `min_bandwidth`,
   `num_closids`, `delay_linear`), monitoring `info/L3_MON`, and the cache ids per resource
   from the root group's `schemata`.  Whether MBA takes MBps (`mba_MBps` mount option) is
   read from the mount table (`/proc/mounts` entry whose mount point is `root`), so a
   synthetic tree needs only a mounts file of its own or the `mba_mbps` argument.
   The MB unit is one of: percent (Intel), MBps (software controller, `mba_MBps`), or
   1/8 GB/s (AMD: recognised by a root MB value above 100, its maximum, typically 2048).
   Masks must be contiguous unless `sparse_masks` says 1, or, on kernels without that
   file, `min_cbm_bits` is 0 (AMD, which also accepts empty masks).

2. **Plan** (pure): `plan_classes(info, config)` turns the configuration into the exact
   `schemata` text of every class group, and `plan_pod_group(info, spec)` does the same for
   a pod's koordinator-style annotation.  Every group's text lists every resource the
   machine has (L3 or L3CODE+L3DATA, then L2 or L2CODE+L2DATA, then MB), each cache id in
   ascending order; what the configuration does not restrict gets the full mask or the
   maximum bandwidth, so rewriting a group always yields the same state.

   *Cache allocations* are percentage ranges (`"20-80%"`; `"50%"` means `"0-50%"`) or
   bitmasks (`"0xff0"`), for all cache ids (`all`) with per-id overrides (`"1": "0-25%"`),
   and with CDP as `{unified, code, data}`.  A percentage range over N available bits
   selects bits floor(N*lo/100) .. ceil(N*hi/100)-1 (at least one bit).  Partition
   percentages are of the whole `cbm_mask`, class percentages are of the partition's bits.
   Partitions must not overlap; a class bitmask must lie inside its partition.
   *Memory bandwidth* is `"50%"`, `"2000MBps"`, or a list of alternatives (`["50%",
   "2000MBps"]`) from which the machine's unit picks.  Percentages are rounded **up** to
   the next multiple of `bandwidth_gran`, as the kernel itself does; values below
   `min_bandwidth` or above 100% are refused.  On AMD a percentage is of the maximum
   and MBps are converted to 1/8 GB/s units (125 MBps each), rounded up.  An MBps-only
   value on a machine without `mba_MBps` is refused, as is a percentage-only value with
   `mba_MBps`.  A class's bandwidth is absolute (the kernel's meaning) and must not exceed
   its partition's.

   Refused with `ConfigError` (or `AnnotationError` for annotations), the message naming
   the config path, what the hardware allows and what was asked: more groups than
   `num_closids - 1` (CLOSID 0 is the root group), masks outside `cbm_mask`, masks with fewer
   than `min_cbm_bits` bits, non-contiguous masks where the CPU needs contiguity, unknown
   cache ids, a resource the machine lacks (unless `options.<res>.optional`).

3. **Apply** (`RdtController`): `apply_classes()` makes the class directories and writes
   their `schemata` in a single `write(2)` each; on failure it reports the kernel's
   `info/last_cmd_status`.  `ensure_pod_group(pod)` (RunPodSandbox) creates
   `nri-resmgr-pod-<uid>` for a pod annotated `node.koordinator.sh/resctrl`; its
   containers get that name as their RDT class (see `classes.select_classes`).
   `remove_pod_group(pod)` (RemovePodSandbox) removes it.  The annotation's keys match in
   any letter case, as koordinator's Go decoder matches them (`LLC`, `llc`; `cacheid`,
   `cacheID`); two keys for one field are refused.

4. **Monitor** (with `monitorPods`): `monitor_container` (CreateContainer) decides where a
   container's tasks are counted, at the earliest point the runtime allows: a pod's own
   group counts it from the start; with NRI's `LinuxRdt` (v0.11+) and an RDT class the
   runtime makes `<class>/mon_groups/<container id>` (`MonPlan.clos_id`: the adjustment
   asks for ``enableMonitoring``); otherwise `ensure_mon_group` makes
   `[<class>/]mon_groups/nri-resmgr-pod-<uid>` and `task_started` (PostStartContainer)
   writes the task's PID into its `tasks`, also where a runtime that was asked made no
   group.  `monitoring_samples` reads `mon_data/mon_L3_NN/{llc_occupancy,
   mbm_total_bytes,mbm_local_bytes}` of every group that counts pods, for /metrics.

Ownership: this daemon deletes only what it created.  Before each `mkdir` it records the
group in a JSON file (`<state_dir>/resctrl-groups.json`, replaced atomically), so a crash
between the two leaves a record of a group that may not exist (harmless) rather than a
group nobody knows.  Pod groups also carry the `nri-resmgr-pod-` prefix.
`reconcile(live_pod_uids)` at start removes recorded pod and monitoring groups of pods that
no longer exist, and never touches a directory that is not in the record, even one with our
prefix.  A class directory that already existed is configured (the configuration names it)
but not recorded, so it is never removed.

The record is input like any other: a record that cannot be read or parsed (or is too
large or too deeply nested) counts as empty, and an entry that does not have the shape of
a group this daemon makes (the root itself, a traversal, an absolute path, another tool's
name) is skipped; each with one log line.  A symlink on the way to a group is refused
where the group would be read or removed, and that group alone stays.  A record that
cannot be written (read-only, full) is kept in memory meanwhile, with one log line: the
daemon runs on, and a restart then merely forgets those groups.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import json
import math
import os
import re
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from nri_resmgr.control.classes import (
    POD_GROUP_PREFIX,
    RESCTRL_POD_ANNOTATION,
    ClassSelection,
    pod_group_name,
)
from nri_resmgr.control.names import RESERVED_NAMES, safe_join, validate_name
from nri_resmgr.limits import load_annotation_json
from nri_resmgr.model import AnnotationError, ConfigError, Pod, ResmgrError

DEFAULT_ROOT = Path("/sys/fs/resctrl")
RECORD_NAME = "resctrl-groups.json"
#: A larger record is not one this daemon wrote (a thousand groups take about 80 KB).
RECORD_MAX_BYTES = 1 << 20
#: One AMD MBA unit is 1/8 GB/s.
AMD_MBPS_PER_UNIT = 125
MON_FEATURES = ("llc_occupancy", "mbm_total_bytes", "mbm_local_bytes")
#: The root group's class label in metrics, as goresctrl (and so nri-plugins) names it.
ROOT_CLASS_LABEL = "system/default"
_T = TypeVar("_T")


class MBUnit(enum.StrEnum):
    PERCENT = "percent"
    MBPS = "MBps"
    AMD_EIGHTH_GBPS = "1/8GBps"


class CacheLevel(enum.StrEnum):
    L3 = "L3"
    L2 = "L2"


# --------------------------------------------------------------------------- discovery


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """One cache allocation resource (`info/L3`, `info/L3CODE`, `info/L2`, ...)."""

    name: str
    cbm_mask: int
    min_cbm_bits: int
    num_closids: int
    shareable_bits: int = 0
    sparse_masks: bool = False
    cache_ids: tuple[int, ...] = ()

    @property
    def num_bits(self) -> int:
        return self.cbm_mask.bit_length()


@dataclass(frozen=True, slots=True)
class MBInfo:
    """Memory bandwidth allocation (`info/MB`), with the unit the schemata uses."""

    bandwidth_gran: int
    min_bandwidth: int
    num_closids: int
    delay_linear: bool
    unit: MBUnit
    #: the value meaning "unthrottled": 100 (percent), the root's value (MBps, AMD)
    max_value: int
    cache_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MonInfo:
    num_rmids: int
    features: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ResctrlInfo:
    caches: Mapping[str, CacheInfo]
    mb: MBInfo | None = None
    mon: MonInfo | None = None

    @property
    def num_closids(self) -> int:
        counts = [c.num_closids for c in self.caches.values()]
        if self.mb is not None:
            counts.append(self.mb.num_closids)
        return min(counts) if counts else 0

    def cdp(self, level: CacheLevel) -> bool:
        return f"{level}CODE" in self.caches

    def has(self, level: CacheLevel) -> bool:
        return level in self.caches or self.cdp(level)

    def resources(self, level: CacheLevel) -> tuple[CacheInfo, ...]:
        if self.cdp(level):
            return (self.caches[f"{level}CODE"], self.caches[f"{level}DATA"])
        if level in self.caches:
            return (self.caches[level],)
        return ()


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii").strip()


def _read_int(path: Path, *, base: int = 10) -> int:
    text = _read(path)
    try:
        return int(text, base)
    except ValueError as exc:
        raise ResmgrError(f"{path}: expected a base-{base} integer; found {text!r}") from exc


def parse_schemata(text: str) -> dict[str, dict[int, str]]:
    """`{"L3": {0: "fff", 1: "fff"}, "MB": {...}}` from schemata text (kernel alignment ok)."""
    result: dict[str, dict[int, str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        resource, sep, values = line.partition(":")
        if not sep:
            raise ResmgrError(f"schemata line {raw!r}: expected RESOURCE:ID=VALUE;...")
        entries: dict[int, str] = {}
        for item in values.split(";"):
            ident, eq, value = item.strip().partition("=")
            if not eq or not ident.isdigit():
                raise ResmgrError(f"schemata line {raw!r}: expected ID=VALUE; found {item!r}")
            entries[int(ident)] = value.strip()
        result[resource.strip()] = entries
    return result


def mount_has_mba_mbps(root: str | os.PathLike[str], mounts: str | os.PathLike[str]) -> bool:
    """True when the mount table lists `root` as resctrl mounted with `mba_MBps`."""
    target = str(Path(root).resolve())
    try:
        lines = Path(mounts).read_text().splitlines()
    except FileNotFoundError:
        return False
    found = False
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        if fields[2] == "resctrl" and point == target:
            found = "mba_MBps" in fields[3].split(",")  # the last mount over root wins
    return found


def read_info(
    root: str | os.PathLike[str] = DEFAULT_ROOT,
    *,
    mounts: str | os.PathLike[str] = "/proc/mounts",
    mba_mbps: bool | None = None,
    mb_unit: MBUnit | None = None,
) -> ResctrlInfo:
    """Describe the resctrl hardware under `root` (see the module docstring).

    `mba_mbps` overrides the mount table; `mb_unit` overrides the unit detection.
    """
    base = Path(root)
    info_dir = base / "info"
    schemata_path = base / "schemata"
    if not info_dir.is_dir() or not schemata_path.is_file():
        raise ResmgrError(
            f"resctrl at {base}: expected a mounted resctrl file system with info/ and "
            f"schemata; found {'no info/' if not info_dir.is_dir() else 'no schemata'}"
        )
    root_schemata = parse_schemata(schemata_path.read_text(encoding="ascii"))
    caches: dict[str, CacheInfo] = {}
    for name in ("L3", "L3CODE", "L3DATA", "L2", "L2CODE", "L2DATA"):
        d = info_dir / name
        if not d.is_dir():
            continue
        min_bits = _read_int(d / "min_cbm_bits")
        sparse_file = d / "sparse_masks"
        sparse = _read(sparse_file) == "1" if sparse_file.exists() else min_bits == 0
        shareable = d / "shareable_bits"
        caches[name] = CacheInfo(
            name=name,
            cbm_mask=_read_int(d / "cbm_mask", base=16),
            min_cbm_bits=min_bits,
            num_closids=_read_int(d / "num_closids"),
            shareable_bits=_read_int(shareable, base=16) if shareable.exists() else 0,
            sparse_masks=sparse,
            cache_ids=tuple(sorted(root_schemata.get(name, {}))),
        )
    mb: MBInfo | None = None
    mb_dir = info_dir / "MB"
    if mb_dir.is_dir():
        if mba_mbps is None:
            mba_mbps = mount_has_mba_mbps(base, mounts)
        root_mb = root_schemata.get("MB", {})
        root_max = max((int(v) for v in root_mb.values()), default=100)
        unit = mb_unit
        if unit is None:
            if mba_mbps:
                unit = MBUnit.MBPS
            elif root_max > 100:
                unit = MBUnit.AMD_EIGHTH_GBPS
            else:
                unit = MBUnit.PERCENT
        delay = mb_dir / "delay_linear"
        mb = MBInfo(
            bandwidth_gran=_read_int(mb_dir / "bandwidth_gran"),
            min_bandwidth=_read_int(mb_dir / "min_bandwidth"),
            num_closids=_read_int(mb_dir / "num_closids"),
            delay_linear=delay.exists() and _read(delay) == "1",
            unit=unit,
            max_value=100 if unit is MBUnit.PERCENT else root_max,
            cache_ids=tuple(sorted(root_mb)),
        )
    mon: MonInfo | None = None
    mon_dir = info_dir / "L3_MON"
    if mon_dir.is_dir():
        features = mon_dir / "mon_features"
        mon = MonInfo(
            num_rmids=_read_int(mon_dir / "num_rmids"),
            features=tuple(_read(features).split()) if features.exists() else (),
        )
    return ResctrlInfo(caches=caches, mb=mb, mon=mon)


# ------------------------------------------------------------------------------ config

_PERCENT_RE = re.compile(r"(?:(\d+(?:\.\d+)?)-)?(\d+(?:\.\d+)?)%")
_MASK_RE = re.compile(r"0[xX][0-9a-fA-F]+")
_MB_RE = re.compile(r"(\d+(?:\.\d+)?)(%|MBps)")
#: Widest capacity bitmask any resctrl takes: the kernel parses a CBM as an unsigned long
#: (x86 CPUID reports at most 32 bits).  A machine's own `cbm_mask` is checked at plan time.
MAX_CBM_BITS = 64


def _check_cache_spec(text: str) -> str:
    text = text.strip()
    m = _PERCENT_RE.fullmatch(text)
    if m:
        lo = Fraction(m.group(1) or "0")
        hi = Fraction(m.group(2))
        if not 0 <= lo < hi <= 100:
            raise ValueError(
                f"cache allocation {text!r}: expected 0 <= start < end <= 100 percent"
            )
        return text
    if _MASK_RE.fullmatch(text):
        value = int(text, 16)
        if value == 0:
            raise ValueError(f"cache allocation {text!r}: expected a non-zero bitmask")
        if value.bit_length() > MAX_CBM_BITS:
            raise ValueError(
                f"cache allocation {text[:40]!r}: expected a bitmask of at most {MAX_CBM_BITS} "
                f"bits (resctrl's widest); found {value.bit_length()} bits"
            )
        return text.lower()
    raise ValueError(
        f"cache allocation {text!r}: expected a percentage (\"50%\"), a range (\"20-80%\") "
        "or a hex bitmask (\"0xff0\")"
    )


def _check_mb_spec(text: str) -> str:
    text = text.strip()
    m = _MB_RE.fullmatch(text)
    if not m or Fraction(m.group(1)) <= 0:
        raise ValueError(
            f"memory bandwidth {text!r}: expected a positive \"N%\" or \"NMBps\""
        )
    if m.group(2) == "%" and Fraction(m.group(1)) > 100:
        raise ValueError(f"memory bandwidth {text!r}: expected at most 100%")
    return text


def _check_id_key(key: str) -> str:
    if key != "all" and not key.isdigit():
        raise ValueError(f"cache id key {key!r}: expected \"all\" or a decimal cache id")
    return key


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )


class CacheEntry(_Model):
    """One cache id's allocation: unified, or code/data under CDP."""

    unified: str | None = None
    code: str | None = None
    data: str | None = None

    @field_validator("unified", "code", "data")
    @classmethod
    def _syntax(cls, value: str | None) -> str | None:
        return None if value is None else _check_cache_spec(value)

    @model_validator(mode="after")
    def _non_empty(self) -> CacheEntry:
        if self.unified is None and self.code is None and self.data is None:
            raise ValueError("cache allocation: expected unified, code or data")
        return self


def _normalize_cache(value: Any) -> Any:
    """`"50%"` | `{unified,code,data}` | `{all: .., "1": ..}` -> `{key: CacheEntry-like}`."""
    if value is None:
        return None
    if isinstance(value, str):
        return {"all": {"unified": value}}
    if isinstance(value, Mapping):
        if set(value) <= {"unified", "code", "data"}:
            return {"all": dict(value)}
        return {
            str(k): ({"unified": v} if isinstance(v, str) else v) for k, v in value.items()
        }
    return value


def _normalize_mb(value: Any) -> Any:
    """`"50%"` | `["50%", "2000MBps"]` | `{all: .., "1": ..}` -> `{key: [spec, ...]}`."""
    if value is None:
        return None
    if isinstance(value, str | list | tuple):
        value = {"all": value}
    if not isinstance(value, Mapping):
        raise ValueError(
            'memory bandwidth: expected "N%", "NMBps", a list of them, or a map from cache '
            f"ids to those; found {value!r}"
        )
    out: dict[str, list[object]] = {}
    for key, specs in value.items():
        items = [specs] if isinstance(specs, str) else specs
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError(
                f'memory bandwidth for {key}: expected "N%", "NMBps" or a list of them; '
                f"found {specs!r}"
            )
        out[str(key)] = list(items)
    return out


class Allocation(_Model):
    """What one partition or class gets; unset resources are not restricted."""

    l3_allocation: dict[str, CacheEntry] | None = None
    l2_allocation: dict[str, CacheEntry] | None = None
    mb_allocation: dict[str, tuple[str, ...]] | None = None

    @field_validator("l3_allocation", "l2_allocation", mode="before")
    @classmethod
    def _cache_shape(cls, value: Any) -> Any:
        return _normalize_cache(value)

    @field_validator("mb_allocation", mode="before")
    @classmethod
    def _mb_shape(cls, value: Any) -> Any:
        return _normalize_mb(value)

    @field_validator("l3_allocation", "l2_allocation")
    @classmethod
    def _cache_keys(cls, value: dict[str, CacheEntry] | None) -> dict[str, CacheEntry] | None:
        for key in value or {}:
            _check_id_key(key)
        return value

    @field_validator("mb_allocation")
    @classmethod
    def _mb_values(
        cls, value: dict[str, tuple[str, ...]] | None
    ) -> dict[str, tuple[str, ...]] | None:
        if value is None:
            return None
        out: dict[str, tuple[str, ...]] = {}
        for key, specs in value.items():
            _check_id_key(key)
            if not specs:
                raise ValueError(f"memory bandwidth for {key}: expected at least one value")
            out[key] = tuple(_check_mb_spec(s) for s in specs)
        return out


class ClassDef(Allocation):
    """A class inside a partition."""


class Partition(Allocation):
    classes: dict[str, ClassDef] = Field(default_factory=dict)


class ResourceOption(_Model):
    #: skip this resource silently when the machine lacks it (else ConfigError)
    optional: bool = False


class RdtOptions(_Model):
    l3: ResourceOption = Field(default_factory=ResourceOption)
    l2: ResourceOption = Field(default_factory=ResourceOption)
    mb: ResourceOption = Field(default_factory=ResourceOption)


class RdtConfig(ClassSelection):
    """`control.rdt`: class selection (enable, ...) plus partitions, classes and options."""

    partitions: dict[str, Partition] = Field(default_factory=dict)
    options: RdtOptions = Field(default_factory=RdtOptions)
    #: create `mon_groups/nri-resmgr-pod-<uid>` per pod (see RdtController.ensure_mon_group)
    monitor_pods: bool = False

    @model_validator(mode="after")
    def _class_names(self) -> RdtConfig:
        seen: dict[str, str] = {}
        for pname, part in self.partitions.items():
            for cname in part.classes:
                where = f"control.rdt.partitions.{pname}.classes.{cname}"
                validate_name(cname, subject=where, error=ValueError)
                if cname.startswith(POD_GROUP_PREFIX):
                    raise ValueError(
                        f"{where}: expected a name not starting with {POD_GROUP_PREFIX!r} "
                        "(reserved for pod groups)"
                    )
                if cname in seen:
                    raise ValueError(
                        f"{where}: expected class names unique across partitions; "
                        f"found it also in partition {seen[cname]}"
                    )
                seen[cname] = pname
        return self

    def class_names(self) -> tuple[str, ...]:
        return tuple(c for p in self.partitions.values() for c in p.classes)


# -------------------------------------------------------------------------------- plan

#: resource name -> {cache id: value text}
Schemata = dict[str, dict[int, str]]


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _contiguous(mask: int) -> bool:
    if mask == 0:
        return True
    low = mask & -mask
    return (mask + low) & mask == 0


def _range_mask(available: int, lo: Fraction, hi: Fraction) -> int:
    bits = _bits(available)
    n = len(bits)
    start = math.floor(n * lo / 100)
    end = max(math.ceil(n * hi / 100), start + 1)
    mask = 0
    for b in bits[start:min(end, n)]:
        mask |= 1 << b
    return mask


def _spec_mask(spec: str, available: int) -> int:
    """Mask for `spec`: hex masks are absolute, percentages select from `available` bits."""
    if _MASK_RE.fullmatch(spec):
        return int(spec, 16)
    m = _PERCENT_RE.fullmatch(spec)
    assert m is not None  # checked at config load
    return _range_mask(available, Fraction(m.group(1) or "0"), Fraction(m.group(2)))


def _check_mask(
    mask: int, res: CacheInfo, *, within: int, subject: str, error: type[ResmgrError]
) -> None:
    if mask & ~within:
        raise error(
            f"{subject}: expected a mask within 0x{within:x}; found 0x{mask:x}"
        )
    if mask == 0 and res.min_cbm_bits > 0:
        raise error(f"{subject}: expected a non-empty mask; found 0x0")
    if mask.bit_count() < res.min_cbm_bits:
        raise error(
            f"{subject}: expected at least min_cbm_bits={res.min_cbm_bits} bits set in "
            f"{res.name}; found 0x{mask:x} with {mask.bit_count()}"
        )
    if not res.sparse_masks and not _contiguous(mask):
        raise error(
            f"{subject}: expected a contiguous mask ({res.name} has no sparse_masks); "
            f"found 0x{mask:x}"
        )


def _check_cache_ids(
    entries: Mapping[str, object],
    cache_ids: Iterable[int],
    *,
    resource: str,
    subject: str,
    error: type[ResmgrError],
) -> None:
    """Every per-id key of `entries` (besides ``all``) must name a cache id of `resource`."""
    known = set(cache_ids)
    for key in entries:
        if key != "all" and int(key) not in known:
            raise error(
                f"{subject}.{key}: expected a cache id of {resource} "
                f"({', '.join(map(str, sorted(known)))}); found {key}"
            )


def _cache_values(
    entries: Mapping[str, CacheEntry],
    *,
    res: CacheInfo,
    kind: str,
    parent: Mapping[int, int] | None,
    subject: str,
    cdp: bool,
    error: type[ResmgrError],
) -> dict[int, int]:
    """Mask per cache id of `res` (`kind`: unified/code/data) from per-id entries."""
    _check_cache_ids(entries, res.cache_ids, resource=res.name, subject=subject, error=error)
    out: dict[int, int] = {}
    for cid in res.cache_ids:
        entry = entries.get(str(cid), entries.get("all"))
        within = res.cbm_mask if parent is None else parent[cid]
        if entry is None:
            out[cid] = within
            continue
        if not cdp and entry.unified is None:
            raise error(
                f"{subject}: expected a unified allocation, code/data split needs CDP "
                f"(mount resctrl with -o cdp); found only code/data"
            )
        spec = entry.unified
        if cdp and kind == "code" and entry.code is not None:
            spec = entry.code
        if cdp and kind == "data" and entry.data is not None:
            spec = entry.data
        if spec is None:
            out[cid] = within
            continue
        mask = _spec_mask(spec, within)
        _check_mask(mask, res, within=within, subject=f"{subject} {spec!r} on cache id {cid}",
                    error=error)
        out[cid] = mask
    return out


def _mb_value(specs: tuple[str, ...], mb: MBInfo, *, subject: str,
              error: type[ResmgrError]) -> int:
    by_kind: dict[str, Fraction] = {}
    for spec in specs:
        m = _MB_RE.fullmatch(spec)
        assert m is not None
        by_kind.setdefault(m.group(2), Fraction(m.group(1)))
    if mb.unit is MBUnit.MBPS:
        if "MBps" not in by_kind:
            raise error(
                f"{subject}: expected an MBps value, resctrl is mounted with mba_MBps; "
                f"found {', '.join(specs)}"
            )
        return max(1, math.ceil(by_kind["MBps"]))
    if mb.unit is MBUnit.AMD_EIGHTH_GBPS:
        if "MBps" in by_kind:
            value = math.ceil(by_kind["MBps"] / AMD_MBPS_PER_UNIT)
        else:
            value = math.ceil(mb.max_value * by_kind["%"] / 100)
        value = max(value, mb.min_bandwidth, 1)
        if value > mb.max_value:
            raise error(
                f"{subject}: expected at most {mb.max_value} units of 1/8 GB/s "
                f"({mb.max_value * AMD_MBPS_PER_UNIT}MBps); found {value}"
            )
        return value
    if "%" not in by_kind:
        raise error(
            f"{subject}: expected a percentage; MBps values need resctrl mounted with "
            f"mba_MBps; found {', '.join(specs)}"
        )
    pct = by_kind["%"]
    if pct < mb.min_bandwidth:
        raise error(
            f"{subject}: expected at least min_bandwidth={mb.min_bandwidth}%; found {pct}%"
        )
    gran = max(mb.bandwidth_gran, 1)
    return min(math.ceil(pct / gran) * gran, 100)


def _mb_values(
    entries: Mapping[str, tuple[str, ...]],
    mb: MBInfo,
    *,
    parent: Mapping[int, int] | None,
    subject: str,
    error: type[ResmgrError],
) -> dict[int, int]:
    _check_cache_ids(entries, mb.cache_ids, resource="MB", subject=subject, error=error)
    out: dict[int, int] = {}
    for cid in mb.cache_ids:
        specs = entries.get(str(cid), entries.get("all"))
        ceiling = mb.max_value if parent is None else parent[cid]
        if specs is None:
            out[cid] = ceiling
            continue
        value = _mb_value(specs, mb, subject=f"{subject} on cache id {cid}", error=error)
        if value > ceiling:
            raise error(
                f"{subject} on cache id {cid}: expected at most the partition's {ceiling}; "
                f"found {value}"
            )
        out[cid] = value
    return out


@dataclass(frozen=True, slots=True)
class _Resolved:
    caches: dict[str, dict[int, int]] = field(default_factory=dict)
    mb: dict[int, int] = field(default_factory=dict)


def _resolve(
    alloc: Allocation,
    info: ResctrlInfo,
    options: RdtOptions,
    *,
    parent: _Resolved | None,
    subject: str,
    error: type[ResmgrError] = ConfigError,
) -> _Resolved:
    caches: dict[str, dict[int, int]] = {}
    for level, entries, opt in (
        (CacheLevel.L3, alloc.l3_allocation, options.l3),
        (CacheLevel.L2, alloc.l2_allocation, options.l2),
    ):
        resources = info.resources(level)
        if entries is not None and not resources and not opt.optional:
            raise error(
                f"{subject}.{level.lower()}Allocation: expected {level} cache allocation "
                f"support in resctrl (or options.{level.lower()}.optional); found none"
            )
        cdp = info.cdp(level)
        for res in resources:
            kind = "code" if res.name.endswith("CODE") else "data" if cdp else "unified"
            up = None if parent is None else parent.caches[res.name]
            if entries is None:
                caches[res.name] = dict(up) if up is not None else dict.fromkeys(
                    res.cache_ids, res.cbm_mask)
            else:
                caches[res.name] = _cache_values(
                    entries, res=res, kind=kind, parent=up, cdp=cdp, error=error,
                    subject=f"{subject}.{level.lower()}Allocation",
                )
    mb: dict[int, int] = {}
    if alloc.mb_allocation is not None and info.mb is None and not options.mb.optional:
        raise error(
            f"{subject}.mbAllocation: expected memory bandwidth allocation (info/MB) in "
            "resctrl (or options.mb.optional); found none"
        )
    if info.mb is not None:
        up_mb = None if parent is None else parent.mb
        if alloc.mb_allocation is None:
            mb = dict(up_mb) if up_mb is not None else dict.fromkeys(
                info.mb.cache_ids, info.mb.max_value)
        else:
            mb = _mb_values(alloc.mb_allocation, info.mb, parent=up_mb, error=error,
                            subject=f"{subject}.mbAllocation")
    return _Resolved(caches=caches, mb=mb)


def _render_schemata(info: ResctrlInfo, resolved: _Resolved) -> str:
    """Schemata text: caches in kernel order (L3*, L2*), then MB; ids ascending."""
    lines: list[str] = []
    for level in (CacheLevel.L3, CacheLevel.L2):
        for res in info.resources(level):
            values = resolved.caches[res.name]
            body = ";".join(f"{cid}={values[cid]:x}" for cid in res.cache_ids)
            lines.append(f"{res.name}:{body}")
    if info.mb is not None:
        body = ";".join(f"{cid}={resolved.mb[cid]}" for cid in info.mb.cache_ids)
        lines.append(f"MB:{body}")
    return "".join(line + "\n" for line in lines)


def plan_classes(info: ResctrlInfo, config: RdtConfig) -> dict[str, str]:
    """Exact schemata text per class name; ConfigError for what the hardware can't hold."""
    names = config.class_names()
    usable = info.num_closids - 1
    if len(names) > usable:
        raise ConfigError(
            f"control.rdt.partitions: expected at most {usable} classes "
            f"(num_closids={info.num_closids}, CLOSID 0 is the root group); "
            f"found {len(names)}: {', '.join(names)}"
        )
    plans: dict[str, str] = {}
    claimed: dict[str, dict[int, tuple[int, str]]] = {}
    for pname, part in config.partitions.items():
        psubject = f"control.rdt.partitions.{pname}"
        presolved = _resolve(part, info, config.options, parent=None, subject=psubject)
        if part.l3_allocation is not None or part.l2_allocation is not None:
            for rname, values in presolved.caches.items():
                level = CacheLevel.L3 if rname.startswith("L3") else CacheLevel.L2
                if (part.l3_allocation if level is CacheLevel.L3 else part.l2_allocation) is None:
                    continue
                for cid, mask in values.items():
                    other = claimed.setdefault(rname, {}).get(cid)
                    if other is not None and other[0] & mask:
                        raise ConfigError(
                            f"{psubject}: expected partitions not to overlap; found {rname} "
                            f"cache id {cid} mask 0x{mask:x} overlapping partition "
                            f"{other[1]} (0x{other[0]:x})"
                        )
                    prev = other[0] if other is not None else 0
                    claimed[rname][cid] = (prev | mask, pname)
        for cname, cdef in part.classes.items():
            resolved = _resolve(cdef, info, config.options, parent=presolved,
                                subject=f"{psubject}.classes.{cname}")
            plans[cname] = _render_schemata(info, resolved)
    return plans


# ------------------------------------------------------------ koordinator pod annotation


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
        subject, "[start, end] integer percentages", value,
    )
    assert isinstance(value, list)
    lo, hi = value
    _want(0 <= lo < hi <= 100, subject, "0 <= start < end <= 100", value)
    return (lo, hi)


def _parse_percent(value: object, subject: str) -> int:
    _want(_int(value) and 0 < value <= 100, subject,  # type: ignore[operator]
          "an integer percentage 1-100", value)
    assert isinstance(value, int)
    return value


def _fields(obj: object, names: Collection[str], *, subject: str, expected: str,
            required: Collection[str] = ()) -> dict[str, object]:
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
        fields = _fields(item, ("cacheID", key), subject=where,
                         expected=f"an object with cacheID and {key}",
                         required=("cacheID", key))
        cid = fields["cacheID"]
        _want(_int(cid) and cid >= 0, f"{where}.cacheID", "a cache id", cid)  # type: ignore[operator]
        assert isinstance(cid, int)
        _want(cid not in out, f"{where}.cacheID", "each cache id once", cid)
        out[cid] = fields[key]
    return out


def _parse_section(
    doc: Mapping[str, object], name: str, key: str, example: str,
    parse: Callable[[object, str], _T], subject: str,
) -> tuple[_T | None, dict[int, _T]]:
    """One resource of the annotation (``llc`` or ``mb``): its machine-wide ``schemata``
    value and its ``schemataPerCache`` values, each read with `parse`."""
    raw = doc.get(name)
    if raw is None:
        return None, {}
    section = _fields(raw, ("schemata", "schemataPerCache"), subject=f"{subject} {name}",
                      expected="an object with schemata and/or schemataPerCache")
    whole = None
    if "schemata" in section:
        sch = _fields(section["schemata"], (key,), subject=f"{subject} {name}.schemata",
                      expected=example, required=(key,))
        whole = parse(sch[key], f"{subject} {name}.schemata.{key}")
    per: dict[int, _T] = {}
    if "schemataPerCache" in section:
        raw = _parse_per_cache(section["schemataPerCache"], f"{subject} {name}.schemataPerCache",
                               key)
        per = {cid: parse(v, f"{subject} {name}.schemataPerCache cacheID {cid}")
               for cid, v in raw.items()}
    return whole, per


def parse_pod_resctrl(value: str, *, subject: str) -> PodResctrl:
    """Parse the koordinator resctrl annotation JSON; AnnotationError names `subject`."""
    doc = load_annotation_json(value, where=subject)
    doc = _fields(doc, ("llc", "mb"), subject=subject, expected="an object with llc and/or mb")
    llc_range, llc_per = _parse_section(
        doc, "llc", "range", '{"range": [start, end]}', _parse_range, subject
    )
    mb_percent, mb_per = _parse_section(doc, "mb", "percent", '{"percent": N}', _parse_percent,
                                        subject)
    return PodResctrl(llc_range=llc_range, llc_per_cache=llc_per, mb_percent=mb_percent,
                      mb_per_cache=mb_per)


def plan_pod_group(info: ResctrlInfo, spec: PodResctrl, *, subject: str) -> str:
    """Exact schemata text for a pod group (L3 by range, MB by percent)."""
    l3: dict[str, CacheEntry] | None = None
    if spec.llc_range is not None or spec.llc_per_cache:
        l3 = {}
        if spec.llc_range is not None:
            lo, hi = spec.llc_range
            l3["all"] = CacheEntry(unified=f"{lo}-{hi}%")
        for cid, (lo, hi) in spec.llc_per_cache.items():
            l3[str(cid)] = CacheEntry(unified=f"{lo}-{hi}%")
    mba: dict[str, tuple[str, ...]] | None = None
    if spec.mb_percent is not None or spec.mb_per_cache:
        mba = {}
        if spec.mb_percent is not None:
            mba["all"] = (f"{spec.mb_percent}%",)
        for cid, pct in spec.mb_per_cache.items():
            mba[str(cid)] = (f"{pct}%",)
    alloc = Allocation(l3_allocation=l3, mb_allocation=mba)
    resolved = _resolve(alloc, info, RdtOptions(), parent=None, subject=subject,
                        error=AnnotationError)
    return _render_schemata(info, resolved)


# ------------------------------------------------------------------------------- apply


class GroupKind(enum.StrEnum):
    CLASS = "class"
    POD = "pod"
    MON = "mon"


@dataclass(frozen=True, slots=True)
class MonCounters:
    """One cache id's monitoring counters; None when absent or "Unavailable"."""

    llc_occupancy: int | None = None
    mbm_total_bytes: int | None = None
    mbm_local_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class MonSample:
    """One group's counters on one L3 cache id, labelled as nri-plugins labels them: the
    control group (`rdt_class`; the root is ``system/default``) and the monitoring group
    inside it (`rdt_mon_group`; "" for the control group's own counters)."""

    rdt_class: str
    rdt_mon_group: str
    cache_id: int
    llc_occupancy: int | None = None
    mbm_total_bytes: int | None = None
    mbm_local_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class MonPlan:
    """Where a new container's tasks will be counted (`RdtController.monitor_container`).

    `group` is the group's path under the resctrl root.  With `clos_id` set the runtime
    does it: the container's adjustment carries NRI's `LinuxRdt` (v0.11+) with that
    ``closID`` and ``enableMonitoring``, and the OCI runtime makes ``<closID>/mon_groups/
    <container id>`` and starts the task in it.  Otherwise the daemon writes the task's
    PID into `group` at PostStartContainer (`RdtController.task_started`).
    """

    group: str
    clos_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    #: directories under root that look like ours (prefix) but are not in the record
    foreign: tuple[str, ...] = ()


def _write_once(path: Path, content: str, *, root: Path, append: bool = False) -> None:
    """Write `content` with a single write(2), as resctrl needs; report last_cmd_status.

    `append` for `tasks`: the kernel moves the task whatever the offset, and a synthetic
    tree then keeps every PID written, as the kernel's file would list them."""
    data = content.encode("ascii")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        status = root / "info" / "last_cmd_status"
        detail = ""
        with contextlib.suppress(OSError):
            detail = f" (info/last_cmd_status: {status.read_text().strip()})"
        raise ResmgrError(
            f"{path}: expected the kernel to accept {content!r}; found {exc}{detail}"
        ) from exc
    if written != len(data):
        raise ResmgrError(f"{path}: expected to write {len(data)} bytes; wrote {written}")


_GROUP_SHAPES = {
    GroupKind.CLASS: "<class>",
    GroupKind.POD: f"{POD_GROUP_PREFIX}<pod uid>",
    GroupKind.MON: f"[<class>/]mon_groups/{POD_GROUP_PREFIX}<pod uid>",
}


def _group_path(root: Path, rel: str) -> Path:
    """The directory of group `rel` under `root` (resolved): strictly inside it, never
    `root` itself, and reached without a symlink on the way (ResmgrError otherwise).

    Checked with one lstat(2) per component below `root`, cheap enough for every read
    of a scrape (a full `resolve` walks every component from /)."""
    parts = rel.split("/")
    if "\x00" in rel or any(part in ("", ".", "..") for part in parts):
        raise ResmgrError(f"resctrl group {rel!r}: expected a relative path of names under "
                          f"{root}; found an empty, '.', '..' or NUL component")
    path = str(root)
    for part in parts:
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            break  # nothing below a missing component can lead elsewhere
        if stat.S_ISLNK(mode):
            raise ResmgrError(f"resctrl group {rel!r}: expected a directory strictly inside "
                              f"{root}; found {path} is a symlink")
    return root.joinpath(*parts)


def _read_counter(path: str) -> int | None:
    """A counter file's value; None when absent, unreadable or not a number
    ("Unavailable"); never follows a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def _entry_problem(rel: object, meta: object) -> str | None:
    """Why a record entry names no group this daemon makes (None: it does).

    Shape and names only (no file system access: `owned` runs on every change); a
    symlink on the way is caught where a group is read or removed (`_group_path`)."""
    if not isinstance(meta, dict) or not isinstance(meta.get("pod_uid", ""), str):
        return f"expected {{kind, pod_uid}}; found {meta!r}"[:200]
    try:
        kind = GroupKind(str(meta.get("kind")))
    except ValueError:
        return f"expected kind class, pod or mon; found {meta.get('kind')!r}"[:200]
    meta.setdefault("pod_uid", "")
    if not isinstance(rel, str):
        return f"expected a group path; found {rel!r}"[:200]
    parts = rel.split("/")
    own = POD_GROUP_PREFIX + meta["pod_uid"]
    if kind is GroupKind.CLASS:
        shaped = len(parts) == 1
    elif kind is GroupKind.POD:
        shaped = parts == [own]
    else:
        shaped = parts[-2:] == ["mon_groups", own] and len(parts) in (2, 3)
    names = [p for p in parts if p != "mon_groups"] if kind is GroupKind.MON else parts
    try:
        for name in names:
            validate_name(name, subject=f"{kind} group {rel!r}", error=ValueError)
        if not shaped or (kind is not GroupKind.CLASS and not meta["pod_uid"]):
            return f"expected {_GROUP_SHAPES[kind]} for a {kind} group of pod " \
                   f"{meta['pod_uid']!r}"
    except ValueError as exc:
        return str(exc)[:300]
    return None


class RdtController:
    """resctrl groups under `root`: classes from config, pod groups, monitoring groups.

    Construct with an `info` (from `read_info`) or let it be read from `root`.  The
    ownership record lives in `state_dir` (see the module docstring).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = DEFAULT_ROOT,
        config: RdtConfig | None = None,
        *,
        state_dir: str | os.PathLike[str],
        info: ResctrlInfo | None = None,
        log: Any = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.config = config if config is not None else RdtConfig()
        self.info = info if info is not None else read_info(self.root)
        self.record_path = Path(state_dir) / RECORD_NAME
        if log is None:
            from nri_resmgr.logs import get_logger  # logs -> config -> this module

            log = get_logger("resctrl")
        self.log = log
        #: the groups, while the record cannot be written (None: the record is current)
        self._unsaved: dict[str, dict[str, str]] | None = None
        #: problems with the record already logged (each is logged once, not per read)
        self._reported: set[str] = set()
        self._plans = plan_classes(self.info, self.config)

    # -- ownership record ---------------------------------------------------------------

    @property
    def persisted(self) -> bool:
        """False while the record cannot be written and the groups live in memory only."""
        return self._unsaved is None

    def _warn_once(self, event: str, **details: str) -> None:
        key = f"{event} {sorted(details.items())}"
        if key not in self._reported:
            self._reported.add(key)
            self.log.warning(event, record=str(self.record_path), **details)

    def owned(self) -> dict[str, dict[str, str]]:
        """Recorded groups: relative path -> {"kind": ..., "pod_uid": ...}.

        A record that cannot be read, is not JSON, is too large or too deeply nested counts
        as empty, and an entry that does not name a group this daemon makes (a traversal,
        an absolute path, the root itself, a name of the wrong shape) is skipped; each
        problem is logged once.  Nothing is deleted on the strength of such a record.
        """
        if self._unsaved is not None:
            return {rel: dict(meta) for rel, meta in self._unsaved.items()}
        try:
            with self.record_path.open("rb") as f:
                data = f.read(RECORD_MAX_BYTES + 1)
        except (FileNotFoundError, NotADirectoryError):
            return {}  # never written (the state directory may not be one: see `_save`)
        except OSError as exc:
            self._warn_once("resctrl ownership record unreadable, taken as empty", error=str(exc))
            return {}
        if len(data) > RECORD_MAX_BYTES:
            self._warn_once("resctrl ownership record too large, taken as empty",
                            error=f"expected at most {RECORD_MAX_BYTES} bytes")
            return {}
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            self._warn_once("resctrl ownership record corrupt, taken as empty",
                            error=f"expected the JSON ownership record; found {reason}")
            return {}
        if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict):
            self._warn_once("resctrl ownership record corrupt, taken as empty",
                            error="expected an object with root and groups")
            return {}
        if doc.get("root") != str(self.root):
            return {}  # another resctrl mount's record
        groups: dict[str, dict[str, str]] = {}
        for rel, meta in doc["groups"].items():
            problem = _entry_problem(rel, meta)
            if problem is not None:
                self._warn_once("resctrl ownership record entry skipped", entry=repr(rel)[:120],
                                error=problem)
                continue
            groups[rel] = {"kind": meta["kind"], "pod_uid": meta["pod_uid"]}
        return groups

    def _save(self, groups: Mapping[str, Mapping[str, str]]) -> None:
        """Replace the record atomically; if that fails (read-only, full, not a directory),
        keep the groups in memory and say so once: the daemon runs on, and a restart only
        forgets the groups (they stay in place, never deleted unrecorded)."""
        tmp = self.record_path.with_suffix(".tmp")
        text = json.dumps({"version": 1, "root": str(self.root),
                           "groups": dict(sorted(groups.items()))}, indent=1)
        try:
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            os.replace(tmp, self.record_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()  # a partial file left by ENOSPC
            if self._unsaved is None:
                self.log.warning(
                    "resctrl ownership record not writable: groups kept in memory only",
                    record=str(self.record_path), error=str(exc),
                    consequence="after a restart this daemon's groups are left in place, "
                    "not cleaned up",
                )
            self._unsaved = {rel: dict(meta) for rel, meta in groups.items()}
            return
        if self._unsaved is not None:
            self.log.info("resctrl ownership record writable again", record=str(self.record_path))
            self._unsaved = None

    def _record(self, rel: str, kind: GroupKind, pod_uid: str = "") -> None:
        groups = self.owned()
        groups[rel] = {"kind": str(kind), "pod_uid": pod_uid}
        self._save(groups)

    def _forget(self, rel: str) -> None:
        groups = self.owned()
        if groups.pop(rel, None) is not None:
            self._save(groups)

    # -- directories --------------------------------------------------------------------

    def _make(self, rel: str, kind: GroupKind, pod_uid: str = "", *, limit: bool = False) -> bool:
        """mkdir root/rel, recording it first; False when it already existed.

        With `limit`, refuse a new control group when every CLOSID is taken (the kernel
        would say ENOSPC; checking first gives the same answer on synthetic trees).
        """
        path = safe_join(self.root, *rel.split("/"))
        if path.is_dir():
            return False
        if limit:
            groups = list(self.live_groups())
            if len(groups) + 1 >= self.info.num_closids:
                raise ResmgrError(
                    f"resctrl group {rel}: expected a free CLOSID (num_closids="
                    f"{self.info.num_closids}, CLOSID 0 is the root group); found all taken "
                    f"by {', '.join(groups)}"
                )
        self._record(rel, kind, pod_uid)
        if kind is GroupKind.MON:
            path.parent.mkdir(exist_ok=True)  # present on a real resctrl, made in a synthetic one
        try:
            path.mkdir()
        except OSError as exc:
            self._forget(rel)
            if exc.errno == errno.ENOSPC:
                raise ResmgrError(
                    f"resctrl group {rel}: expected a free CLOSID/RMID "
                    f"(num_closids={self.info.num_closids}); found none left ({exc})"
                ) from exc
            raise ResmgrError(f"resctrl group {rel}: expected mkdir to succeed; found {exc}") \
                from exc
        return True

    def _remove(self, rel: str) -> bool:
        path = _group_path(self.root, rel)
        if not path.is_dir():
            self._forget(rel)
            return False
        try:
            path.rmdir()  # a real resctrl group goes with its pseudo-files
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise ResmgrError(f"resctrl group {rel}: expected rmdir to succeed; found "
                                  f"{exc}") from exc
            self._clear_synthetic(path)
            path.rmdir()
        self._forget(rel)
        return True

    def _clear_synthetic(self, path: Path) -> None:
        """In a synthetic tree, drop the files resctrl would own so rmdir can proceed."""
        for sub in ("mon_groups", "mon_data"):
            d = path / sub
            if d.is_dir() and not d.is_symlink():
                for child in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                    if child.is_dir() and not child.is_symlink():
                        child.rmdir()
                    else:
                        child.unlink()
                d.rmdir()
        for name in RESERVED_NAMES:
            f = path / name
            if f.is_file() or f.is_symlink():
                f.unlink()

    # -- classes ------------------------------------------------------------------------

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self._plans)

    def planned(self) -> Mapping[str, str]:
        """Class name -> schemata text that `apply_classes` writes."""
        return dict(self._plans)

    def apply_classes(self) -> list[tuple[Path, str]]:
        """Create/update class groups, drop owned classes no longer configured."""
        writes: list[tuple[Path, str]] = []
        for name, text in self._plans.items():
            self._make(name, GroupKind.CLASS)
            path = safe_join(self.root, name, "schemata")
            _write_once(path, text, root=self.root)
            writes.append((path, text))
        for rel, meta in sorted(self.owned().items()):
            if meta.get("kind") == GroupKind.CLASS and rel not in self._plans:
                self._remove_logged(rel)
        return writes

    # -- pod groups ---------------------------------------------------------------------

    def pod_group_schemata(self, pod: Pod) -> str | None:
        """Schemata text for the pod's own group, None when it has no resctrl annotation."""
        value = pod.annotations.get(RESCTRL_POD_ANNOTATION)
        if value is None:
            return None
        subject = f"pod {pod.namespace}/{pod.name}: annotation {RESCTRL_POD_ANNOTATION}"
        return plan_pod_group(self.info, parse_pod_resctrl(value, subject=subject),
                              subject=subject)

    def ensure_pod_group(self, pod: Pod) -> str | None:
        """At RunPodSandbox: create/update the pod's group; its name, or None if not asked."""
        text = self.pod_group_schemata(pod)
        if text is None:
            return None
        name = pod_group_name(pod)
        if not self._make(name, GroupKind.POD, pod.uid, limit=True) and name not in self.owned():
            self._record(name, GroupKind.POD, pod.uid)  # named for this very pod: adopt it
        _write_once(safe_join(self.root, name, "schemata"), text, root=self.root)
        return name

    def remove_pod_group(self, pod: Pod) -> list[str]:
        """At RemovePodSandbox: remove the pod's owned group and monitoring groups."""
        removed: list[str] = []
        for rel, meta in sorted(self.owned().items(), key=lambda kv: -kv[0].count("/")):
            mine = meta.get("pod_uid") == pod.uid
            if mine and meta.get("kind") in (GroupKind.POD, GroupKind.MON) and \
                    self._remove_logged(rel):
                removed.append(rel)
        return removed

    def _remove_logged(self, rel: str) -> bool:
        """`_remove`, logging a group that will not go (one must not stop the rest)."""
        try:
            return self._remove(rel)
        except ResmgrError as exc:
            self.log.warning("resctrl group not removed", group=rel, error=str(exc))
            return False

    # -- monitoring ---------------------------------------------------------------------

    def ensure_mon_group(self, pod: Pod, rdt_class: str | None) -> str | None:
        """With monitorPods: `[<class>/]mon_groups/nri-resmgr-pod-<uid>`; its relative path.

        For a pod in its own group (`rdt_class` is its group name) that group is the answer.
        """
        if not self.config.monitor_pods or self.info.mon is None:
            return None
        name = pod_group_name(pod)
        if rdt_class == name:
            return name  # the pod's own control group monitors it already
        parts = [] if rdt_class is None else [
            validate_name(rdt_class, subject="RDT class of a monitoring group",
                          error=AnnotationError)]
        rel = "/".join([*parts, "mon_groups", name])
        self._make(rel, GroupKind.MON, pod.uid)
        return rel

    def read_counters(self, group: str = "") -> dict[int, MonCounters]:
        """Counters per L3 cache id of `group` (relative path; "" is the root group)."""
        base = self.root if group == "" else _group_path(self.root, group)
        mon_data = os.path.join(base, "mon_data")
        out: dict[int, MonCounters] = {}
        try:
            if not stat.S_ISDIR(os.lstat(mon_data).st_mode):
                return out
            domains = sorted((e.name, e.path) for e in os.scandir(mon_data)
                             if e.is_dir(follow_symlinks=False))
        except OSError:
            return out
        for name, path in domains:
            m = re.fullmatch(r"mon_L3_(\d+)", name)
            if m:
                values = {f: _read_counter(os.path.join(path, f)) for f in MON_FEATURES}
                out[int(m.group(1))] = MonCounters(**values)
        return out

    @property
    def monitoring(self) -> bool:
        """Pods are monitored: `monitorPods` is on and the machine has L3 monitoring."""
        return self.config.monitor_pods and self.info.mon is not None

    def monitor_container(
        self, pod: Pod, container_id: str, rdt_class: str | None, *, runtime_rdt: bool
    ) -> MonPlan | None:
        """At CreateContainer: where the container's tasks will be counted (None: nowhere).

        The earliest point wins: a pod in its own group is counted there from the start (its
        class puts it there); with `runtime_rdt` (the runtime speaks NRI v0.11+) and an RDT
        class, the runtime makes a monitoring group for the container and starts the task
        in it; otherwise the pod's monitoring group is made now and the PID goes into it
        once the task runs (`task_started`).
        """
        if not self.monitoring:
            return None
        own = pod_group_name(pod)
        if rdt_class == own:
            return MonPlan(group=own)
        group = self._runtime_group(container_id, rdt_class)
        if runtime_rdt and group is not None:
            return MonPlan(group=group, clos_id=rdt_class)
        rel = self.ensure_mon_group(pod, rdt_class)
        return None if rel is None else MonPlan(group=rel)

    def task_started(self, pod: Pod, container_id: str, rdt_class: str | None, pid: int
                     ) -> str | None:
        """At PostStartContainer: see the task counted; the group that counts it.

        A pod in its own group needs nothing.  A task the runtime put in a group of its
        own (`MonPlan.clos_id`) is left there; where the runtime did not (its OCI runtime
        ignores ``enableMonitoring``: runc before 1.4, for one), or without NRI's LinuxRdt,
        `pid` is written into the pod's monitoring group.  The PID must be one of this
        daemon's PID namespace (run with ``hostPID``), else the kernel answers ESRCH.
        """
        if not self.monitoring:
            return None
        own = pod_group_name(pod)
        if rdt_class == own:
            return own
        group = self._runtime_group(container_id, rdt_class)
        if group is not None and pid in self._tasks(group):
            return group
        if pid <= 0:
            raise ResmgrError(
                f"pod {pod.namespace}/{pod.name} container {container_id}: expected the "
                f"task's PID at PostStartContainer to monitor it; found {pid}"
            )
        rel = self.ensure_mon_group(pod, rdt_class)
        if rel is None:
            return None
        path = safe_join(self.root, *rel.split("/"), "tasks")
        _write_once(path, f"{pid}\n", root=self.root, append=True)
        return rel

    def _runtime_group(self, container_id: str, rdt_class: str | None) -> str | None:
        """`<class>/mon_groups/<container id>`, the group an OCI runtime makes for
        ``enableMonitoring``; None without a class (the runtime would then make a control
        group per container) or for an id that is no usable name."""
        if rdt_class is None:
            return None
        try:
            cls = validate_name(rdt_class, subject="RDT class", error=ValueError)
            cid = validate_name(container_id, subject="container id", error=ValueError)
        except ValueError:
            return None
        return f"{cls}/mon_groups/{cid}"

    def _tasks(self, group: str) -> set[int]:
        try:
            text = safe_join(self.root, *group.split("/"), "tasks").read_text()
        except OSError:
            return set()
        return {int(t) for t in text.split() if t.isascii() and t.isdigit()}

    def monitoring_samples(
        self, containers: Iterable[tuple[str, str | None]] = ()
    ) -> list[MonSample]:
        """Counters of every group that counts pods, read now (for /metrics).

        The root and the configured classes (their own counters, which include their
        monitoring groups'), the pod groups and pod monitoring groups this daemon made, and
        the per-container groups runtimes made for `containers` ((id, RDT class) pairs).
        """
        if not self.monitoring:
            return []
        groups: list[tuple[str, str, str]] = [(ROOT_CLASS_LABEL, "", "")]
        groups += [(name, "", name) for name in self._plans]
        for rel, meta in sorted(self.owned().items()):
            parts = rel.split("/")
            if meta["kind"] == GroupKind.POD:
                groups.append((rel, "", rel))
            elif meta["kind"] == GroupKind.MON:
                cls = parts[0] if len(parts) == 3 else ROOT_CLASS_LABEL
                groups.append((cls, parts[-1], rel))
        for cid, rdt_class in containers:
            rel_or_none = self._runtime_group(cid, rdt_class)
            if rel_or_none is not None and rdt_class is not None:
                groups.append((rdt_class, cid, rel_or_none))
        out: list[MonSample] = []
        seen: set[str] = set()
        for cls, mon, rel in groups:
            if rel in seen:
                continue
            seen.add(rel)
            for cache_id, c in self.read_counters(rel).items():
                out.append(MonSample(cls, mon, cache_id, c.llc_occupancy, c.mbm_total_bytes,
                                     c.mbm_local_bytes))
        return out

    # -- restart ------------------------------------------------------------------------

    def reconcile(self, live_pod_uids: Collection[str]) -> ReconcileReport:
        """At start: remove owned pod/mon groups of gone pods; leave everything else."""
        live = set(live_pod_uids)
        owned = self.owned()
        removed: list[str] = []
        kept: list[str] = []
        for rel, meta in sorted(owned.items(), key=lambda kv: -kv[0].count("/")):
            if meta.get("kind") not in (GroupKind.POD, GroupKind.MON):
                continue
            if meta.get("pod_uid") in live:
                kept.append(rel)
                continue
            if self._remove_logged(rel):
                removed.append(rel)
        foreign = sorted(
            p.name for p in self.root.iterdir()
            if p.is_dir() and p.name.startswith(POD_GROUP_PREFIX) and p.name not in owned
        )
        return ReconcileReport(removed=tuple(removed), kept=tuple(sorted(kept)),
                               foreign=tuple(foreign))

    def live_groups(self) -> Iterable[str]:
        """Control groups present under root (for diagnostics)."""
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and p.name not in RESERVED_NAMES)
