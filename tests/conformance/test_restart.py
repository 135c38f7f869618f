"""Runtime restarts (stop + start on the same directory and socket), per version.

The runtime never reconnects to a plugin. An external plugin with
OnClose.RECONNECT must notice the lost connection, reconnect to the new runtime
and synchronize again; one without exits. Pre-registered plugins are killed with
the runtime and launched anew by the next start.
"""

from __future__ import annotations

from typing import TypeVar

import pytest

from nri_resmgr.topology.cpuset import IDSet
from tests.conformance.harness import GoRuntime, Json
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.plugins import RecorderHandle, attach_recorder
from tests.conformance.test_daemon import TOPOLOGY_AWARE, attach_daemon, diagnostics, guaranteed
from tests.support.waiting import wait_for

pytestmark = pytest.mark.conformance

T = TypeVar("T")



def test_external_plugin_reconnects_and_resynchronizes(runtime: GoRuntime) -> None:
    pod = make_pod(name="web-0")
    first = make_container(pod, name="app")
    rec = attach_recorder(runtime, mode="external", reconnect=True)
    runtime.run_pod(pod)
    runtime.create_container(pod, first)

    # The one external connection is shut down, as the runtime's exit would.
    assert runtime.stop() == 1
    wait_for(lambda: rec.of("CLOSED"), what="CLOSED record", timeout=20, interval=0.05)
    running = {**first, "state": "CONTAINER_RUNNING"}
    runtime.start(pods=[pod], containers=[running])
    resync = runtime.wait_synced()

    assert (resync.pods, resync.containers, resync.updates) == (1, 1, [])
    second = make_container(pod, name="app-2")
    created = runtime.create_container(pod, second)
    assert created["adjust"]["env"] == [{"key": "RECORDED_BY", "value": "10-recorder"}]
    assert rec.events() == [
        ("CONFIGURE",),
        ("SYNCHRONIZE",),
        ("RUN_POD_SANDBOX", pod["id"]),
        ("CREATE_CONTAINER", pod["id"], first["id"]),
        ("CLOSED",),
        ("CONFIGURE",),
        ("SYNCHRONIZE",),
        ("CREATE_CONTAINER", pod["id"], second["id"]),
    ]
    syncs = rec.of("SYNCHRONIZE")
    assert (syncs[1]["pods"], syncs[1]["containers"]) == ([pod["id"]], [first["id"]])
    # One process throughout: it reconnected, it was not restarted.
    assert len({r["pid"] for r in rec.records()}) == 1


def test_external_plugin_without_reconnect_exits(runtime: GoRuntime) -> None:
    rec = attach_recorder(runtime, mode="external")
    [proc] = runtime.externals

    runtime.stop()

    assert proc.wait(timeout=30) == 1
    assert [r["event"] for r in rec.records()] == ["CONFIGURE", "SYNCHRONIZE", "CLOSED"]


def test_preregistered_plugin_is_launched_again(runtime: GoRuntime) -> None:
    pod = make_pod(name="web-0")
    ctr = make_container(pod, name="app", state="CONTAINER_RUNNING")
    rec: RecorderHandle = attach_recorder(runtime, mode="preregistered")

    runtime.stop()
    startup = runtime.start(pods=[pod], containers=[ctr])

    configures = rec.of("CONFIGURE")
    assert len(configures) == 2
    assert configures[0]["pid"] != configures[1]["pid"]
    if version_key(runtime.version) >= (0, 8, 0):
        assert startup is not None and (startup.pods, startup.containers) == (1, 1)
        syncs = rec.of("SYNCHRONIZE")
        assert [(s["pods"], s["containers"]) for s in syncs] == [
            ([], []),
            ([pod["id"]], [ctr["id"]]),
        ]
        assert syncs[1]["pid"] == configures[1]["pid"]
    else:
        assert startup is None
        assert rec.of("SYNCHRONIZE") == []
    created = runtime.create_container(pod, make_container(pod, name="app-2"))
    assert created["adjust"]["env"] == [{"key": "RECORDED_BY", "value": "10-recorder"}]
    assert rec.records()[-1]["pid"] == configures[1]["pid"]


