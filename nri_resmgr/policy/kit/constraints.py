"""Constraints every placement policy reads the same way: available and reserved CPUs,
the namespaces always reserved, the CPU class names a configuration refers to, and the
memory near a set of CPUs.

Theory of operation: nri-plugins' policies share one constraints type (``cpu:`` of
``availableResources`` and ``reservedResources``) and so do ours.  Each function takes
the raw value from a validated configuration model and the policy's `subject`
(``policy balloons``), and a problem is an `InvalidConfig` at the key's path
(``availableResources.cpu``), so ``validate-config`` reports it under
``policyConfig.availableResources.cpu`` without reading the message.

* `cpuset_option`: ``cpuset:LIST`` (those of `base`) or ``exclude-cpuset:LIST`` (`base`
  without them); None for any other text;
* `available_cpus`: ``availableResources.cpu``, the online CPUs by default; it must be
  one of the two forms above and leave some online CPU;
* `required_cpu`: ``reservedResources.cpu`` where a policy requires it;
* `reserved_namespaces`: `ALWAYS_RESERVED_NAMESPACES` and the configured ones;
* `check_cpu_class_names`: every CPU class a pool or a type names is defined;
* `dram_near`: the DRAM nodes closest to CPUs (a node without DRAM stands for itself).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from nri_resmgr.model import MemoryKind
from nri_resmgr.policy.common import parse_cpu_list
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import invalid

__all__ = [
    "ALWAYS_RESERVED_NAMESPACES",
    "AVAILABLE_CPU",
    "RESERVED_CPU",
    "available_cpus",
    "check_cpu_class_names",
    "cpuset_option",
    "dram_near",
    "required_cpu",
    "reserved_namespaces",
]

#: namespaces whose containers always run on reserved CPUs (nri-plugins' rule)
ALWAYS_RESERVED_NAMESPACES = ("kube-system",)
AVAILABLE_CPU = "availableResources.cpu"
RESERVED_CPU = "reservedResources.cpu"
_FORMS = ("exclude-cpuset:", "cpuset:")


def cpuset_option(text: str, base: CPUSet, *, subject: str, path: str) -> CPUSet | None:
    """``cpuset:LIST`` -> `base` & LIST, ``exclude-cpuset:LIST`` -> `base` - LIST, other
    text -> None; a bad LIST is `InvalidConfig` at `path`, one problem per element."""
    for prefix in _FORMS:
        if text.startswith(prefix):
            cpus = parse_cpu_list(text[len(prefix) :], subject=subject, path=path)
            return base - cpus if prefix == "exclude-cpuset:" else base & cpus
    return None


def available_cpus(online: CPUSet, raw: str | int | float | None, *, subject: str) -> CPUSet:
    """The CPUs ``availableResources.cpu`` (`raw`) leaves of `online` (all when unset)."""
    if raw is None:
        return online
    text = str(raw).strip()
    got = cpuset_option(text, online, subject=subject, path=AVAILABLE_CPU)
    if got is None:
        raise invalid(
            subject, AVAILABLE_CPU, f"expected cpuset:LIST or exclude-cpuset:LIST, found {text!r}"
        )
    if not got:
        raise invalid(
            subject, AVAILABLE_CPU, f"{text!r} leaves no online CPU; online CPUs are {online}"
        )
    return got


def required_cpu(raw: str | int | float | None, *, subject: str) -> str | int | float:
    """``reservedResources.cpu`` (`raw`) where the policy requires it."""
    if raw is None:
        raise invalid(
            subject,
            RESERVED_CPU,
            "expected a quantity such as 750m or cpuset:0-1 (required), found none",
        )
    return raw


def reserved_namespaces(configured: Iterable[str]) -> tuple[str, ...]:
    """The namespaces whose containers run on reserved CPUs."""
    return ALWAYS_RESERVED_NAMESPACES + tuple(configured)


def check_cpu_class_names(
    defined: Collection[str], uses: Iterable[tuple[str, str]], *, subject: str
) -> None:
    """Every ``(path, name)`` of `uses` with a name names a class of `defined`."""
    known = ", ".join(sorted(defined)) or "none defined"
    for path, name in uses:
        if name and name not in defined:
            raise invalid(
                subject, path, f"CPU class {name!r} is not in cpuClasses; expected one of {known}"
            )


def dram_near(topology: Topology, cpus: CPUSet) -> NodeSet:
    """The DRAM nodes nearest to the nodes of `cpus` (a node without any, itself)."""
    out: set[int] = set()
    for node in topology.nodes_of(cpus):
        near = topology.memory_nodes_near(node, (MemoryKind.DRAM,))
        out |= near.ids() or {node}
    return IDSet(out)
