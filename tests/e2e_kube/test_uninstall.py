"""What uninstall, upgrade and a daemon restart do to running containers, on the real node.

The README's deploy section states each case in one sentence; each test here checks its
sentence word for word and then the behaviour, from the kernel's cpusets (the static
policy with CPU 0 reserved: a Guaranteed 1-CPU pod gets CPU 1 alone, the shared pods CPU
0). The chart's `reset-on-uninstall` container (`uninstall.resetContainers: true`, the
default) does its work in its preStop hook: on containerd, the CRI stop of its own
container holds NRI's plugin synchronization until it has exited, so a reset after SIGTERM
never synchronized (the defect this replaced; docs/operations.md, "Uninstall").
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from nri_resmgr.cli import main as cli_main
from tests.e2e import cri
from tests.e2e_kube.chart import (
    NAMESPACE,
    README_KEEP,
    RELEASE,
    container_pid,
    cpuset,
    daemon_pods,
    delete_pods,
    helm_install,
    helm_uninstall,
    readme_says,
    run_pod,
    upgrade_and_roll_out,
    values,
)
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import Node
from tests.e2e_kube.soak import wait_daemon
from tests.support.requirements import online_cpus

README_UNINSTALL = (
    "removes everything the chart made; its `reset-on-uninstall` container then gives every "
    "running container on the node all CPUs and memory nodes back, without restarting it "
    "(`uninstall.resetContainers: true`, the default; with `false` they keep their CPUs "
    "until they restart or `nri-resmgr reset` runs on the node)."
)


@pytest.fixture
def pods(node: Node, nri_image: Image) -> Iterator[None]:
    node.ctd.import_image(nri_image.archive)
    yield
    node.kubectl(
        "delete", "pods", "-n", "default", "--all", "--wait=true", "--timeout=120s", check=False
    )
    node.run("helm", "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
             check=False, timeout=180)  # fmt: skip


def _placed(node: Node) -> dict[str, Any]:
    run_pod(node, "keeper", cpu="1", memory="64Mi")
    run_pod(node, "sharer", cpu="100m", memory="32Mi", limits=False)
    assert cpuset(node, "keeper")[0] == "1"
    node.wait_for(lambda: cpuset(node, "sharer")[0] == "0", timeout=60, what="sharer on CPU 0")
    return {n: container_pid(node, node.get("pod", n)) for n in ("keeper", "sharer")}


def _unmoved(node: Node, pids: dict[str, Any], after: str) -> None:
    assert (cpuset(node, "keeper")[0], cpuset(node, "sharer")[0]) == ("1", "0"), (
        f"{after} moved a running container"
    )
    assert {n: container_pid(node, node.get("pod", n)) for n in pids} == pids, (
        f"{after} restarted a pod"
    )


def test_upgrade_pod_deletion_and_kill9_keep_running_containers_then_uninstall_resets(
    node: Node,
    nri_image: Image,
    pods: None,
) -> None:
    readme_says(README_KEEP)
    readme_says(README_UNINSTALL)
    helm_install(node, values(node, nri_image))
    wait_daemon(node)
    pids = _placed(node)
    # every case below stops a daemon pod with its reset container: the preStop hook runs
    # and must leave everything, as the DaemonSet stays
    upgrade_and_roll_out(node, values(node, nri_image, podAnnotations={"rev": "2"}))
    _unmoved(node, pids, "a rolling update")
    (old,) = daemon_pods(node)
    node.kubectl("delete", "pod", "-n", NAMESPACE, old["metadata"]["name"], "--wait=true")
    wait_daemon(node)
    _unmoved(node, pids, "deleting the daemon's pod")
    pid = wait_daemon(node)
    os.kill(pid, signal.SIGKILL)
    wait_daemon(node, other_than=pid)
    _unmoved(node, pids, "kill -9 of the daemon")

    helm_uninstall(node)
    mine = f"app.kubernetes.io/instance={RELEASE}"
    for kind in ("daemonset", "configmap", "serviceaccount", "role", "rolebinding"):
        left = node.kubectl("get", kind, "-n", NAMESPACE, "-l", mine, "-o", "name").stdout
        assert not left.strip(), f"helm uninstall left {left}"
    for kind in ("clusterrole", "clusterrolebinding"):
        left = node.kubectl("get", kind, "-l", mine, "-o", "name").stdout
        assert not left.strip(), f"helm uninstall left {left}"
    everything = online_cpus()
    node.wait_for(
        lambda: all(cri.parse_cpus(cpuset(node, n)[0]) == everything for n in pids),
        timeout=60,
        what=f"{sorted(pids)} on every CPU after helm uninstall",
    )
    assert {n: container_pid(node, node.get("pod", n)) for n in pids} == pids, (
        "the uninstall restarted a pod"
    )
    assert "synchronizing plugin 99-resmgr-reset" in node.ctd.log_text()
    delete_pods(node, *pids)


def test_uninstall_without_the_reset_container_leaves_cpus_until_reset(
    node: Node,
    nri_image: Image,
    pods: None,
) -> None:
    helm_install(node, values(node, nri_image, uninstall={"resetContainers": False}))
    wait_daemon(node)
    pids = _placed(node)
    helm_uninstall(node)
    _unmoved(node, pids, "helm uninstall with uninstall.resetContainers=false")
    # the documented way out: the reset command on the node
    assert cli_main(["reset", "--socket", str(node.ctd.layout.nri_socket),
                     "--state-dir", str(node.base / "nri-resmgr-state")]) == 0  # fmt: skip
    everything = online_cpus()
    for name in pids:
        assert cri.parse_cpus(cpuset(node, name)[0]) == everything
    assert {n: container_pid(node, node.get("pod", n)) for n in pids} == pids
    delete_pods(node, *pids)
