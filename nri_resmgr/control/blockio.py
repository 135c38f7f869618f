"""Block I/O classes: cgroup v1 `blkio` and cgroup v2 `io` weights and throttles.

Theory of operation
-------------------
A block I/O class is a named set of limits from the configuration::

    classes:
      slowdisk:
        weight: 100                       # 10-1000, the cgroup's default weight
        devices:
          - devices: ["/dev/sd*", "/dev/vda"]   # paths or globs
            throttleReadBps: 50M                # bytes/s; k, M, G, T are binary (1024)
            throttleWriteBps: 20M
            throttleReadIOPS: 1000
            throttleWriteIOPS: 500
            weight: 200                         # optional per-device weight

Device paths and globs must lie under ``/dev/`` (no ``..``); byte rates are at most
2**63-1 (the kernel's limits are 64-bit) and IOPS at most 2**32-1, so a configuration that
names ``/etc/passwd`` or ``99999999999999999999999T`` fails validation, not a write.
Devices are resolved once, when the controller is built, to `major:minor` numbers
(`os.stat(...).st_rdev` of block devices; partitions are refused, throttling applies to
whole disks).  A glob that matches nothing is skipped (a node may lack that kind of disk);
an explicit path that does not exist, or is not a block device, is a `ConfigError`.  When
several entries name the same device, later entries override the limits they set.
Resolution is injectable (`resolve_device`) so tests and the simulator need no real disks.

`plan_writes(cls, version, weight_file=...)` is pure: it returns the (file name, content)
pairs in a fixed order (weight, per-device weights, then throttles by device number):

- cgroup v2: `io.weight` gets `default N` (or `io.bfq.weight` gets `N` when only BFQ's
  file exists), per-device weights `MAJ:MIN N`; `io.max` gets one line per device,
  `MAJ:MIN rbps=R wbps=W riops=r wiops=w`, with `max` for each unset limit, so a line
  always states the device's whole throttle.
- cgroup v1: `blkio.weight` (or `blkio.bfq.weight` when CFQ is gone and BFQ is loaded)
  gets `N`, per-device weights go to `blkio.weight_device` / `blkio.bfq.weight_device`;
  `blkio.throttle.{read,write}_{bps,iops}_device` each get `MAJ:MIN value` per
  configured device, `0` for an unset limit (0 removes the kernel's rule).

`BlockIOController.apply(cgroups_path, class_name)` finds the container's cgroup under the
hierarchy root (the systemd form `kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>`
expands to `kubepods.slice/kubepods-besteffort.slice/.../cri-containerd-<id>.scope`; a
plain path is taken relative to the root), picks the weight file that exists there, and
writes each pair with one `write(2)` (cgroup files take one rule per write).  With
`dry_run` it returns the same list without touching anything.  A class that sets a weight
on a cgroup with no weight file (no BFQ and no CFQ on v1, no io.weight on v2) is refused
with a message naming both files, rather than silently ignored.

Every path is built with `names.safe_join`, so a hostile `cgroups_path` (`../..`, an
absolute path, a symlink out) cannot make the controller write outside the root.

The configuration models (`BlockIOConfig`, `parse_size`) are in
`nri_resmgr.control.blockio_config`, validated with every configuration; this module is
imported only where block I/O files are written (`control.wiring`, the simulator's
kubelet), so a daemon without block I/O classes never loads it.
"""

from __future__ import annotations

import enum
import glob
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_resmgr.control.blockio_config import BlockIOClassDef, BlockIOConfig
from nri_resmgr.control.names import safe_join
from nri_resmgr.model import ConfigError, ResmgrError

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")


class CgroupVersion(enum.StrEnum):
    AUTO = "auto"
    V1 = "v1"
    V2 = "v2"


# ---------------------------------------------------------------------- devices (IO edge)


@dataclass(frozen=True, slots=True, order=True)
class Device:
    major: int
    minor: int
    path: str = ""

    @property
    def number(self) -> str:
        return f"{self.major}:{self.minor}"


#: pattern -> devices it names now (raises ConfigError for a bad explicit path)
DeviceResolver = Callable[[str], Sequence[Device]]


