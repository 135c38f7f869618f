"""Planning (pure): the exact `schemata` text of every class group and pod group.

`plan_classes(info, config)` for the configured classes, `plan_pod_group(info, spec)` for
a pod's annotation; what the hardware cannot hold is refused with `ConfigError` (or
`AnnotationError`), naming the config path.  The rules are in the package docstring.
Nothing here touches files (an import-linter contract keeps it so).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from nri_resmgr.control.resctrl.annotation import PodResctrl
from nri_resmgr.control.resctrl.config import (
    MASK_RE,
    MB_RE,
    PERCENT_RE,
    Allocation,
    CacheEntry,
    RdtConfig,
    RdtOptions,
)
from nri_resmgr.control.resctrl.info import CacheInfo, CacheLevel, MBInfo, MBUnit, ResctrlInfo
from nri_resmgr.model import AnnotationError, ConfigError, ResmgrError

#: One AMD MBA unit is 1/8 GB/s.
AMD_MBPS_PER_UNIT = 125

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
    for b in bits[start : min(end, n)]:
        mask |= 1 << b
    return mask


def _spec_mask(spec: str, available: int) -> int:
    """Mask for `spec`: hex masks are absolute, percentages select from `available` bits."""
    if MASK_RE.fullmatch(spec):
        return int(spec, 16)
    m = PERCENT_RE.fullmatch(spec)
    assert m is not None  # checked at config load
    return _range_mask(available, Fraction(m.group(1) or "0"), Fraction(m.group(2)))


def _check_mask(
    mask: int, res: CacheInfo, *, within: int, subject: str, error: type[ResmgrError]
) -> None:
    if mask & ~within:
        raise error(f"{subject}: expected a mask within 0x{within:x}; found 0x{mask:x}")
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
        _check_mask(
            mask, res, within=within, subject=f"{subject} {spec!r} on cache id {cid}", error=error
        )
        out[cid] = mask
    return out


def _mb_value(specs: tuple[str, ...], mb: MBInfo, *, subject: str, error: type[ResmgrError]) -> int:
    by_kind: dict[str, Fraction] = {}
    for spec in specs:
        m = MB_RE.fullmatch(spec)
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
        raise error(f"{subject}: expected at least min_bandwidth={mb.min_bandwidth}%; found {pct}%")
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
                caches[res.name] = (
                    dict(up) if up is not None else dict.fromkeys(res.cache_ids, res.cbm_mask)
                )
            else:
                caches[res.name] = _cache_values(
                    entries,
                    res=res,
                    kind=kind,
                    parent=up,
                    cdp=cdp,
                    error=error,
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
            mb = (
                dict(up_mb)
                if up_mb is not None
                else dict.fromkeys(info.mb.cache_ids, info.mb.max_value)
            )
        else:
            mb = _mb_values(
                alloc.mb_allocation,
                info.mb,
                parent=up_mb,
                error=error,
                subject=f"{subject}.mbAllocation",
            )
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
            resolved = _resolve(
                cdef, info, config.options, parent=presolved, subject=f"{psubject}.classes.{cname}"
            )
            plans[cname] = _render_schemata(info, resolved)
    return plans


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
    resolved = _resolve(
        alloc, info, RdtOptions(), parent=None, subject=subject, error=AnnotationError
    )
    return _render_schemata(info, resolved)
