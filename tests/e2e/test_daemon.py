"""nri-resmgr on a real containerd: placements, faults and bursts, read back from cgroups.

This machine class has 2 CPUs (0-1) and one NUMA node, so the scenarios are sized for it:

* ``static`` with CPU 0 reserved (kubelet semantics: the reserved CPU stays in the shared
  pool). Burstable and BestEffort containers start on 0-1; a Guaranteed 1-CPU container
  takes CPU 1 exclusively and the shared pool shrinks to 0, which the running shared
  containers' cgroups must show; a second Guaranteed container is impossible and its
  CreateContainer error must reach crictl; removing the first grows the pool back.
* ``topology-aware`` with CPU 0 reserved: shared containers run on CPU 1 with memory node
  0; kube-system runs on the reserved CPU 0; an exclusive CPU would empty the only
  shared set, so a Guaranteed request is refused with the policy's text.

The daemon always runs with the real sysfs (`--sysfs-root /`), its own state dir and a
log file under the test's temp dir. Every assertion reads the container's cgroup
(`cpuset.cpus`, `cpuset.mems`) and its init's `Cpus_allowed_list`.

The daemon and the readers of its placements are `tests/e2e/resmgr.py`; the kill -9
scenarios are `test_kill9.py`, the kill -9 rounds of issue 24 `test_kill9_rounds.py`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.control.irq import parse_interrupts
from tests.e2e import cri
from tests.e2e.conftest import (
    plugin_failures,
    python,
    python_env,
    record_prereg_startup,
    wait_plugin_synchronized,
)
from tests.e2e.containerd import CACHE, Containerd
from tests.e2e.resmgr import (
    PLUGIN,
    PREREG_REGISTRATION_TIMEOUT,
    STATIC,
    TOPOLOGY_AWARE,
    Daemon,
    assert_no_double_exclusive,
    await_cpus,
    running_daemon,
    web_and_db,
)
from tests.e2e.resmgr import daemon as daemon  # the fixture
from tests.support.requirements import REPO, require
from tests.support.waiting import wait_for

# -- static: QoS classes and a shared pool that shrinks ----------------------------------


def _static_scenario(ctd: Containerd) -> None:
    web = cri.run_pod(ctd, "web", qos=cri.QoS.BURSTABLE)
    b = cri.run_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
    be = cri.run_pod(ctd, "batch", qos=cri.QoS.BESTEFFORT)
    e = cri.run_container(ctd, be, "job", resources=cri.BESTEFFORT)
    assert cri.cpus_of(ctd, b) == "0-1"
    assert cri.cpus_of(ctd, e) == "0-1"

    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    g = cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)
    assert cri.cpus_of(ctd, g) == "1"
    await_cpus(ctd, b, "0", "shared pool shrank")
    await_cpus(ctd, e, "0", "shared pool shrank")
    assert_no_double_exclusive(ctd, {"db/pg": g}, [b, e])

    db2 = cri.run_pod(ctd, "db2", qos=cri.QoS.GUARANTEED)
    created, stderr = cri.create_container(
        ctd, db2, "pg", resources=cri.GUARANTEED_1CPU, check=False
    )
    assert created is None, "a second exclusive CPU does not exist, creation must fail"
    assert "requested 1 exclusive CPUs; only 0 free CPUs available" in stderr, stderr
    assert "db2" in stderr and "pg" in stderr, stderr
    cri.remove_pod(ctd, db2)

    cri.remove_pod(ctd, g.pod)
    await_cpus(ctd, b, "0-1", "shared pool grew back")
    await_cpus(ctd, e, "0-1", "shared pool grew back")
    assert plugin_failures(ctd) == []


def test_static_external(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    d = running_daemon(daemon, STATIC)
    _static_scenario(containerd)
    assert d.proc is not None and d.proc.alive()


@pytest.mark.registration_timeout(PREREG_REGISTRATION_TIMEOUT)
def test_static_preregistered(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """`nri-resmgr install --root <tmp>` writes the launcher containerd then starts."""
    config = containerd.layout.base / "static.json"
    config.write_text(json.dumps(STATIC))
    log = containerd.layout.base / "resmgr-prereg.log"
    r = subprocess.run(
        [python(), "-m", "nri_resmgr.cli", "install", "--index", "90",
         "--root", str(containerd.layout.base), "--policy", "static",
         "--config", str(config), "--log-file", str(log)],
        capture_output=True, text=True, env=python_env(), cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (containerd.layout.plugin_path / PLUGIN).exists()
    containerd.restart()
    try:
        wait_plugin_synchronized(containerd, PLUGIN)
    except AssertionError as exc:
        text = log.read_text() if log.exists() else "(no log file)"
        raise AssertionError(f"{exc}\n--- daemon log ---\n{text[-3000:]}") from None
    record_prereg_startup(containerd, PLUGIN, "nri-resmgr run, pre-registered")
    _static_scenario(containerd)


@pytest.mark.registration_timeout(PREREG_REGISTRATION_TIMEOUT)
def test_static_preregistered_config_from_conf_d(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """Pre-registered through a plain launcher (no policy on its command line): the
    policy comes only from conf.d/90-resmgr.conf, which containerd hands over in
    Configure. The static scenario's exact cpusets prove that config was applied."""
    log = containerd.layout.base / "resmgr-prereg.log"
    launcher = containerd.layout.plugin_path / PLUGIN
    launcher.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH='{REPO}' exec '{python()}' -m nri_resmgr.cli run "
        f"--sysfs-root / --state-dir '{containerd.layout.base / 'resmgr-state'}' "
        f">>'{log}' 2>&1\n"
    )
    launcher.chmod(0o755)
    conf = containerd.layout.plugin_config_path / f"{PLUGIN}.conf"
    conf.write_text(json.dumps({**STATIC, "log": {"level": "debug", "file": str(log)}}))
    containerd.restart()
    try:
        wait_plugin_synchronized(containerd, PLUGIN)
    except AssertionError as exc:
        text = log.read_text() if log.exists() else "(no log file)"
        raise AssertionError(f"{exc}\n--- daemon log ---\n{text[-3000:]}") from None
    record_prereg_startup(containerd, PLUGIN, "nri-resmgr run, pre-registered")
    _static_scenario(containerd)


