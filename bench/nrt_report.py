"""The cost of the NodeResourceTopology report at 10, 100 and 1,000 live containers.

Usage: python -m bench.nrt_report [--levels 10,100,1000] [--samples 100] [--out FILE]

Machine: `examples/topologies/server-2s-224t.yaml` (2 sockets, 4 NUMA nodes, 224
threads), topology-aware with 750m reserved; live containers are created through the
simulator (the daemon's adapter, pipeline and policy) in `bench.workload`'s pattern of
ten (5 burstable, 4 besteffort, 1 guaranteed with one exclusive CPU).  Two parts are
timed, in CPU time of this thread (`thread_time_ns`):

* **capture**: the pipeline's containers and pods copied into lists: what the daemon's
  report task does on the event loop, between events, at most once a second
  (`nri_resmgr.kube.report_loop.capture_plugin_use`);
* **build**: `read_node_use` over the capture, `node_fields` and the JSON the manager
  compares and sends: what runs in a thread, off the event loop.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import structlog

from bench.common import load_note, machine
from bench.stats import summary_us
from nri_resmgr.kube.nrt import node_fields
from nri_resmgr.kube.policy_view import read_node_use
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.simulator.kubelet import Simulator
from nri_resmgr.simulator.scenario import ContainerSpec, PodSpec, Resources
from nri_resmgr.topology.load import load_topology

TOPOLOGY = Path(__file__).resolve().parents[1] / "examples" / "topologies" / "server-2s-224t.yaml"
QUIET = structlog.wrap_logger(structlog.ReturnLogger())
PATTERN = ("burstable",) * 5 + ("besteffort",) * 4 + ("guaranteed",)


def _spec(i: int) -> PodSpec:
    kind = PATTERN[i % len(PATTERN)]
    req: dict[str, str] = {}
    lim: dict[str, str] = {}
    if kind == "guaranteed":
        req = lim = {"cpu": "1", "memory": "64Mi"}
    elif kind == "burstable":
        req, lim = {"cpu": "100m", "memory": "64Mi"}, {"cpu": "500m", "memory": "128Mi"}
    c = ContainerSpec(name="c", requests=Resources(**req), limits=Resources(**lim))
    return PodSpec(pod=f"w{i}", namespace="bench", containers=(c,))


def measure(levels: list[int], samples: int) -> dict[str, Any]:
    topo = load_topology(str(TOPOLOGY))
    policy = load_policy(
        "topology-aware", topology=topo, config={"reservedResources": {"cpu": "750m"}}
    )
    sim = Simulator(policy=policy, log=QUIET, topology=topo)
    out: dict[str, Any] = {}
    count = 0
    for n in levels:
        for i in range(count, n):
            errors, _ = sim.create(_spec(i))
            assert not errors, errors
        count = n
        p = sim.pipeline
        reads, builds = [], []
        for _ in range(samples):
            start = time.thread_time_ns()
            containers, pods = p.snapshot(), list(p.pods.values())
            mid = time.thread_time_ns()
            use = read_node_use(topo, p.policy, p.state, containers, pods=pods)
            json.dumps(node_fields(topo, use), sort_keys=True)
            reads.append(mid - start)
            builds.append(time.thread_time_ns() - mid)
        out[str(n)] = {"capture": summary_us(reads), "build": summary_us(builds)}
        print(n, json.dumps(out[str(n)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--levels", default="10,100,1000")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--out")
    args = parser.parse_args()
    result = {
        "machine": machine(),
        "load": load_note(),
        "results": measure([int(x) for x in args.levels.split(",")], args.samples),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
