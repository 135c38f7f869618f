"""The issue's 40-pod workload on the real two-node cluster, with and without the extender.

Usage: sudo python -m bench.numa_nodes [--pods 40] [--seed 26] [--settle 20] [--out FILE]

Everything is real: the cluster of tests/e2e_kube/test_cluster.py (one control plane, two
kubelets v1.34.4, two containerd 2.3.7 with NRI, nri-resmgr from the chart on each node,
static policy, CPU 0 reserved, on a synthetic sysfs tree of two NUMA nodes over the
machine's two CPUs: `tests.e2e_kube.numa`), the cluster's kube-scheduler, and a second
kube-scheduler (profile ``nri-resmgr-numa``) calling the extender, which runs in this
process (`bench.numa_cluster`'s, for its exact answer times).  Each node has one CPU a
Guaranteed container can hold alone; the kube-scheduler counts two per node.

The workload is `bench.numa_cluster.workload` (the same seed gives the same pods), each
pod given the e2e busybox image and, in the second run, ``schedulerName:
nri-resmgr-numa``; created at once, it runs until no pod changes for `--settle` seconds,
and the pods are deleted between the runs.  Reported per run: pods Running, Guaranteed
pods whose cpuset (read from the kernel) spans both NUMA nodes, pods refused at
container creation (a container waiting with ``CreateContainerError``), pods Pending
(unbound), the seconds from the first creation to the last pod Running, and the
extender's filter latency.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import load_note, machine
from bench.numa_cluster import _extender, workload
from bench.stats import percentile
from nri_resmgr.scheduler.server import ExtenderMetrics
from nri_resmgr.topology.cpuset import IDSet
from tests.e2e import containerd as ctdmod
from tests.e2e import cri
from tests.e2e_kube.chart import container_pid
from tests.e2e_kube.image import build_image
from tests.e2e_kube.node import TWO_NODES, TWO_NODES_NAT, KubeCluster, built_cluster, scheduler_argv
from tests.e2e_kube.numa import deploy
from tests.support.requirements import go_binary

NS = "default"
NUMA = "nri-resmgr-numa"
#: the zone of each CPU on the synthetic nodes (tests.e2e_kube.numa.SYNTHETIC)
ZONE = {0: 0, 1: 1}


def _pods(kc: KubeCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kc.nodes[0].get("pods", "-n", NS)["items"]
    return items


def _bindings(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(p["metadata"]["name"], p["spec"].get("nodeName", "")) for p in items]


def _refused(pod: dict[str, Any]) -> bool:
    for status in pod["status"].get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("CreateContainerError", "RunContainerError"):
            return True
    return False


def _spread(kc: KubeCluster, pod: dict[str, Any]) -> bool:
    if pod["status"].get("qosClass") != "Guaranteed" or pod["status"].get("phase") != "Running":
        return False
    (node,) = (n for n in kc.nodes if n.name == pod["spec"]["nodeName"])
    cpus = cri.read_cgroup(container_pid(node, pod), "cpuset", "cpuset.cpus")
    return len({ZONE[c] for c in IDSet.parse(cpus)}) > 1


def _scheduler(kc: KubeCluster, stack: contextlib.ExitStack, metrics: ExtenderMetrics) -> None:
    """The extender in this process and a second kube-scheduler calling it."""
    port = stack.enter_context(_extender(kc.cluster.client, metrics))
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kc.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": NUMA}],
        "extenders": [{
            "urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
            "prioritizeVerb": "prioritize", "weight": 5, "nodeCacheCapable": True,
            "ignorable": True}],
    }  # fmt: skip
    path = kc.base / "bench-numa-scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = kc.start(
        scheduler_argv(kc.k8s, kc.kubeconfig, kc.base / "bench-sched-certs",
                       f"--config={path}", "--pod-max-in-unschedulable-pods-duration=10s"),
        kc.base / "bench-numa-scheduler.log",
    )  # fmt: skip
    stack.callback(proc.wait, 20)
    stack.callback(proc.terminate)
    time.sleep(3)  # its informers


def _manifests(pods: int, seed: int, *, extender: bool) -> list[dict[str, Any]]:
    docs = []
    for doc in workload(pods, seed):
        doc["metadata"]["namespace"] = NS
        spec = doc["spec"]
        spec.update(terminationGracePeriodSeconds=0, restartPolicy="Never")
        spec["containers"][0].update(
            image=ctdmod.TEST_IMAGE, imagePullPolicy="Never", command=["/bin/sleep", "2147483647"]
        )
        if extender:
            spec["schedulerName"] = NUMA
        docs.append(doc)
    return docs


def run_once(
    kc: KubeCluster, *, extender: bool, pods: int, seed: int, settle: float
) -> dict[str, Any]:
    metrics = ExtenderMetrics()
    with contextlib.ExitStack() as stack:
        stack.callback(
            kc.nodes[0].kubectl,
            "delete", "pods", "-n", NS, "--all", "--wait=true", "--timeout=300s", check=False,
        )  # fmt: skip
        if extender:
            _scheduler(kc, stack, metrics)
        docs = _manifests(pods, seed, extender=extender)
        start = time.monotonic()
        kc.nodes[0].kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(docs))
        last, last_change, most, running_at = "", time.monotonic(), 0, start
        while time.monotonic() - last_change < settle:
            items = _pods(kc)
            state = json.dumps(sorted(
                (p["metadata"]["name"], p["spec"].get("nodeName", ""),
                 p["status"].get("phase", ""), _refused(p))
                for p in items))  # fmt: skip
            now = time.monotonic()
            if state != last:
                last, last_change = state, now
            n = sum(p["status"].get("phase") == "Running" for p in items)
            if n > most:
                most, running_at = n, now
            time.sleep(0.5)
        items = _pods(kc)
        filters = list(metrics.recent["filter"])
        return {
            "extender": extender,
            "pods": len(items),
            "running": sum(p["status"].get("phase") == "Running" for p in items),
            "spread_across_numa": sorted(p["metadata"]["name"] for p in items if _spread(kc, p)),
            "refused_at_creation": sorted(p["metadata"]["name"] for p in items if _refused(p)),
            "pending": sorted(n for n, node in _bindings(items) if not node),
            "seconds_to_last_running": round(running_at - start, 2) if most else None,
            "filter_ms": (
                {"n": len(filters), "p50": round(1000 * percentile(filters, 50), 2),
                 "p99": round(1000 * percentile(filters, 99), 2)}
                if filters else None
            ),
        }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--settle", type=float, default=20)
    parser.add_argument("--out")
    args = parser.parse_args()
    go = go_binary()
    assert go, "the Go toolchain is needed (the e2e builds)"
    with built_cluster(
        TWO_NODES, nat_chain=TWO_NODES_NAT, go=go, release=ctdmod.CONTAINERD_2
    ) as kc:
        deploy(kc, build_image())
        results = []
        for extender in (False, True):
            result = run_once(kc, extender=extender, pods=args.pods, seed=args.seed,
                              settle=args.settle)  # fmt: skip
            print(json.dumps(result), flush=True)
            results.append(result)
    out = {"machine": machine(), "load": load_note(), "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
