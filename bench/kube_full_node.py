"""A full node through the real kubelet: 110 pods at once, with nri-resmgr and with no plugin.

Usage: sudo python -m bench.kube_full_node [--pods 110] [--rounds 2] [--timeout 600] [--out FILE]

Everything is real (issue 25, item 4): one node as tests/e2e_kube/node.py starts it (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet v1.34.4 on
containerd 2.3.7 with NRI), on a bridge, /24, NAT chain and cgroup root of its own
(`SPEC`), so that it runs beside the test suite's node.  The kubelet's ``maxPods`` is
raised to ``--pods`` + `HEADROOM`: with the chart installed its daemon is a pod of the node
too, and the kubelet's default of 110 would refuse the 110th workload pod (OutOfpods).

Theory of operation: `plan(rounds)` gives the order of the phases, ABBA per pair of rounds
(with, without, without, with, ...) so that a drift of the machine's load over the run
weighs on both modes alike. Before a phase with nri-resmgr the chart is installed as the
e2e tests install it (`tests.e2e_kube.chart.values`: the static policy, CPU 0 reserved)
and its daemon waited Ready; before one without, it is uninstalled and its daemon pod
waited gone, so that containerd has no NRI plugin at all. A phase creates ``--pods``
pause-image pods at once (a thread POSTs them one after another; every other one Burstable
with a 10m CPU and 8Mi memory request, the rest BestEffort, so that 110 fit on 2 CPUs)
while this thread lists them every `POLL` seconds; each pod's start is from its POST
returning to the first list showing it Running (monotonic clock, so the resolution is
`POLL` plus a list's time). The phase ends when all are Running (or at ``--timeout``,
reporting which are not and why); the pods are then deleted and waited gone. `summarize`
pools each mode's starts (p50, p99) and takes the median of its phases' times until all
Running; the row is nri-resmgr over no plugin, target 1.05x (printed as `bench.goals`
prints its rows; not one of its default rows, since it needs root and several minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.common import load_note, machine
from bench.goals import Goal, Measured, _commit, header, line
from bench.stats import percentile
from nri_resmgr.kube.client import KubeClient
from tests.e2e import containerd as ctdmod
from tests.e2e_kube.chart import (
    NAMESPACE,
    RELEASE,
    helm_install,
    helm_uninstall,
    values,
)
from tests.e2e_kube.image import Image, build_image
from tests.e2e_kube.node import KubeCluster, Node, NodeSpec, built_cluster
from tests.e2e_kube.soak import wait_daemon
from tests.support.requirements import go_binary

Mode = Literal["nri-resmgr", "no plugin"]
WITH: Mode = "nri-resmgr"
WITHOUT: Mode = "no plugin"
NS = "default"
#: seconds between two lists of the pods
POLL = 0.25
#: pods the kubelet admits beyond the workload's (the daemon's own pod)
HEADROOM = 10
GOAL = Goal(
    "kube-full-node",
    "110 pods at once through the real kubelet, pod start p50, nri-resmgr / no plugin",
    "s",
    1.05,
    "ratio",
)


def plan(rounds: int) -> list[Mode]:
    """The phases of `rounds` rounds, each round one phase per mode: ABBA ABBA ..."""
    if rounds < 1:
        raise ValueError(f"bench.kube_full_node: rounds: expected at least 1, found {rounds}")
    order: list[Mode] = []
    for i in range(rounds):
        order += [WITH, WITHOUT] if i % 2 == 0 else [WITHOUT, WITH]
    return order


@dataclass(frozen=True)
class Phase:
    """One phase's observations: when each pod's POST returned and when it was first
    seen Running (monotonic seconds), and why the ones never Running were not."""

    mode: Mode
    posted: dict[str, float]
    running: dict[str, float]
    stuck: dict[str, str]

    def starts(self) -> list[float]:
        """Seconds from creation to Running of each pod that ran."""
        return [self.running[n] - t for n, t in self.posted.items() if n in self.running]

    def all_running(self) -> float | None:
        """Seconds from the first creation to the last pod Running; None if some never ran."""
        if not self.posted or set(self.running) != set(self.posted):
            return None
        return max(self.running.values()) - min(self.posted.values())


def summarize(phases: Sequence[Phase]) -> dict[Mode, dict[str, Any]]:
    """Per mode: pods, pods Running, start p50/p99 over every phase's pods pooled, and the
    median over phases of the time until all were Running (None if any phase fell short)."""
    out: dict[Mode, dict[str, Any]] = {}
    for mode in (WITH, WITHOUT):
        mine = [p for p in phases if p.mode == mode]
        if not mine:
            continue
        starts = [s for p in mine for s in p.starts()]
        totals = [p.all_running() for p in mine]
        complete = [t for t in totals if t is not None]
        out[mode] = {
            "phases": len(mine),
            "pods": sum(len(p.posted) for p in mine),
            "running": sum(len(p.running) for p in mine),
            "start_p50": percentile(starts, 50) if starts else None,
            "start_p99": percentile(starts, 99) if starts else None,
            "all_running": [None if t is None else round(t, 2) for t in totals],
            "all_running_median": (
                statistics.median(complete) if len(complete) == len(totals) else None
            ),
        }
    return out


def ratios(summary: dict[Mode, dict[str, Any]]) -> dict[str, float | None]:
    """nri-resmgr over no plugin, for each of the three measures."""
    out: dict[str, float | None] = {}
    for key in ("start_p50", "start_p99", "all_running_median"):
        a, b = summary.get(WITH, {}).get(key), summary.get(WITHOUT, {}).get(key)
        out[key] = round(a / b, 3) if a is not None and b else None
    return out


def manifest(i: int) -> dict[str, Any]:
    """The `i`-th workload pod: the e2e pause image; every other one Burstable."""
    resources: dict[str, Any] = {}
    if i % 2:
        resources = {"requests": {"cpu": "10m", "memory": "8Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"full-{i:03d}", "namespace": NS},
        "spec": {
            "containers": [{
                "name": "c", "image": ctdmod.SANDBOX_IMAGE, "imagePullPolicy": "Never",
                "resources": resources,
            }],
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
        },
    }  # fmt: skip


def spec(pods: int) -> NodeSpec:
    """The bench's node: its own bridge, /24, cgroup root; room for `pods` and the daemon."""
    return NodeSpec(
        "nri-resmgr-full", "nrkfull", "10.88.95.1", "nri-resmgr-full", max_pods=pods + HEADROOM
    )


