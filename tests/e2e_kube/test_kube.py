"""nri-resmgr deployed by its Helm chart on a real single-node Kubernetes (tests/e2e_kube/node.py).

The node runs a real kubelet, scheduler and controller manager (v1.34.4) on containerd
2.3.7. The chart is installed with the README's "Deploy on a cluster" commands (the test
runs that block; see `test_readme_deploy_commands`), with values pointing at the image
from tools/build-image.sh and the node's private NRI socket, and the static policy with
CPU 0 reserved, which on this 2-CPU machine class gives:

* Burstable and BestEffort pods share CPUs 0-1; a Guaranteed pod with 1 CPU gets CPU 1
  alone and the shared pods shrink to CPU 0; deleting it gives CPU 1 back;
* everything is read from the kernel: the container's cpuset cgroup (`cpuset.cpus`,
  `cpuset.mems`), found through its init pid.

Every scenario drives the cluster with kubectl/helm only, as an operator would; crictl is
used only to find a container's pid for the cgroup read.

The node (one per containerd release, shared by the module's scenarios) and the install
are this module's fixtures; what an operator does on the node (the chart's values, pods,
kubectl and helm) is `tests.e2e_kube.chart`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_resmgr.kube.podresources import Availability, PodResourcesCache, PodResourcesClient
from nri_resmgr.policy.topology_aware.explain import COMPONENTS
from nri_resmgr.simulator.run import quiet_log, run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.view.text import shown
from tests.e2e import containerd as ctdmod
from tests.e2e import cri
from tests.e2e_kube.chart import (
    BUILD_LINE,
    IN_NAMESPACE,
    LABEL,
    LEAST_PRIVILEGE,
    NAMESPACE,
    PLUGIN,
    README_KEEP,
    REFUSED,
    RELEASE,
    STARTUP_PODS,
    can_i,
    config_events,
    container_pid,
    cpuset,
    daemon_log,
    daemon_page,
    daemon_pods,
    delete_pods,
    events_for,
    helm_install,
    helm_upgrade,
    kubectl_proxy,
    percentile,
    pod_manifest,
    pod_startup_seconds,
    readme_deploy_block,
    readme_says,
    reconfigure,
    run_pod,
    runtime_requires,
    topology_aware,
    upgrade_and_roll_out,
    values,
    wait_cpus,
    wait_running,
)
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import Node
from tests.integration.browser import browser, no_alert, shown_containers
from tests.support.requirements import REPO, online_cpus


@pytest.fixture(scope="module")
def installed(node: Node, nri_image: Image) -> Iterator[subprocess.CompletedProcess[str]]:
    """The README's deploy block, run in a work dir as an operator would run it."""
    block = readme_deploy_block()
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    # the image build is the one `nri_image` ran (tools/build-image.sh, cached by content)
    assert lines[0] == BUILD_LINE, f"README's first deploy command changed: {lines[0]!r}"
    work = node.base / "operator"
    work.mkdir()
    (work / "charts").symlink_to(REPO / "charts")
    (work / "nri-resmgr.oci.tar").symlink_to(nri_image.archive)
    (work / "values.yaml").write_text(yaml.safe_dump(values(node, nri_image)))
    script = "set -eux\n" + "\n".join(lines[1:]) + "\n"
    r = subprocess.run(
        ["sh", "-c", script],
        cwd=work,
        capture_output=True,
        text=True,
        env={**node.env, "TAG": nri_image.tag},
        timeout=600,
    )
    assert r.returncode == 0, f"README deploy block failed:\n{r.stdout}\n{r.stderr}"
    try:
        yield r
    finally:
        node.run(
            "helm",
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            check=False,
            timeout=180,
        )


