"""The synthetic host root both plugins of a differential run read their machine from.

`host_root(machine, dir)` writes (or unpacks) a sysfs tree under ``dir`` and completes it
with what nri-plugins insists on and our discovery leaves out, so that nri-plugins'
``--host-root`` and our ``--sysfs-root`` see one machine:

* cache ``size`` and geometry files (their sysfs discovery fails on a cache without them;
  `write_sysfs` does not write them, real snapshots have them);
* ``proc/interrupts`` (their balloons plugin reads it at start-up and refuses to run
  without it); a header line only: no interrupt to move.
"""

from __future__ import annotations

import threading
from pathlib import Path

from nri_resmgr.topology.load import extract_archive
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import write_sysfs

__all__ = ["HostRoots", "complete_sysfs", "host_root"]

#: cache (level, type) -> size written where a tree has none
CACHE_SIZES = {
    ("1", "Data"): "48K",
    ("1", "Instruction"): "32K",
    ("2", "Unified"): "2048K",
    ("3", "Unified"): "107520K",
}
#: the cache geometry files nri-plugins reads, with the value written where one is missing
CACHE_GEOMETRY = {
    "ways_of_associativity": "12",
    "coherency_line_size": "64",
    "number_of_sets": "64",
    "physical_line_partition": "1",
}


def complete_sysfs(root: Path) -> None:
    """Add the cache files nri-plugins' sysfs discovery insists on where `root` lacks them,
    and a ``proc/interrupts`` without interrupts."""
    for cache in root.glob("sys/devices/system/cpu/cpu*/cache/index*"):
        key = ((cache / "level").read_text().strip(), (cache / "type").read_text().strip())
        files = {"size": CACHE_SIZES.get(key, "32K"), **CACHE_GEOMETRY}
        for name, value in files.items():
            if not (cache / name).exists():
                (cache / name).write_text(value + "\n")
    interrupts = root / "proc" / "interrupts"
    if not interrupts.exists():
        interrupts.parent.mkdir(parents=True, exist_ok=True)
        online = (root / "sys" / "devices" / "system" / "cpu" / "online").read_text()
        count = _count(online)
        interrupts.write_text(" " * 11 + "".join(f"CPU{i:<8}" for i in range(count)) + "\n")


def _count(cpu_list: str) -> int:
    """The highest CPU id of a kernel list plus one (the columns of /proc/interrupts)."""
    top = 0
    for part in cpu_list.strip().split(","):
        if part:
            top = max(top, int(part.split("-")[-1]))
    return top + 1


def host_root(machine: Topology | Path, dest: Path) -> Path:
    """Write `machine` (a topology, or a sysfs snapshot archive) as a host root under
    `dest`; return the root (the directory holding ``sys/`` and ``proc/``)."""
    if isinstance(machine, Path):
        # the files our discovery reads are enough for theirs too (placements identical to
        # those on the whole snapshot), and a third as many to write and delete
        root = extract_archive(machine, dest)
    else:
        write_sysfs(machine, dest)
        root = dest
    complete_sysfs(root)
    return root


class HostRoots:
    """Host roots written once per machine under `base` and shared by the cases of a run
    (both plugins only read them)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.roots: dict[str, Path] = {}
        self.lock = threading.Lock()

    def get(self, name: str, machine: Topology | Path) -> Path:
        with self.lock:
            if name not in self.roots:
                dest = self.base / f"host-{len(self.roots)}"
                self.roots[name] = host_root(machine, dest)
            return self.roots[name]
