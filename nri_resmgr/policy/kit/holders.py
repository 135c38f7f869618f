"""Exclusive CPUs held by a policy's containers, counted so that a release costs its CPUs.

Theory of operation: a state keeps the union of its containers' exclusive CPUs (the CPUs
no shared pool may use) next to a persistent map (`immutables.Map`) counting the
containers holding each of them.  Adding a container's CPUs (`hold`, sign 1) or dropping
them (sign -1) changes the counts of those CPUs only, and a CPU leaves the union when
its count drops to zero: the union is kept exact without walking the other containers,
even in a broken state where two containers hold one CPU (dropping one of them must not
free it).  `holders_of` derives the counts from scratch, for a state built at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from immutables import Map

from nri_resmgr.topology.cpuset import CPUSet, IDSet

__all__ = ["Holders", "hold", "holders_of"]

#: CPU -> how many containers hold it exclusively (CPUs held at least once only)
Holders = Map[int, int]


def holders_of(held: Iterable[CPUSet]) -> Holders:
    """The counts of every CPU in `held` (one set per container)."""
    counts: dict[int, int] = {}
    for cpus in held:
        for cpu in cpus:
            counts[cpu] = counts.get(cpu, 0) + 1
    return Map(counts)


def hold(used: CPUSet, holders: Holders, cpus: CPUSet, sign: int) -> tuple[CPUSet, Holders]:
    """``used`` and ``holders`` with `cpus` held once more (sign 1) or once less (-1)."""
    freed = []
    m = holders.mutate()
    for cpu in cpus:
        count = m.get(cpu, 0) + sign
        if count > 0:
            m[cpu] = count
        else:
            m.pop(cpu, None)
            freed.append(cpu)
    holders = m.finish()
    if sign > 0:
        return used | cpus, holders
    return (used - IDSet(freed) if freed else used), holders