NAT = "NRI-RESMGR-KUBE-FULL"


def _why(pod: dict[str, Any]) -> str:
    """Why a pod is not Running: its phase, a waiting container's reason, or its
    scheduling condition."""
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message', '')}"[:200]
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" and cond.get("message"):
            return f"{cond.get('reason')}: {cond['message']}"[:200]
    return status.get("phase") or "no status"


def _set_mode(node: Node, image: Image, mode: Mode) -> None:
    """The chart installed (and its daemon Ready) for `WITH`, uninstalled for `WITHOUT`."""
    status = node.run("helm", "status", RELEASE, "--namespace", NAMESPACE, check=False)
    installed = status.returncode == 0
    if mode == WITH and not installed:
        helm_install(node, values(node, image))
        # helm's --wait passes a DaemonSet of one pod before that pod is Ready (its
        # maxUnavailable is 1): the phase starts once the daemon has registered and is Ready
        wait_daemon(node)
    elif mode == WITHOUT and installed:
        helm_uninstall(node)


def _list(client: KubeClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.request("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
    return items


def _delete_all(kc: KubeCluster, timeout: float) -> None:
    kc.nodes[0].run(
        "kubectl", "delete", "pods", "-n", NS, "--all", "--wait=true", f"--timeout={timeout}s",
        timeout=timeout + 60,
    )  # fmt: skip


def run_phase(kc: KubeCluster, mode: Mode, *, pods: int, timeout: float) -> Phase:
    """Create `pods` pods at once and watch them until all are Running (module docstring)."""
    posted: dict[str, float] = {}
    errors: list[BaseException] = []
    poster = KubeClient(kc.cluster.creds, timeout=60)
    lister = KubeClient(kc.cluster.creds, timeout=60)

    def post() -> None:
        try:
            for i in range(pods):
                doc = manifest(i)
                poster.request("POST", f"/api/v1/namespaces/{NS}/pods", body=doc)
                posted[doc["metadata"]["name"]] = time.monotonic()
        except BaseException as exc:  # reported by the phase, not lost in the thread
            errors.append(exc)

    thread = threading.Thread(target=post, name="post-pods", daemon=True)
    running: dict[str, float] = {}
    start = time.monotonic()
    thread.start()
    items: list[dict[str, Any]] = []
    while time.monotonic() - start < timeout:
        items = _list(lister)
        now = time.monotonic()
        for pod in items:
            name = pod["metadata"]["name"]
            if name not in running and (pod.get("status") or {}).get("phase") == "Running":
                running[name] = now
        if errors or (not thread.is_alive() and len(running) >= pods):
            break
        time.sleep(POLL)
    thread.join(60)
    if errors:
        raise RuntimeError(f"bench.kube_full_node: creating pods failed: {errors[0]}")
    stuck = {p["metadata"]["name"]: _why(p) for p in items if p["metadata"]["name"] not in running}
    return Phase(mode, dict(posted), running, stuck)


def _requirements() -> str:
    """The Go toolchain, or a clear exit naming what is missing."""
    if os.geteuid() != 0:
        raise SystemExit(
            "bench.kube_full_node: needs root (it starts a kubelet, containerd and a bridge); "
            "run it with sudo"
        )
    if not Path("/usr/lib/cni/bridge").exists():
        raise SystemExit(
            "bench.kube_full_node: Debian's containernetworking-plugins is not installed "
            "(/usr/lib/cni/bridge)"
        )
    go = go_binary()
    if not go:
        raise SystemExit(
            "bench.kube_full_node: the Go toolchain is needed to build the peers "
            "(python -m tests.build_peers)"
        )
    return go


def table(summary: dict[Mode, dict[str, Any]], r: dict[str, float | None]) -> str:
    """The result as a markdown table."""

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = [
        "| mode | phases | pods Running | start p50 s | start p99 s | all Running s (each) |",
        "|---|---|---|---|---|---|",
    ]
    for mode, s in summary.items():
        each = ", ".join("-" if t is None else f"{t:.1f}" for t in s["all_running"])
        rows.append(
            f"| {mode} | {s['phases']} | {s['running']}/{s['pods']} | {num(s['start_p50'])} "
            f"| {num(s['start_p99'])} | {num(s['all_running_median'])} ({each}) |"
        )
    rows.append(
        f"| ratio | | | {num(r['start_p50'])} | {num(r['start_p99'])} "
        f"| {num(r['all_running_median'])} |"
    )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pods", type=int, default=110, help="pods created at once per phase")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of one phase per mode (ABBA)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a phase may take")
    ap.add_argument("--out", default="bench/out/kube_full_node.json")
    ns = ap.parse_args()
    order = plan(ns.rounds)
    go = _requirements()
    print(f"bench.kube_full_node: {load_note()}; phases {' '.join(order)}", flush=True)
    image = build_image()
    phases: list[Phase] = []
    with built_cluster((spec(ns.pods),), nat_chain=NAT, go=go, release=ctdmod.CONTAINERD_2) as kc:
        node = kc.nodes[0]
        node.ctd.import_image(image.archive)
        for mode in order:
            _set_mode(node, image, mode)
            phase = run_phase(kc, mode, pods=ns.pods, timeout=ns.timeout)
            phases.append(phase)
            starts = phase.starts()
            print(json.dumps({
                "mode": mode, "running": len(phase.running), "pods": len(phase.posted),
                "all_running_s": phase.all_running(),
                "start_p50_s": percentile(starts, 50) if starts else None,
                "stuck": dict(list(phase.stuck.items())[:5]), "load": load_note(),
            }), flush=True)  # fmt: skip
            _delete_all(kc, ns.timeout)
        with contextlib.suppress(AssertionError):
            helm_uninstall(node)
    summary = summarize(phases)
    r = ratios(summary)
    print(table(summary, r))
    if r["start_p50"] is not None:
        m = Measured(GOAL, summary[WITH]["start_p50"], summary[WITHOUT]["start_p50"])
        print(header())
        print(line(m))
    result = {
        "machine": machine(), "commit": _commit(), "load_after": load_note(),
        "pods": ns.pods, "order": order, "summary": summary, "ratios": r,
        "stuck": [p.stuck for p in phases],
    }  # fmt: skip
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"commit {result['commit']}; {result['load_after']} after; JSON in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
