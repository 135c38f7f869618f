"""Topology hints from the devices and mounts the runtime gives a container, per version.

The daemon (external) runs on a synthetic sysfs of nri-plugins' n4c16 machine (2 packages
x 2 NUMA nodes x 2 cores x 2 threads: node2 = 4-5,12-13, node3 = 6-7,14-15) with PCI
devices: a GPU (char 226:0) on node3 and an NVMe disk (block 259:0) on node2.  The
container's ``linux.devices`` and ``mounts`` arrive through the real NRI library; the
daemon resolves them under its ``--sysfs-root`` and places the container next to them.
"""

from __future__ import annotations

import json

import pytest

from nri_resmgr.topology.synthetic import write_sysfs
from tests.conformance.harness import GoRuntime, Json, RuntimeCallError, prune_empty
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.test_daemon import DAEMON, IDX, NAME, diagnostics

pytestmark = pytest.mark.conformance

N4C16 = {"packages": 2, "dies": 1, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"}
DEVICES = [
    {"pci": "0000:af:00.0", "name": "card0", "node": 3, "char": "226:0"},
    {"pci": "0000:3b:00.0", "name": "nvme0n1", "node": 2, "block": "259:0"},
]
NVME_SYSFS = "/sys/devices/pci0000:3b/0000:3b:00.0/nvme/nvme0/nvme0n1"


def _guaranteed(pod: Json, name: str, n: int) -> Json:
    return make_container(
        pod,
        name=name,
        cpu_request_millis=1000 * n,
        cpu_limit_millis=1000 * n,
        memory_limit=1 << 28,
    )


def _linux(reply: Json) -> Json:
    linux: Json = prune_empty(reply)["adjust"]["linux"]
    return linux


def test_devices_and_mounts_steer_the_placement(runtime: GoRuntime) -> None:
    d = runtime.dir
    write_sysfs(N4C16, d / "root", devices=DEVICES)
    cfg = d / "resmgr.json"
    cfg.write_text(
        json.dumps(
            {
                "policy": "topology-aware",
                "policyConfig": {
                    "reservedResources": {"cpu": "cpuset:0"},
                    "preferIsolatedCPUs": False,
                },
                "log": {"level": "debug", "format": "json", "file": str(d / "daemon.log")},
            }
        )
    )
    runtime.start()
    runtime.start_external(
        DAEMON,
        idx=IDX,
        name=NAME,
        args=[
            "--sysfs-root",
            str(d / "root"),
            "--config",
            str(cfg),
            "--state-dir",
            str(d / "state"),
        ],
        log_path=d / "daemon.out",
    )
    runtime.wait_synced(timeout=60)

    # a device: the GPU's node
    gpu = make_pod(name="render-0", qos="guaranteed")
    runtime.run_pod(gpu)
    ctr = _guaranteed(gpu, "render", 2)
    ctr["linux"]["devices"] = [
        {"path": "/dev/dri/card0", "type": "c", "major": 226, "minor": 0},
    ]
    res = _linux(runtime.create_container(gpu, ctr))["resources"]["cpu"]
    assert set(res["cpus"].replace("-", ",").split(",")) <= {"6", "7", "14", "15"}, (
        res,
        diagnostics(runtime),
    )
    assert res["mems"] == "3"

    # a mount of the disk's sysfs directory, strict: the disk's node
    db = make_pod(
        name="db-0",
        qos="guaranteed",
        annotations={
            "strict.topologyhints.resource-policy.nri.io": "true",
        },
    )
    runtime.run_pod(db)
    pg = _guaranteed(db, "pg", 2)
    pg["mounts"].append(
        {"destination": "/data", "type": "bind", "source": NVME_SYSFS, "options": ["rbind", "rw"]}
    )
    res = _linux(runtime.create_container(db, pg))["resources"]["cpu"]
    assert set(res["cpus"].replace("-", ",").split(",")) <= {"4", "5", "12", "13"}, res
    assert res["mems"] == "2"

    # node2 has no room left for 3 more CPUs: a strict container fails with the reason
    big = _guaranteed(db, "big", 3)
    big["linux"]["devices"] = [
        {"path": "/dev/nvme0n1", "type": "b", "major": 259, "minor": 0},
    ]
    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(db, big)
    assert "pod default/db-0 container big" in err.value.message
    assert "fail strict hint /sys/devices/pci0000:3b/0000:3b:00.0" in err.value.message
