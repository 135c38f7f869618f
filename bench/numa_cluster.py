"""The issue's 40-pod workload scheduled with and without the NUMA extender, on synthetic
nodes behind the real NRI library, the real API server and the real kube-scheduler.

Usage: python -m bench.numa_cluster [--pods 40] [--seed 26] [--settle 20] [--out FILE]

What is real: etcd and kube-apiserver, kube-scheduler v1.34.4 (tests/k8s), the extender
(`nri_resmgr.scheduler`, in this process over TCP), and per node the real NRI runtime
library (the conformance harness, NRI v0.12.2) with a real daemon attached
(`nri-resmgr run`, topology-aware, 750m reserved, `--node-resource-topology`, its node's
name), each discovering a synthetic machine of 2 NUMA nodes of 8 CPUs from its own sysfs
tree (`write_sysfs`, `--sysfs-root`), as the chart's daemon reads the host's.  What
stands in for the kubelet: a thread per node that lists the pods bound to it, runs each
through its runtime (RunPodSandbox, CreateContainer, StartContainer, with the pod's QoS
cgroup parent and resources as the kubelet sets them) and writes the pod's phase
(Running, or Failed when creation is refused).  Node objects have 16 CPUs and 32Gi allocatable.

The workload (seeded): a third Guaranteed (1-4 CPUs, 256Mi-1Gi), a third Burstable
(100-500m, 128Mi), a third BestEffort, created at once; it runs until no pod changes for
`--settle` seconds.  Reported per run: Guaranteed pods whose exclusive CPUs span more than
one NUMA node, pods refused at creation, pods Pending, the seconds until the last pod
that runs was Running, and the extender's filter latency (its own answer times).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog
import yaml

from bench.common import load_note, machine
from bench.stats import percentile
from nri_resmgr.kube.client import KubeClient, KubeError
from nri_resmgr.kube.report import NRT_PATH
from nri_resmgr.policy.common import parse_cpu_quantity, parse_memory_quantity
from nri_resmgr.scheduler.fit import Strategy
from nri_resmgr.scheduler.server import ExtenderMetrics, NrtCache, serve
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.synthetic.sysfs import write_sysfs
from tests.conformance.harness import GoRuntime, RuntimeCallError, go_runtime
from tests.conformance.harness_pods import make_container, make_pod
from tests.k8s.cluster import Cluster, _free_port, control_plane
from tests.k8s.components import build_node_components

DAEMON = Path(__file__).resolve().parent / "plugins" / "resmgr.py"
CRD = Path(__file__).resolve().parents[1] / "charts" / "nri-resmgr" / "crds"
SPEC = "packages=1,nodes=2,cores=8,threads=1,memory=16G"
NODES = ("node-a", "node-b")
NS = "bench"
QUIET = structlog.wrap_logger(structlog.ReturnLogger())


def workload(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    pods = []
    for i in range(n):
        kind = ("guaranteed", "burstable", "besteffort")[i % 3]
        res: dict[str, Any] = {}
        if kind == "guaranteed":
            cpu, mem = str(rng.randint(1, 4)), f"{rng.choice([256, 512, 1024])}Mi"
            res = {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}
        elif kind == "burstable":
            res = {"requests": {"cpu": f"{rng.randint(1, 5) * 100}m", "memory": "128Mi"}}
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"w{i:02d}-{kind}", "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": res}]},
        })  # fmt: skip
    rng.shuffle(pods)
    return pods


def _millis(value: str | None) -> int:
    """A pod's CPU quantity as the API server returns it (``500m``, ``2``)."""
    return parse_cpu_quantity(value, subject="pod cpu", path="") if value else 0


def _bytes(value: str | None) -> int | None:
    """A memory quantity as the API server returns it (it turns ``1024Mi`` into ``1Gi``)."""
    return parse_memory_quantity(value) if value else None


