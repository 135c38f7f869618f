"""NUMA-aware scheduling on a real two-node cluster on this machine (issue 26, items 3-4).

The cluster (tests/e2e_kube/node.py, `TWO_NODES`): one control plane, two kubelets v1.34.4
(`node-a`, `node-b`), each with its own containerd 2.3.7 (NRI on, its own socket) and its
own nri-resmgr from the chart's DaemonSet (one release per node, `nodeSelector` on the
node's hostname label: the NRI socket and the sysfs tree are per node host paths).  Each
daemon sees a synthetic topology of two NUMA nodes over the machine's two real CPUs (its
`hostPaths.sys` is a tree `write_sysfs` made: CPU 0 on NUMA node 0, CPU 1 on NUMA node 1),
with the static policy and CPU 0 reserved: each node's one free zone (`node-1`) holds one
exclusive CPU.  The kernel has one memory node only, so memory pinning is off
(`pinMemory: false`): a cpuset.mems of node 1 would make runc fail; the zones' memory
`available` then stays their allocatable.

The NUMA-aware scheduler is the real kube-scheduler run with the chart's scheduler
configuration (the `nri-resmgr-numa` profile and its extender entry, from `helm template`,
the extender's address changed to where it listens here), beside the cluster's default
scheduler, and the project's extender (`nri-resmgr scheduler-extender`) as a process of
this host with the admin kubeconfig.  Pods opt in with `schedulerName: nri-resmgr-numa`.
The second scheduler's flags are the chart's Deployment's: with
`--pod-max-in-unschedulable-pods-duration=10s` a pod the extender turned away is retried
within about 40 s of its zone's coming free (kube-scheduler has no event for a
NodeResourceTopology change; its own 5 minutes otherwise).  The daemons request no CPU,
so that the kube-scheduler's own count (2 CPUs a node) never decides where only the
NUMA zones should.

After every step, `nrt_matches_kernel` waits until each node's NodeResourceTopology
`available` CPUs of every NUMA zone equal what the kernel's cpusets leave free there: the
zone's CPUs less the reserved ones less those that a Guaranteed container's cpuset holds
(read from its cgroup through its pid, and checked disjoint from every other container's).
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from nri_resmgr.policy.common import parse_cpu_quantity
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from tests.e2e import containerd as ctdmod
from tests.e2e import cri
from tests.e2e_kube.chart import (
    container_pid,
    pod_manifest,
    ready_sandboxes,
    stop_pods,
    wait_running,
)
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import (
    TWO_NODES,
    TWO_NODES_NAT,
    KubeCluster,
    Node,
    kube_cluster,
    scheduler_argv,
    stop_processes,
)
from tests.e2e_kube.numa import CHART, NRT, RESERVED, SYNTHETIC, deploy, nrt
from tests.k8s.cluster import _free_port
from tests.k8s.components import build_node_components
from tests.peers import build_helm
from tests.support.requirements import REPO, require, require_go, require_two_cpus

CRD = CHART / "crds" / "noderesourcetopologies.yaml"
NUMA = "nri-resmgr-numa"
#: what the extender's filter says of a Guaranteed 1-CPU pod that no zone holds
REASON = "needs 1 exclusive CPUs"
#: the one release of the suite's containerd builds this suite runs (issue 26: 2.3)
RELEASE = ctdmod.CONTAINERD_2


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kc(e2e_host: str, crictl_bin: Path, image_archives: list[Path]) -> Iterator[KubeCluster]:
    """The two nodes; a node that cannot start fails (kube_cluster raises)."""
    require_two_cpus()
    require(
        Path("/usr/lib/cni/bridge").exists(),
        "Debian's containernetworking-plugins is not installed (/usr/lib/cni/bridge)",
    )
    go = require_go()
    k8s = build_node_components()
    helm = Path(build_helm())
    bins = ctdmod.build(RELEASE, go)
    with kube_cluster(
        TWO_NODES,
        nat_chain=TWO_NODES_NAT,
        release=RELEASE,
        ctd_bins=bins,
        crictl=crictl_bin,
        images=image_archives,
        k8s=k8s,
        helm=helm,
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def deployed(kc: KubeCluster, nri_image: Image) -> Iterator[KubeCluster]:
    deploy(kc, nri_image)
    yield kc


@dataclass
class NumaScheduler:
    """The extender and the second kube-scheduler that calls it, restartable."""

    kc: KubeCluster
    port: int = field(default_factory=_free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    starts: int = 0

    @property
    def extender_log(self) -> Path:
        return self.kc.base / "extender.log"

    def config(self) -> list[str]:
        """The chart's second scheduler's flags, its configuration file among them (the
        extender's URL changed to where it listens here, and the admin kubeconfig)."""
        node = self.kc.nodes[0]
        rendered = node.run(
            "helm", "template", "x", str(CHART), "--namespace", "kube-system",
            "--set", "schedulerExtender.enable=true",
            "--set", "schedulerExtender.secondScheduler.enable=true",
        ).stdout  # fmt: skip
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        (cm,) = (
            d for d in docs if d["kind"] == "ConfigMap" and "scheduler-config.yaml" in d["data"]
        )
        (deploy,) = (
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-scheduler")
        )
        command = deploy["spec"]["template"]["spec"]["containers"][0]["command"]
        config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
        assert [p["schedulerName"] for p in config["profiles"]] == [NUMA], config
        (ext,) = config["extenders"]
        ext["urlPrefix"] = f"http://127.0.0.1:{self.port}"
        config["clientConnection"] = {"kubeconfig": str(self.kc.kubeconfig)}
        path = self.kc.base / "numa-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        assert command[:2] == ["kube-scheduler", "--config=/etc/nri-resmgr/scheduler-config.yaml"]
        return [f"--config={path}", *command[2:]]

    def start(self) -> None:
        self.starts += 1
        env = {**os.environ, "PYTHONPATH": str(REPO), "KUBECONFIG": str(self.kc.kubeconfig)}
        with open(self.extender_log, "ab") as out:
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", "import sys; from nri_resmgr.cli import main; "
                     "sys.exit(main())", "scheduler-extender", f"--listen=127.0.0.1:{self.port}"],
                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                )
            )  # fmt: skip
        url = f"http://127.0.0.1:{self.port}/healthz"
        self.kc.nodes[0].wait_for(lambda: _get(url) == "ok", timeout=60, what="extender healthz")
        self.procs.append(
            self.kc.start(
                scheduler_argv(
                    self.kc.k8s,
                    self.kc.kubeconfig,
                    self.kc.base / f"numa-sched-certs-{self.starts}",
                    *self.config(),
                ),
                self.kc.base / "numa-scheduler.log",
            )
        )

    def stop(self) -> None:
        stop_processes(self.procs)
        self.procs.clear()

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.extender_log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def healthy(self) -> bool:
        return _get(f"http://127.0.0.1:{self.port}/healthz") == "ok"


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode().strip())
    except OSError:
        return None


