"""Balloons decisions at 1,000 live containers, and how they grow with the number of CPUs.

Usage: python -m bench.balloons [--live 1000] [--samples 200] [--warmup 20]
                                [--machines 224t,1k,2k,4k] [--policy balloons] [--out FILE]

Machines: `examples/topologies/server-2s-224t.yaml` (224 threads) and synthetic machines
of 8 packages x 1 NUMA node x N cores x 2 threads: 1,024, 2,048 and 4,096 CPUs (``1k``,
``2k``, ``4k``).  Policy configuration (`CONFIG`): 750m reserved, three balloon types by
namespace:

* ``work`` (namespace bench): the live containers, `bench.workload`'s pattern of ten
  (5 burstable 100m, 4 besteffort, 1 guaranteed 1 CPU), in instances of at most 16 CPUs;
* ``grow`` (namespace bench-grow, 1 to 64 CPUs, one instance): holds one anchor container;
* ``fresh`` (namespace bench-new, exactly 1 CPU, preferNewBalloons): each container gets
  its own instance.

Three kinds of decision are timed, in this process, around `Pipeline` calls (adapter,
policy, rendering of the adjustment and of the updates, commit, the decision's log line,
JSON logs to /dev/null), wall (`perf_counter_ns`) and CPU (`thread_time_ns`):

* **inflate**: `Pipeline.create` of a Guaranteed 1-CPU container that joins ``grow[0]``,
  which grows by one CPU (the anchor is updated);
* **deflate**: `Pipeline.stop` + `Pipeline.remove` of that container: ``grow[0]`` shrinks;
* **new**: `Pipeline.create` of a container of type ``fresh``: a new balloon instance (it
  is removed again after the sample, untimed).

Growth with CPUs: the p50 at 4,096 CPUs over the p50 at 1,024 CPUs, per kind, next to the
CPU ratio (4): a decision that grows at most linearly with CPUs has a factor of at most 4.

``--policy topology-aware`` runs the same probes with only the reserved CPUs configured
(namespaces mean nothing there: "inflate" and "new" are exclusive 1-CPU grants, "deflate"
their release), a baseline for the pipeline around the policy.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from bench.common import load_note, machine, state_dir
from bench.decision import pb_ctr, pb_pod
from bench.stats import summary_us
from bench.workload import container_for, live
from nri_resmgr.config import Config, LogConfig
from nri_resmgr.ops.logs import configure_logging
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from tests.conformance.harness import Json
from tests.conformance.harness_pods import make_pod

REPO = Path(__file__).resolve().parents[1]
MACHINES: dict[str, str | dict[str, Any]] = {
    "224t": str(REPO / "examples" / "topologies" / "server-2s-224t.yaml"),
    "1k": {"packages": 8, "nodes": 1, "cores": 64, "threads": 2, "memory": "64G"},
    "2k": {"packages": 8, "nodes": 1, "cores": 128, "threads": 2, "memory": "64G"},
    "4k": {"packages": 8, "nodes": 1, "cores": 256, "threads": 2, "memory": "64G"},
}
KINDS = ("inflate", "deflate", "new")
CONFIG: dict[str, Any] = {
    "reservedResources": {"cpu": "750m"},
    "pinCPU": True,
    "pinMemory": True,
    "balloonTypes": [
        {"name": "work", "namespaces": ["bench"], "maxCPUs": 16},
        {"name": "grow", "namespaces": ["bench-grow"], "minCPUs": 1, "maxCPUs": 64,
         "maxBalloons": 1},
        {"name": "fresh", "namespaces": ["bench-new"], "minCPUs": 1, "maxCPUs": 1,
         "preferNewBalloons": True},
    ],
}  # fmt: skip


def guaranteed(name: str, namespace: str) -> tuple[Json, Json]:
    pod = make_pod(name=name, namespace=namespace, qos="guaranteed")
    return pod, container_for(pod, "guaranteed", "app")


def _pipeline(topology: Topology, policy: str, config: dict[str, Any]) -> Pipeline:
    return build_pipeline(
        Config.model_validate({"policyConfig": config}),
        topology=topology,
        policy=policy,
        state_dir=state_dir(),
    )


def measure(
    topology: Topology,
    *,
    live_count: int,
    samples: int,
    warmup: int,
    policy: str = "balloons",
    config: dict[str, Any] = CONFIG,
) -> dict[str, Any]:
    """Wall and CPU time per decision kind with `live_count` live containers."""
    pipe = _pipeline(topology, policy, config)
    for pod, ctr in live(live_count):
        sp = pb_pod(pod)
        pipe.run_pod(sp)
        pipe.create(sp, pb_ctr(ctr))
    anchor_pod, anchor = guaranteed("anchor", "bench-grow")
    pipe.run_pod(pb_pod(anchor_pod))
    pipe.create(pb_pod(anchor_pod), pb_ctr(anchor))
    wall: dict[str, list[int]] = {k: [] for k in KINDS}
    cpu: dict[str, list[int]] = {k: [] for k in KINDS}
    updates: dict[str, list[int]] = {k: [] for k in KINDS}

    def timed(kind: str, keep: bool, call: Any) -> Any:
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        out = call()
        dt, dc = time.perf_counter_ns() - t0, time.thread_time_ns() - c0
        if keep:
            wall[kind].append(dt)
            cpu[kind].append(dc)
        return out

    for i in range(warmup + samples):
        keep = i >= warmup
        pod, ctr = guaranteed(f"grow-{i}", "bench-grow")
        sp, sc = pb_pod(pod), pb_ctr(ctr)
        pipe.run_pod(sp)
        _adjust, ups = timed("inflate", keep, lambda sp=sp, sc=sc: pipe.create(sp, sc))
        if keep:
            updates["inflate"].append(len(ups))

        def shrink(sp: Any = sp, sc: Any = sc) -> int:
            return len(pipe.stop(sp, sc)) + len(pipe.remove(sp, sc))

        n = timed("deflate", keep, shrink)
        if keep:
            updates["deflate"].append(n)
        pipe.remove_pod(sp)

        pod, ctr = guaranteed(f"new-{i}", "bench-new")
        sp, sc = pb_pod(pod), pb_ctr(ctr)
        pipe.run_pod(sp)
        _adjust, ups = timed("new", keep, lambda sp=sp, sc=sc: pipe.create(sp, sc))
        if keep:
            updates["new"].append(len(ups))
        pipe.stop(sp, sc)
        pipe.remove(sp, sc)
        pipe.remove_pod(sp)
    return {
        k: {**summary_us(wall[k]), "updates": max(updates[k]), "cpu": summary_us(cpu[k])}
        for k in KINDS
    } | {"load": load_note(), "cpus": len(topology.cpus)}


def table(per_machine: dict[str, Any], live_count: int) -> str:
    rows = [
        f"**balloons decisions at {live_count} live containers, CPU time (thread_time_ns)**",
        "",
        "| machine | CPUs | inflate p50 µs | inflate p99 µs | deflate p50 µs | deflate p99 µs "
        "| new p50 µs | new p99 µs | wall p50 µs (inflate/deflate/new) | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in per_machine.items():
        cells = [f"{r[k]['cpu']['p50_us']} | {r[k]['cpu']['p99_us']}" for k in KINDS]
        wall = "/".join(str(r[k]["p50_us"]) for k in KINDS)
        rows.append(f"| {name} | {r['cpus']} | " + " | ".join(cells) + f" | {wall} | {r['load']} |")
    if "1k" in per_machine and "4k" in per_machine:
        lo, hi = per_machine["1k"], per_machine["4k"]
        ratio = hi["cpus"] / lo["cpus"]
        growth = ", ".join(
            f"{k} {hi[k]['cpu']['p50_us'] / max(lo[k]['cpu']['p50_us'], 0.1):.2f}" for k in KINDS
        )
        rows += ["", f"growth 1k -> 4k CPUs (CPU p50 ratio; CPUs grew {ratio:.0f}x): {growth}"]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--live", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--machines", default="224t,1k,2k,4k")
    ap.add_argument("--policy", default="balloons")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--out", default="bench/out/balloons.json")
    ns = ap.parse_args()
    result: dict[str, Any] = {"machine": machine(), "live": ns.live, "samples": ns.samples,
                              "policy": ns.policy, "machines": {}}  # fmt: skip
    config = (
        CONFIG if ns.policy == "balloons" else {"reservedResources": CONFIG["reservedResources"]}
    )
    result["config"] = config
    with open(os.devnull, "w") as devnull:
        configure_logging(LogConfig(level=ns.log_level, format="json"), stream=devnull)  # type: ignore[arg-type]
        for name in ns.machines.split(","):
            topo = load_topology(MACHINES[name])
            result["machines"][name] = measure(
                topo, live_count=ns.live, samples=ns.samples, warmup=ns.warmup,
                policy=ns.policy, config=config,
            )  # fmt: skip
    print(table(result["machines"], ns.live))
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