def resolve_host_device(pattern: str, *, sys_root: str = "/sys") -> list[Device]:
    """Resolve a path or glob to whole-disk block devices via `os.stat` (st_rdev)."""
    is_glob = glob.has_magic(pattern)
    paths = sorted(glob.glob(pattern)) if is_glob else [pattern]
    found: list[Device] = []
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError as exc:
            raise ConfigError(
                f"block I/O device {path}: expected it to exist; found no such file"
            ) from exc
        if not stat.S_ISBLK(st.st_mode):
            if is_glob:
                continue
            raise ConfigError(
                f"block I/O device {path}: expected a block device; found "
                f"mode {stat.filemode(st.st_mode)}"
            )
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        if Path(sys_root, "dev", "block", f"{major}:{minor}", "partition").exists():
            if is_glob:
                continue
            raise ConfigError(
                f"block I/O device {path} ({major}:{minor}): expected a whole "
                "disk, throttles and weights apply per disk; found a partition"
            )
        found.append(Device(major, minor, path))
    return found


# --------------------------------------------------------------------------- plan (pure)


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    device: Device
    weight: int | None = None
    read_bps: int | None = None
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None


@dataclass(frozen=True, slots=True)
class ResolvedClass:
    name: str
    weight: int | None
    devices: tuple[DeviceSettings, ...]


def resolve_class(name: str, cls: BlockIOClassDef, resolve: DeviceResolver) -> ResolvedClass:
    """Merge a class's device entries into one settings record per device."""
    merged: dict[tuple[int, int], dict[str, Any]] = {}
    for entry in cls.devices:
        values = {
            "weight": entry.weight,
            "read_bps": entry.throttle_read_bps,
            "write_bps": entry.throttle_write_bps,
            "read_iops": entry.throttle_read_iops,
            "write_iops": entry.throttle_write_iops,
        }
        for pattern in entry.devices:
            for dev in resolve(pattern):
                slot = merged.setdefault((dev.major, dev.minor), {"device": dev})
                slot.update({k: v for k, v in values.items() if v is not None})
    devices = tuple(DeviceSettings(**merged[key]) for key in sorted(merged))
    return ResolvedClass(name=name, weight=cls.weight, devices=devices)


V1_THROTTLE_FILES = (
    ("read_bps", "blkio.throttle.read_bps_device"),
    ("write_bps", "blkio.throttle.write_bps_device"),
    ("read_iops", "blkio.throttle.read_iops_device"),
    ("write_iops", "blkio.throttle.write_iops_device"),
)
V2_WEIGHT_FILES = ("io.weight", "io.bfq.weight")
V1_WEIGHT_FILES = ("blkio.weight", "blkio.bfq.weight")


def plan_writes(
    cls: ResolvedClass, version: CgroupVersion, *, weight_file: str | None
) -> list[tuple[str, str]]:
    """(file name, content) pairs for `cls`; `weight_file` is the weight file present."""
    version = CgroupVersion(version)
    writes: list[tuple[str, str]] = []
    weighted = [d for d in cls.devices if d.weight is not None]
    if cls.weight is not None or weighted:
        if weight_file is None:
            choices = V2_WEIGHT_FILES if version is CgroupVersion.V2 else V1_WEIGHT_FILES
            raise ResmgrError(
                f"block I/O class {cls.name}: expected a weight file ({' or '.join(choices)}; "
                "the io controller with iocost or the BFQ scheduler); found neither"
            )
        if cls.weight is not None:
            default = f"default {cls.weight}" if weight_file == "io.weight" else str(cls.weight)
            writes.append((weight_file, default))
        device_file = (
            weight_file
            if version is CgroupVersion.V2
            else (weight_file.replace("weight", "weight_device"))
        )
        writes.extend((device_file, f"{d.device.number} {d.weight}") for d in weighted)
    throttled = [
        d
        for d in cls.devices
        if any(v is not None for v in (d.read_bps, d.write_bps, d.read_iops, d.write_iops))
    ]
    if version is CgroupVersion.V2:
        for d in throttled:
            fields = " ".join(
                f"{key}={'max' if value is None else value}"
                for key, value in (
                    ("rbps", d.read_bps),
                    ("wbps", d.write_bps),
                    ("riops", d.read_iops),
                    ("wiops", d.write_iops),
                )
            )
            writes.append(("io.max", f"{d.device.number} {fields}"))
    else:
        for attr, filename in V1_THROTTLE_FILES:
            for d in throttled:
                value = getattr(d, attr)
                writes.append((filename, f"{d.device.number} {0 if value is None else value}"))
    return writes