@pytest.fixture(scope="module")
def numa(deployed: KubeCluster) -> Iterator[NumaScheduler]:
    sched = NumaScheduler(deployed)
    sched.start()
    try:
        yield sched
    finally:
        sched.stop()


@pytest.fixture(autouse=True)
def _no_pods_left(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "kc" in request.fixturenames:
        kc: KubeCluster = request.getfixturevalue("kc")
        kc.nodes[0].kubectl(
            "delete", "pods", "-n", "default", "--all", "--wait=true", "--timeout=120s", check=False
        )
        # the pods' API objects went at once (grace 0): the next test starts once the
        # nodes stopped them, so that no decision of this test's reaches its reports
        for node in kc.nodes:
            node.wait_for(
                lambda n=node: not ready_sandboxes(n, "--namespace=default"),
                timeout=120,
                what=f"node {node.name} stopping the test's pods",
            )


# -- helpers -----------------------------------------------------------------------------


def numa_pod(name: str, *, on: str | None = None, **kw: Any) -> dict[str, Any]:
    doc = pod_manifest(name, **kw)
    doc["spec"]["schedulerName"] = NUMA
    if on is not None:
        doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": on}
    return doc


def by_name(kc: KubeCluster, name: str) -> Node:
    (node,) = (n for n in kc.nodes if n.name == name)
    return node


def node_of(kc: KubeCluster, pod: str) -> Node:
    return by_name(kc, kc.nodes[0].get("pod", pod)["spec"]["nodeName"])


def stop_on_their_nodes(kc: KubeCluster, *pods: str) -> None:
    """`stop_pods` each of `pods` through the node it runs on."""
    for pod in pods:
        stop_pods(node_of(kc, pod), pod)


def pod_cpus(kc: KubeCluster, pod: str) -> tuple[str, str]:
    """(its node, cpuset.cpus of its first container from the kernel)."""
    node = node_of(kc, pod)
    data = node.get("pod", pod)
    return node.name, cri.read_cgroup(container_pid(node, data), "cpuset", "cpuset.cpus")


def _is_exclusive(pod: dict[str, Any], container: dict[str, Any]) -> bool:
    if pod["status"].get("qosClass") != "Guaranteed":
        return False
    cpu = ((container.get("resources") or {}).get("requests") or {}).get("cpu", "0")
    milli = parse_cpu_quantity(cpu, subject=pod["metadata"]["name"], path="cpu")
    return milli > 0 and milli % 1000 == 0


def kernel_free(node: Node) -> dict[str, int] | str:
    """Per NUMA zone, the CPUs (millicores) its cpusets leave free on `node`; or what is
    wrong: exclusive CPUs that another container's cpuset also holds (an update not yet
    done, or a fault)."""
    pods = node.get("pods", "-A", "--field-selector", f"spec.nodeName={node.name}")["items"]
    held: set[int] = set()
    shared: set[int] = set()
    for pod in pods:
        if pod["status"].get("phase") != "Running":
            continue
        for i, container in enumerate(pod["spec"]["containers"]):
            statuses = pod["status"].get("containerStatuses") or []
            if i >= len(statuses) or "running" not in (statuses[i].get("state") or {}):
                continue
            cpus = set(
                IDSet.parse(cri.read_cgroup(container_pid(node, pod, i), "cpuset", "cpuset.cpus"))
            )
            (held if _is_exclusive(pod, container) else shared).update(cpus)
    if held & shared:
        return f"exclusive CPUs {sorted(held)} also in shared cpusets {sorted(shared)}"
    topology = load_topology(SYNTHETIC)
    return {
        f"node-{numa.id}": 1000 * len(set(numa.cpus) - RESERVED - held)
        for numa in topology.nodes.values()
    }


def nrt_free(node: Node) -> dict[str, int]:
    doc = nrt(node) or {}
    out = {}
    for zone in doc.get("zones") or []:
        if zone.get("type") != "Node":
            continue
        for res in zone.get("resources") or []:
            if res["name"] == "cpu":
                out[zone["name"]] = parse_cpu_quantity(
                    str(res["available"]), subject=f"NRT {node.name}", path=zone["name"]
                )
            if res["name"] == "memory":
                # memory is not pinned: nothing of a zone's memory is taken
                assert res["available"] == res["allocatable"], (node.name, zone)
    return out


def nrt_matches_kernel(kc: KubeCluster) -> None:
    """Every node's NRT `available` CPUs per NUMA zone == what the kernel leaves free."""
    for node in kc.nodes:
        try:
            node.wait_for(lambda n=node: nrt_free(n) == kernel_free(n), timeout=60, what="")
        except AssertionError:
            raise AssertionError(
                f"{node.name}: NRT available {nrt_free(node)}, kernel free {kernel_free(node)}"
            ) from None


def run_numa(kc: KubeCluster, name: str, **kw: Any) -> tuple[str, str]:
    kc.nodes[0].apply(numa_pod(name, **kw))
    wait_running(kc.nodes[0], name)
    return pod_cpus(kc, name)


def failed_scheduling(kc: KubeCluster, pod: str) -> str:
    """The pod's FailedScheduling event messages (joined), once there is one."""

    def messages() -> str | None:
        items = kc.nodes[0].get(
            "events", "-n", "default", "--field-selector",
            f"involvedObject.kind=Pod,involvedObject.name={pod},reason=FailedScheduling",
        )["items"]  # fmt: skip
        return "\n".join(e["message"] for e in items) or None

    text: str = kc.nodes[0].wait_for(messages, timeout=90, what=f"pod {pod} FailedScheduling")
    return text


def unscheduled(kc: KubeCluster, pod: str) -> bool:
    data = kc.nodes[0].get("pod", pod)
    return not data["spec"].get("nodeName") and data["status"].get("phase") == "Pending"


def filtered(numa: NumaScheduler, pod: str, message: str) -> dict[str, str]:
    """node -> reason of the extender's log lines `message` for default/`pod`."""
    return {
        e["node"]: e.get("reason", "")
        for e in numa.log_lines()
        if e.get("event") == message and e.get("pod") == f"default/{pod}"
    }


# -- scenarios ---------------------------------------------------------------------------


def test_nrt_objects_validate_against_the_chart_crd(deployed: KubeCluster) -> None:
    import kubernetes_validate

    crd = yaml.safe_load(CRD.read_text())
    kubernetes_validate.validate(crd, "1.34", strict=True)
    (version,) = (v for v in crd["spec"]["versions"] if v["storage"])
    schema = version["schema"]["openAPIV3Schema"]
    for node in deployed.nodes:
        doc = nrt(node)
        assert doc is not None and doc["apiVersion"] == f"topology.node.k8s.io/{version['name']}"
        jsonschema.Draft202012Validator(schema).validate(doc)
        # the real API server applies the same schema: a zone without its type is refused
        bad = copy.deepcopy(doc)
        bad["metadata"] = {"name": f"bad-{node.name}"}
        del bad["zones"][0]["type"]
        r = node.kubectl("create", "-f", "-", check=False, stdin=json.dumps(bad))
        assert r.returncode != 0 and "zones[0].type: Required value" in r.stderr, r.stderr
        assert {"node-0", "node-1"} <= set(nrt_free(node)), doc["zones"]
    nrt_matches_kernel(deployed)


def test_guaranteed_pod_goes_where_a_zone_is_free_and_waits_when_none_is(
    deployed: KubeCluster, numa: NumaScheduler
) -> None:
    kc = deployed
    nrt_matches_kernel(kc)
    assert run_numa(kc, "hold-a", on="node-a", cpu="1", memory="64Mi") == ("node-a", "1")
    nrt_matches_kernel(kc)
    # only node-b's zone node-1 is free: the extender turns node-a away
    assert run_numa(kc, "fits-b", cpu="1", memory="64Mi") == ("node-b", "1")
    assert REASON in filtered(numa, "fits-b", "node filtered out").get("node-a", ""), (
        numa.extender_log.read_text()[-3000:]
    )
    nrt_matches_kernel(kc)
    # no zone anywhere: Pending, with the extender's reason in its events
    kc.nodes[0].apply(numa_pod("waits", cpu="1", memory="64Mi"))
    message = failed_scheduling(kc, "waits")
    assert REASON in message, message
    assert unscheduled(kc, "waits")
    nrt_matches_kernel(kc)
    # deleting a holder gives its zone back, and the waiting pod goes there
    stop_on_their_nodes(kc, "hold-a")
    nrt_matches_kernel(kc)
    wait_running(kc.nodes[0], "waits")
    assert pod_cpus(kc, "waits") == ("node-a", "1")
    nrt_matches_kernel(kc)
    stop_on_their_nodes(kc, "fits-b", "waits")
    nrt_matches_kernel(kc)


def test_restarted_scheduler_uses_nrt_objects_created_after_it_started(
    deployed: KubeCluster, numa: NumaScheduler
) -> None:
    kc = deployed
    b = by_name(kc, "node-b")
    numa.stop()
    numa.start()
    started = time.time()
    # node-b's object goes; its daemon's next decision writes it anew, after the extender
    # and the scheduler started
    b.kubectl("delete", NRT, "node-b")
    assert run_numa(kc, "fill-b", on="node-b", cpu="1", memory="64Mi") == ("node-b", "1")
    created = b.wait_for(lambda: nrt(b), timeout=120, what="node-b's new NRT object")
    stamp = created["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    assert datetime.datetime.fromisoformat(stamp).timestamp() >= started - 1, (stamp, started)
    nrt_matches_kernel(kc)
    assert run_numa(kc, "fill-a", on="node-a", cpu="1", memory="64Mi") == ("node-a", "1")
    nrt_matches_kernel(kc)
    # judged by node-b's new object: turned away there too (without it node-b would
    # pass unjudged, and the pod would be bound there and refused at creation)
    kc.nodes[0].apply(numa_pod("late", cpu="1", memory="64Mi"))
    message = failed_scheduling(kc, "late")
    assert REASON in message, message
    assert set(filtered(numa, "late", "node filtered out")) == {"node-a", "node-b"}
    assert unscheduled(kc, "late")
    nrt_matches_kernel(kc)


def _other_writer(node: str) -> dict[str, Any]:
    """An NRT object as nri-plugins writes one: pool zones only, no NUMA zone."""
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "attributes": [{"name": "topologyManagerPolicy", "value": "none"}],
        "zones": [
            {"name": "socket #0", "type": "socket",
             "attributes": [{"name": "shared cpuset", "value": "0-1"}],
             "resources": [{"name": "cpu", "capacity": "2", "allocatable": "2",
                            "available": "2"}]},
        ],
    }  # fmt: skip


def _malformed(node: str) -> dict[str, Any]:
    """NUMA zones the API server accepts and no one can read: not quantities."""
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "zones": [
            {"name": "node-0", "type": "Node",
             "resources": [{"name": "cpu", "capacity": "lots", "allocatable": "lots",
                            "available": "lots"}]},
            {"name": "node-1", "type": "Node", "resources": []},
        ],
    }  # fmt: skip


