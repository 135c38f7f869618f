"""A Synchronize reply whose update the runtime cannot apply, on the real runtimes.

CRI-O 1.36.3 applies the reply's updates inside its `syncPlugin` and, when one not marked
``ignore_failure`` fails, never adds the plugin to those that get events (it logs
"failed to synchronize plugin" and nothing more); containerd logs the failure and
synchronizes the plugin anyway.  The churn test met it by chance (a restored placement
hit a container being stopped, about one run in thirteen); here the failure is certain:
the daemon sees a synthetic machine with CPUs 0-3 and CPUs 0-1 reserved, so every
container it moves at Synchronize is moved onto CPU 2 or 3, which this machine (CPUs 0-1)
does not have, and the kernel refuses the cpuset.  The runtime must still report the
plugin synchronized (its own "connected and synchronized" line).  Without the
``ignore_failure`` mark CRI-O never does; containerd does either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nri_resmgr.topology.synthetic import write_sysfs
from tests.e2e import cri
from tests.e2e.containerd import Containerd
from tests.e2e.resmgr import Daemon, Synchronized, synchronized_in
from tests.e2e.resmgr import daemon as daemon  # the fixture
from tests.support.waiting import wait_for

#: a machine with twice this one's CPUs (0-3), this machine's own (0-1) reserved
BEYOND = {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0-1"}}


def test_a_sync_update_the_runtime_cannot_apply_leaves_the_daemon_synchronized(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    ctd = containerd
    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    g = cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)
    assert cri.cpus_of(ctd, g) == "0-1", "without a plugin the runtime leaves the cpuset alone"

    root = ctd.layout.base / "sysfs-beyond"
    write_sysfs({"packages": 1, "nodes": 1, "cores": 4, "threads": 1, "memory": "1G"}, root)
    d = daemon(BEYOND)
    d.sysfs_root = str(root)
    d.start()
    d.wait_synced_since_start(timeout=60)

    lines: list[str] = []

    def decided() -> Synchronized | None:
        lines.extend(d.output_since_start.new_lines())
        return synchronized_in(lines, [g.id])

    sync: Synchronized = wait_for(decided, timeout=30, what="the daemon's decision on db/pg")
    # the failure this test is about did happen: the daemon moved pg to a CPU this
    # machine lacks, and the kernel refused it
    assert sync.cpus[g.id] and sync.cpus[g.id] <= {2, 3}, sync
    assert cri.cpus_of(ctd, g) == "0-1", "the kernel refused the cpuset: nothing changed"
    assert "failed to synchronize plugin" not in ctd.log_text(), ctd.log_tail(30)
    assert d.proc is not None and d.proc.alive()
