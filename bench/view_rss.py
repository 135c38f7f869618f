"""The daemon's RSS and page build time at 1,000 live containers, with and without the
decision record (issue 27).

Usage: python -m bench.view_rss [--live 1000] [--policy topology-aware] [--reps 10]
                                [--out FILE]

Each variant runs in a fresh Python process (so one's heap does not hide the other's):
the daemon's `ResmgrPlugin` (the object the daemon runs, with its pipeline, metrics,
decision record and pod event queue) on `examples/topologies/server-2s-224t.yaml`, and
`bench.workload`'s 1,000 live containers created through its pipeline.  **with**: as the
daemon runs, every decision noted in the record (`view.record`) and offered to the pod
event queue (off without a Kubernetes side, as here); **without**: the pipeline's
`on_decision` hook unset, so nothing is noted.  Then the daemon's page (``/``, the
node picture and its HTML, `runtime.process.node_pages`) is built `--reps` times (each a
fresh picture: CPU time of picture + page), and VmRSS is read from /proc/self/status after
the containers and again after the pages.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import load_note, machine, state_dir
from bench.decision import TOPOLOGY, pb_ctr, pb_pod
from bench.stats import summary_us
from bench.workload import live
from nri_resmgr.config import Config, LogConfig
from nri_resmgr.ops.logs import configure_logging
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.runtime.process import node_pages
from nri_resmgr.topology.load import load_topology

VARIANTS = ("with", "without")


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/status: expected a VmRSS line, found none")


def child(variant: str, policy: str, n: int, reps: int) -> dict[str, Any]:
    """One variant, in this process (module docstring)."""
    with open(os.devnull, "w") as devnull:
        configure_logging(LogConfig(level="warning", format="json"), stream=devnull)  # type: ignore[arg-type]
        plugin = ResmgrPlugin(
            config=Config(policy=policy),
            topology=load_topology(str(TOPOLOGY)),
            state_dir=state_dir(),
            name="bench",
            idx="90",
            socket_path="/nonexistent/nri.sock",
        )
        if variant == "without":
            plugin.pipeline.on_decision = None
        for pod, ctr in live(n):
            sp = pb_pod(pod)
            plugin.pipeline.run_pod(sp)
            plugin.pipeline.create(sp, pb_ctr(ctr))
        gc.collect()
        rss_live = _rss_kib()
        pages = node_pages(plugin)
        cpu = []
        size = 0
        for _ in range(reps):
            fresh = node_pages(plugin)["/"]  # a new NodePages: the picture is drawn anew
            c0 = time.thread_time_ns()
            _, body = fresh()
            cpu.append(time.thread_time_ns() - c0)
            size = len(body)
        pages["/"]()
        gc.collect()
        return {
            "variant": variant,
            "live": len(plugin.pipeline.containers),
            "noted": len(plugin.decisions),
            "rss_live_kib": rss_live,
            "rss_after_pages_kib": _rss_kib(),
            "page": {**summary_us(cpu), "bytes": size},
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=1000)
    parser.add_argument("--policy", default="topology-aware")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out" / "view_rss.json"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.policy, args.live, args.reps)))
        return 0
    runs = {}
    for variant in VARIANTS:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.view_rss",
                "--child",
                variant,
                "--policy",
                args.policy,
                "--live",
                str(args.live),
                "--reps",
                str(args.reps),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        runs[variant] = json.loads(out.strip().splitlines()[-1])
    result = {"machine": machine(), "policy": args.policy, "runs": runs, "load": load_note()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("| variant | live | noted | RSS after containers | RSS after pages | page CPU p50 |")
    print("|---|---|---|---|---|---|")
    for v, r in runs.items():
        print(
            f"| {v} | {r['live']} | {r['noted']} | {r['rss_live_kib'] / 1024:.1f} MiB | "
            f"{r['rss_after_pages_kib'] / 1024:.1f} MiB | {r['page']['p50_us'] / 1000:.1f} ms |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