@pytest.fixture(autouse=True)
def _no_pods_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each scenario starts on a node with no workload pods, whatever the last one did."""
    yield
    if "node" in request.fixturenames:
        node: Node = request.getfixturevalue("node")
        node.kubectl(
            "delete", "pods", "-n", "default", "--all", "--wait=true", "--timeout=120s", check=False
        )


def test_readme_deploy_commands(installed: subprocess.CompletedProcess[str], node: Node) -> None:
    out = installed.stdout
    assert 'daemon set "nri-resmgr" successfully rolled out' in out, out
    assert "nri_resmgr_" in out, f"no nri-resmgr metrics in the README's metrics check:\n{out}"
    assert f"name: {node.name}" in out and "zones:" in out, (
        f"no NodeResourceTopology for {node.name} in the README's check:\n{out}"
    )
    (ds_pod,) = daemon_pods(node)
    ready = {c["type"]: c["status"] for c in ds_pod["status"]["conditions"]}
    assert ready["Ready"] == "True", ds_pod["status"]
    logs = node.ctd.log_text()
    assert PLUGIN in logs and "synchronized" in logs, "containerd never synchronized 90-resmgr"


def test_guaranteed_exclusive_shared_rest_and_give_back(installed: Any, node: Node) -> None:
    run_pod(node, "burstable", cpu="100m", memory="32Mi", limits=False)
    run_pod(node, "besteffort")
    assert cpuset(node, "burstable") == ("0-1", "0")
    assert cpuset(node, "besteffort")[0] == "0-1"
    run_pod(node, "guaranteed", cpu="1", memory="64Mi")
    assert cpuset(node, "guaranteed") == ("1", "0"), daemon_log(node)
    # the shared pods are updated in place: CPU 1 is no longer theirs
    wait_cpus(node, "burstable", "0")
    wait_cpus(node, "besteffort", "0")
    delete_pods(node, "guaranteed")
    wait_cpus(node, "burstable", "0-1")
    wait_cpus(node, "besteffort", "0-1")
    delete_pods(node, "burstable", "besteffort")


def test_in_place_resize_changes_the_cpuset(installed: Any, node: Node) -> None:
    # 1500m is not a whole CPU: shared CPUs; resized to 1 CPU it becomes exclusive
    run_pod(node, "resized", cpu="1500m", memory="64Mi", resize=True)
    assert cpuset(node, "resized")[0] == "0-1"
    node.kubectl(
        "patch",
        "pod",
        "resized",
        "--subresource",
        "resize",
        "-p",
        json.dumps(
            {
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
                        }
                    ]
                }
            }
        ),
    )
    wait_cpus(node, "resized", "1", timeout=90)
    node.wait_for(
        lambda: (
            node.get("pod", "resized")["status"]["containerStatuses"][0]["resources"]
            == {
                "requests": {"cpu": "1", "memory": "64Mi"},
                "limits": {"cpu": "1", "memory": "64Mi"},
            }
        ),
        timeout=60,
        what="the kubelet to report the resize done",
    )
    delete_pods(node, "resized")


def test_bad_annotation_is_shown_in_describe(installed: Any, node: Node) -> None:
    node.apply(
        pod_manifest(
            "badly-annotated",
            cpu="100m",
            limits=False,
            annotations={"noderesource.dev/resources": "{not json"},
        )
    )

    def failed() -> str | None:
        text = node.kubectl("describe", "pod", "badly-annotated").stdout
        return text if "noderesource.dev/resources" in text and "expected JSON" in text else None

    text = node.wait_for(failed, timeout=90, what="the annotation error in kubectl describe")
    assert "Failed" in text or "CreateContainerError" in text, text
    delete_pods(node, "badly-annotated")


def test_upgrade_and_daemon_restart_leave_running_containers_where_they_are(
    installed: Any, node: Node, nri_image: Image
) -> None:
    readme_says(README_KEEP)
    run_pod(node, "keeper", cpu="1", memory="64Mi")
    run_pod(node, "sharer")
    assert cpuset(node, "keeper")[0] == "1" and cpuset(node, "sharer")[0] == "0"
    pids = {n: container_pid(node, node.get("pod", n)) for n in ("keeper", "sharer")}
    # helm upgrade with a changed pod template: a rolling update to a new daemon pod
    (first,) = daemon_pods(node)
    upgrade_and_roll_out(node, values(node, nri_image, podAnnotations={"rev": "2"}))
    (upgraded,) = daemon_pods(node)
    assert upgraded["metadata"]["uid"] != first["metadata"]["uid"], "no new daemon pod"
    assert cpuset(node, "keeper")[0] == "1" and cpuset(node, "sharer")[0] == "0", (
        "helm upgrade moved a running container"
    )
    assert {n: container_pid(node, node.get("pod", n)) for n in pids} == pids
    (old,) = daemon_pods(node)
    node.kubectl("delete", "pod", "-n", NAMESPACE, old["metadata"]["name"], "--wait=true")

    def replaced() -> bool:
        pods = daemon_pods(node)
        return any(
            p["metadata"]["uid"] != old["metadata"]["uid"]
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or []
            )
            for p in pods
        )

    node.wait_for(replaced, timeout=120, what="a new Ready nri-resmgr pod")
    assert cpuset(node, "keeper")[0] == "1" and cpuset(node, "sharer")[0] == "0", (
        "a running container moved when the daemon restarted"
    )
    delete_pods(node, "keeper")
    run_pod(node, "next", cpu="1", memory="64Mi")
    assert cpuset(node, "next")[0] == "1", daemon_log(node)
    wait_cpus(node, "sharer", "0")
    delete_pods(node, "next", "sharer")
    # the release back to the fixture's values: a later `helm_upgrade` without the
    # annotation would change the pod template and roll the daemon out again
    upgrade_and_roll_out(node, values(node, nri_image))


def test_helm_upgrade_applies_config_live_and_refuses_a_broken_one(
    installed: Any, node: Node, nri_image: Image
) -> None:
    applied_before = len(config_events(node, "ConfigApplied"))
    (ds_pod,) = daemon_pods(node)
    helm_upgrade(node, nri_image, {"reservedSystemCPUs": "1"})
    node.wait_for(
        lambda: len(config_events(node, "ConfigApplied")) > applied_before,
        timeout=120,
        what="a ConfigApplied Event after helm upgrade",
    )
    run_pod(node, "after-upgrade", cpu="1", memory="64Mi")
    assert cpuset(node, "after-upgrade")[0] == "0", (
        f"with CPU 1 reserved the exclusive CPU must be 0:\n{daemon_log(node)}"
    )
    delete_pods(node, "after-upgrade")

    helm_upgrade(node, nri_image, {"reservedSystemCPUs": "7"})
    rejected = node.wait_for(
        lambda: config_events(node, "ConfigRejected"),
        timeout=120,
        what="a ConfigRejected Event for CPU 7",
    )
    assert any("7" in e["message"] for e in rejected), rejected
    run_pod(node, "after-broken", cpu="1", memory="64Mi")
    assert cpuset(node, "after-broken")[0] == "0", "the previous configuration must stay"
    delete_pods(node, "after-broken")
    (same,) = daemon_pods(node)
    assert same["metadata"]["uid"] == ds_pod["metadata"]["uid"], "applied live, no restart"
    helm_upgrade(node, nri_image, {})


def test_enable_nri_init_container_on_the_node(
    installed: Any, node: Node, nri_image: Image
) -> None:
    """The chart's `enable-nri` init container (nri.enableInit) edits the runtime config
    on the host path it mounts; here a private copy with NRI off."""
    host_dir = node.base / "host-etc-containerd"
    host_dir.mkdir()
    toml = host_dir / "config.toml"
    toml.write_text('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n')
    doc = values(
        node,
        nri_image,
        nri={"enableInit": True, "configPath": str(toml), "registrationTimeout": "15s"},
    )
    upgrade_and_roll_out(node, doc)
    (pod,) = [p for p in daemon_pods(node) if p["status"].get("initContainerStatuses")]
    (init,) = pod["status"]["initContainerStatuses"]
    assert init["state"]["terminated"]["exitCode"] == 0, init
    text = toml.read_text()
    assert "disable = false" in text and 'plugin_registration_timeout = "15s"' in text, text
    # back to the values the other scenarios use
    upgrade_and_roll_out(node, values(node, nri_image))


def test_a_pod_created_while_the_daemon_is_away(
    installed: Any, node: Node, nri_image: Image
) -> None:
    """With `enable-nri --require`: containerd 2.3 refuses the container with the validator's
    reason until the daemon is back, then the kubelet's retry runs placed; containerd 1.7
    (no validator) runs it on every CPU until the daemon's Synchronize moves it."""
    validator = node.ctd.release.name != "containerd-1.7"
    runtime_requires(node, "--require")
    try:
        # the daemon away: its DaemonSet selects no node
        upgrade_and_roll_out(node, values(node, nri_image, nodeSelector={"nri-resmgr": "none"}))
        node.wait_for(lambda: not daemon_pods(node), timeout=120, what="the daemon pod gone")
        node.apply(pod_manifest("waiter", cpu="1", memory="64Mi"))
        if validator:

            def refused() -> bool:
                return any(REFUSED in (e.get("message") or "")
                           for e in events_for(node, "Pod", "waiter", "default"))  # fmt: skip

            node.wait_for(refused, timeout=120, what="the validator's reason in the pod's events")
            assert node.get("pod", "waiter")["status"]["phase"] == "Pending"
        else:
            wait_running(node, "waiter")
            assert cri.parse_cpus(cpuset(node, "waiter")[0]) == online_cpus()
        upgrade_and_roll_out(node, values(node, nri_image))
        node.wait_for(lambda: node.get("pod", "waiter")["status"].get("phase") == "Running",
                      timeout=360, what="the kubelet's retry Running")  # fmt: skip
        wait_cpus(node, "waiter", "1", timeout=120)
    finally:
        delete_pods(node, "waiter")
        runtime_requires(node, "--no-require")


