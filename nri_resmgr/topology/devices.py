"""Device locality from sysfs: the topology hints of the devices and mounts a container gets.

Theory of operation
-------------------
A container's devices arrive in CreateContainer as NRI ``LinuxDevice``\\ s (type ``c`` or
``b``, major, minor); its mounts as host source paths.  Each is resolved to a directory
under ``ROOT/sys/devices`` and the first directory on the way up to the root that tells
its locality gives the hint (nri-plugins' rules):

* a device: ``ROOT/sys/dev/{char,block}/MAJOR:MINOR`` is a symlink to the device's
  directory (a PCI function's ``.../0000:3b:00.0/nvme/nvme0/nvme0n1``, say);
* a mount whose source is under ``/sys/``: that sysfs path itself;
* any other mount: the block device holding the source (``stat``: ``st_rdev`` of a device
  node, else ``st_dev`` of the file system), then as a device.  Read-only mounts, and
  sources or destinations under ``/etc/``, ``/lib/``, ``/lib64/``, ``/usr/lib*/`` or
  ``/dev/termination-log`` (host libraries, small config files) give no hint;
* walking up, ``local_cpulist`` gives CPUs and ``numa_node`` a NUMA node (``-1``: not
  NUMA-aware, ignored); the first directory with either is the provider;
* a block device built on others (RAID, device mapper) adds the hints of its
  ``slaves/`` too.

Nothing here fails a container: a device or mount that does not resolve gives no hint.
The only IO is reading under `root` (and `stat`, injectable for tests).
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from nri_resmgr.model import DeviceRef, HintSource, MountRef, TopologyHint
from nri_resmgr.topology.cpuset import IDSet, IDSetError

__all__ = ["IGNORED_MOUNT_PREFIXES", "StatResult", "device_hints", "topology_hints"]

#: mounts under these (source or destination) are not performance-relevant
IGNORED_MOUNT_PREFIXES = (
    "/.nri-resource-policy",
    "/etc/",
    "/dev/termination-log",
    "/lib/",
    "/lib64/",
    "/usr/lib/",
    "/usr/lib32/",
    "/usr/lib64/",
)
#: at most this many directories are walked up from a device, and slaves followed
_MAX_DEPTH = 64
_MAX_SLAVES = 64


class StatResult(Protocol):
    @property
    def st_mode(self) -> int: ...
    @property
    def st_dev(self) -> int: ...
    @property
    def st_rdev(self) -> int: ...


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _hint_at(directory: Path, *, sys_root: Path, source: HintSource) -> TopologyHint | None:
    cpus = IDSet()
    nodes = IDSet()
    text = _read(directory / "local_cpulist")
    if text:
        try:
            cpus = IDSet.parse(text)
        except IDSetError:
            cpus = IDSet()
    text = _read(directory / "numa_node")
    if text and text != "-1":
        try:
            node = int(text)
        except ValueError:
            node = -1
        if node >= 0:
            nodes = IDSet([node])
    if not cpus and not nodes:
        return None
    provider = "/" + str(directory.relative_to(sys_root.parent))
    return TopologyHint(provider=provider, source=source, cpus=cpus, nodes=nodes)


def _hints_of_sysfs_dir(
    real: Path, *, sys_root: Path, source: HintSource, depth: int = 0
) -> list[TopologyHint]:
    devices = sys_root / "devices"
    out: list[TopologyHint] = []
    p = real
    for _ in range(_MAX_DEPTH):
        if p == devices or devices not in p.parents:
            break
        hint = _hint_at(p, sys_root=sys_root, source=source)
        if hint is not None:
            out.append(hint)
            break
        p = p.parent
    if depth < 2:
        slaves = real / "slaves"
        try:
            entries = sorted(slaves.iterdir())[:_MAX_SLAVES] if slaves.is_dir() else []
        except OSError:
            entries = []
        for entry in entries:
            out.extend(
                _hints_of_sysfs_dir(
                    entry.resolve(), sys_root=sys_root, source=source, depth=depth + 1
                )
            )
    return out


def device_hints(
    root: Path | str, *, kind: str, major: int, minor: int, source: HintSource
) -> list[TopologyHint]:
    """The hints of device ``kind`` (``c``/``b``) ``major:minor`` under ``root/sys``."""
    sys_root = Path(root) / "sys"
    sub = {"c": "char", "b": "block"}.get(kind)
    if sub is None or major <= 0:
        return []
    link = sys_root / "dev" / sub / f"{major}:{minor}"
    try:
        real = link.resolve(strict=True)
    except OSError:
        return []
    return _hints_of_sysfs_dir(real, sys_root=sys_root, source=source)


def _mount_hints(
    root: Path, mount: MountRef, stat: Callable[[str], StatResult]
) -> list[TopologyHint]:
    if mount.read_only:
        return []
    for prefix in IGNORED_MOUNT_PREFIXES:
        if mount.source.startswith(prefix) or mount.destination.startswith(prefix):
            return []
    if mount.source.startswith("/sys/"):
        sys_root = root / "sys"
        try:
            real = (root / mount.source.lstrip("/")).resolve(strict=True)
        except OSError:
            return []
        return _hints_of_sysfs_dir(real, sys_root=sys_root, source=HintSource.MOUNTS)
    try:
        st = stat(mount.source)
    except OSError:
        return []
    if stat_mod.S_ISCHR(st.st_mode) or stat_mod.S_ISBLK(st.st_mode):
        kind = "c" if stat_mod.S_ISCHR(st.st_mode) else "b"
        number = st.st_rdev
    else:
        kind, number = "b", st.st_dev
    return device_hints(
        root,
        kind=kind,
        major=os.major(number),
        minor=os.minor(number),
        source=HintSource.MOUNTS,
    )


def topology_hints(
    root: Path | str,
    *,
    devices: Iterable[DeviceRef] = (),
    mounts: Iterable[MountRef] = (),
    stat: Callable[[str], StatResult] = os.stat,
) -> tuple[TopologyHint, ...]:
    """The hints of a container's `devices` and `mounts` (module docstring), one per
    provider, first seen first."""
    base = Path(root)
    found: dict[str, TopologyHint] = {}
    for d in devices:
        for h in device_hints(
            base, kind=d.type, major=d.major, minor=d.minor, source=HintSource.DEVICES
        ):
            found.setdefault(h.provider, h)
    for m in mounts:
        for h in _mount_hints(base, m, stat):
            found.setdefault(h.provider, h)
    return tuple(found.values())
