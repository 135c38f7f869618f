"""Planning CPU class sysfs writes: from classes and CPUs to the files that must change.

Theory of operation: `desired_values` turns a policy's `CPUClassUse` (class -> CPUs),
the class definitions and what each CPU offers (`CPUFacts`, read from sysfs by the
controller) into the value every managed file should hold (`Setting`, keyed by its path
relative to ``sys/devices/system/cpu``):

- ``cpuN/cpufreq/scaling_min_freq`` / ``scaling_max_freq`` (``minFreq``/``maxFreq``;
  ``min``, ``base`` and ``turbo`` become the CPU's ``cpuinfo_min_freq``,
  ``base_frequency`` and ``cpuinfo_max_freq``), ``scaling_governor``
  (``freqGovernor``), ``energy_performance_preference``;
- ``cpuN/cpuidle/stateK/disable``: for a class that sets ``disabledCstates``, ``1`` for
  the states named there and ``0`` for every other state of the CPU;
- ``intel_uncore_frequency/package_PP_die_DD/{min,max}_freq_khz``: the highest
  ``uncoreMinFreq``/``uncoreMaxFreq`` of the classes with CPUs on that die.

Turbo priority: within a turbo domain (a package, or the whole machine), among the
classes with CPUs there, only those with the highest ``turboPriority`` get ``turbo`` as
the turbo frequency when that priority is above 0; the others get ``base`` instead.

`plan_writes` compares the desired values with the files' current contents and the
*originals* (the value each file held before the first write to it): a file whose value
differs is written; a file written before that is no longer desired (its CPU left every
class, or the class stopped setting it) gets its original back and leaves the originals.
Planning with nothing desired is the restore at shutdown.  Min and max frequency writes
of one CPU (or one die) are ordered so that min <= max holds after each write.

Nothing here does IO: `nri_resmgr.control.cpuclass.files` reads and writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nri_resmgr.policy.cpu_classes import (
    CPUClassSettings,
    CPUClassUse,
    FreqSymbol,
    Frequency,
    TurboDomain,
)

__all__ = [
    "CPUFacts",
    "Plan",
    "Setting",
    "Write",
    "cpufreq_path",
    "cpuidle_path",
    "desired_values",
    "is_class_file",
    "plan_writes",
    "uncore_path",
    "undefined_classes",
]

RESTORE = "(original)"


@dataclass(frozen=True, slots=True)
class CPUFacts:
    """What a CPU offers, read from sysfs (None: the file is missing)."""

    cpu: int
    package: int = 0
    die: int = 0
    min_khz: int | None = None  # cpufreq/cpuinfo_min_freq
    base_khz: int | None = None  # cpufreq/base_frequency
    max_khz: int | None = None  # cpufreq/cpuinfo_max_freq
    #: (state index, name) of cpuidle/stateK/name
    cstates: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Setting:
    """The value a file should hold, and the class that wants it."""

    value: str
    cls: str


@dataclass(frozen=True, slots=True)
class Write:
    """One file write; `cls` is the class, or ``(original)`` for a restore."""

    path: str
    value: str
    cls: str


@dataclass(frozen=True, slots=True)
class Plan:
    writes: tuple[Write, ...]
    #: the originals after the writes: every file written and still desired
    originals: Mapping[str, str]
    #: files that are desired but could not be read (missing): named, never written
    missing: tuple[str, ...]


#: every file a plan may name (relative to ``sys/devices/system/cpu``), and its values: what
#: a record read back from disk is checked against before anything is written from it
_CLASS_FILE = re.compile(
    r"cpu[0-9]{1,5}/cpufreq/(scaling_min_freq|scaling_max_freq|scaling_governor"
    r"|energy_performance_preference)"
    r"|cpu[0-9]{1,5}/cpuidle/state[0-9]{1,3}/disable"
    r"|intel_uncore_frequency/package_[0-9]{2,4}_die_[0-9]{2,4}/(min|max)_freq_khz"
)
_CLASS_VALUE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_class_file(path: str, value: str) -> bool:
    """Whether `path` is a file a plan may write and `value` a value such a file holds."""
    return _CLASS_FILE.fullmatch(path) is not None and _CLASS_VALUE.fullmatch(value) is not None


def cpufreq_path(cpu: int, name: str) -> str:
    return f"cpu{cpu}/cpufreq/{name}"


def cpuidle_path(cpu: int, state: int) -> str:
    return f"cpu{cpu}/cpuidle/state{state}/disable"


def uncore_path(package: int, die: int, name: str) -> str:
    return f"intel_uncore_frequency/package_{package:02d}_die_{die:02d}/{name}"


def _turbo_domain(f: CPUFacts, domain: TurboDomain) -> int:
    """The turbo domain `f`'s CPU competes in: its package, or the one machine-wide."""
    return f.package if domain is TurboDomain.PACKAGE else 0


def _turbo_winners(
    cpu_class: Mapping[int, str],
    classes: Mapping[str, CPUClassSettings],
    facts: Mapping[int, CPUFacts],
    domain: TurboDomain,
) -> dict[int, frozenset[str]]:
    """Turbo domain -> the classes that get real turbo there."""
    active: dict[int, set[str]] = {}
    for cpu, name in cpu_class.items():
        active.setdefault(_turbo_domain(facts[cpu], domain), set()).add(name)
    out: dict[int, frozenset[str]] = {}
    for key, names in active.items():
        top = max(classes[n].turbo_priority for n in names)
        out[key] = frozenset(n for n in names if top == 0 or classes[n].turbo_priority == top)
    return out


