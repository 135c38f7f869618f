"""The daemon with policy ``balloons`` through the real NRI runtime library, per version.

Same machine and launch as test_daemon.py (one package, one node, 4 cores x 2 threads,
CPUs 0-7), CPU 0 reserved.  Two balloon types by namespace: ``inference`` (2 to 4 CPUs,
one instance that its pods share) and ``batch`` (one CPU).  A second inference replica
inflates the instance, and the first replica is updated to the larger cpuset in the same
CreateContainer reply; removing it deflates the instance again and updates the first.
The assertions are about sizes and disjointness, which any correct allocator meets.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.harness import GoRuntime
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.test_daemon import (
    attach_daemon,
    cpus,
    diagnostics,
    guaranteed,
    updates,
)

pytestmark = pytest.mark.conformance

BALLOONS: dict[str, Any] = {
    "policy": "balloons",
    "policyConfig": {
        "reservedResources": {"cpu": "cpuset:0"},
        "pinCPU": True,
        "balloonTypes": [
            {"name": "inference", "namespaces": ["inference"], "minCPUs": 2, "maxCPUs": 4},
            {"name": "batch", "namespaces": ["batch"], "minCPUs": 1, "maxCPUs": 1},
        ],
    },
}


def ids(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def test_daemon_balloons_inflate_and_deflate(runtime: GoRuntime, mode: str) -> None:
    sync = attach_daemon(runtime, mode=mode, policy=BALLOONS)
    if mode == "external" or version_key(runtime.version) >= (0, 8, 0):
        assert sync is not None and sync.updates == [], diagnostics(runtime)
    batch = make_pod(name="etl-0", namespace="batch", qos="burstable")
    etl = make_container(batch, name="etl", cpu_request_millis=500)
    llm0 = make_pod(name="llm-0", namespace="inference", qos="guaranteed")
    llm1 = make_pod(name="llm-1", namespace="inference", qos="guaranteed")
    server0 = guaranteed(llm0, "server", 2)
    server1 = guaranteed(llm1, "server", 2)

    runtime.run_pod(batch)
    reply = runtime.create_container(batch, etl)
    batch_cpus = ids(cpus(reply))
    assert len(batch_cpus) == 1 and 0 not in batch_cpus, diagnostics(runtime)
    runtime.start_container(batch, etl)

    runtime.run_pod(llm0)
    reply = runtime.create_container(llm0, server0)
    first = ids(cpus(reply))
    assert len(first) == 2 and first.isdisjoint(batch_cpus | {0}), (first, batch_cpus)
    runtime.start_container(llm0, server0)

    runtime.run_pod(llm1)
    reply = runtime.create_container(llm1, server1)
    grown = ids(cpus(reply))
    assert len(grown) == 4 and grown.isdisjoint(batch_cpus | {0}), grown
    assert [(cid, ids(c)) for cid, c in updates(reply)] == [(server0["id"], grown)]
    runtime.start_container(llm1, server1)

    reply = runtime.stop_container(llm1, server1)
    (updated,) = updates(reply)
    assert updated[0] == server0["id"] and len(ids(updated[1])) == 2, updated
    runtime.remove_container(llm1, server1)
    runtime.stop_pod(llm1)
    runtime.remove_pod(llm1)