# -- topology-aware ---------------------------------------------------------------------


def test_topology_aware_external(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    running_daemon(daemon, TOPOLOGY_AWARE)
    ctd = containerd
    web = cri.run_pod(ctd, "web", qos=cri.QoS.BURSTABLE)
    b = cri.run_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
    be = cri.run_pod(ctd, "batch", qos=cri.QoS.BESTEFFORT)
    e = cri.run_container(ctd, be, "job")
    sys_pod = cri.run_pod(ctd, "dns", qos=cri.QoS.BURSTABLE, namespace="kube-system")
    k = cri.run_container(ctd, sys_pod, "coredns", resources=cri.BURSTABLE_SMALL)
    for c, want in ((b, "1"), (e, "1"), (k, "0")):
        view = cri.kernel_view(ctd, c)
        assert (view.cpus, view.mems) == (want, "0"), f"{c.pod.name}/{c.name}: {view}"
        assert view.allowed_cpus == want

    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    created, stderr = cri.create_container(
        ctd, db, "pg", resources=cri.GUARANTEED_1CPU, check=False
    )
    assert created is None
    assert "no pool can fit 1 isolated or exclusive CPU" in stderr, stderr
    assert "root: 899m of shared capacity allocatable, 1000m needed" in stderr, stderr
    # the refused request changed nothing
    assert (cri.cpus_of(ctd, b), cri.cpus_of(ctd, e), cri.cpus_of(ctd, k)) == ("1", "1", "0")
    assert plugin_failures(ctd) == []


def _real_irq(device: str) -> tuple[int, Path]:
    """The number and ``smp_affinity_list`` of the machine's interrupt for `device`."""
    irqs = parse_interrupts(Path("/proc/interrupts").read_text())
    found = [i.number for i in irqs if i.description.split()[-1:] == [device]]
    require(found, f"this machine has no {device} interrupt in /proc/interrupts")
    path = Path(f"/proc/irq/{found[0]}/smp_affinity_list")
    require(os.access(path, os.W_OK), f"{path} is not writable (root needed)")
    return found[0], path


def test_topology_aware_irq_claim_moves_a_real_interrupt(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """Their test25's claim on the kernel: the ``irq-affinity`` annotation of a container
    with an exclusive CPU moves the serial port's interrupt there (its
    ``/proc/irq/N/smp_affinity_list``), and the original comes back when the pod goes.
    100m reserved (a quantity): a 1-CPU Guaranteed container gets a CPU of its own."""
    _, path = _real_irq("ttyS0")
    original = path.read_text().strip()
    ctd = containerd
    d = running_daemon(
        daemon, {"policy": "topology-aware", "policyConfig": {"reservedResources": {"cpu": "100m"}}}
    )
    try:
        pod = cri.run_pod(
            ctd,
            "irq",
            qos=cri.QoS.GUARANTEED,
            annotations={"irq-affinity.resource-policy.nri.io/container.c": 'claim: ["*ttyS0*"]'},
        )
        c = cri.run_container(ctd, pod, "c", resources=cri.GUARANTEED_1CPU)
        mine = cri.cpus_of(ctd, c)
        assert len(cri.parse_cpus(mine)) == 1, mine
        wait_for(
            lambda: path.read_text().strip() == mine,
            timeout=15,
            what=f"{path} == {mine} (now {path.read_text().strip()})",
        )
        cri.remove_pod(ctd, pod)
        wait_for(
            lambda: path.read_text().strip() == original,
            timeout=15,
            what=f"{path} back to {original} (now {path.read_text().strip()})",
        )
        assert plugin_failures(ctd) == []
        assert d.proc is not None and d.proc.alive()
    finally:
        path.write_text(original + "\n")


@pytest.mark.parametrize(
    ("annotation", "value", "expected"),
    [
        ("prefer-shared-cpus.resource-policy.nri.io/container.c", "maybe",
         'annotation prefer-shared-cpus.resource-policy.nri.io has value "maybe"; '
         "expected true or false"),
        ("memory-type.resource-policy.nri.io/container.c", "hbmx",
         'has unknown type "hbmx"; expected one of dram, pmem, hbm'),
    ],
    ids=["bool", "memory-type"],
)  # fmt: skip
def test_malformed_annotation_error_reaches_crictl(
    containerd: Containerd,
    daemon: Callable[[dict[str, Any]], Daemon],
    annotation: str,
    value: str,
    expected: str,
) -> None:
    d = running_daemon(daemon, TOPOLOGY_AWARE)
    pod = cri.run_pod(containerd, "bad", annotations={annotation: value})
    created, stderr = cri.create_container(containerd, pod, "c", check=False)
    assert created is None
    assert expected in stderr, stderr
    assert "e2e/bad" in stderr and "c" in stderr, stderr
    # an error status is not fatal: the daemon stays connected and serves the next pod
    good = cri.run_container(containerd, pod, "ok", resources=cri.BURSTABLE_SMALL)
    assert cri.cpus_of(containerd, good) == "1"
    assert d.proc is not None and d.proc.alive()
    assert plugin_failures(containerd) == []


# -- faults -----------------------------------------------------------------------------
def test_containerd_restart_daemon_resyncs(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    ctd = containerd
    d = running_daemon(daemon, STATIC)
    b, g = web_and_db(ctd)

    ctd.restart()  # shims and containers survive, the NRI connection does not
    d.wait_synced(2)  # the daemon reconnected and was synchronized again
    assert d.proc is not None and d.proc.alive()
    assert (cri.cpus_of(ctd, g), cri.cpus_of(ctd, b)) == ("1", "0"), "nothing moved"

    web2 = cri.run_pod(ctd, "web2")
    b2 = cri.run_container(ctd, web2, "app", resources=cri.BURSTABLE_SMALL)
    assert cri.cpus_of(ctd, b2) == "0", "a later pod is placed by the resynchronized daemon"
    db2 = cri.run_pod(ctd, "db2", qos=cri.QoS.GUARANTEED)
    created, stderr = cri.create_container(
        ctd, db2, "pg", resources=cri.GUARANTEED_1CPU, check=False
    )
    assert created is None and "only 0 free CPUs available" in stderr, stderr
    cri.remove_pod(ctd, g.pod)
    await_cpus(ctd, b, "0-1", "pool grows after the resync")
    await_cpus(ctd, b2, "0-1", "pool grows after the resync")


# -- a burst of concurrent pods -----------------------------------------------------------

BURST = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _scrape_latency(port: int, event: str) -> dict[str, float]:
    """The daemon's own handler-time histogram for `event`, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("nri_resmgr_event_latency_seconds"):
            continue
        if f'event="{event}"' not in line:
            continue
        name_labels, value = line.rsplit(" ", 1)
        name = name_labels.split("{", 1)[0].removeprefix("nri_resmgr_event_latency_seconds")
        le = name_labels.split('le="', 1)[1].split('"', 1)[0] if 'le="' in name_labels else ""
        out[f"bucket_le_{le}" if le else name.lstrip("_")] = float(value)
    return out


def test_concurrent_burst_answered_in_time(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon], release: Any
) -> None:
    """BURST pods created at once: every CreateContainer answered, no plugin dropped."""
    ctd = containerd
    port = _free_port()
    running_daemon(daemon, {**STATIC, "instrumentation": {"httpEndpoint": f"127.0.0.1:{port}"}})
    pods = [cri.run_pod(ctd, f"burst-{i}") for i in range(BURST)]
    results: dict[int, tuple[float, cri.Container | None, str]] = {}
    gate = threading.Barrier(BURST)

    def create(i: int) -> None:
        gate.wait()
        t0 = time.perf_counter()
        c, err = cri.create_container(
            ctd, pods[i], "app", resources=cri.BURSTABLE_SMALL, check=False
        )
        results[i] = (time.perf_counter() - t0, c, err)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    failed = {i: err for i, (_, c, err) in results.items() if c is None}
    assert len(results) == BURST and not failed, failed
    assert plugin_failures(ctd) == [], plugin_failures(ctd)
    for _, c, _err in results.values():
        assert c is not None
        cri.start_container(ctd, c)
        assert cri.cpus_of(ctd, c) == "0-1"

    latencies = sorted(round(v[0] * 1000, 1) for v in results.values())
    out = CACHE / "latency"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"burst-{release.name}.json").write_text(
        json.dumps(
            {
                "what": "crictl create wall time (ms) with nri-resmgr static, "
                f"{BURST} concurrent",
                "containerd": release.version,
                "concurrency": BURST,
                "request_timeout": ctd.request_timeout,
                "ms": latencies,
                "daemon_create_container_seconds": _scrape_latency(port, "CreateContainer"),
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=2,
        )
    )


# -- block I/O classes: the container's blkio cgroup ---------------------------------------


def _whole_disk() -> tuple[str, str] | None:
    """(/dev path, MAJ:MIN) of a real whole disk (not loop, zram or ram), or None."""
    for entry in sorted(Path("/sys/block").iterdir()):
        if entry.name.startswith(("loop", "zram", "ram", "dm-", "md")):
            continue
        dev = Path("/dev") / entry.name
        if dev.is_block_device():
            return str(dev), (entry / "dev").read_text().strip()
    return None


def test_blockio_class_throttles_in_cgroup(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    disk = _whole_disk()
    if disk is None:
        pytest.skip("no whole block device (only loop/zram/ram) to throttle")
    if not (cri.CGROUP_ROOT / "blkio" / "blkio.throttle.read_bps_device").exists():
        pytest.skip("no cgroup v1 blkio hierarchy with throttle files")
    path, majmin = disk
    config = {
        **STATIC,
        "control": {
            "blockio": {
                "enable": True,
                "classes": {
                    "slowdisk": {
                        "devices": [
                            {"devices": [path], "throttleReadBps": "50M",
                             "throttleWriteIOPS": 500}
                        ]
                    }
                },
            }
        },
    }  # fmt: skip
    running_daemon(daemon, config)
    ctd = containerd
    pod = cri.run_pod(
        ctd, "io", annotations={"blockioclass.resource-policy.nri.io/container.slow": "slowdisk"}
    )
    created, stderr = cri.create_container(
        ctd, pod, "slow", resources=cri.BURSTABLE_SMALL, check=False
    )
    assert created is not None, stderr
    slow = created
    cri.start_container(ctd, slow)
    fast = cri.run_container(ctd, pod, "fast", resources=cri.BURSTABLE_SMALL)
    pid = cri.container_pid(ctd, slow)
    assert cri.read_cgroup(pid, "blkio", "blkio.throttle.read_bps_device") == f"{majmin} 52428800"
    assert cri.read_cgroup(pid, "blkio", "blkio.throttle.write_iops_device") == f"{majmin} 500"
    other = cri.container_pid(ctd, fast)
    assert cri.read_cgroup(other, "blkio", "blkio.throttle.read_bps_device") == ""
    assert cri.cgroup_dir(pid, "blkio") != cri.cgroup_dir(other, "blkio")

    bad = cri.run_pod(
        ctd, "io2", annotations={"blockioclass.resource-policy.nri.io/container.c": "nosuch"}
    )
    created, stderr = cri.create_container(ctd, bad, "c", check=False)
    assert created is None
    assert "nosuch" in stderr and "slowdisk" in stderr, stderr
    assert plugin_failures(ctd) == []


@pytest.mark.request_timeout("1s")
def test_hung_daemon_times_out_fails_open_and_recovers(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    """SIGSTOP the daemon: containerd gives up after the request timeout, drops it and
    creates the container anyway; SIGCONT: it reconnects, resyncs and corrects placement."""
    ctd = containerd
    d = running_daemon(daemon, STATIC)
    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    g = cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)
    web = cri.run_pod(ctd, "web")
    assert d.proc is not None
    d.proc.signal(signal.SIGSTOP)
    try:
        b = cri.run_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
        assert cri.cpus_of(ctd, b) == "0-1", "created without the (hung) plugin's adjustment"
        assert any("closing plugin" in ln and PLUGIN in ln for ln in plugin_failures(ctd))
    finally:
        d.proc.signal(signal.SIGCONT)
    d.wait_synced(2)
    await_cpus(ctd, b, "0", "the resynchronized daemon moves it off the exclusive CPU")
    assert cri.cpus_of(ctd, g) == "1", "the exclusive container did not move"
    assert_no_double_exclusive(ctd, {"db/pg": g}, [b])