def _resolve(freq: Frequency, f: CPUFacts, *, turbo: bool) -> int | None:
    if isinstance(freq, int):
        return freq
    if freq is FreqSymbol.MIN:
        return f.min_khz
    if freq is FreqSymbol.BASE or not turbo:
        return f.base_khz
    return f.max_khz


def undefined_classes(use: CPUClassUse, classes: Mapping[str, CPUClassSettings]) -> list[str]:
    """A problem for each class of `use` without a definition (its CPUs are left alone)."""
    return [
        f"CPU class {name!r} (CPUs {cpus}) is defined in neither cpuClasses nor "
        "control.cpu.classes; its CPUs are left as they were"
        for name, cpus in sorted(use.cpus.items())
        if name not in classes
    ]


def desired_values(
    use: CPUClassUse,
    classes: Mapping[str, CPUClassSettings],
    facts: Mapping[int, CPUFacts],
) -> tuple[dict[str, Setting], list[str]]:
    """Path -> the `Setting` it should hold, and problems (each naming class and CPU).

    Only CPUs in ``use.managed`` with `facts` are set.  A class with no definition, or
    a symbolic frequency whose file a CPU lacks, is a problem; its files are left out.
    """
    problems = undefined_classes(use, classes)
    cpu_class: dict[int, str] = {}
    for name, cpus in sorted(use.cpus.items()):
        if name not in classes:
            continue
        for cpu in cpus & use.managed:
            if cpu in facts:
                cpu_class[cpu] = name
    winners = _turbo_winners(cpu_class, classes, facts, use.turbo_domain)
    out: dict[str, Setting] = {}
    dies: dict[tuple[int, int], set[str]] = {}
    for cpu, name in sorted(cpu_class.items()):
        c, f = classes[name], facts[cpu]
        dies.setdefault((f.package, f.die), set()).add(name)
        turbo = name in winners[_turbo_domain(f, use.turbo_domain)]
        for key, freq in (("scaling_min_freq", c.min_freq), ("scaling_max_freq", c.max_freq)):
            if freq is None:
                continue
            khz = _resolve(freq, f, turbo=turbo)
            if khz is None:
                problems.append(
                    f"CPU class {name!r}: cpu{cpu}: {freq} frequency unknown (its cpufreq "
                    "file is missing); not set"
                )
                continue
            out[cpufreq_path(cpu, key)] = Setting(str(khz), name)
        if c.freq_governor:
            out[cpufreq_path(cpu, "scaling_governor")] = Setting(c.freq_governor, name)
        if c.energy_performance_preference is not None:
            out[cpufreq_path(cpu, "energy_performance_preference")] = Setting(
                str(c.energy_performance_preference), name
            )
        if c.disabled_cstates is not None:
            off = set(c.disabled_cstates)
            for index, state in f.cstates:
                out[cpuidle_path(cpu, index)] = Setting("1" if state in off else "0", name)
    for (pkg, die), names in sorted(dies.items()):
        for key, attr in (("min_freq_khz", "uncore_min_freq"), ("max_freq_khz", "uncore_max_freq")):
            best: tuple[int, str] | None = None
            for n in sorted(names):
                v = getattr(classes[n], attr)
                if isinstance(v, int) and (best is None or v > best[0]):
                    best = (v, n)
            if best is not None:
                out[uncore_path(pkg, die, key)] = Setting(str(best[0]), best[1])
    return out, problems


#: (minimum, maximum) file names kept min <= max across writes
_PAIRS = (("scaling_min_freq", "scaling_max_freq"), ("min_freq_khz", "max_freq_khz"))


def _write_order(w: Write, current: Mapping[str, str]) -> tuple[str, int, str]:
    """Sort key: files by directory; a minimum before its maximum, unless the new
    minimum is above the current maximum (then the maximum goes first)."""
    head, _, leaf = w.path.rpartition("/")
    for low, high in _PAIRS:
        if leaf == high:
            return (head, 1, leaf)
        if leaf == low:
            new, top = _int(w.value), _int(current.get(f"{head}/{high}"))
            return (head, 2 if new is not None and top is not None and new > top else 0, leaf)
    return (head, 0, leaf)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def plan_writes(
    desired: Mapping[str, Setting],
    current: Mapping[str, str],
    originals: Mapping[str, str],
) -> Plan:
    """The writes taking `current` to `desired`, restoring what is no longer desired.

    `current` holds every readable file of `desired` and `originals` (a missing key is a
    missing file); `originals` is the previous plan's.
    """
    writes: list[Write] = []
    kept: dict[str, str] = {}
    missing: list[str] = []
    for path, want in sorted(desired.items()):
        now = current.get(path)
        if now is None:
            missing.append(path)
            continue
        kept[path] = originals.get(path, now)
        if now != want.value:
            writes.append(Write(path, want.value, want.cls))
    for path, original in sorted(originals.items()):
        if path in desired:
            continue
        now = current.get(path)
        if now is not None and now != original:
            writes.append(Write(path, original, RESTORE))
    writes.sort(key=lambda w: _write_order(w, current))
    return Plan(tuple(writes), kept, tuple(missing))


def paths_to_read(desired: Iterable[str], originals: Iterable[str]) -> list[str]:
    """Every file `plan_writes` needs the current value of."""
    return sorted(set(desired) | set(originals))
