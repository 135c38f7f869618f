"""The pod annotations more than one policy reads: their keys and their one parser each.

Theory of operation: nri-plugins' policies share their annotation names (all under
``resource-policy.nri.io``) and so do ours; a key is defined here once, and a policy
that reads it imports it from here, never from another policy.  Each key is the
effective one (`ContainerInfo.annotation` resolves the ``/container.NAME`` and ``/pod``
forms).  A malformed value is an `AnnotationError` naming the container, the annotation
and the accepted values (nri-plugins logs it and carries on with a default).
"""

from __future__ import annotations

from nri_resmgr.model import ANNOTATION_DOMAIN, AnnotationError, ContainerInfo, MemoryKind

__all__ = [
    "ALL_MEMORY",
    "CPU_CLASS",
    "CPU_PRESERVE",
    "HIDE_HYPERTHREADS",
    "MEMORY_PRESERVE",
    "MEMORY_TYPE",
    "PREFER_ISOLATED",
    "PREFER_RESERVED",
    "PREFER_SHARED",
    "REQUIRE_ISOLATED",
    "UNLIMITED_BURSTABLE",
    "parse_memory_types",
]

PREFER_ISOLATED = f"prefer-isolated-cpus.{ANNOTATION_DOMAIN}"
PREFER_SHARED = f"prefer-shared-cpus.{ANNOTATION_DOMAIN}"
REQUIRE_ISOLATED = f"require-isolated-cpus.{ANNOTATION_DOMAIN}"
PREFER_RESERVED = f"prefer-reserved-cpus.{ANNOTATION_DOMAIN}"
HIDE_HYPERTHREADS = f"hide-hyperthreads.{ANNOTATION_DOMAIN}"
CPU_PRESERVE = f"cpu.preserve.{ANNOTATION_DOMAIN}"
MEMORY_PRESERVE = f"memory.preserve.{ANNOTATION_DOMAIN}"
MEMORY_TYPE = f"memory-type.{ANNOTATION_DOMAIN}"
UNLIMITED_BURSTABLE = f"unlimited-burstable.{ANNOTATION_DOMAIN}"
CPU_CLASS = f"cpu-class.{ANNOTATION_DOMAIN}"

ALL_MEMORY = frozenset({MemoryKind.DRAM, MemoryKind.PMEM, MemoryKind.HBM})
_MEMORY_WORDS = {
    "dram": frozenset({MemoryKind.DRAM}),
    "pmem": frozenset({MemoryKind.PMEM}),
    "hbm": frozenset({MemoryKind.HBM}),
    "mixed": ALL_MEMORY,
}


def parse_memory_types(container: ContainerInfo) -> frozenset[MemoryKind] | None:
    """The ``memory-type`` annotation as a set of kinds, or None when absent."""
    raw = container.annotation(MEMORY_TYPE)
    if raw is None or not raw.strip():
        return None
    kinds: set[MemoryKind] = set()
    for word in raw.split(","):
        w = word.strip().lower()
        if w not in _MEMORY_WORDS:
            raise AnnotationError(
                f'{container.pretty}: annotation {MEMORY_TYPE} has unknown type "{w}"; '
                f"expected one of dram, pmem, hbm, mixed"
            )
        kinds |= _MEMORY_WORDS[w]
    return frozenset(kinds)
