"""The real daemon (`nri-resmgr run`) through the real NRI runtime library, per version.

The daemon runs as its own process, attached external (a DaemonSet) or pre-registered
(launched by the runtime with the socket on fd 3 and its config from conf.d), on a
synthetic sysfs root written by `write_sysfs`: one package, one NUMA node, 4 cores x 2
threads, CPUs 0-7, CPU c and c+4 siblings.  The static policy reserves CPU 0, so the
first 2-CPU exclusive grant is the whole core {1,5}, the next {2,6}.

This file is also the daemon's launcher: run as a script it turns the harness's plugin
arguments (``--socket S --idx NN --name N``) into ``nri-resmgr run`` options.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # the launcher (see the module docstring)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import argparse

    from nri_resmgr.cli import main as cli_main

    parser = argparse.ArgumentParser()
    parser.add_argument("--socket")
    parser.add_argument("--idx")
    parser.add_argument("--name")
    known, rest = parser.parse_known_args()
    argv = ["run", *rest]
    for flag, value in (("--socket", known.socket), ("--plugin-index", known.idx),
                        ("--plugin-name", known.name)):
        if value:
            argv += [flag, value]
    sys.exit(cli_main(argv))

import pytest

from nri_resmgr.topology.synthetic import write_sysfs
from tests.conformance.harness import GoRuntime, Json, RuntimeCallError, SyncResult, prune_empty
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod

pytestmark = pytest.mark.conformance

DAEMON = Path(__file__).resolve()
SPEC = {"packages": 1, "dies": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"}
IDX, NAME = "90", "resmgr"


STATIC: dict[str, Any] = {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0"}}
TOPOLOGY_AWARE: dict[str, Any] = {
    "policy": "topology-aware",
    "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}},
}


def daemon_config(rt: GoRuntime, policy: dict[str, Any] | None = None) -> str:
    return json.dumps({
        **(policy or STATIC),
        "log": {"level": "debug", "format": "json", "file": str(rt.dir / "daemon.log")},
    })


def attach_daemon(
    rt: GoRuntime,
    *,
    mode: str,
    pods: list[Json] | None = None,
    containers: list[Json] | None = None,
    start: bool = True,
    policy: dict[str, Any] | None = None,
    wait: bool = True,
) -> SyncResult | None:
    """Start `rt` (if `start`) with the daemon attached in `mode`; its Synchronize result
    (None without `wait`, for a daemon expected to refuse the runtime)."""
    root = rt.dir / "root"
    if not (root / "sys").exists():
        write_sysfs(SPEC, root)
    config = daemon_config(rt, policy)
    config_file = rt.dir / "resmgr.json"
    config_file.write_text(config)
    args = ["--sysfs-root", str(root), "--config", str(config_file),
            "--state-dir", str(rt.dir / "state")]
    if mode == "preregistered":
        rt.install_preregistered(DAEMON, idx=IDX, name=NAME, config=config, args=args)
        return rt.start(pods=pods or [], containers=containers or [])
    if start:
        rt.start(pods=pods or [], containers=containers or [])
    rt.start_external(DAEMON, idx=IDX, name=NAME, args=args,
                      log_path=rt.dir / f"daemon-{len(rt.externals)}.out")
    return rt.wait_synced(timeout=60) if wait else None


def cpus(reply: Json) -> str:
    return str(prune_empty(reply)["adjust"]["linux"]["resources"]["cpu"]["cpus"])


def updates(reply: Json) -> list[tuple[str, str]]:
    return [(u["container_id"], u["linux"]["resources"]["cpu"]["cpus"])
            for u in prune_empty(reply).get("update", [])]


def guaranteed(pod: Json, name: str, n: int, **kw: Any) -> Json:
    return make_container(pod, name=name, cpu_request_millis=1000 * n,
                          cpu_limit_millis=1000 * n, memory_limit=256 << 20, **kw)


def diagnostics(rt: GoRuntime) -> str:
    log = rt.dir / "daemon.log"
    return log.read_text()[-4000:] if log.exists() else "(no daemon log)"


def test_daemon_pod_lifecycle_exact_cpusets(runtime: GoRuntime, mode: str) -> None:
    sync = attach_daemon(runtime, mode=mode)
    if mode == "external" or version_key(runtime.version) >= (0, 8, 0):
        assert sync is not None and sync.updates == [], diagnostics(runtime)
    web = make_pod(name="web-0", qos="burstable")
    db = make_pod(name="db-0", qos="guaranteed")
    nginx = make_container(web, name="nginx", cpu_request_millis=500)
    pg = guaranteed(db, "postgres", 2)
    cache = guaranteed(db, "cache", 2)

    runtime.run_pod(web)
    reply = runtime.create_container(web, nginx)
    assert cpus(reply) == "0-7", diagnostics(runtime)
    assert updates(reply) == []
    runtime.start_container(web, nginx)

    runtime.run_pod(db)
    reply = runtime.create_container(db, pg)
    assert cpus(reply) == "1,5"
    assert updates(reply) == [(nginx["id"], "0,2-4,6-7")]
    runtime.start_container(db, pg)
    reply = runtime.create_container(db, cache)
    assert cpus(reply) == "2,6"
    assert updates(reply) == [(nginx["id"], "0,3-4,7")]

    # too big for what is left: the runtime gets the policy's own message
    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(db, guaranteed(db, "hog", 4, id="hog"))
    assert "pod default/db-0 container hog: requested 4 exclusive CPUs" in err.value.message

    reply = runtime.stop_container(db, pg)
    assert updates(reply) == [(nginx["id"], "0-1,3-5,7")]
    runtime.remove_container(db, pg)
    reply = runtime.stop_container(db, cache)
    assert updates(reply) == [(nginx["id"], "0-7")]
    runtime.remove_container(db, cache)
    runtime.stop_pod(db)
    runtime.remove_pod(db)
    assert runtime.updates() == []


@pytest.mark.parametrize("nri_version", ["v0.8.0", "v0.12.2"])
def mems(reply: Json) -> str:
    return str(prune_empty(reply)["adjust"]["linux"]["resources"]["cpu"]["mems"])


def test_daemon_topology_aware_shared_pool_shrinks_and_grows(
    runtime: GoRuntime, mode: str
) -> None:
    """topology-aware, CPU 0 reserved: the shared set is 1-7; whole cores are sliced off
    it for Guaranteed containers and the running shared container follows in the same
    reply; a request that would empty it is refused; removals give the cores back."""
    sync = attach_daemon(runtime, mode=mode, policy=TOPOLOGY_AWARE)
    if mode == "external" or version_key(runtime.version) >= (0, 8, 0):
        assert sync is not None and sync.updates == [], diagnostics(runtime)
    web = make_pod(name="web-0", qos="burstable")
    db = make_pod(name="db-0", qos="guaranteed")
    nginx = make_container(web, name="nginx", cpu_request_millis=500)
    pg = guaranteed(db, "postgres", 2)
    cache = guaranteed(db, "cache", 2)

    runtime.run_pod(web)
    reply = runtime.create_container(web, nginx)
    assert (cpus(reply), mems(reply)) == ("1-7", "0"), diagnostics(runtime)
    assert updates(reply) == []
    runtime.start_container(web, nginx)

    runtime.run_pod(db)
    reply = runtime.create_container(db, pg)
    assert (cpus(reply), updates(reply)) == ("1,5", [(nginx["id"], "2-4,6-7")])
    runtime.start_container(db, pg)
    reply = runtime.create_container(db, cache)
    assert (cpus(reply), updates(reply)) == ("2,6", [(nginx["id"], "3-4,7")])
    runtime.start_container(db, cache)

    with pytest.raises(RuntimeCallError) as err:  # 3 of the 3 shared CPUs left
        runtime.create_container(db, guaranteed(db, "hog", 3, id="hog"))
    assert "container hog" in err.value.message, err.value.message
    room = "root: 2500m of shared capacity allocatable, 3000m needed"
    assert room in err.value.message, err.value.message

    reply = runtime.stop_container(db, pg)
    assert updates(reply) == [(nginx["id"], "1,3-5,7")]
    runtime.remove_container(db, pg)
    reply = runtime.stop_container(db, cache)
    assert updates(reply) == [(nginx["id"], "1-7")]
    runtime.remove_container(db, cache)
    assert runtime.updates() == []


def test_daemon_restart_keeps_placements(runtime: GoRuntime) -> None:
    """kill -9 under load, restart: correct placements stay, nothing granted twice."""
    attach_daemon(runtime, mode="external")
    web = make_pod(name="web-0", qos="burstable")
    db = make_pod(name="db-0", qos="guaranteed")
    nginx = make_container(web, name="nginx", cpu_request_millis=500)
    a, b = guaranteed(db, "a", 2), guaranteed(db, "b", 2)
    # load: 24 more shared containers in 6 pods, created between the exclusive ones
    crowd = [(make_pod(name=f"crowd-{i}", qos="burstable"), i) for i in range(6)]
    extra = [(p, make_container(p, name=f"w{j}", cpu_request_millis=100 + 10 * j))
             for p, i in crowd for j in range(4)]
    placed: dict[str, str] = {}
    order = [(web, nginx), *extra[:12], (db, a), *extra[12:], (db, b)]
    started: set[str] = set()
    for pod, ctr in order:
        if pod["id"] not in started:
            runtime.run_pod(pod)
            started.add(pod["id"])
        reply = runtime.create_container(pod, ctr)
        placed[ctr["id"]] = cpus(reply)
        placed.update(dict(updates(reply)))
        runtime.start_container(pod, ctr)
    shared = {cid: cs for cid, cs in placed.items() if cid not in (a["id"], b["id"])}
    assert set(shared.values()) == {"0,3-4,7"}
    assert (placed[a["id"]], placed[b["id"]]) == ("1,5", "2,6")

    first = runtime.externals[0]
    first.kill()
    first.wait()
    running = [
        make_container(web, name="nginx", cpu_request_millis=500, state="CONTAINER_RUNNING",
                       cpuset_cpus=placed[nginx["id"]]),
        guaranteed(db, "a", 2, state="CONTAINER_RUNNING", cpuset_cpus=placed[a["id"]]),
        guaranteed(db, "b", 2, state="CONTAINER_RUNNING", cpuset_cpus=placed[b["id"]]),
    ] + [
        make_container(p, name=c["name"], cpu_request_millis=100 + 10 * int(c["name"][1:]),
                       state="CONTAINER_RUNNING", cpuset_cpus=placed[c["id"]])
        for p, c in extra
    ]
    runtime.set_state(pods=[web, db] + [p for p, _ in crowd], containers=running)
    sync = attach_daemon(runtime, mode="external", start=False)
    assert sync is not None
    assert (sync.pods, sync.containers, sync.updates) == (8, 27, []), diagnostics(runtime)

    # the restarted daemon knows what is taken: the next grant is the last free core
    c = guaranteed(db, "c", 2)
    reply = runtime.create_container(db, c)
    assert cpus(reply) == "3,7"
    moved = dict(updates(reply))
    assert set(moved) == set(shared) and set(moved.values()) == {"0,4"}


@pytest.mark.parametrize("nri_version", ["v0.12.2"])
def test_daemon_synchronize_fixes_double_allocation(runtime: GoRuntime) -> None:
    db = make_pod(name="db-0", qos="guaranteed")
    a = guaranteed(db, "a", 2, state="CONTAINER_RUNNING", cpuset_cpus="1,5")
    b = guaranteed(db, "b", 2, state="CONTAINER_RUNNING", cpuset_cpus="1,5")
    sync = attach_daemon(runtime, mode="external", pods=[db], containers=[a, b])
    assert sync is not None
    moved = {u["container_id"]: u["linux"]["resources"]["cpu"]["cpus"] for u in sync.updates}
    assert list(moved) == [b["id"]], diagnostics(runtime)
    assert set(moved[b["id"]].replace("-", ",").split(",")).isdisjoint({"1", "5"})
