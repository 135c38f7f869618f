"""Synthetic resctrl trees for tests and the simulator.

Theory of operation: `read_info` and `RdtController` only read and write plain files under
a root, so a directory laid out like `/sys/fs/resctrl` stands in for the kernel.  The
layouts below follow real machines' `info/` directories:

- `INTEL_SKX`: Xeon Scalable, two sockets, 11-bit L3 mask (`7ff`), 16 CLOSIDs (8 with CDP),
  MBA in percent with 10% granularity and a 10% minimum, L3 monitoring.
- `AMD_ROME`: EPYC, four L3 domains, 16-bit mask (`ffff`), `min_cbm_bits` 0 (empty and
  non-contiguous masks allowed), MBA in 1/8 GB/s up to 2048, granularity 1, minimum 0.

What the kernel does and a directory cannot (validating schemata writes, counting CLOSIDs,
creating a new group's files on mkdir, running the counters) is not simulated; the
controller checks those limits itself before writing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ResctrlLayout:
    cache_ids: tuple[int, ...]
    cbm_mask: str
    min_cbm_bits: int
    num_closids: int
    shareable_bits: str = "0"
    mb_gran: int | None = 10
    mb_min: int = 10
    mb_closids: int = 8
    mb_delay_linear: str = "1"
    mb_default: int = 100
    sparse_masks: str | None = None
    l2_cache_ids: tuple[int, ...] = ()
    l2_cbm_mask: str = "ff"
    num_rmids: int = 176
    cdp: bool = False
    mba_mbps: bool = False


INTEL_SKX = ResctrlLayout(
    cache_ids=(0, 1),
    cbm_mask="7ff",
    min_cbm_bits=1,
    num_closids=16,
    shareable_bits="600",
)
AMD_ROME = ResctrlLayout(
    cache_ids=(0, 1, 2, 3),
    cbm_mask="ffff",
    min_cbm_bits=0,
    num_closids=16,
    mb_gran=1,
    mb_min=0,
    mb_closids=16,
    mb_delay_linear="0",
    mb_default=2048,
    num_rmids=256,
)
#: what the kernel shows as the MB default with mba_MBps (MBA_MAX_MBPS, U32_MAX)
MBA_MAX_MBPS = 4294967295


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_resctrl_tree(root: str | os.PathLike[str], layout: ResctrlLayout) -> Path:
    """Lay out `root` like a freshly mounted resctrl; returns a mounts file naming it."""
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    info = base / "info"
    closids = layout.num_closids // 2 if layout.cdp else layout.num_closids
    schemata: list[str] = []
    levels = [("L3", layout.cache_ids, layout.cbm_mask)]
    if layout.l2_cache_ids:
        levels.append(("L2", layout.l2_cache_ids, layout.l2_cbm_mask))
    for level, ids, mask in levels:
        names = [f"{level}CODE", f"{level}DATA"] if layout.cdp and level == "L3" else [level]
        for name in names:
            d = info / name
            _put(d / "cbm_mask", mask)
            _put(d / "min_cbm_bits", str(layout.min_cbm_bits))
            _put(d / "num_closids", str(closids))
            _put(d / "shareable_bits", layout.shareable_bits)
            _put(d / "bit_usage", ";".join(f"{i}=X" for i in ids))
            if layout.sparse_masks is not None:
                _put(d / "sparse_masks", layout.sparse_masks)
            schemata.append(f"{name}:" + ";".join(f"{i}={mask}" for i in ids))
    if layout.mb_gran is not None:
        d = info / "MB"
        _put(d / "bandwidth_gran", str(layout.mb_gran))
        _put(d / "min_bandwidth", str(layout.mb_min))
        _put(d / "num_closids", str(layout.mb_closids))
        _put(d / "delay_linear", layout.mb_delay_linear)
        default = MBA_MAX_MBPS if layout.mba_mbps else layout.mb_default
        schemata.append("MB:" + ";".join(f"{i}={default}" for i in layout.cache_ids))
    mon = info / "L3_MON"
    _put(mon / "num_rmids", str(layout.num_rmids))
    _put(mon / "mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes")
    _put(info / "last_cmd_status", "ok")
    width = max(len(line.partition(":")[0]) for line in schemata)
    # the kernel right-aligns resource names in the root schemata
    _put(
        base / "schemata",
        "\n".join(
            line.partition(":")[0].rjust(width) + ":" + line.partition(":")[2] for line in schemata
        ),
    )
    _put(base / "tasks", "1")
    (base / "mon_groups").mkdir(exist_ok=True)
    (base / "mon_data").mkdir(exist_ok=True)
    options = (
        "rw,relatime" + (",cdp" if layout.cdp else "") + (",mba_MBps" if layout.mba_mbps else "")
    )
    mounts = base.parent / f"{base.name}.mounts"
    mounts.write_text(
        "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
        f"resctrl {base.resolve()} resctrl {options} 0 0\n"
    )
    return mounts


def with_(layout: ResctrlLayout, **changes: object) -> ResctrlLayout:
    """A copy of `layout` with `changes` (cdp=True, mba_mbps=True, ...)."""
    return replace(layout, **changes)  # type: ignore[arg-type]