def cgroup_relpath(cgroups_path: str) -> tuple[str, ...]:
    """Path components of a container cgroup (systemd `slice:prefix:name` or plain path)."""
    if "\x00" in cgroups_path or "\n" in cgroups_path:
        raise ResmgrError(f"cgroups path {cgroups_path!r}: expected no NUL or newline")
    parts = cgroups_path.split(":")
    if len(parts) == 3 and not cgroups_path.startswith("/"):
        slice_name, prefix, name = parts
        if not slice_name.endswith(".slice") or "/" in cgroups_path:
            raise ResmgrError(f"cgroups path {cgroups_path!r}: expected SLICE.slice:PREFIX:NAME")
        comps: list[str] = []
        if slice_name != "-.slice":
            stem = slice_name[: -len(".slice")]
            words = stem.split("-")
            if any(not w for w in words):
                raise ResmgrError(
                    f"cgroups path {cgroups_path!r}: expected a slice name "
                    "without empty dash-separated words"
                )
            comps = ["-".join(words[: i + 1]) + ".slice" for i in range(len(words))]
        leaf = (
            name
            if name.endswith(".slice")
            else (f"{prefix}-{name}.scope" if prefix else f"{name}.scope")
        )
        return (*comps, leaf)
    comps = [c for c in cgroups_path.split("/") if c]
    if not comps or any(c in (".", "..") for c in comps):
        raise ResmgrError(f"cgroups path {cgroups_path!r}: expected a path below the cgroup root")
    return tuple(comps)


# ---------------------------------------------------------------------------- controller


def detect_version(root: Path) -> tuple[CgroupVersion, Path]:
    """(version, hierarchy root) for `root`: the unified mount, a v1 blkio mount, or their
    parent (`/sys/fs/cgroup` holding `blkio/`)."""
    if (root / "cgroup.controllers").exists():
        return CgroupVersion.V2, root
    if (root / "blkio.throttle.read_bps_device").exists() or (root / "blkio.reset_stats").exists():
        return CgroupVersion.V1, root
    if (root / "blkio").is_dir():
        return CgroupVersion.V1, root / "blkio"
    raise ResmgrError(
        f"cgroup root {root}: expected a cgroup v2 mount (cgroup.controllers) or a v1 blkio "
        "hierarchy (blkio.* files or a blkio/ directory); found neither"
    )


def _write_one(path: Path, content: str) -> None:
    data = content.encode("ascii")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # as `echo v > file` does
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ResmgrError(
            f"{path}: expected the kernel to accept {content!r}; found {exc}"
        ) from exc


class BlockIOController:
    """Applies block I/O classes to container cgroups under one hierarchy root."""

    def __init__(
        self,
        cgroup_root: str | os.PathLike[str] = DEFAULT_CGROUP_ROOT,
        config: BlockIOConfig | None = None,
        *,
        version: CgroupVersion | str = CgroupVersion.AUTO,
        resolve_device: DeviceResolver | None = None,
        dry_run: bool = False,
    ) -> None:
        root = Path(cgroup_root)
        version = CgroupVersion(version)  # accept "v1"/"v2"/"auto" from configuration
        if version is CgroupVersion.AUTO:
            version, root = detect_version(root)
        self.version = version
        self.root = root
        self.dry_run = dry_run
        self.config = config if config is not None else BlockIOConfig()
        resolver = resolve_device if resolve_device is not None else resolve_host_device
        self.classes: Mapping[str, ResolvedClass] = {
            name: resolve_class(name, cls, resolver) for name, cls in self.config.classes.items()
        }

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self.classes)

    def cgroup_dir(self, cgroups_path: str) -> Path:
        return safe_join(self.root, *cgroup_relpath(cgroups_path))

    def _weight_file(self, directory: Path) -> str | None:
        choices = V2_WEIGHT_FILES if self.version is CgroupVersion.V2 else V1_WEIGHT_FILES
        if self.dry_run and not directory.is_dir():
            return choices[0]
        for name in choices:
            if (directory / name).exists():
                return name
        return None

    def apply(self, cgroups_path: str, class_name: str) -> list[tuple[Path, str]]:
        """Write `class_name`'s settings into the container's cgroup; the writes made."""
        cls = self.classes.get(class_name)
        if cls is None:
            known = ", ".join(sorted(self.classes)) or "(none configured)"
            raise ResmgrError(f"block I/O class {class_name!r}: expected one of {known}")
        directory = self.cgroup_dir(cgroups_path)
        if not self.dry_run and not directory.is_dir():
            raise ResmgrError(
                f"cgroup {directory} ({cgroups_path}): expected the runtime to have created "
                "it; found no such directory"
            )
        planned = plan_writes(cls, self.version, weight_file=self._weight_file(directory))
        writes = [(safe_join(directory, name), content) for name, content in planned]
        if not self.dry_run:
            for path, content in writes:
                _write_one(path, content)
        return writes