def test_node_resource_topology_object(installed: Any, node: Node) -> None:
    nrt = node.wait_for(
        lambda: (
            node.kubectl(
                "get",
                "noderesourcetopologies.topology.node.k8s.io",
                node.name,
                "-o",
                "json",
                check=False,
            ).stdout
        ),
        timeout=60,
        what=f"NodeResourceTopology {node.name}",
    )
    doc = json.loads(nrt)
    zones = doc["zones"]
    assert zones, doc
    names = {z["name"] for z in zones}
    assert any(z.get("type") for z in zones), zones
    cpu = [r for z in zones for r in z.get("resources") or [] if r["name"] == "cpu"]
    assert cpu, f"no cpu resource in any zone: {names}"


def test_kubelet_pod_resources_socket_without_device_plugins(installed: Any, node: Node) -> None:
    """The real kubelet's PodResources socket (under its root dir) through the daemon's
    client: List and Get name the pod and its container with no devices (this node has no
    device plugin), an unknown pod is none, and no hint comes of it; the daemon the chart
    runs (``podResources.enable``) reads the same socket and says it answers."""
    run_pod(node, "podres", cpu="100m", memory="32Mi", limits=False)
    logs = node.kubectl("logs", "-n", NAMESPACE, "-l", LABEL, "--tail=-1", check=False)
    assert "kubelet pod-resources socket answers" in logs.stdout, daemon_log(node)
    assert "kubelet pod-resources socket unavailable" not in logs.stdout, daemon_log(node)
    sock = node.base / "kubelet" / "pod-resources" / "kubelet.sock"
    client = PodResourcesClient(sock, list_timeout=10, get_timeout=10)

    async def ask() -> tuple[Any, ...]:
        cache = PodResourcesCache(client, sys_root="/")
        cache.prefetch("default", "podres")
        return (
            await client.list(),
            await client.get("default", "podres"),
            await client.get("default", "nobody"),
            await cache.hints("default", "podres", "c"),
        )

    try:
        listed, got, unknown, hints = asyncio.run(ask())
    finally:
        client.close()
    assert listed is not None and listed[("default", "podres")] == {"c": ()}
    assert got == {"c": ()}
    assert unknown is None
    assert hints == ()
    assert client.availability is Availability.OK