class Kubelet(threading.Thread):
    """Runs the pods bound to `node` through its NRI runtime (module docstring)."""

    def __init__(self, node: str, client: KubeClient, rt: GoRuntime, stop: threading.Event):
        super().__init__(daemon=True, name=f"kubelet-{node}")
        self.node, self.client, self.rt, self.stop = node, client, rt, stop
        self.topology = load_topology(SPEC)
        self.seen: set[str] = set()
        self.running: dict[str, float] = {}
        self.refused: dict[str, str] = {}
        self.spread: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            items = self.client.request(
                "GET", f"/api/v1/namespaces/{NS}/pods",
                query={"fieldSelector": f"spec.nodeName={self.node}"},
            )["items"]  # fmt: skip
            for pod in items:
                name = pod["metadata"]["name"]
                if name not in self.seen:
                    self.seen.add(name)
                    self._start(pod)
            self.stop.wait(0.1)

    def _start(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        c = pod["spec"]["containers"][0]
        req, lim = c["resources"].get("requests", {}), c["resources"].get("limits", {})
        qos = "guaranteed" if lim else ("burstable" if req else "besteffort")
        sandbox = make_pod(name=name, namespace=NS, qos=qos, uid=pod["metadata"]["uid"])
        ctr = make_container(
            sandbox, name="c",
            cpu_request_millis=_millis(req.get("cpu")),
            cpu_limit_millis=_millis(lim["cpu"]) if "cpu" in lim else None,
            memory_request=_bytes(req.get("memory")), memory_limit=_bytes(lim.get("memory")),
        )  # fmt: skip
        phase, message = "Running", ""
        try:
            self.rt.run_pod(sandbox)
            reply = self.rt.create_container(sandbox, ctr)
            self.rt.start_container(sandbox, ctr)
            cpus = ((reply.get("adjust") or {}).get("linux") or {}).get("resources", {})
            cpuset = ((cpus.get("cpu") or {}).get("cpus")) or ""
            if qos == "guaranteed" and cpuset:
                nodes = {self.topology.cpu(x).node_id for x in CPUSet.parse(cpuset)}
                if len(nodes) > 1:
                    self.spread.append(name)
            self.running[name] = time.monotonic()
        except RuntimeCallError as exc:
            phase, message = "Failed", str(exc)[:300]
            self.refused[name] = message
        status = {"phase": phase, "message": message, "reason": "" if phase == "Running" else "NRI"}
        with contextlib.suppress(KubeError):
            self.client.request(
                "PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", body={"status": status},
                content_type="application/merge-patch+json",
            )  # fmt: skip


def _node(client: KubeClient, name: str) -> None:
    client.request("POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})  # fmt: skip
    status = {
        "capacity": {"cpu": "16", "memory": "32Gi", "pods": "110"},
        "allocatable": {"cpu": "16", "memory": "32Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "ready", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }  # fmt: skip
    client.request("PATCH", f"/api/v1/nodes/{name}/status", body={"status": status},
                   content_type="application/merge-patch+json")  # fmt: skip
    # the API server taints a new node not-ready until a kubelet says otherwise: none will
    client.request("PATCH", f"/api/v1/nodes/{name}", body={"spec": {"taints": None}},
                   content_type="application/merge-patch+json")  # fmt: skip


@contextlib.contextmanager
def _extender(client: KubeClient, metrics: ExtenderMetrics) -> Iterator[int]:
    cache = NrtCache(client, log=QUIET)
    stop = threading.Event()
    threading.Thread(target=cache.run_blocking, args=(stop,), daemon=True).start()
    port = _free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def main() -> None:
        server = await serve(
            cache.offers,
            host="127.0.0.1",
            port=port,
            strategy=Strategy.LEAST_ALLOCATED,
            log=QUIET,
            metrics=metrics,
        )
        ready.set()
        async with server:
            await asyncio.Event().wait()

    def serve_forever() -> None:
        with contextlib.suppress(RuntimeError):  # stopped when the run ends
            loop.run_until_complete(main())

    threading.Thread(target=serve_forever, daemon=True).start()
    assert ready.wait(10)
    try:
        yield port
    finally:
        stop.set()
        loop.call_soon_threadsafe(loop.stop)


def run_once(cluster: Cluster, *, extender: bool, pods: int, seed: int, settle: float,
             work: Path) -> dict[str, Any]:  # fmt: skip
    client = cluster.client
    with contextlib.suppress(KubeError):
        client.request("DELETE", f"/api/v1/namespaces/{NS}/pods", query={"gracePeriodSeconds": "0"})
    metrics = ExtenderMetrics()
    stop = threading.Event()
    with contextlib.ExitStack() as stack:
        kubelets = []
        for node in NODES:
            rt = stack.enter_context(go_runtime("v0.12.2"))
            rt.start()
            write_sysfs(load_topology(SPEC), rt.dir / "sysfs")
            rt.start_external(DAEMON, idx="90", name="resmgr", args=[
                "--policy", "topology-aware", "--sysfs-root", str(rt.dir / "sysfs"),
                "--state-dir", str(rt.dir / "state"), "--node-name", node,
                "--kubeconfig", str(cluster.kubeconfig()), "--node-resource-topology",
                "--report-interval", "60"])  # fmt: skip
            rt.wait_synced(timeout=60)
            kubelets.append(Kubelet(node, client, rt, stop))
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(cluster.kubeconfig())},
            "leaderElection": {"leaderElect": False},
        }
        if extender:
            port = stack.enter_context(_extender(client, metrics))
            config["extenders"] = [{
                "urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
                "prioritizeVerb": "prioritize", "weight": 5, "nodeCacheCapable": True,
                "ignorable": True}]  # fmt: skip
        (work / "sched.yaml").write_text(yaml.safe_dump(config))
        sched_log = stack.enter_context(open(work / f"sched-{extender}.log", "wb"))
        proc = subprocess.Popen(
            [str(build_node_components()["kube-scheduler"]), f"--config={work / 'sched.yaml'}",
             f"--authentication-kubeconfig={cluster.kubeconfig()}",
             f"--authorization-kubeconfig={cluster.kubeconfig()}",
             "--bind-address=127.0.0.1", f"--secure-port={_free_port()}",
             f"--cert-dir={work / 'certs'}"],
            stdout=sched_log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        stack.callback(proc.wait, 20)
        stack.callback(proc.terminate)
        for k in kubelets:
            k.start()
        stack.callback(stop.set)
        time.sleep(3)  # the daemons' first reports, the scheduler's informers
        start = time.monotonic()
        for pod in workload(pods, seed):
            client.request("POST", f"/api/v1/namespaces/{NS}/pods", body=pod)
        last, last_change = "", time.monotonic()
        while time.monotonic() - last_change < settle:
            items = client.request("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
            state = json.dumps(
                sorted(
                    (p["metadata"]["name"], p["spec"].get("nodeName", ""),
                     p.get("status", {}).get("phase", ""))
                    for p in items
                )
            )  # fmt: skip
            if state != last:
                last, last_change = state, time.monotonic()
            time.sleep(0.5)
        items = client.request("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
        pending = [p["metadata"]["name"] for p in items if not p["spec"].get("nodeName")]
        running_at = [t for k in kubelets for t in k.running.values()]
        filters = list(metrics.recent["filter"])
        return {
            "extender": extender,
            "pods": len(items),
            "running": len(running_at),
            "spread_across_numa": sorted(n for k in kubelets for n in k.spread),
            "refused_at_creation": {n: m for k in kubelets for n, m in k.refused.items()},
            "pending": sorted(pending),
            "seconds_to_last_running": round(max(running_at) - start, 2) if running_at else None,
            "filter_ms": (
                {
                    "n": len(filters),
                    "p50": round(1000 * percentile(filters, 50), 2),
                    "p99": round(1000 * percentile(filters, 99), 2),
                }
                if filters
                else None
            ),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--settle", type=float, default=20)
    parser.add_argument("--out")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="numa-cluster-") as tmp:
        work = Path(tmp)
        for extender in (False, True):
            with control_plane(work / f"cp-{extender}") as cluster:
                cluster.apply_yaml(CRD / "noderesourcetopologies.yaml")
                cluster.client.request("POST", "/api/v1/namespaces", body={
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})  # fmt: skip
                for node in NODES:
                    _node(cluster.client, node)
                result = run_once(cluster, extender=extender, pods=args.pods, seed=args.seed,
                                  settle=args.settle, work=work)  # fmt: skip
                nrts = cluster.client.request("GET", NRT_PATH)["items"]
                result["nrt_nodes"] = sorted(o["metadata"]["name"] for o in nrts)
                print(json.dumps(result))
                results.append(result)
    out = {"machine": machine(), "load": load_note(), "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
