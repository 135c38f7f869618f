"""Synthetic cpufreq, cpuidle and uncore files for tests and the simulator.

Theory of operation: `CPUClassFiles` only reads and writes plain files under a root, so
the files a ``intel_pstate``/``intel_idle``/``intel_uncore_frequency`` machine has, laid
out under ``ROOT/sys/devices/system/cpu`` next to `topology.synthetic.write_sysfs`' own,
stand in for the kernel.  What the kernel does and a directory cannot (refusing a
minimum above the maximum, rounding to available frequencies, refusing EPP under the
performance governor, actually changing frequency) is not simulated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nri_resmgr.topology.model import Topology

__all__ = ["CPUFreqLayout", "write_cpu_class_tree"]


@dataclass(frozen=True, slots=True)
class CPUFreqLayout:
    """What each CPU offers; None leaves that file (or driver) out."""

    min_khz: int = 800_000
    base_khz: int | None = 2_900_000
    max_khz: int = 3_800_000
    governor: str = "powersave"
    epp: str | None = "balance_performance"
    cstates: tuple[str, ...] = ("POLL", "C1E", "C2", "C4", "C8")
    #: the uncore's initial (min, max) kHz, None: no intel_uncore_frequency
    uncore: tuple[int, int] | None = (800_000, 2_400_000)


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def write_cpu_class_tree(
    root: str | os.PathLike[str], topology: Topology, layout: CPUFreqLayout = CPUFreqLayout()
) -> Path:
    """Write the files under ``root/sys/devices/system/cpu``; returns that directory."""
    cpu_dir = Path(root) / "sys" / "devices" / "system" / "cpu"
    for c in topology.cpus.values():
        freq = cpu_dir / f"cpu{c.id}" / "cpufreq"
        _put(freq / "cpuinfo_min_freq", str(layout.min_khz))
        _put(freq / "cpuinfo_max_freq", str(layout.max_khz))
        if layout.base_khz is not None:
            _put(freq / "base_frequency", str(layout.base_khz))
        _put(freq / "scaling_min_freq", str(layout.min_khz))
        _put(freq / "scaling_max_freq", str(layout.max_khz))
        _put(freq / "scaling_governor", layout.governor)
        _put(freq / "scaling_available_governors", "performance powersave")
        if layout.epp is not None:
            _put(freq / "energy_performance_preference", layout.epp)
        for index, name in enumerate(layout.cstates):
            state = cpu_dir / f"cpu{c.id}" / "cpuidle" / f"state{index}"
            _put(state / "name", name)
            _put(state / "disable", "0")
    if layout.uncore is not None:
        dies = sorted({(c.package_id, c.die_id) for c in topology.cpus.values()})
        local: dict[int, int] = {}
        for pkg, _die in dies:
            die = local[pkg] = local.get(pkg, -1) + 1
            d = cpu_dir / "intel_uncore_frequency" / f"package_{pkg:02d}_die_{die:02d}"
            lo, hi = layout.uncore
            for name, value in (
                ("initial_min_freq_khz", lo),
                ("initial_max_freq_khz", hi),
                ("min_freq_khz", lo),
                ("max_freq_khz", hi),
            ):
                _put(d / name, str(value))
    return cpu_dir
