"""Where an in-process decision's time goes: cProfile of one event kind at N live containers.

Usage: python -m bench.hotspots [--live 1000] [--kind shared|exclusive|affinity|sync]
                                [--policy topology-aware] [--samples 50] [--top 25]

The pipeline is built as `bench.decision` builds it (the 224-thread machine, logs as
JSON to /dev/null) and filled with `bench.workload.scaled(N)`; then `--samples` probes
of `--kind` are created and removed again (only the probes' events are profiled), or,
for ``sync``, a fresh pipeline synchronizes the N containers as running (every one is
placed, as `bench.scale`'s cold Synchronize).  Prints the thread CPU time p50 of the
profiled event (inflated by the profiler: compare hotspots, not the value) and the
functions by own time and by cumulative time.  `bench.profile` does the same for a
py-spy recording of the external daemon.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

from bench.common import state_dir
from bench.decision import TOPOLOGY, pb_ctr, pb_pod
from bench.stats import percentile
from bench.workload import affine_probe, probe, running, scaled
from nri_resmgr.config import Config, LogConfig
from nri_resmgr.ops.logs import configure_logging
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.load import load_topology

KINDS = ("shared", "exclusive", "affinity", "sync")


def pipeline(policy: str) -> Pipeline:
    return build_pipeline(
        Config(), topology=load_topology(str(TOPOLOGY)), policy=policy, state_dir=state_dir()
    )


def profile(*, live: int, kind: str, policy: str, samples: int) -> tuple[float, pstats.Stats]:
    """(CPU p50 µs of the profiled event, its profile)."""
    prof = cProfile.Profile()
    cpu: list[int] = []
    state = scaled(live)
    if kind == "sync":
        pods = [pb_pod(pod) for pod, _ in state]
        ctrs = [pb_ctr(running(ctr)) for _, ctr in state]
        for _ in range(samples):
            pipe = pipeline(policy)
            c0 = time.thread_time_ns()
            prof.enable()
            pipe.synchronize(pods, ctrs)
            prof.disable()
            cpu.append(time.thread_time_ns() - c0)
    else:
        pipe = pipeline(policy)
        for pod, ctr in state:
            sp = pb_pod(pod)
            pipe.run_pod(sp)
            pipe.create(sp, pb_ctr(ctr))
        for i in range(samples):
            pod, ctr = affine_probe(i) if kind == "affinity" else probe(kind, i)
            sp, sc = pb_pod(pod), pb_ctr(ctr)
            pipe.run_pod(sp)
            c0 = time.thread_time_ns()
            prof.enable()
            pipe.create(sp, sc)
            prof.disable()
            cpu.append(time.thread_time_ns() - c0)
            pipe.stop(sp, sc)
            pipe.remove(sp, sc)
            pipe.remove_pod(sp)
    return percentile(cpu, 50) / 1000, pstats.Stats(prof)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--live", type=int, default=1000)
    ap.add_argument("--kind", choices=KINDS, default="shared")
    ap.add_argument("--policy", default="topology-aware")
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--top", type=int, default=25)
    ns = ap.parse_args()
    with open(os.devnull, "w") as devnull:
        configure_logging(LogConfig(level="info", format="json"), stream=devnull)  # type: ignore[arg-type]
        samples = max(1, ns.samples // 10) if ns.kind == "sync" else ns.samples
        p50, stats = profile(live=ns.live, kind=ns.kind, policy=ns.policy, samples=samples)
    print(f"{ns.kind} at {ns.live:,} live ({ns.policy}): CPU p50 {p50:,.0f} µs under cProfile")
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(order).print_stats(ns.top)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