def test_extender_passes_pods_it_cannot_judge(deployed: KubeCluster, numa: NumaScheduler) -> None:
    kc = deployed
    b = by_name(kc, "node-b")
    # objects of nodes that do not exist, of every kind, beside the real ones
    for doc in (_other_writer("ghost-1"), _malformed("ghost-2")):
        b.apply(doc)
    cases: dict[str, dict[str, Any] | None] = {
        "other-writer": _other_writer("node-b"),
        "malformed": _malformed("node-b"),
        "missing": None,
    }
    try:
        for case, written in cases.items():
            # node-b's report is current: its daemon writes again only at its next
            # decision (the probe's), after the extender judged what is written here
            b.wait_for(lambda: nrt(b) is not None, timeout=120, what="node-b's own NRT object")
            nrt_matches_kernel(kc)
            b.kubectl("delete", NRT, "node-b", "--ignore-not-found")
            if written is not None:
                b.apply(written)
            time.sleep(2)  # the extender's watch delivers the change
            now = nrt(b)
            assert (now and now["zones"]) == (written and written["zones"]), (case, now)
            pod = f"probe-{case}"
            assert run_numa(kc, pod, on="node-b", cpu="1", memory="64Mi") == ("node-b", "1")
            passed = filtered(numa, pod, "node not judged; passed")
            assert passed.get("node-b"), (case, numa.log_lines()[-5:])
            assert numa.healthy()
            # its API object goes at once; the next case starts once node-b has stopped
            # it, so that no decision on it (the stop; a resource update the kubelet
            # sends while it kills) writes node-b's report after the case's object
            stop_pods(b, pod)
    finally:
        b.kubectl("delete", NRT, "ghost-1", "ghost-2", "--ignore-not-found")
    b.wait_for(lambda: nrt(b), timeout=120, what="node-b's NRT object again")
    nrt_matches_kernel(kc)
    assert numa.healthy()
