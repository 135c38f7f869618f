"""Synchronize through the real NRI runtime library, per version.

* the plugin sees exactly the pods and containers the runtime reports, once;
* the updates it returns reach the runtime's SyncFn, and unsolicited updates sent
  after the hook reach its UpdateFn;
* pre-registered plugins are synchronized at start-up only from NRI v0.8.0;
* a state larger than the 4 MiB ttrpc limit is split into chunks from NRI v0.7.0
  (the plugin still sees everything once); older versions cannot synchronize it.
"""

from __future__ import annotations

from typing import TypeVar

import pytest

from tests.conformance.harness import GoRuntime, Json, RuntimeCallError, read_jsonl
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.plugins import attach_recorder
from tests.conformance.plugins.recorder import SYNC_CPUS_ANNOTATION
from tests.support.waiting import wait_for

pytestmark = pytest.mark.conformance

T = TypeVar("T")

TTRPC_MAX = 4 << 20



def small_state() -> tuple[list[Json], list[Json]]:
    pods = [make_pod(name="db-0", qos="guaranteed"), make_pod(name="web-0")]
    ctrs = [
        make_container(
            pods[0],
            name="postgres",
            cpu_request_millis=2000,
            cpu_limit_millis=2000,
            memory_limit=4 << 30,
            annotations={SYNC_CPUS_ANNOTATION: "2-3"},
            state="CONTAINER_RUNNING",
        ),
        make_container(pods[1], name="nginx", state="CONTAINER_RUNNING"),
        make_container(
            pods[1],
            name="exporter",
            annotations={SYNC_CPUS_ANNOTATION: "0"},
            state="CONTAINER_RUNNING",
        ),
    ]
    return pods, ctrs


def big_state(*, pods: int, per_pod: int, pad: int) -> tuple[list[Json], list[Json]]:
    pod_list = [make_pod(name=f"pod-{i:04d}") for i in range(pods)]
    ctrs = [
        make_container(p, name=f"c{j}", annotations={"pad.conformance.nri": "x" * pad})
        for p in pod_list
        for j in range(per_pod)
    ]
    return pod_list, ctrs


def test_synchronize_reports_state_and_returns_updates(runtime: GoRuntime, mode: str) -> None:
    pods, ctrs = small_state()
    rec = attach_recorder(runtime, mode=mode, pods=pods, containers=ctrs)
    expected_updates = [
        {"container_id": ctrs[0]["id"], "linux": {"resources": {"cpu": {"cpus": "2-3"}}}},
        {"container_id": ctrs[2]["id"], "linux": {"resources": {"cpu": {"cpus": "0"}}}},
    ]

    if mode == "preregistered" and version_key(runtime.version) < (0, 8, 0):
        # NRI before v0.8.0 never synchronizes pre-registered plugins.
        assert rec.sync is None
        assert rec.of("SYNCHRONIZE") == []
        return

    assert rec.sync is not None
    assert (rec.sync.pods, rec.sync.containers) == (2, 3)
    assert rec.sync.updates == expected_updates
    [sync] = rec.of("SYNCHRONIZE")
    assert sync["pods"] == [p["id"] for p in pods]
    assert sync["containers"] == [c["id"] for c in ctrs]
    # The same updates, sent once more with UpdateContainers after the hook returned.
    updates = wait_for(runtime.updates, what="UpdateContainers call", timeout=20, interval=0.05)
    assert updates == [expected_updates]


def test_synchronize_of_empty_runtime(runtime: GoRuntime, mode: str) -> None:
    rec = attach_recorder(runtime, mode=mode)
    if rec.sync is None:
        assert mode == "preregistered" and version_key(runtime.version) < (0, 8, 0)
        return
    assert (rec.sync.pods, rec.sync.containers, rec.sync.updates) == (0, 0, [])
    [sync] = rec.of("SYNCHRONIZE")
    assert (sync["pods"], sync["containers"]) == ([], [])


def chunking(version: str) -> bool:
    return version_key(version) >= (0, 7, 0)


def sync_messages(logs: list[str]) -> list[str]:
    return [line for line in logs if "sending sync message" in line]


