"""Decision cost at two node sizes, measured side by side: does a decision grow with the node?

Usage: python -m bench.growth [--levels 1000,10000] [--samples 150] [--warmup 10]
                              [--out bench/out/growth.json]

`bench.scale` measures its levels one after another; on a shared machine the load moves
in between, and a growth factor of two sequential medians measures the load as much as
the code.  Here one pipeline per level (the 224-thread machine, topology-aware, logs as
JSON to /dev/null) is filled with `bench.workload.scaled(N)` first; then every round
creates one probe of each kind in each pipeline, in shuffled order, so each level sees
the same load.  Per level and kind: thread CPU time of `Pipeline.create` p50/p99 and the
updates in the reply; the probe is removed again after its sample.

Kinds: ``shared`` (Burstable 100m), ``exclusive`` (Guaranteed 1 CPU: its reply updates
every shared container of its pool, so the growth that counts is per update sent) and
``affinity`` (`bench.workload.affine_probe`: a shared probe whose affinity and
anti-affinity rules are weighed against every live container of its namespace).

Growth = p50 at the largest level / at the smallest (per update sent for ``exclusive``).

A sample is `bench.decision.timed_create`, the decision and the release of its own
reply, inside the daemon's per-event collector rule (`ops.collector.handling`); the
after-reply step (the collector back on, and any collection) runs after the sample, and
the probe's removal runs under the same rule.  `bench.scale` measures the same rows on
one pipeline grown level by level (one node's heap, as the daemon's; strict shared /
exclusive alternation); its docstring says why the two differ and what each shows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import load_note, machine, state_dir
from bench.decision import TOPOLOGY, after_reply, pb_ctr, pb_pod, timed_create
from bench.stats import summary_us
from bench.workload import affine_probe, probe, scaled
from nri_resmgr.config import Config, LogConfig
from nri_resmgr.ops import collector
from nri_resmgr.ops.logs import configure_logging
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.load import load_topology
from tests.conformance.harness import Json

KINDS = ("shared", "exclusive", "affinity")


def _filled(n: int) -> Pipeline:
    pipe = build_pipeline(
        Config(),
        topology=load_topology(str(TOPOLOGY)),
        policy="topology-aware",
        state_dir=state_dir(),
    )
    for pod, ctr in scaled(n):
        sp = pb_pod(pod)
        pipe.run_pod(sp)
        pipe.create(sp, pb_ctr(ctr))
    return pipe


def _probe(kind: str, i: int) -> tuple[Json, Json]:
    return affine_probe(i) if kind == "affinity" else probe(kind, i)


def measure(
    levels: Sequence[int],
    *,
    samples: int,
    warmup: int,
    kinds: Sequence[str] = KINDS,
    seed: int = 1,
) -> dict[str, Any]:
    """{level: {kind: {cpu summary, updates}}}, every round one probe per level and kind."""
    with open(os.devnull, "w") as devnull:
        configure_logging(LogConfig(level="info", format="json"), stream=devnull)  # type: ignore[arg-type]
        pipes = {n: _filled(n) for n in levels}
        cpu: dict[tuple[int, str], list[int]] = {(n, k): [] for n in levels for k in kinds}
        updates: dict[tuple[int, str], int] = {(n, k): 0 for n in levels for k in kinds}
        order = [(n, k) for n in levels for k in kinds]
        later: list[Callable[[], None]] = []  # the collector's return after each reply
        rng = random.Random(seed)
        for i in range(warmup + samples):
            rng.shuffle(order)
            for n, kind in order:
                pipe = pipes[n]
                pod, ctr = _probe(kind, i)
                sp, sc = pb_pod(pod), pb_ctr(ctr)
                pipe.run_pod(sp)
                sample = timed_create(pipe, sp, sc, defer=later.append)
                after_reply(later)
                with collector.handling(later.append):
                    pipe.stop(sp, sc)
                    pipe.remove(sp, sc)
                    pipe.remove_pod(sp)
                after_reply(later)
                if i >= warmup:
                    cpu[n, kind].append(sample.cpu_ns)
                    updates[n, kind] = max(updates[n, kind], sample.updates)
    return {
        str(n): {k: {"cpu": summary_us(cpu[n, k]), "updates": updates[n, k]} for k in kinds}
        for n in levels
    }


def growth(result: dict[str, Any], kind: str) -> float:
    """p50 at the largest level over p50 at the smallest; per update sent for kinds whose
    replies carry updates."""
    levels = sorted(result, key=int)
    lo, hi = result[levels[0]][kind], result[levels[-1]][kind]
    a, b = float(lo["cpu"]["p50_us"]), float(hi["cpu"]["p50_us"])
    if lo["updates"] and hi["updates"]:
        a, b = a / lo["updates"], b / hi["updates"]
    return round(b / a, 2)


def table(result: dict[str, Any]) -> str:
    kinds = list(next(iter(result.values())))
    head = " | ".join(f"{k} CPU p50 / p99 µs (updates)" for k in kinds)
    rows = [f"| live containers | {head} |", "|---" * (len(kinds) + 1) + "|"]
    for n, per in result.items():
        cells = " | ".join(
            f"{per[k]['cpu']['p50_us']} / {per[k]['cpu']['p99_us']} ({per[k]['updates']})"
            for k in kinds
        )
        rows.append(f"| {int(n):,} | {cells} |")
    rows.append("")
    rows.append(
        "growth (p50 largest / smallest level; exclusive per update sent): "
        + ", ".join(f"{k} {growth(result, k)}x" for k in kinds)
    )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--levels", default="1000,10000")
    ap.add_argument("--samples", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", default="bench/out/growth.json")
    ns = ap.parse_args()
    levels = [int(x) for x in ns.levels.split(",")]
    out: dict[str, Any] = {"machine": machine()}
    out["levels"] = measure(levels, samples=ns.samples, warmup=ns.warmup)
    out["growth"] = {k: growth(out["levels"], k) for k in KINDS}
    out["load_after"] = load_note()
    path = Path(ns.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(table(out["levels"]))
    print(f"{out['machine']['load_before']} before, {out['load_after']} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
