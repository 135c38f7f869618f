"""Scheduling classes through the real NRI library, per version.

The topology-aware policy's scheduling classes (nri-plugins' n4c16/test17 configuration)
travel in the creation adjustment as NRI's ``LinuxScheduler`` (NRI v0.11.0+) and
``LinuxIOPriority`` (v0.10.0+).  A runtime on an older NRI release would drop those fields
without a word, so the daemon refuses it at Configure with a configuration error naming
the fields, the classes and the runtime's release; the plugin never registers there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nri_resmgr.topology.synthetic import write_sysfs
from tests.conformance.harness import GoRuntime, RuntimeCallError, prune_empty
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.test_daemon import DAEMON, IDX, NAME, SPEC, attach_daemon, diagnostics
from tests.support.waiting import wait_for

pytestmark = pytest.mark.conformance

CLASSES: dict[str, Any] = {
    "schedulingClasses": [
        {"name": "realtime", "policy": "fifo", "priority": 42},
        {"name": "lowprio", "policy": "other", "nice": 10},
        {"name": "idle", "policy": "idle", "nice": 17, "ioClass": "be", "ioPriority": 6},
    ],
    "podQoSSchedulingClasses": {"BestEffort": "lowprio"},
}


def _start(rt: GoRuntime) -> None:
    root = rt.dir / "root"
    write_sysfs(SPEC, root)
    cfg = rt.dir / "resmgr.json"
    cfg.write_text(
        json.dumps(
            {
                "policy": "topology-aware",
                "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}, **CLASSES},
                "log": {"level": "debug", "format": "json", "file": str(rt.dir / "daemon.log")},
            }
        )
    )
    rt.start()
    rt.start_external(
        DAEMON,
        idx=IDX,
        name=NAME,
        args=["--sysfs-root", str(root), "--config", str(cfg), "--state-dir", str(rt.dir / "st")],
        log_path=rt.dir / "daemon.out",
    )


def _wait_for_log(rt: GoRuntime, text: str, *, timeout: float = 60.0) -> str:
    log = rt.dir / "daemon.log"

    def said() -> str:
        content = log.read_text()
        return content if text in content else ""

    try:
        return wait_for(said, what=f"the daemon log to say {text!r}", timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {diagnostics(rt)}") from exc


def test_scheduling_classes_reach_the_runtime_or_the_config_is_refused(
    runtime: GoRuntime,
) -> None:
    _start(runtime)
    if version_key(runtime.version) < (0, 11, 0):
        content = _wait_for_log(runtime, "configuration not supported by the runtime")
        line = next(
            json.loads(x) for x in content.splitlines() if "configuration not supported" in x
        )
        msg = line["error"]
        assert "LinuxScheduler (NRI v0.11.0+; scheduling classes idle, lowprio, realtime)" in msg
        assert "LinuxIOPriority (NRI v0.10.0+; scheduling classes idle)" in msg
        assert f"NRI {runtime.version}" in msg
        return

    runtime.wait_synced(timeout=60)
    rt_pod = make_pod(
        name="rt-0",
        qos="guaranteed",
        annotations={
            "scheduling-class.resource-policy.nri.io/container.loop": "realtime",
            "scheduling-class.resource-policy.nri.io": "idle",
        },
    )
    runtime.run_pod(rt_pod)
    reply = prune_empty(
        runtime.create_container(
            rt_pod,
            make_container(
                rt_pod,
                name="loop",
                cpu_request_millis=1000,
                cpu_limit_millis=1000,
                memory_limit=1 << 28,
            ),
        )
    )
    linux = reply["adjust"]["linux"]
    assert linux["scheduler"] == {"policy": "SCHED_FIFO", "priority": 42}, diagnostics(runtime)
    assert "io_priority" not in linux
    assert linux["resources"]["cpu"]["cpus"].isdigit()  # one exclusive CPU, as without a class

    reply = prune_empty(
        runtime.create_container(
            rt_pod,
            make_container(
                rt_pod,
                name="logger",
                cpu_request_millis=1000,
                cpu_limit_millis=1000,
                memory_limit=1 << 28,
            ),
        )
    )
    linux = reply["adjust"]["linux"]
    assert linux["scheduler"] == {"policy": "SCHED_IDLE", "nice": 17}
    assert linux["io_priority"] == {"class": "IOPRIO_CLASS_BE", "priority": 6}

    # the pod QoS default
    batch = make_pod(name="batch-0", qos="besteffort")
    runtime.run_pod(batch)
    reply = prune_empty(
        runtime.create_container(batch, make_container(batch, name="job", cpu_request_millis=0))
    )
    assert reply["adjust"]["linux"]["scheduler"] == {"policy": "SCHED_OTHER", "nice": 10}


def test_preregistered_with_classes(runtime: GoRuntime) -> None:
    """Pre-registered, the refusal is a plugin that fails Configure: up to NRI v0.6 that
    fails the runtime's whole NRI start (like any broken pre-registered plugin, see
    test_errors.py), from v0.8 the plugin is left out; v0.11+ carry the class."""
    policy = {
        "policy": "topology-aware",
        "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}, **CLASSES},
    }
    version = version_key(runtime.version)
    refusal = (
        "failed to configure plugin: rpc error: code = InvalidArgument desc = configuration: "
        "policy topology-aware sets LinuxScheduler (NRI v0.11.0+"
    )
    if version < (0, 8, 0):
        with pytest.raises(RuntimeCallError) as err:
            attach_daemon(runtime, mode="preregistered", policy=policy)
        assert err.value.message.startswith(refusal), err.value.message
        return
    attach_daemon(runtime, mode="preregistered", policy=policy)
    pod = make_pod(name="batch-0", qos="besteffort")
    runtime.run_pod(pod)
    reply = prune_empty(
        runtime.create_container(pod, make_container(pod, name="job", cpu_request_millis=0))
    )
    if version < (0, 11, 0):
        assert "scheduler" not in reply.get("adjust", {}).get("linux", {})
        warning = f'warn: failed to start pre-installed NRI plugin "resmgr": {refusal}'
        assert any(line.startswith(warning) for line in runtime.logs()), runtime.logs()
        return
    assert reply["adjust"]["linux"]["scheduler"] == {"policy": "SCHED_OTHER", "nice": 10}
