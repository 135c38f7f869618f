"""CPU priority: which CPUs a container prefers (P- and E-cores), and whether a pool has them.

Theory of operation: nri-plugins sorts CPUs into three priority classes and lets a
Guaranteed container ask for one with ``prefer-cpu-priority.resource-policy.nri.io``
(``high``, ``normal``, ``low``, or ``default`` = the policy default, which is ``none``:
no preference).  Here the classes come from the core types discovery reads
(`CPU.core_type`, sysfs ``cpu_core``/``cpu_atom``):

=========  ==========================================  =================================
class      hybrid machine (some E-cores)               other machines
=========  ==========================================  =================================
high       the P-cores                                 none (see below)
normal     every CPU that is not an E-core             every CPU
low        the E-cores                                 none
=========  ==========================================  =================================

nri-plugins also ranks CPUs of non-hybrid machines by Intel SST-BF/CP or by the cpufreq
base frequency and energy-performance preference (``base_frequency``,
``energy_performance_preference``).  Our topology model does not carry those figures, so
on such machines every CPU is ``normal`` and a ``high`` or ``low`` preference is met by
no pool: it changes nothing, as it does in nri-plugins on a machine without SST or
frequency bins.

A priority acts twice, as in nri-plugins:

- **where** (`priority_unmet`, a component of the pool sort key in `scoring`): a pool
  whose free shared CPUs of the class cannot hold the request loses to one that can.
  ``high`` and ``low`` count before the pool depth, ``normal`` after it;
- **which CPUs**: the CPU allocator (`nri_resmgr.policy.cpu_allocator`, their
  ``cmpCPUSet``) ranks packages, cores and threads by their CPUs of the class, and on a
  hybrid machine skips the cache groups of the other core kind.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nri_resmgr.limits import shown
from nri_resmgr.model import ANNOTATION_DOMAIN, AnnotationError, ContainerInfo
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.model import CoreType, Topology

__all__ = [
    "PREFER_CPU_PRIORITY",
    "CPUPriority",
    "PriorityCPUs",
    "parse_cpu_priority",
    "priority_cpus",
    "priority_unmet",
]

PREFER_CPU_PRIORITY = f"prefer-cpu-priority.{ANNOTATION_DOMAIN}"


class CPUPriority(enum.StrEnum):
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"
    #: no preference (nri-plugins' default ``defaultCPUPriority``)
    NONE = "none"


@dataclass(frozen=True, slots=True)
class PriorityCPUs:
    """The CPUs of each priority class of one machine (module docstring)."""

    high: CPUSet
    normal: CPUSet
    low: CPUSet
    #: the machine has both P- and E-cores
    hybrid: bool

    def of(self, priority: CPUPriority) -> CPUSet:
        """The CPUs of `priority` (empty for NONE)."""
        if priority is CPUPriority.HIGH:
            return self.high
        if priority is CPUPriority.NORMAL:
            return self.normal
        if priority is CPUPriority.LOW:
            return self.low
        return IDSet()


def priority_cpus(topology: Topology) -> PriorityCPUs:
    """The priority classes of `topology`'s online CPUs."""
    efficient = topology.core_type_cpus(CoreType.EFFICIENT)
    online = topology.online_cpus()
    if not efficient:
        return PriorityCPUs(high=IDSet(), normal=online, low=IDSet(), hybrid=False)
    return PriorityCPUs(
        high=topology.core_type_cpus(CoreType.PERFORMANCE),
        normal=online - efficient,
        low=efficient,
        hybrid=True,
    )


def parse_cpu_priority(container: ContainerInfo, default: CPUPriority) -> CPUPriority:
    """The effective ``prefer-cpu-priority`` of `container` (``default`` = `default`)."""
    raw = container.annotation(PREFER_CPU_PRIORITY)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word == "default":
        return default
    try:
        return CPUPriority(word)
    except ValueError:
        found = shown(raw, quote='"')
        raise AnnotationError(
            f"{container.pretty}: annotation {PREFER_CPU_PRIORITY} has value {found}; "
            f"expected one of high, normal, low, default"
        ) from None


def priority_unmet(
    priority: CPUPriority, classes: PriorityCPUs, shared: CPUSet, *, full: int, milli: int
) -> bool:
    """Whether `shared` (a pool's free shared CPUs) lacks room for a request of `priority`.

    nri-plugins' ``PrioCapacity``: 1000 x the class's CPUs among the free shared ones,
    minus the request (`full` whole CPUs and `milli` millicores, at least 1m), must not
    be negative.  NONE is never unmet.
    """
    if priority is CPUPriority.NONE:
        return False
    return 1000 * len(classes.of(priority) & shared) < max(1000 * full + milli, 1)