@pytest.mark.parametrize("mode", ["external", "preregistered"])
def test_synchronize_larger_than_ttrpc_limit(runtime: GoRuntime, mode: str) -> None:
    pods, ctrs = big_state(pods=300, per_pod=4, pad=3600)
    size = sum(len(c["annotations"]["pad.conformance.nri"]) for c in ctrs)
    assert size > TTRPC_MAX
    v = runtime.version

    if not chunking(v):
        if mode == "external":
            with pytest.raises(RuntimeCallError) as err:
                attach_recorder(runtime, mode=mode, pods=pods, containers=ctrs)
            # The runtime (ttrpc v1.2.1/v1.2.3) sends the oversized message; the plugin's
            # ttrpc layer discards it and answers RESOURCE_EXHAUSTED, as Go's server does.
            assert err.value.message.startswith(
                "rpc error: code = ResourceExhausted desc = message length "
            )
            assert err.value.message.endswith(" exceed maximum message size of 4194304")
            # The plugin was never added: it sees no events.
            rec_path = runtime.dir / "10-recorder.jsonl"
            pod = make_pod(name="late")
            runtime.create_container(pod, make_container(pod, name="late"))
            assert [r["event"] for r in read_jsonl(rec_path)] == ["CONFIGURE"]
        else:
            rec = attach_recorder(runtime, mode=mode, pods=pods, containers=ctrs)
            assert rec.sync is None
        return

    rec = attach_recorder(runtime, mode=mode, pods=pods, containers=ctrs, request_timeout_ms=30000)
    assert rec.sync is not None
    assert (rec.sync.pods, rec.sync.containers, rec.sync.updates) == (300, 1200, [])
    [sync] = rec.of("SYNCHRONIZE")
    assert sync["pods"] == [p["id"] for p in pods]
    assert sync["containers"] == [c["id"] for c in ctrs]
    messages = sync_messages(runtime.logs())
    # First the whole state (refused as oversized), then at least two chunks.
    assert messages[0].endswith("300/300, 1200/1200 (more: false)")
    assert len(messages) >= 3
    assert all(m.endswith("(more: true)") for m in messages[1:-1])
    assert messages[-1].endswith("(more: false)")


def test_go_stub_synchronize_larger_than_ttrpc_limit(runtime: GoRuntime) -> None:
    """Reference: the Go stub of the same version, same state."""
    pods, ctrs = big_state(pods=300, per_pod=4, pad=3600)
    v = runtime.version
    runtime.start(pods=pods, containers=ctrs, request_timeout_ms=30000 if chunking(v) else 2000)
    runtime.go_plugin(name="ref", idx="10")
    if not chunking(v):
        with pytest.raises(RuntimeCallError) as err:
            runtime.wait_synced()
        # The runtime sends the oversized message and the Go stub of these versions
        # never answers it, so the sync runs into the request timeout. (The Python
        # stub answers RESOURCE_EXHAUSTED at once, see the test above.)
        assert err.value.message == "context deadline exceeded"
        assert [e["event"] for e in runtime.go_plugin_events("ref")] == ["CONFIGURE"]
        return
    result = runtime.wait_synced()
    assert (result.pods, result.containers) == (300, 1200)
    [sync] = [e for e in runtime.go_plugin_events("ref") if e["event"] == "SYNCHRONIZE"]
    assert sync["pods"] == [p["id"] for p in pods]
    assert sync["containers"] == [c["id"] for c in ctrs]


def test_unsolicited_update_failures_reach_plugin(runtime: GoRuntime) -> None:
    """UpdateContainers from outside any hook returns the updates the runtime failed."""
    pods, ctrs = small_state()
    runtime.fail_updates([ctrs[2]["id"]])
    rec = attach_recorder(
        runtime, mode="external", pods=pods, containers=ctrs, report_update_result=True
    )

    [result] = wait_for(
        lambda: rec.of("UPDATE_CONTAINERS_RESULT"),
        what="UPDATE_CONTAINERS_RESULT",
        timeout=20,
        interval=0.05,
    )
    assert result["failed"] == [ctrs[2]["id"]]
    assert rec.sync is not None
    assert runtime.updates() == [rec.sync.updates]
