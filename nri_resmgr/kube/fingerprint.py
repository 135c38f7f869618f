"""The pods fingerprint of a NodeResourceTopology object (``pfp0v001...``).

Theory of operation: a NUMA-aware scheduler keeps its own account of what it sent to a
node and trusts the node's report only when the report was made with the same pods in
place.  node-feature-discovery's topology updater tells it which pods a report counts
with the attribute ``nodeTopologyPodsFingerprint`` (and how they were chosen with
``nodeTopologyPodsFingerprintMethod``); scheduler-plugins' NodeResourceTopology cache
recomputes the fingerprint of the pods it knows on the node and compares.  The
algorithm is k8stopologyawareschedwg/podfingerprint's (version ``v001``):

1. each pod (namespace, name) hashes to ``XXH64(name, seed=XXH64(namespace, seed=0))``;
2. the 64-bit hashes are sorted as unsigned integers, so the order pods are named in does
   not matter (a pod named twice counts twice, as theirs does);
3. the sorted hashes, each as 8 little-endian bytes, are hashed with ``XXH64(seed=0)``;
4. the fingerprint is ``"pfp0" + "v001"`` and that digest as 16 lowercase hex digits
   (big-endian, as their ``Sum`` appends it).

XXH64 is written out here (Yann Collet's xxHash, 64-bit variant; the spec's test values
and their published pod sets are the tests' vectors) because the project carries no
native hashing dependency; a node's report hashes a few hundred short names at most.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ATTRIBUTE",
    "METHOD_ALL",
    "METHOD_ATTRIBUTE",
    "pods_fingerprint",
    "xxh64",
]

#: the NodeResourceTopology attribute names and the method this project uses
ATTRIBUTE = "nodeTopologyPodsFingerprint"
METHOD_ATTRIBUTE = "nodeTopologyPodsFingerprintMethod"
#: every pod the runtime runs on the node (theirs also has "with-exclusive-resources")
METHOD_ALL = "all"

PREFIX = "pfp0"
VERSION = "v001"

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """The XXH64 digest of `data` with `seed`, as an unsigned 64-bit integer."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed & _MASK
        v4 = (seed - _P1) & _MASK
        while i + 32 <= n:
            v1 = _round(v1, int.from_bytes(data[i : i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8 : i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16 : i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    h ^= h >> 32
    return h


def _pod_hash(namespace: str, name: str) -> int:
    return xxh64(name.encode(), seed=xxh64(namespace.encode()))


def pods_fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of the (namespace, name) pairs `pods` (module docstring)."""
    hashes = sorted(_pod_hash(ns, name) for ns, name in pods)
    digest = xxh64(b"".join(h.to_bytes(8, "little") for h in hashes))
    return f"{PREFIX}{VERSION}{digest:016x}"
