"""RDT monitoring through the real NRI library, per version.

A monitored container with an RDT class: where the runtime's NRI has `LinuxRdt` (v0.11+)
the merged adjustment the real library hands back carries ``closID`` and
``enableMonitoring`` next to the class (no ownership conflict between RdtClass, RdtClosID
and RdtEnableMonitoring), and the daemon makes no monitoring group of its own; with an
older NRI the daemon makes the pod's monitoring group and writes the task's PID into it at
PostStartContainer.  The resctrl tree is synthetic (docs/rdt-blockio.md says what that
leaves out).
"""

from __future__ import annotations

import json

import pytest

from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.topology.synthetic import write_sysfs
from tests.conformance.harness import GoRuntime, prune_empty
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.test_daemon import DAEMON, IDX, NAME, SPEC

pytestmark = pytest.mark.conformance


def test_monitored_container_enters_a_monitoring_group(
    runtime: GoRuntime, nri_version: str
) -> None:
    d = runtime.dir
    root = d / "root"
    write_sysfs(SPEC, root)
    resctrl = d / "resctrl"
    make_resctrl_tree(resctrl, INTEL_SKX)
    cfg = d / "resmgr.json"
    cfg.write_text(
        json.dumps(
            {
                "policy": "static",
                "policyConfig": {"reservedSystemCPUs": "0"},
                "log": {"level": "debug", "format": "json", "file": str(d / "daemon.log")},
                "control": {
                    "rdt": {
                        "enable": True,
                        "monitorPods": True,
                        "partitions": {
                            "all": {
                                "l3Allocation": "100%",
                                "classes": {"gold": {"l3Allocation": "50-100%"}},
                            }
                        },
                    }
                },
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
            str(root),
            "--config",
            str(cfg),
            "--state-dir",
            str(d / "state"),
            "--resctrl-root",
            str(resctrl),
        ],
    )
    runtime.wait_synced(timeout=60)
    log = d / "daemon.log"

    web = make_pod(name="web-0", annotations={"rdtclass.resource-policy.nri.io/pod": "gold"})
    runtime.run_pod(web)
    app = make_container(web, name="app")
    reply = prune_empty(runtime.create_container(web, app))
    diag = log.read_text()[-3000:] if log.exists() else ""
    linux = reply["adjust"]["linux"]
    assert linux["resources"]["rdt_class"] == {"value": "gold"}, diag
    pod_mon = resctrl / "gold" / "mon_groups" / f"nri-resmgr-pod-{web['uid']}"
    if version_key(nri_version) >= (0, 11, 0):
        assert linux["rdt"] == {
            "clos_id": {"value": "gold"},
            "enable_monitoring": {"value": True},
        }, diag
        assert not pod_mon.exists()
        runtime_mon = resctrl / "gold" / "mon_groups" / app["id"]
        runtime_mon.mkdir(parents=True)  # what runc 1.4 / crun make for enableMonitoring
        (runtime_mon / "tasks").write_text("4242\n")
        counted = runtime_mon
    else:
        assert "rdt" not in linux, diag
        assert pod_mon.is_dir()
        counted = pod_mon
    runtime.post_start(web, {**app, "pid": 4242, "state": "CONTAINER_RUNNING"})
    assert (counted / "tasks").read_text().split() == ["4242"], log.read_text()[-3000:]
    runtime.remove_container(web, app)
    runtime.remove_pod(web)
    assert not pod_mon.exists()
