"""CPU classes: named CPU frequency, governor, EPP, uncore and C-state settings.

Theory of operation: a CPU class is what nri-plugins calls one entry of a policy's
``cpuClasses`` list (`CPUClass`: ``name``, ``minFreq``, ``maxFreq``,
``energyPerformancePreference``, ``uncoreMinFreq``, ``uncoreMaxFreq``, ``freqGovernor``,
``disabledCstates``, ``turboPriority`` and their Intel SST/PCT keys), or one value of the
older ``control.cpu.classes`` mapping (class name -> the same settings without a name,
`CPUControlConfig`).  A policy names the CPUs of each class (the balloons policy: a
balloon type's ``cpuClass``, ``idleCPUClass`` for CPUs in no balloon); `CPUClassUse` is
that naming plus the definitions, the value a policy hands the shell after each decision.
The older mapping is the base and a policy's ``cpuClasses`` entry of the same name
replaces it (`merged_classes`, the one place the two meet).

Frequencies are kHz, the unit of cpufreq's sysfs files: a number, or a string with a unit
(``3.2GHz``, ``2900MHz``, ``800000kHz``, ``G``/``M``/``k``; a bare number is kHz), or one
of the symbols `FreqSymbol` ``min`` (``cpuinfo_min_freq``), ``base``
(``base_frequency``) and ``turbo`` (``cpuinfo_max_freq``), resolved per CPU when the
files are read (`nri_resmgr.control.cpuclass.plan`).  Unset keys leave their files
alone.  ``disabledCstates`` set (even to ``[]``) manages every C-state of the class's
CPUs: those listed are disabled, the others enabled; unset leaves the C-states alone.

Policies validate and hand out these values; the CPU class control
(`nri_resmgr.control.cpuclass`) applies them.  Nothing here does IO.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.validation import invalid

__all__ = [
    "NO_CPU_CLASSES",
    "CPUClass",
    "CPUClassSettings",
    "CPUClassUse",
    "CPUControlConfig",
    "FreqSymbol",
    "Frequency",
    "TurboDomain",
    "check_classes",
    "merged_classes",
    "parse_frequency",
]


class FreqSymbol(enum.StrEnum):
    """A frequency named by what the CPU offers, read from its cpufreq files."""

    MIN = "min"
    BASE = "base"
    TURBO = "turbo"


class TurboDomain(enum.StrEnum):
    """Where ``turboPriority`` classes compete for turbo: per package, or machine-wide."""

    PACKAGE = "package"
    SYSTEM = "system"


#: kHz, or a symbol resolved per CPU
Frequency = int | FreqSymbol

_FREQ = re.compile(r"(?i)^\s*([0-9]*\.?[0-9]+)\s*(ghz|g|mhz|m|khz|k)?\s*$")
_SCALE = {"ghz": 1_000_000, "g": 1_000_000, "mhz": 1000, "m": 1000, "khz": 1, "k": 1, "": 1}


def parse_frequency(value: object) -> Frequency | None:
    """`value` (a number of kHz, a string with a unit, or a symbol) as kHz or a symbol.

    None and ``""`` (and 0, nri-plugins' "unset") are None.  Raises ValueError saying
    what was expected.
    """
    if value is None or isinstance(value, FreqSymbol):
        return value
    if isinstance(value, bool):
        raise ValueError(f"frequency {value!r}: expected kHz, a unit or min/base/turbo")
    if isinstance(value, int | float):
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"frequency {value!r}: expected a non-negative number of kHz")
        return round(value) or None
    if not isinstance(value, str):
        raise ValueError(f"frequency {value!r}: expected a number or a string")
    text = value.strip()
    if not text:
        return None
    if text.lower() in FreqSymbol.__members__.values():
        return FreqSymbol(text.lower())
    m = _FREQ.match(text)
    if m is None:
        raise ValueError(
            f"frequency {value!r}: expected a number with an optional unit (GHz, MHz, kHz) "
            "or min, base, turbo"
        )
    khz = round(float(m.group(1)) * _SCALE[(m.group(2) or "").lower()])
    if khz == 0 and float(m.group(1)) > 0:
        raise ValueError(f"frequency {value!r}: below 1 kHz")
    return khz or None


FrequencyField = Annotated[Frequency | None, BeforeValidator(parse_frequency)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CPUClassSettings(_Model):
    """What a CPU class sets (``control.cpu.classes`` values; `CPUClass` adds the name)."""

    min_freq: FrequencyField = Field(default=None, alias="minFreq")
    max_freq: FrequencyField = Field(default=None, alias="maxFreq")
    energy_performance_preference: int | None = Field(
        default=None, ge=0, le=255, alias="energyPerformancePreference"
    )
    uncore_min_freq: FrequencyField = Field(default=None, alias="uncoreMinFreq")
    uncore_max_freq: FrequencyField = Field(default=None, alias="uncoreMaxFreq")
    freq_governor: str = Field(default="", alias="freqGovernor", pattern=r"^[A-Za-z0-9_-]*$")
    disabled_cstates: tuple[str, ...] | None = Field(default=None, alias="disabledCstates")
    turbo_priority: int = Field(default=0, ge=0, alias="turboPriority")

    def uncore_symbolic(self) -> bool:
        return isinstance(self.uncore_min_freq, FreqSymbol) or isinstance(
            self.uncore_max_freq, FreqSymbol
        )


class CPUClass(CPUClassSettings):
    """One entry of a policy's ``cpuClasses``."""

    name: str = Field(min_length=1)
    # Intel SST/PCT (priority core turbo): accepted, not implemented (NOT_IMPLEMENTED)
    pct_priority: str = Field(default="", alias="pctPriority", pattern=r"^(|high|low)$")
    sst_clos_id: int | None = Field(default=None, ge=0, alias="sstClosID")
    pct_min_freq: FrequencyField = Field(default=None, alias="pctMinFreq")
    pct_max_freq: FrequencyField = Field(default=None, alias="pctMaxFreq")
    publish_extended_resource: bool = Field(default=False, alias="publishExtendedResource")

    def settings(self) -> CPUClassSettings:
        return CPUClassSettings.model_validate(
            self.model_dump(include=set(CPUClassSettings.model_fields))
        )


class CPUControlConfig(_Model):
    """``control.cpu``: the older place of class definitions (name -> settings)."""

    classes: Mapping[str, CPUClassSettings] = Field(default_factory=dict)


def _check_pct(classes: Mapping[str, CPUClass], *, subject: str, path: str) -> None:
    """Their rules for the (otherwise unimplemented) SST/PCT keys, so that a
    configuration nri-plugins refuses is refused here too."""
    for c in classes.values():
        pct = c.pct_priority != ""
        problem = ""
        if pct and c.sst_clos_id is not None:
            problem = "pctPriority and sstClosID are mutually exclusive"
        elif (c.pct_min_freq is not None or c.pct_max_freq is not None) and not pct:
            problem = "pctMinFreq/pctMaxFreq need pctPriority (managed mode)"
        elif c.publish_extended_resource and not pct and c.sst_clos_id is None:
            problem = "publishExtendedResource needs pctPriority or sstClosID"
        if problem:
            raise invalid(subject, path, f"class {c.name!r}: {problem}")
    managed = sorted(c.name for c in classes.values() if c.pct_priority)
    assoc = sorted(c.name for c in classes.values() if c.sst_clos_id is not None)
    if managed and assoc:
        raise invalid(
            subject,
            path,
            f"classes {', '.join(managed)} (pctPriority) and {', '.join(assoc)} "
            "(sstClosID) mix managed and assoc-only PCT; expected one mode",
        )
    for prio in ("high", "low"):
        named = sorted(c.name for c in classes.values() if c.pct_priority == prio)
        if len(named) > 1:
            raise invalid(
                subject,
                path,
                f"classes {', '.join(named)} all have pctPriority {prio}; expected at most one",
            )


def check_classes(
    classes: Iterable[CPUClass], *, subject: str, path: str = "cpuClasses"
) -> dict[str, CPUClass]:
    """`classes` by name; a name given twice, min above max, an uncore symbol or SST/PCT
    keys that nri-plugins refuses together are `InvalidConfig` of `subject` at `path`."""
    out: dict[str, CPUClass] = {}
    for c in classes:
        if c.name in out:
            raise invalid(subject, path, f"class {c.name!r} is defined twice; expected once")
        for low, high, keys in (
            (c.min_freq, c.max_freq, "minFreq > maxFreq"),
            (c.uncore_min_freq, c.uncore_max_freq, "uncoreMinFreq > uncoreMaxFreq"),
        ):
            if isinstance(low, int) and isinstance(high, int) and low > high:
                raise invalid(
                    subject,
                    path,
                    f"class {c.name!r}: {keys} ({low} > {high} kHz); expected the minimum at "
                    "most the maximum",
                )
        if c.uncore_symbolic():
            raise invalid(
                subject,
                path,
                f"class {c.name!r}: uncoreMinFreq/uncoreMaxFreq are symbolic; expected kHz "
                "(the uncore has no min/base/turbo files)",
            )
        out[c.name] = c
    _check_pct(out, subject=subject, path=path)
    return out


def merged_classes(
    legacy: Mapping[str, CPUClassSettings], classes: Iterable[CPUClass]
) -> dict[str, CPUClassSettings]:
    """Class name -> settings: ``control.cpu.classes`` overridden by ``cpuClasses``."""
    out = dict(legacy)
    for c in classes:
        out[c.name] = c.settings()
    return out


@dataclass(frozen=True, slots=True)
class CPUClassUse:
    """What a policy asks of the CPU class control after a decision.

    `cpus`: class name -> its CPUs (disjoint); `managed`: every CPU the policy may
    set (its available CPUs; a managed CPU in no class gets its original values back,
    a CPU outside is never touched); `classes`: the policy's definitions (merged over the
    daemon's ``control.cpu.classes`` by the controller); `turbo_domain`: where
    ``turboPriority`` competes.
    """

    cpus: Mapping[str, CPUSet] = field(default_factory=dict)
    managed: CPUSet = field(default_factory=IDSet)
    classes: tuple[CPUClass, ...] = ()
    turbo_domain: TurboDomain = TurboDomain.PACKAGE

    def to_json(self) -> dict[str, str]:
        """Class name -> CPU list (for reports and the simulator)."""
        return {name: str(cpus) for name, cpus in sorted(self.cpus.items())}


#: what a policy without CPU classes asks: nothing (its files keep or get back originals)
NO_CPU_CLASSES = CPUClassUse()
