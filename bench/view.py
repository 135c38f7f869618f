"""What the node picture costs at 1,000 live containers (issue 27), next to one decision.

Usage: python -m bench.view [--live 1000] [--reps 30] [--policies topology-aware,static,balloons]
                            [--out FILE]

Machine: `examples/topologies/server-2s-224t.yaml` (224 threads); workload `bench.workload`
(1,000 live containers: 500 Burstable, 400 BestEffort, 100 Guaranteed exclusive), placed
by a real pipeline in this process.  Timed, `--reps` times each (CPU time and wall time):

* **view**: `view.pages.live_view` (the daemon's picture: the policy's pools, every
  container's row, every CPU's holder);
* **json** / **page** / **text**: the picture's JSON (``/view.json``), its HTML page
  (``/``) and the terminal text of `nri-resmgr show`, from one picture;
* **dump**: `simulator.dump.dump_scenario` (``/scenario.json``, before JSON);
* **decision**: one Burstable `Pipeline.create` at the same live count, the reference the
  ratios are taken against (a probe, removed again after each sample);
* **record**: the memory the daemon's decision record (`view.record`) holds per container,
  noting the 1,000 live containers' decisions (tracemalloc).

The table shows CPU time p50 (`time.thread_time_ns`); the JSON has wall times too.

The daemon draws a picture at most once a second (`view.pages`), so a request costs at
most view + page (or json) once per second whatever the request rate.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import load_note, machine, state_dir
from bench.decision import TOPOLOGY, pb_ctr, pb_pod
from bench.stats import summary_us
from bench.workload import live, probe
from nri_resmgr.config import Config, LogConfig
from nri_resmgr.model import ContainerInfo, Decision
from nri_resmgr.ops.logs import configure_logging
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.simulator.dump import dump_scenario
from nri_resmgr.topology.load import load_topology
from nri_resmgr.view.html import render_page
from nri_resmgr.view.pages import live_view
from nri_resmgr.view.record import DecisionRecord
from nri_resmgr.view.terminal import render_text


def timed(fn: Callable[[], Any], reps: int) -> tuple[dict[str, Any], Any]:
    """CPU time (thread_time_ns: on a loaded machine wall time mostly measures waiting
    for a CPU) and wall time of `reps` calls, and the last result."""
    times, cpu = [], []
    out = None
    for _ in range(reps):
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        out = fn()
        times.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    return {**summary_us(cpu), "wall": summary_us(times)}, out


def measure(policy: str, n: int, reps: int) -> dict[str, Any]:
    topology = load_topology(str(TOPOLOGY))
    config = Config(policy=policy)
    noted: list[tuple[str, ContainerInfo, Decision]] = []
    pipe = build_pipeline(
        config,
        topology=topology,
        policy=policy,
        state_dir=state_dir(),
        on_decision=lambda *args: noted.append(args),
    )
    for pod, ctr in live(n):
        sp = pb_pod(pod)
        pipe.run_pod(sp)
        pipe.create(sp, pb_ctr(ctr))
    view_t, view = timed(lambda: live_view(topology, pipe), reps)
    json_t, body = timed(lambda: json.dumps(view.as_dict(), separators=(",", ":")), reps)
    page_t, page = timed(lambda: render_page([view], refresh=5), reps)
    text_t, _ = timed(lambda: render_text(view, width=120), max(3, reps // 5))
    dump_t, _ = timed(lambda: dump_scenario(topology, config, pipe.snapshot()), reps)
    decisions, decisions_cpu = [], []
    for i in range(reps):
        pod, ctr = probe("shared", i)
        sp, sc = pb_pod(pod), pb_ctr(ctr)
        pipe.run_pod(sp)
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        pipe.create(sp, sc)
        decisions.append(time.perf_counter_ns() - t0)
        decisions_cpu.append(time.thread_time_ns() - c0)
        pipe.stop(sp, sc)
        pipe.remove(sp, sc)
        pipe.remove_pod(sp)
    decision_t = {**summary_us(decisions_cpu), "wall": summary_us(decisions)}
    # the decision record: what noting every live container's decision holds
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    record = DecisionRecord()
    for event, info, dec in noted[:n]:
        record.note(event, info, dec)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(d.size_diff for d in after.compare_to(before, "filename"))
    base = decision_t["p50_us"]
    return {
        "live": len(pipe.containers),
        "view": view_t,
        "json": {**json_t, "bytes": len(body)},
        "page": {**page_t, "bytes": len(page.encode())},
        "text": text_t,
        "dump": dump_t,
        "decision": decision_t,
        "record_bytes_per_container": round(held / max(len(record), 1)),
        "ratios_to_decision": {
            k: round(v["p50_us"] / base, 1)
            for k, v in (
                ("view", view_t),
                ("json", json_t),
                ("page", page_t),
                ("text", text_t),
                ("dump", dump_t),
            )
        },
        "load": load_note(),
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| policy | live | view | json | page | text | dump | one decision | "
        "view+page / decision | page size | record per container |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, r in result["policies"].items():
        ms = {
            k: r[k]["p50_us"] / 1000 for k in ("view", "json", "page", "text", "dump", "decision")
        }
        both = (r["view"]["p50_us"] + r["page"]["p50_us"]) / r["decision"]["p50_us"]
        lines.append(
            f"| {policy} | {r['live']} | {ms['view']:.1f} ms | {ms['json']:.1f} ms | "
            f"{ms['page']:.1f} ms | {ms['text']:.0f} ms | {ms['dump']:.1f} ms | "
            f"{ms['decision']:.2f} ms | {both:.0f}x | {r['page']['bytes'] / 1024:.0f} KiB | "
            f"{r['record_bytes_per_container']} B |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--policies", default="topology-aware,static,balloons")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out" / "view.json"))
    args = parser.parse_args()
    with open(os.devnull, "w") as devnull:
        configure_logging(LogConfig(level="warning", format="json"), stream=devnull)  # type: ignore[arg-type]
        result = {
            "machine": machine(),
            "policies": {p: measure(p, args.live, args.reps) for p in args.policies.split(",")},
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