def test_page_explain_events_dump_and_whatif_on_the_node(
    installed: Any, node: Node, nri_image: Image
) -> None:
    """Issue 27's acceptance on the node, under the topology-aware policy (the chart
    passes the policy as --policy, so switching it rolls the daemon out): CPU 0 reserved
    holds the daemon's own pod (kube-system), a Guaranteed pod gets CPU 1 alone.  On
    this 2-CPU machine no shared container fits next to it.  The what-if's change (the
    reserved CPUs) is then applied live."""
    upgrade_and_roll_out(node, topology_aware(node, nri_image, "0"))
    try:
        (ds_pod,) = [p for p in daemon_pods(node) if "deletionTimestamp" not in p["metadata"]]
        ds = ds_pod["metadata"]["name"]
        proxy = f"/api/v1/namespaces/{NAMESPACE}/pods/{ds}:8891/proxy"
        # an annotation with markup, quotes and a control character: shown escaped
        hostile = "<img src=x onerror=alert(1)>\"q'\x07<script>alert(2)</script>"
        note = "note.resource-policy.nri.io/pod"
        run_pod(node, "guaranteed", cpu="1", memory="64Mi", annotations={note: hostile})
        where = {"guaranteed": "default", ds: NAMESPACE}
        kernel = {name: cpuset(node, name, ns)[0] for name, ns in where.items()}
        assert kernel == {"guaranteed": "1", ds: "0"}, daemon_log(node)

        # the page, in a real browser, shows each container's cpuset as the kernel has it
        time.sleep(1.1)  # the page is drawn at most once a second
        with kubectl_proxy(node) as base, browser() as session:
            session.get(f"{base}{proxy}/")
            rows = shown_containers(session)
            alert_free = no_alert(session)
            # explain, as an operator runs it: the pool and the sort key's components
            explained = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "nri_resmgr.cli",
                    "explain",
                    "guaranteed",
                    "--url",
                    f"{base}{proxy}",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        assert {r["pod"]: r["cpus"] for r in rows.values()} == kernel, rows
        (g,) = [r for r in rows.values() if r["pod"] == "guaranteed"]
        assert g["annotations"] == f"{note}={shown(hostile)}" and alert_free, g
        assert explained.returncode == 0, explained.stderr
        out = explained.stdout
        assert "decision: exclusive in root, cpus 1" in out, out
        assert "candidates, best first (sort key: " + ", ".join(COMPONENTS) in out, out
        assert re.search(r"^\s+root\s+\(.*\) winner cpus 1$", out, re.M), out

        # kubectl describe pod shows the placement event
        node.wait_for(
            lambda: (
                "exclusive CPUs 1 on NUMA node 0 (pool root)"
                in node.kubectl("describe", "pod", "guaranteed").stdout
            ),
            timeout=60,
            what="the Placed event in kubectl describe pod guaranteed",
        )
        described = node.kubectl("describe", "pod", "guaranteed").stdout
        assert re.search(r"Normal\s+Placed\s+.*nri-resmgr", described), described

        # the dump, replayed, gives every container the cpuset it has on the node
        dump = json.loads(daemon_page(node, "/scenario.json"))
        (replayed,) = run_scenario(load_scenario(dump), log=quiet_log()).steps

        def cpus_of(step: Any) -> dict[str, str]:
            return {k.split("/")[0]: c.cpus for k, c in step.containers.items()}

        assert cpus_of(replayed) == kernel, replayed.containers
        assert replayed.moved == {}

        # the what-if of reserving CPU 1 instead, then applying it: the same movers and CPUs
        dump["config"] = {**dump["config"], "reservedResources": {"cpu": "cpuset:1"}}
        (whatif,) = run_scenario(load_scenario(dump), log=quiet_log()).steps
        movers = {k.split("/")[0] for k in whatif.moved}
        assert movers == set(kernel), whatif.moved
        reconfigure(node, topology_aware(node, nri_image, "1"))
        want = cpus_of(whatif)
        node.wait_for(
            lambda: {n: cpuset(node, n, ns)[0] for n, ns in where.items()} == want,
            timeout=60,
            what=f"the cpusets the what-if named: {want}",
        )
        moved = {n for n, ns in where.items() if cpuset(node, n, ns)[0] != kernel[n]}
        assert moved == movers, (whatif.moved, daemon_log(node))
    finally:
        delete_pods(node, "guaranteed")
        upgrade_and_roll_out(node, values(node, nri_image))


