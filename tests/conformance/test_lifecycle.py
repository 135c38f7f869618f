"""Full pod and container lifecycle through the real NRI runtime library, per version.

A Python plugin (`plugins/recorder.py`, built on nri_api) is attached external and
pre-registered; the fake runtime drives every CRI-level event; the tests check the
exact merged replies the runtime receives and the exact events the plugin saw.
The Go stub plugin of the same version runs the same scenario as a reference.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conformance.harness import GoRuntime, Json, prune_empty
from tests.conformance.harness_build import CONTAINERD_FOR, version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.plugins import attach_recorder
from tests.conformance.plugins.recorder import (
    CPUSET_ANNOTATION,
    CREATE_UPDATE_ANNOTATION,
    RECORDED_BY_ANNOTATION,
    RECORDED_BY_ENV,
    STOP_UPDATE_ANNOTATION,
    UPDATE_CPUS_ANNOTATION,
)

pytestmark = pytest.mark.conformance

ALL_EVENTS = [
    "RUN_POD_SANDBOX",
    "STOP_POD_SANDBOX",
    "REMOVE_POD_SANDBOX",
    "CREATE_CONTAINER",
    "POST_CREATE_CONTAINER",
    "START_CONTAINER",
    "POST_START_CONTAINER",
    "UPDATE_CONTAINER",
    "POST_UPDATE_CONTAINER",
    "STOP_CONTAINER",
    "REMOVE_CONTAINER",
    "UPDATE_POD_SANDBOX",
    "POST_UPDATE_POD_SANDBOX",
]


def has_pod_update(version: str) -> bool:
    return version_key(version) >= (0, 10, 0)


def syncs_preregistered(version: str) -> bool:
    """NRI v0.8+ synchronizes pre-registered plugins at start; v0.3-v0.6 never do."""
    return version_key(version) >= (0, 8, 0)


def drive_lifecycle(rt: GoRuntime, pod: Json, ctr: Json) -> dict[str, Any]:
    """Every pod and container event once, in CRI order; returns the replies."""
    out: dict[str, Any] = {}
    rt.run_pod(pod)
    if has_pod_update(rt.version):
        out["update_pod"] = rt.update_pod(pod, linux_resources={"cpu": {"shares": {"value": 2048}}})
        rt.post_update_pod(pod)
    out["create"] = rt.create_container(pod, ctr)
    rt.post_create(pod, ctr)
    rt.start_container(pod, ctr)
    rt.post_start(pod, ctr)
    out["update"] = rt.update_container(
        pod, ctr, {"cpu": {"shares": {"value": 512}, "quota": {"value": 50000}}}
    )
    rt.post_update(pod, ctr)
    out["stop"] = rt.stop_container(pod, ctr)
    rt.remove_container(pod, ctr)
    rt.stop_pod(pod)
    rt.remove_pod(pod)
    return out


def expected_lifecycle(
    version: str, pod: Json, ctr: Json, subscribed: set[str]
) -> list[tuple[str, ...]]:
    p, c = pod["id"], ctr["id"]
    seq: list[tuple[str, ...]] = [("RUN_POD_SANDBOX", p)]
    if has_pod_update(version):
        seq += [("UPDATE_POD_SANDBOX", p), ("POST_UPDATE_POD_SANDBOX", p)]
    seq += [
        ("CREATE_CONTAINER", p, c),
        ("POST_CREATE_CONTAINER", p, c),
        ("START_CONTAINER", p, c),
        ("POST_START_CONTAINER", p, c),
        ("UPDATE_CONTAINER", p, c),
        ("POST_UPDATE_CONTAINER", p, c),
        ("STOP_CONTAINER", p, c),
        ("REMOVE_CONTAINER", p, c),
        ("STOP_POD_SANDBOX", p),
        ("REMOVE_POD_SANDBOX", p),
    ]
    return [e for e in seq if e[0] in subscribed]


def scenario() -> tuple[Json, Json, Json]:
    pod = make_pod(name="web-0", namespace="shop", qos="burstable")
    other = make_container(pod, name="sidecar", cpu_request_millis=100)
    ctr = make_container(
        pod,
        name="app",
        cpu_request_millis=500,
        cpu_limit_millis=1000,
        memory_limit=512 << 20,
        annotations={
            CPUSET_ANNOTATION.format(name="app"): "2-3",
            CREATE_UPDATE_ANNOTATION: f"{other['id']}=6",
            UPDATE_CPUS_ANNOTATION: "4-5",
            STOP_UPDATE_ANNOTATION: f"{other['id']}=0-7",
        },
    )
    return pod, ctr, other


def cpuset_update(container_id: str, cpus: str, **cpu: Any) -> Json:
    return {"container_id": container_id, "linux": {"resources": {"cpu": {**cpu, "cpus": cpus}}}}


def test_python_plugin_full_lifecycle(runtime: GoRuntime, mode: str) -> None:
    pod, ctr, other = scenario()
    rec = attach_recorder(runtime, mode=mode, pods=[pod], containers=[other])

    replies = drive_lifecycle(runtime, pod, ctr)

    # What the runtime received.
    assert prune_empty(replies["create"]) == {
        "adjust": {
            "annotations": {RECORDED_BY_ANNOTATION: "10-recorder"},
            "env": [{"key": RECORDED_BY_ENV, "value": "10-recorder"}],
            "linux": {"resources": {"cpu": {"cpus": "2-3"}}},
        },
        "update": [cpuset_update(other["id"], "6")],
    }
    # The plugin's update of the container being updated is merged into the request.
    assert prune_empty(replies["update"]) == {
        "update": [
            cpuset_update(ctr["id"], "4-5", shares={"value": "512"}, quota={"value": "50000"})
        ]
    }
    assert prune_empty(replies["stop"]) == {"update": [cpuset_update(other["id"], "0-7")]}
    if has_pod_update(runtime.version):
        assert prune_empty(replies["update_pod"]) == {}

    # What the plugin saw: each event once, in order, nothing else.
    assert rec.events(lifecycle_only=True) == expected_lifecycle(
        runtime.version, pod, ctr, set(ALL_EVENTS)
    )
    assert len({r["pid"] for r in rec.records()}) == 1
    first = [r["event"] for r in rec.records()][:2]
    if mode == "external" or syncs_preregistered(runtime.version):
        assert first == ["CONFIGURE", "SYNCHRONIZE"]
    else:
        assert first == ["CONFIGURE", "RUN_POD_SANDBOX"]
    assert runtime.updates() == []


def test_configure_request_seen_by_python_plugin(runtime: GoRuntime, mode: str) -> None:
    rec = attach_recorder(runtime, mode=mode, request_timeout_ms=3000)
    [configure] = rec.of("CONFIGURE")
    v = runtime.version
    assert configure["runtime_name"] == "containerd"
    assert configure["runtime_version"] == CONTAINERD_FOR[v]
    # Reported by v0.12+ runtimes, inferred from containerd's version before.
    assert configure["nri_version"] == v
    # Timeouts travel in ConfigureRequest since v0.7.0; older runtimes leave the default.
    assert configure["request_timeout"] == (3.0 if version_key(v) >= (0, 7, 0) else 2.0)
    if mode == "external":
        assert configure["config"] == ""
        assert configure["env"] == {}
        assert configure["pre_registered"] is False
    else:
        assert configure["config"] == json.dumps(rec.settings)
        assert configure["pre_registered"] is True
        # v0.3.0 passed the full file name as NRI_PLUGIN_NAME, later versions the base name.
        name = "10-recorder" if v == "v0.3.0" else "recorder"
        assert configure["env"] == {
            "NRI_PLUGIN_IDX": "10",
            "NRI_PLUGIN_NAME": name,
            "NRI_PLUGIN_SOCKET": "3",
        }


@pytest.mark.parametrize(
    "events",
    [
        ["CREATE_CONTAINER", "STOP_CONTAINER"],
        ["RUN_POD_SANDBOX", "POST_START_CONTAINER", "REMOVE_CONTAINER", "REMOVE_POD_SANDBOX"],
    ],
    ids=["create+stop", "pod+post-start+remove"],
)
def test_python_plugin_subscribed_to_a_subset(
    runtime: GoRuntime, mode: str, events: list[str]
) -> None:
    pod, ctr, other = scenario()
    rec = attach_recorder(runtime, mode=mode, events=events, pods=[pod], containers=[other])

    replies = drive_lifecycle(runtime, pod, ctr)

    assert rec.events(lifecycle_only=True) == expected_lifecycle(
        runtime.version, pod, ctr, set(events)
    )
    if "CREATE_CONTAINER" in events:
        assert prune_empty(replies["create"])["adjust"]["linux"] == {
            "resources": {"cpu": {"cpus": "2-3"}}
        }
    else:
        assert prune_empty(replies["create"]) == {}
    if "STOP_CONTAINER" in events:
        assert prune_empty(replies["stop"]) == {"update": [cpuset_update(other["id"], "0-7")]}
    else:
        assert prune_empty(replies["stop"]) == {}


def test_go_stub_plugin_full_lifecycle(runtime: GoRuntime) -> None:
    """The reference: the real Go stub of the same version sees the same sequence."""
    pod, ctr, _ = scenario()
    runtime.start()
    runtime.go_plugin(name="ref", idx="10", behaviour="noop")
    runtime.wait_synced()

    replies = drive_lifecycle(runtime, pod, ctr)

    seen = runtime.go_plugin_events("ref")
    assert [e["event"] for e in seen[:2]] == ["CONFIGURE", "SYNCHRONIZE"]
    got = [tuple([e["event"]] + [e[k] for k in ("pod", "container") if k in e]) for e in seen[2:]]
    assert got == expected_lifecycle(runtime.version, pod, ctr, set(ALL_EVENTS))
    assert prune_empty(replies["create"]) == {}


@pytest.mark.parametrize("go_idx", ["05", "20"])
def test_invocation_order_follows_plugin_index(
    runtime: GoRuntime, mode: str, go_idx: str
) -> None:
    """Plugins run in index order; each sees the container as adjusted by those before it."""
    pod = make_pod(name="web-0")
    ctr = make_container(pod, name="app")
    rec = attach_recorder(runtime, mode=mode)
    runtime.go_plugin(name="pinner", idx=go_idx, behaviour="cpuset", cpus="0-1")
    runtime.wait_synced()

    created = runtime.create_container(pod, ctr)

    assert prune_empty(created) == {
        "adjust": {
            "annotations": {RECORDED_BY_ANNOTATION: "10-recorder"},
            "env": [{"key": RECORDED_BY_ENV, "value": "10-recorder"}],
            "linux": {"resources": {"cpu": {"cpus": "0-1"}}},
        }
    }
    [seen] = rec.of("CREATE_CONTAINER")
    assert seen["cpus"] == ("0-1" if go_idx == "05" else "")
    assert runtime.go_plugin_events("pinner")[-1]["event"] == "CREATE_CONTAINER"


def test_elapsed_ns_is_reported_per_request(runtime: GoRuntime) -> None:
    runtime.start()
    pod, ctr, _ = scenario()
    runtime.run_pod(pod)
    assert isinstance(runtime.last_reply["elapsed_ns"], int)
    assert runtime.last_reply["elapsed_ns"] > 0
    runtime.create_container(pod, ctr)
    assert runtime.last_reply["op"] == "create_container"
    assert runtime.last_reply["elapsed_ns"] > 0
