"""RDT and block I/O classes in the adjustment the real NRI library receives, per version.

The daemon (external, on a synthetic sysfs root) manages its own resctrl groups on a
synthetic Intel resctrl tree and writes block I/O files into a synthetic cgroup v1 tree.
The RDT class name travels to the runtime in the adjustment (`rdt_class`: the runtime puts
the task into that resctrl group, ours). Block I/O classes the daemon applies itself stay
out of the adjustment; without the daemon's own block I/O control the names are sent
(`test_blockio_names_go_to_a_runtime_that_owns_them`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.topology.synthetic import write_sysfs
from tests.conformance.harness import GoRuntime, RuntimeCallError, prune_empty
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.test_daemon import DAEMON, IDX, NAME, SPEC

pytestmark = pytest.mark.conformance


def test_classes_reach_the_runtime(runtime: GoRuntime) -> None:
    d = runtime.dir
    root = d / "root"
    write_sysfs(SPEC, root)
    resctrl = d / "resctrl"
    make_resctrl_tree(resctrl, INTEL_SKX)
    cgroup = d / "cgroup"
    (cgroup / "blkio").mkdir(parents=True)
    (cgroup / "blkio" / "blkio.throttle.read_bps_device").write_text("")
    config = {
        "policy": "static",
        "policyConfig": {"reservedSystemCPUs": "0"},
        "log": {"level": "debug", "format": "json", "file": str(d / "daemon.log")},
        "control": {
            "rdt": {
                "enable": True,
                "usePodQoSAsDefaultClass": True,
                "partitions": {"all": {"l3Allocation": "100%", "classes": {
                    "gold": {"l3Allocation": "50-100%"},
                    "BestEffort": {"l3Allocation": "0-20%"},
                }}},
            },
            "blockio": {"enable": True, "classes": {"slowdisk": {}}},
        },
    }
    cfg = d / "resmgr.json"
    cfg.write_text(json.dumps(config))
    runtime.start()
    runtime.start_external(
        DAEMON, idx=IDX, name=NAME,
        args=["--sysfs-root", str(root), "--config", str(cfg), "--state-dir", str(d / "state"),
              "--resctrl-root", str(resctrl), "--cgroup-root", str(cgroup)],
    )
    runtime.wait_synced(timeout=60)
    log = d / "daemon.log"

    db = make_pod(name="db-0", qos="guaranteed", annotations={
        "rdtclass.resource-policy.nri.io/pod": "gold",
        "blockioclass.resource-policy.nri.io/container.pg": "slowdisk",
    })
    runtime.run_pod(db)
    reply = prune_empty(runtime.create_container(db, make_container(
        db, name="pg", cpu_request_millis=2000, cpu_limit_millis=2000, memory_limit=1 << 28)))
    diag = log.read_text()[-3000:] if log.exists() else ""
    res = reply["adjust"]["linux"]["resources"]
    assert res["rdt_class"] == {"value": "gold"}, diag
    # block I/O classes the daemon applies itself are not sent: a runtime without its own
    # class configuration would fail the container on an unknown name
    assert "blockio_class" not in res, diag
    assert res["cpu"]["cpus"] == "1,5"
    # our resctrl group for the class exists with the class's schemata
    assert (resctrl / "gold" / "schemata").exists()

    batch = make_pod(name="batch-0", qos="besteffort")
    runtime.run_pod(batch)
    reply = prune_empty(runtime.create_container(batch, make_container(
        batch, name="job", cpu_request_millis=0)))
    res = reply["adjust"]["linux"]["resources"]
    assert res["rdt_class"] == {"value": "BestEffort"}
    assert "blockio_class" not in res

    def tree() -> set[Path]:
        return {p for p in d.rglob("*") if "log" not in p.name}

    before = tree()
    bad = make_pod(name="bad-0", annotations={"rdtclass.resource-policy.nri.io": "../../x"})
    runtime.run_pod(bad)
    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(bad, make_container(bad, name="x"))
    assert "rdtclass.resource-policy.nri.io" in err.value.message
    assert tree() == before  # nothing written anywhere for a hostile name


def test_blockio_names_go_to_a_runtime_that_owns_them(runtime: GoRuntime) -> None:
    d = runtime.dir
    root = d / "root"
    write_sysfs(SPEC, root)
    cfg = d / "resmgr.json"
    cfg.write_text(json.dumps({
        "policy": "static",
        "policyConfig": {"reservedSystemCPUs": "0"},
        "control": {"blockio": {"enable": True, "runtimeClasses": True,
                                 "classes": {"slowdisk": {}}}},
    }))
    runtime.start()
    # runtimeClasses: the runtime applies block I/O classes itself; names are sent
    runtime.start_external(DAEMON, idx=IDX, name=NAME, args=[
        "--sysfs-root", str(root), "--config", str(cfg), "--state-dir", str(d / "state"),
    ])
    runtime.wait_synced(timeout=60)
    web = make_pod(name="web-0", annotations={"blockioclass.resource-policy.nri.io": "slowdisk"})
    runtime.run_pod(web)
    reply = prune_empty(runtime.create_container(web, make_container(web, name="app")))
    assert reply["adjust"]["linux"]["resources"]["blockio_class"] == {"value": "slowdisk"}
