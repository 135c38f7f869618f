"""Memory policy and memory QoS through the real NRI library, per version.

The memory policy travels as NRI's ``LinuxMemoryPolicy`` (NRI v0.12.0+): on an older
release the daemon refuses the configuration at Configure, naming the section, the field
and the runtime's release, since the runtime would drop the field silently.  Memory QoS
travels as unified (cgroup v2) resources, which every release carries: the values the
runtime library merges into its reply are the ones the daemon computed; so is the SGX EPC
limit (``misc.max``) of their sgx-epc plugin's annotation.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conformance.harness import GoRuntime, RuntimeCallError, prune_empty
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.test_daemon import attach_daemon, diagnostics
from tests.conformance.test_daemon_sched_classes import _wait_for_log

pytestmark = pytest.mark.conformance

MEMORY: dict[str, Any] = {
    "policy": "topology-aware",
    "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}},
    "control": {
        "memoryPolicy": {
            "classes": [
                {"name": "spread", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "allowed-mems"}}
            ]
        },
        "memoryQos": {
            "classes": [{"name": "bronze", "swaplimitratio": 0.5}],
            "unifiedannotations": ["memory.swap.max", "memory.high", "memory.oom.group"],
        },
    },
}
QOS_ONLY: dict[str, Any] = {
    **MEMORY,
    "control": {"memoryQos": MEMORY["control"]["memoryQos"], "sgxEpc": {"enable": True}},
}


def test_memory_policy_reaches_the_runtime_or_the_config_is_refused(runtime: GoRuntime) -> None:
    if version_key(runtime.version) < (0, 12, 0):
        attach_daemon(runtime, mode="external", policy=MEMORY, wait=False)
        content = _wait_for_log(runtime, "configuration not supported by the runtime")
        line = next(
            json.loads(x) for x in content.splitlines() if "configuration not supported" in x
        )
        msg = line["error"]
        assert msg.startswith(
            "configuration: control.memoryPolicy sets LinuxMemoryPolicy (NRI v0.12.0+); "
            "expected a runtime whose NRI release has them, found containerd"
        ), msg
        assert f"NRI {runtime.version}" in msg
        assert msg.endswith("Remove control.memoryPolicy or upgrade the runtime")
        return
    attach_daemon(runtime, mode="external", policy=MEMORY)
    db = make_pod(name="db-0", qos="guaranteed", annotations={
        "class.memory-policy.nri.io": "spread",
        "policy.memory-policy.nri.io/container.log": "{mode: MPOL_BIND, nodes: '0'}",
    })  # fmt: skip
    runtime.run_pod(db)
    main = make_container(db, name="main", cpu_request_millis=2000, cpu_limit_millis=2000,
                          memory_limit=256 << 20)  # fmt: skip
    linux = prune_empty(runtime.create_container(db, main))["adjust"]["linux"]
    assert linux["memory_policy"] == {"mode": "MPOL_INTERLEAVE", "nodes": "0"}, diagnostics(runtime)
    log = make_container(db, name="log", cpu_request_millis=1000, cpu_limit_millis=1000,
                         memory_limit=256 << 20)  # fmt: skip
    linux = prune_empty(runtime.create_container(db, log))["adjust"]["linux"]
    assert linux["memory_policy"] == {"mode": "MPOL_BIND", "nodes": "0"}


def test_memory_qos_values_reach_the_runtime(runtime: GoRuntime) -> None:
    attach_daemon(runtime, mode="external", policy=QOS_ONLY)
    web = make_pod(name="web-0", qos="burstable", annotations={
        "class.memory-qos.nri.io": "bronze",
        "memory.swap.max.memory-qos.nri.io/noswap": "0",
        "memory.high.memory-qos.nri.io/noswap": "max",
        "memory.oom.group.memory-qos.nri.io": "1",
        "epc-limit.nri.io/container.app": "16384",
    })  # fmt: skip
    runtime.run_pod(web)
    app = make_container(web, name="app", cpu_request_millis=500, memory_limit=100 << 20)
    resources = prune_empty(runtime.create_container(web, app))["adjust"]["linux"]["resources"]
    assert resources["unified"] == {
        "memory.high": "52428800",
        "memory.swap.max": "max",
        "memory.oom.group": "1",
        "misc.max": "sgx_epc 16384",  # their sgx-epc plugin's annotation
    }, diagnostics(runtime)
    # a key not in unifiedannotations fails the container with the daemon's reason
    bad = make_pod(name="web-1", qos="burstable",
                   annotations={"memory.min.memory-qos.nri.io": "1G"})  # fmt: skip
    runtime.run_pod(bad)
    app = make_container(bad, name="app", cpu_request_millis=500, memory_limit=100 << 20)
    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(bad, app)
    assert "annotation memory.min.memory-qos.nri.io: expected class.memory-qos.nri.io or a key" in (
        err.value.message
    )
    noswap = make_container(web, name="noswap", cpu_request_millis=500, memory_limit=100 << 20)
    resources = prune_empty(runtime.create_container(web, noswap))["adjust"]["linux"]["resources"]
    assert resources["unified"] == {
        "memory.high": "max",
        "memory.swap.max": "0",
        "memory.oom.group": "1",
    }