def test_service_account_has_exactly_the_documented_rights(installed: Any, node: Node) -> None:
    token = node.kubectl("create", "token", RELEASE, "-n", NAMESPACE).stdout.strip()
    assert can_i(node, token, NAMESPACE) == LEAST_PRIVILEGE | IN_NAMESPACE
    assert can_i(node, token, "default") == LEAST_PRIVILEGE
    denied = node.kubectl(
        "--token", token, "auth", "can-i", "delete", "pods", "-n", NAMESPACE, check=False
    )
    assert denied.stdout.strip() == "no"


def test_pod_startup_latency_without_and_with_the_plugin(node: Node, nri_image: Image) -> None:
    """Pod creation to Running through the real kubelet, 30 pods each, same node and run:
    first with no NRI plugin, then with the chart installed. Recorded, not asserted."""
    node.run(
        "helm", "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", check=False, timeout=180
    )
    node.wait_for(lambda: not daemon_pods(node), timeout=120, what="no plugin at first")
    without = pod_startup_seconds(node, "bare")
    helm_install(node, values(node, nri_image))
    try:
        with_plugin = pod_startup_seconds(node, "managed")
        assert f"managed-{STARTUP_PODS - 1}" in daemon_log(node), (
            f"the plugin did not see the last pod:\n{daemon_log(node)}"
        )
    finally:
        node.run(
            "helm",
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            check=False,
            timeout=180,
        )
    record = {
        "what": f"pod create to Running, {STARTUP_PODS} Burstable pods one at a time, "
        f"real kubelet v1.34.4 + containerd {node.ctd.release.version}",
        "without_plugin": {
            "p50": round(percentile(without, 50), 3),
            "p99": round(percentile(without, 99), 3),
        },
        "with_nri_resmgr": {
            "p50": round(percentile(with_plugin, 50), 3),
            "p99": round(percentile(with_plugin, 99), 3),
        },
        "load1": round(float(Path("/proc/loadavg").read_text().split()[0]), 2),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = ctdmod.CACHE / "latency"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "kube-pod-startup.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record))
