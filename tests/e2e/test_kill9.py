"""kill -9 of the daemon on a real containerd: fail open, then the restart's corrections.

The machine class and configurations are `test_daemon.py`'s (CPUs 0-1, CPU 0 reserved;
static unless said otherwise).  SIGKILL leaves no goodbye: containerd creates the pods
that come meanwhile without the plugin (fail open: every CPU), and the restarted
daemon's Synchronize must correct them without moving what was right:

* a fail-open Guaranteed container gets the free CPU and the shared ones leave it, and a
  second restart with nothing changed moves nobody (`test_kill9_fail_open_and_correction`);
* churn: pods created and removed while the daemon is killed twice;
* the resync reaching a container whose StartContainer is in flight;
* the restart rule (`resmgr.check_restart_rule`): fail-open Guaranteed containers never
  share an exclusive CPU, a claim of every CPU loses to a valid holder, and on
  topology-aware an unplaceable container still leaves the isolated CPU.

The rounds of issue 24 (every kill point, hundreds of restarts) are `test_kill9_rounds.py`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.e2e import cri
from tests.e2e.containerd import Containerd
from tests.e2e.resmgr import (
    STATIC,
    Cpusets,
    Daemon,
    assert_no_double_exclusive,
    await_cpus,
    check_restart_rule,
    restarted,
    running_daemon,
    settled_cpusets,
    web_and_db,
)
from tests.e2e.resmgr import daemon as daemon  # the fixture
from tests.support.requirements import online_cpus


def test_kill9_fail_open_and_correction(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """kill -9 while pods come and go; pods start without it; back, it corrects them."""
    ctd = containerd
    d = running_daemon(daemon, STATIC)
    b, g = web_and_db(ctd)
    assert (cri.cpus_of(ctd, g), cri.cpus_of(ctd, b)) == ("1", "0")

    d.kill9()
    # pods come and go while the daemon is away: containerd fails open
    cri.remove_pod(ctd, g.pod)
    web2 = cri.run_pod(ctd, "web2")
    b2 = cri.run_container(ctd, web2, "app", resources=cri.BURSTABLE_SMALL)
    db3 = cri.run_pod(ctd, "db3", qos=cri.QoS.GUARANTEED)
    g3 = cri.run_container(ctd, db3, "pg", resources=cri.GUARANTEED_1CPU)
    assert cri.cpus_of(ctd, b2) == "0-1", "without a plugin containerd leaves the cpuset alone"
    assert cri.cpus_of(ctd, g3) == "0-1"
    assert cri.cpus_of(ctd, b) == "0", "nobody touched the running container"

    d.start()
    d.wait_synced(2)
    # back: the Guaranteed container gets the free CPU, the shared ones the rest
    await_cpus(ctd, g3, "1", "restarted daemon places the container created without it")
    await_cpus(ctd, b2, "0", "restarted daemon corrects the shared container")
    assert cri.cpus_of(ctd, b) == "0", "a correctly placed container must not move"
    assert_no_double_exclusive(ctd, {"db3/pg": g3}, [b, b2])

    # a second kill -9 with nothing changed: the restart moves nobody
    before = {c.id: cri.cpus_of(ctd, c) for c in (b, b2, g3)}
    d.kill9()
    d.start()
    d.wait_synced(3)
    after = {c.id: cri.cpus_of(ctd, c) for c in (b, b2, g3)}
    assert after == before
    # and the state it rebuilt is right: no second exclusive CPU exists
    db4 = cri.run_pod(ctd, "db4", qos=cri.QoS.GUARANTEED)
    created, stderr = cri.create_container(
        ctd, db4, "pg", resources=cri.GUARANTEED_1CPU, check=False
    )
    assert created is None, "CPU 1 is still exclusive to db3/pg after the restart"
    assert "only 0 free CPUs available" in stderr, stderr



def test_kill9_during_churn_keeps_invariants(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """Pods are created and removed continuously while the daemon is SIGKILLed and
    restarted twice. Afterwards: every error was the policy's "no free CPU" refusal, no
    CPU is exclusive to two containers, no shared container runs on the exclusive CPU, and
    a fresh Guaranteed request gets exactly the CPU nobody holds."""
    ctd = containerd
    d = running_daemon(daemon, STATIC)
    live: list[tuple[cri.Container, cri.QoS]] = []
    errors: list[str] = []
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set() and i < 40:
            qos = cri.QoS.GUARANTEED if i % 3 == 0 else cri.QoS.BURSTABLE
            res = cri.GUARANTEED_1CPU if qos is cri.QoS.GUARANTEED else cri.BURSTABLE_SMALL
            pod = cri.run_pod(ctd, f"churn-{i}", qos=qos)
            c, err = cri.create_container(ctd, pod, "app", resources=res, check=False)
            if c is None:
                errors.append(err)
                cri.remove_pod(ctd, pod)
            else:
                cri.start_container(ctd, c)
                live.append((c, qos))
            if len(live) > 4:
                old, _ = live.pop(0)
                cri.remove_pod(ctd, old.pod)
            i += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for restart in (2, 3):
            time.sleep(1.5)
            d.kill9()
            time.sleep(1.5)
            d.start()
            d.wait_synced(restart)
    finally:
        stop.set()
        worker.join(300)
    assert not worker.is_alive()
    unexpected = [e for e in errors if "only 0 free CPUs available" not in e]
    assert unexpected == [], unexpected

    # settle: the last resync's updates are applied asynchronously by containerd
    final = settled_cpusets(ctd, [c for c, _ in live])
    holders = [c.id for c, q in live if q is cri.QoS.GUARANTEED and final[c.id] == {1}]
    assert len(holders) <= 1, f"CPU 1 exclusive to several containers: {holders}"
    table = "\n".join(
        f"  {c.pod.name}/{c.name} {q.value} {c.id[:12]}: {sorted(final[c.id])}" for c, q in live
    )
    if holders:
        overlapping = [c.pod.name for c, _ in live if c.id not in holders and 1 in final[c.id]]
        assert overlapping == [], (
            f"CPU 1 is exclusive to {holders[0][:12]} but also in the cpuset of "
            f"{overlapping}:\n{table}\ndaemon log: {d.log}"
        )
    for c, _ in live:
        assert final[c.id] and final[c.id] <= online_cpus(), table

    probe = cri.run_pod(ctd, "probe", qos=cri.QoS.GUARANTEED)
    created, stderr = cri.create_container(
        ctd, probe, "app", resources=cri.GUARANTEED_1CPU, check=False
    )
    if holders:
        assert created is None and "only 0 free CPUs available" in stderr, stderr
    else:
        assert created is not None, (
            f"no container runs on CPU 1 alone, yet the daemon refuses it:\n{stderr}\n"
            f"{table}\ndaemon log: {d.log}"
        )
        cri.start_container(ctd, created)
        assert cri.cpus_of(ctd, created) == "1"
    assert d.proc is not None and d.proc.alive()


def test_resync_during_slow_start_reaches_the_container(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """The daemon reconnects while a StartContainer is in flight (runc create delayed by
    3 s). Its Synchronize reply moves that container off the exclusive CPU; the move must
    reach the container's cgroup, or the shared container runs on the CPU that another
    container holds exclusively. (Found by the churn test above, where it happens when a
    restart lands on a starting container.)"""
    ctd = containerd
    d = running_daemon(daemon, STATIC)
    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    g = cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)
    d.kill9()
    web = cri.run_pod(ctd, "web")
    created, stderr = cri.create_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
    assert created is not None, stderr
    ctd.layout.slow_runc_flag.write_text("3")
    try:
        starter = threading.Thread(target=cri.start_container, args=(ctd, created))
        starter.start()
        time.sleep(0.5)  # StartContainer is now waiting in runc create
        d.start()
        d.wait_synced(2)
        starter.join(60)
    finally:
        ctd.layout.slow_runc_flag.unlink(missing_ok=True)
    assert cri.cpus_of(ctd, g) == "1"
    time.sleep(2)  # any later correction has had time to land
    cpus = cri.cpus_of(ctd, created)
    assert cpus == "0", (
        f"web/app runs on {cpus}, including CPU 1, exclusive to db/pg: the daemon's resync "
        "placed it on 0 while its StartContainer was in flight, and that update was lost"
    )


def test_kill9_fail_open_guaranteed_never_share_exclusive_cpus(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """Issue 11, items 1 and 4, on the real runtime.

    Shared containers fill the pool (0-1). With the daemon down, Guaranteed containers
    are created: containerd fails open and they run on 0-1 too. Back, the daemon gives
    one of them the free CPU 1 exclusively, and every other container (the shared ones,
    and the Guaranteed one that no longer fits) must be moved off it. Then, down again,
    a Guaranteed container created on every CPU claims CPU 1 as well: the valid holder
    keeps it and the claimant is the one that moves.
    """
    ctd = containerd
    d = running_daemon(daemon, STATIC)
    live: list[tuple[cri.Container, cri.QoS]] = []
    for i in range(3):
        pod = cri.run_pod(ctd, f"shared-{i}", qos=cri.QoS.BURSTABLE)
        live.append((cri.run_container(ctd, pod, "app", resources=cri.BURSTABLE_SMALL),
                     cri.QoS.BURSTABLE))  # fmt: skip
    assert {cri.cpus_of(ctd, c) for c, _ in live} == {"0-1"}

    d.kill9()
    for i in range(2):
        pod = cri.run_pod(ctd, f"late-{i}", qos=cri.QoS.GUARANTEED)
        g = cri.run_container(ctd, pod, "app", resources=cri.GUARANTEED_1CPU)
        assert cri.cpus_of(ctd, g) == "0-1", "without a plugin containerd leaves the cpuset alone"
        live.append((g, cri.QoS.GUARANTEED))
    pod = cri.run_pod(ctd, "shared-late", qos=cri.QoS.BESTEFFORT)
    live.append((cri.run_container(ctd, pod, "app", resources=cri.BESTEFFORT),
                 cri.QoS.BESTEFFORT))  # fmt: skip

    kernel = Cpusets(ctd)
    d.start()
    _, cpus = restarted(d, kernel, [c for c, _ in live], "the first restart")
    holders = check_restart_rule(cpus, live, d.log)
    assert len(holders) == 1 and cpus[holders[0].id] == {1}, (
        f"one fail-open Guaranteed container gets the free CPU 1: {cpus}"
    )
    holder = holders[0]

    d.kill9()
    pod = cri.run_pod(ctd, "claimant", qos=cri.QoS.GUARANTEED)
    claimant = cri.run_container(ctd, pod, "app", resources=cri.GUARANTEED_1CPU)
    assert cri.cpus_of(ctd, claimant) == "0-1"
    live.append((claimant, cri.QoS.GUARANTEED))
    before = {c.id: cpus[c.id] for c, _ in live if c is not claimant}

    d.start()
    _, after = restarted(d, kernel, [c for c, _ in live], "the second restart")
    holders = check_restart_rule(after, live, d.log)
    assert holders == [holder], f"the valid holder keeps CPU 1: {after}"
    assert after[claimant.id] == {0}, "the claim of every CPU loses: on the shared pool"
    assert {cid: after[cid] for cid in before} == before, "nobody else moved"
    assert d.proc is not None and d.proc.alive()


def test_kill9_topology_aware_unplaceable_container_leaves_the_isolated_cpu(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """Issue 11 item 1 for topology-aware on the real runtime.

    The daemon sees this machine with CPU 1 kernel-isolated (a synthetic sysfs of the
    same shape) and CPU 0 reserved, so no pool has a shared CPU. While it is down, a
    Burstable and a Guaranteed container are created (containerd fails open: 0-1).
    Back, the Guaranteed one gets the isolated CPU 1; the Burstable one fits nowhere by
    its request, and must still be moved off CPU 1 (to the reserved CPU 0) rather than
    left where it is.
    """
    from nri_resmgr.topology.synthetic import write_sysfs

    ctd = containerd
    root = ctd.layout.base / "sysfs-isolated"
    write_sysfs(
        {"packages": 1, "nodes": 1, "cores": 2, "threads": 1, "memory": "1G", "isolated": "1"},
        root,
    )
    d = daemon({"policy": "topology-aware",
                "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}}})  # fmt: skip
    d.sysfs_root = str(root)
    d.start()
    d.wait_synced(1)
    sys_pod = cri.run_pod(ctd, "sys", qos=cri.QoS.BURSTABLE, namespace="kube-system")
    k = cri.run_container(ctd, sys_pod, "agent", resources=cri.BURSTABLE_SMALL)
    assert cri.cpus_of(ctd, k) == "0"

    d.kill9()
    web = cri.run_pod(ctd, "web", qos=cri.QoS.BURSTABLE)
    b = cri.run_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    g = cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)
    assert (cri.cpus_of(ctd, b), cri.cpus_of(ctd, g)) == ("0-1", "0-1")

    d.start()
    _, cpus = restarted(d, Cpusets(ctd), [k, b, g], "the restart")
    table = {f"{c.pod.name}/{c.name}": sorted(cpus[c.id]) for c in (k, b, g)}
    assert cpus[g.id] == {1}, f"the Guaranteed container gets the isolated CPU: {table}"
    assert_no_double_exclusive(ctd, {"db/pg": g}, [k, b])
    assert cpus[b.id] == {0}, f"the unplaceable one runs on the reserved CPU: {table}"
    assert cpus[k.id] == {0}, f"the kube-system container did not move: {table}"
    assert d.proc is not None and d.proc.alive()

