"""Discovery: what the resctrl hardware under a root offers (step 1 of the package).

`read_info(root)` reads `info/` and the root group's `schemata` into frozen values
(`ResctrlInfo` with its `CacheInfo`, `MBInfo`, `MonInfo`); nothing here writes.  The
package docstring (`nri_resmgr.control.resctrl`) describes what is read and why.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nri_resmgr.model import ResmgrError

DEFAULT_ROOT = Path("/sys/fs/resctrl")


class MBUnit(enum.StrEnum):
    PERCENT = "percent"
    MBPS = "MBps"
    AMD_EIGHTH_GBPS = "1/8GBps"


class CacheLevel(enum.StrEnum):
    L3 = "L3"
    L2 = "L2"


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
    """Describe the resctrl hardware under `root` (see the package docstring).

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