def test_go_stub_sees_runtime_stop(runtime: GoRuntime) -> None:
    """Reference: the Go stub's on-close callback runs when the runtime stops."""
    runtime.start()
    runtime.go_plugin(name="ref", idx="10")
    runtime.wait_synced()
    assert runtime.call("go_plugin_events", name="ref")["closed"] is False

    assert runtime.stop() == 1

    wait_for(
        lambda: runtime.call("go_plugin_events", name="ref")["closed"],
        what="Go stub on-close",
        timeout=20,
        interval=0.05,
    )


# -- the restart rule, with the real daemon ------------------------------------------------


def _final(sync_updates: list[Json], reported: dict[str, str]) -> dict[str, frozenset[int]]:
    """Each container's cpuset once the Synchronize updates are applied to the reports."""
    final = dict(reported)
    for u in sync_updates:
        cpus = u.get("linux", {}).get("resources", {}).get("cpu", {}).get("cpus")
        if cpus:
            final[u["container_id"]] = cpus
    return {cid: IDSet.parse(text).ids() for cid, text in final.items()}


@pytest.mark.parametrize("nri_version", ["v0.12.2"])
def test_daemon_restart_rule_after_fail_open_creations(runtime: GoRuntime) -> None:
    """Issue 11 items 1 and 4 through the real NRI library (topology-aware, 8 CPUs).

    Shared containers fill the shared CPUs 1-7; while the daemon was down, two
    Guaranteed containers were created without it (no cpuset, or every CPU), and a
    BestEffort one claims every CPU next to a validly placed exclusive container. After
    Synchronize, with its updates applied: the valid holder has not moved, and no CPU
    exclusive to one container is in another container's cpuset.
    """
    web = make_pod(name="web-0", qos="burstable")
    db = make_pod(name="db-0", qos="guaranteed")
    be = make_pod(name="batch-0", qos="besteffort")
    shared = [
        make_container(web, name=f"w{i}", cpu_request_millis=1000,
                       state="CONTAINER_RUNNING", cpuset_cpus="1-3,5-7")
        for i in range(5)
    ]  # fmt: skip
    holder = guaranteed(db, "holder", 1, state="CONTAINER_RUNNING", cpuset_cpus="4")
    late = [
        guaranteed(db, "late-0", 2, state="CONTAINER_RUNNING", cpuset_cpus="0-7"),
        guaranteed(db, "late-1", 2, state="CONTAINER_RUNNING"),
    ]
    claimant = make_container(be, name="claimant", cpu_request_millis=0,
                              state="CONTAINER_RUNNING", cpuset_cpus="0-7")  # fmt: skip
    containers = [*shared, holder, *late, claimant]
    sync = attach_daemon(runtime, mode="external", pods=[web, db, be], containers=containers,
                         policy=TOPOLOGY_AWARE)  # fmt: skip
    assert sync is not None
    reported = {
        c["id"]: c["linux"]["resources"]["cpu"].get("cpus", "") for c in containers
    }
    final = _final(sync.updates, reported)
    names = {c["id"]: c["name"] for c in containers}
    table = "\n".join(f"  {names[cid]}: {sorted(cpus)}" for cid, cpus in final.items())
    assert final[holder["id"]] == {4}, f"the valid holder moved:\n{table}"
    exclusive = {c["id"]: final[c["id"]] for c in (holder, *late)}
    assert [len(exclusive[c["id"]]) for c in late] == [2, 2], table
    for owner, cpus in exclusive.items():
        for other, now in final.items():
            assert other == owner or not cpus & now, (
                f"CPUs {sorted(cpus & now)} are exclusive to {names[owner]} and in "
                f"{names[other]}'s cpuset:\n{table}\n{diagnostics(runtime)}"
            )
