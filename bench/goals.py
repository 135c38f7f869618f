"""Every performance goal of issue 17 measured in one run, side by side with its Go peer.

Usage: python -m bench.goals [--requests 3000] [--samples 200] [--reps 5] [--out FILE]
                             [--only ROW,ROW] [--big 10000]

One line per goal: the measured value, the Go peer's value in the same run and the ratio
where there is a peer, the target, and ``ok`` or ``short`` (by how much); then a summary
line. The result, with every sample summary, goes to JSON (default
``bench/out/goals.json``). Needs only what ``python -m tests.build_peers`` builds (the
fake runtime of NRI v0.12.2) plus the Go no-op plugin (`bench/go/noop`, built here on
first use); nri-plugins is not run. About 4-5 minutes on the 2-CPU development VM (the
growth rows fill a node of 10,000 containers twice).

Rows and how each is measured (the peers are always interleaved, so both see the same
machine load; the machine is `examples/topologies/server-2s-224t.yaml`, 224 threads):

* ``noop-rtt``: no-op CreateContainer round trip p50, timed in Go around the adaptation
  call: `bench/plugins/noop.py` (nri_api) / the Go stub no-op as an external process
  (`bench.roundtrip`, every round one request to each in shuffled order);
* ``create-1000``: Burstable CreateContainer round trip p50 at 1,000 live containers,
  the daemon (`nri-resmgr run`, topology-aware) / the Go no-op, each on its own fake
  runtime (`bench.peers`, probes interleaved);
* ``exclusive-cpu-1000``: CPU time (`thread_time_ns`) of `Pipeline.create` for a
  Guaranteed 1-CPU container at 1,000 live containers, in this process (`bench.decision`);
  its reply updates every shared container of the pool;
* ``sync-1000``: Synchronize of 1,000 running containers without cpusets (every one is
  placed), timed in Go, median of ``--reps`` (peers in shuffled order per repetition);
* ``prereg-start``: pre-registered start-up, the runtime's Start (which execs the
  launcher and waits for the plugin's registration and Synchronize), wall clock, median;
* ``restart-1000``: exec of the plugin to registered and synchronized on a runtime whose
  1,000 containers already carry the cpusets the daemon gave them (what a daemon restart
  sees), wall clock, median; the daemon keeps its state directory across;
* ``rss-1000``: VmRSS of the plugin process after ``create-1000`` (1,000 live containers
  plus the probes).

Issue 25's rows: how the cost grows with the node; the "peer" there is the same measure
at the smaller size (or without the feature), taken in the same run:

* ``shared-growth`` / ``exclusive-growth``: CPU p50 of a shared / an exclusive decision
  at 10,000 live containers over 1,000 (`bench.growth`: one pipeline per size, probes
  interleaved; the exclusive one per update sent, since its reply updates every shared
  container of its pool);
* ``affinity-1000``: a shared decision whose affinity and anti-affinity rules weigh it
  against the live containers of its namespace (`bench.workload.affine_probe`) over one
  without rules, at 1,000 live (the same `bench.growth` run);
* ``sync-growth``: cold Synchronize of 10,000 containers over 1,000 (`bench.scale`), at
  most linear: 11x for 10x the containers;
* ``balloons-4k``: a balloons inflation (`bench.balloons`: a Guaranteed container joins
  a balloon that grows by one CPU) at 1,000 live containers on 4,096 CPUs over 1,024
  CPUs: at most linear in CPUs (4x).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench import balloons, decision, growth, peers, roundtrip, scale
from bench.common import load_note, machine
from bench.workload import live, running
from nri_resmgr.config import LogConfig
from nri_resmgr.ops.logs import configure_logging
from nri_resmgr.topology.load import load_topology
from tests.conformance.harness import Json, go_runtime, short_tempdir

GO, OURS = "go-noop", "nri-resmgr"
LEVEL = 1000
#: the larger node of the growth rows (``--big``)
BIG = 10_000


@dataclass(frozen=True, slots=True)
class Goal:
    """One row of issue 17's table: what is measured and the bound it must meet."""

    key: str
    label: str
    unit: str
    #: the bound, on the ratio to the Go peer (`on="ratio"`) or on the value itself
    target: float
    on: Literal["ratio", "value"]


GOALS: tuple[Goal, ...] = (
    Goal(
        "noop-rtt", "no-op round trip p50, Python nri_api / Go stub external", "µs", 1.15, "ratio"
    ),
    Goal(
        "create-1000",
        "Burstable CreateContainer p50 at 1,000 live, nri-resmgr / Go no-op",
        "µs",
        1.5,
        "ratio",
    ),
    Goal(
        "exclusive-cpu-1000",
        "exclusive CreateContainer at 1,000 live, decision CPU p50",
        "ms",
        3.0,
        "value",
    ),
    Goal("sync-1000", "Synchronize of 1,000 containers, cold", "ms", 100.0, "value"),
    Goal("prereg-start", "pre-registered launch to registered", "s", 0.25, "value"),
    Goal("restart-1000", "restart with 1,000 placed: exec to synchronized", "s", 0.3, "value"),
    Goal("rss-1000", "RSS after 1,000 live containers", "MiB", 40.0, "value"),
    Goal("shared-growth", "shared decision CPU p50, 10,000 live / 1,000 live", "µs", 1.3, "ratio"),
    Goal(
        "exclusive-growth",
        "exclusive decision CPU p50 per update sent, 10,000 live / 1,000 live",
        "µs",
        1.3,
        "ratio",
    ),
    Goal(
        "affinity-1000",
        "decision with affinity rules / without, CPU p50 at 1,000 live",
        "µs",
        1.5,
        "ratio",
    ),
    Goal("sync-growth", "Synchronize of 10,000 containers / of 1,000", "ms", 11.0, "ratio"),
    Goal(
        "balloons-4k",
        "balloons inflation CPU p50 at 1,000 live, 4,096 CPUs / 1,024 CPUs",
        "µs",
        4.0,
        "ratio",
    ),
)
BY_KEY = {g.key: g for g in GOALS}


@dataclass(frozen=True, slots=True)
class Measured:
    """A goal's measurement: our value and, where there is one, the Go peer's."""

    goal: Goal
    value: float
    peer: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.peer is None or self.peer <= 0:
            return None
        return self.value / self.peer

    @property
    def judged(self) -> float:
        """What the target bounds: the ratio or the value."""
        if self.goal.on == "value":
            return self.value
        ratio = self.ratio
        if ratio is None:
            raise ValueError(
                f"goal {self.goal.key}: its target bounds the ratio to the Go peer, "
                f"but no positive peer value was measured (found {self.peer!r})"
            )
        return ratio

    @property
    def ok(self) -> bool:
        return self.judged <= self.goal.target

    @property
    def factor(self) -> float:
        """How far from the target: judged / target (<= 1 is met)."""
        return self.judged / self.goal.target


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def line(m: Measured) -> str:
    """One row: label, value, Go peer, ratio, target, verdict."""
    g = m.goal
    value = f"{_num(m.value)} {g.unit}"
    peer = f"{_num(m.peer)} {g.unit}" if m.peer is not None else "-"
    ratio = f"{m.ratio:.2f}x" if m.ratio is not None else "-"
    target = f"<= {_num(g.target)}{'x' if g.on == 'ratio' else ' ' + g.unit}"
    verdict = "ok" if m.ok else f"short ({m.factor:.2f}x the target)"
    return f"{g.key:<19} {g.label:<70} {value:>12} {peer:>12} {ratio:>7}  {target:<11} {verdict}"


def header() -> str:
    return (
        f"{'row':<19} {'measure':<70} {'value':>12} {'peer':>12} {'ratio':>7}  "
        f"{'target':<11} verdict"
    )


def summary(rows: Sequence[Measured]) -> str:
    """`goals: N of M ok`, and the short ones with their factor."""
    short = [m for m in rows if not m.ok]
    text = f"goals: {len(rows) - len(short)} of {len(rows)} ok"
    if short:
        text += "; short: " + ", ".join(f"{m.goal.key} ({m.factor:.2f}x)" for m in short)
    return text


def markdown(rows: Sequence[Measured]) -> str:
    """The table for docs/benchmarks.md."""
    out = [
        "| measure | value | peer (Go, or the baseline) | ratio | target | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for m in rows:
        g = m.goal
        peer = f"{_num(m.peer)} {g.unit}" if m.peer is not None else "-"
        ratio = f"{m.ratio:.2f}x" if m.ratio is not None else "-"
        target = f"<= {_num(g.target)}{'x' if g.on == 'ratio' else ' ' + g.unit}"
        verdict = "ok" if m.ok else f"**short** ({m.factor:.2f}x)"
        out.append(
            f"| {g.label} | {_num(m.value)} {g.unit} | {peer} | {ratio} | {target} | {verdict} |"
        )
    return "\n".join(out)


# -- measurements ---------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def measure_noop(*, requests: int, warmup: int, out_dir: Path) -> tuple[Measured, Json]:
    r = roundtrip.run(
        requests=requests,
        version=peers.VERSION,
        warmup=warmup,
        profile="none",
        seed=1,
        out_dir=out_dir,
    )
    r.pop("samples_ns")
    m = Measured(
        BY_KEY["noop-rtt"], r["summary"]["python"]["p50_us"], r["summary"]["go-external"]["p50_us"]
    )
    return m, r


def measure_create(p: peers.Peers, *, samples: int, warmup: int) -> tuple[list[Measured], Json]:
    r = peers.createcontainer(
        p,
        levels=[LEVEL],
        samples=samples,
        warmup=warmup,
        seed=1,
        save=lambda _r: None,
        names=(GO, OURS),
        kinds=("shared",),
    )
    level = r["levels"][str(LEVEL)]
    create = Measured(
        BY_KEY["create-1000"], level[OURS]["shared"]["p50_us"], level[GO]["shared"]["p50_us"]
    )
    rss = Measured(BY_KEY["rss-1000"], r["rss_kib"][OURS] / 1024, r["rss_kib"][GO] / 1024)
    return [create, rss], r


def measure_decision(*, samples: int, warmup: int) -> tuple[Measured, Json]:
    r = decision.decisions([LEVEL], samples=samples, warmup=warmup, log_level="info")
    cpu_us = r[str(LEVEL)]["exclusive"]["cpu"]["p50_us"]
    return Measured(BY_KEY["exclusive-cpu-1000"], cpu_us / 1000), r


def measure_sync(p: peers.Peers, *, reps: int) -> tuple[Measured, Json]:
    r = peers.synchronize(p, containers=LEVEL, reps=reps, names=(GO, OURS))
    return Measured(BY_KEY["sync-1000"], r["median_ms"][OURS], r["median_ms"][GO]), r


def measure_prereg(p: peers.Peers, *, reps: int, seed: int = 1) -> tuple[Measured, Json]:
    times: dict[str, list[float]] = {GO: [], OURS: []}
    rng = random.Random(seed)
    order = [GO, OURS]
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            with go_runtime(peers.VERSION) as rt:
                p.preregister(name, rt)
                t0 = time.perf_counter()
                sync = rt.start()
                times[name].append(time.perf_counter() - t0)
                if sync is None:
                    raise RuntimeError(f"{name}: pre-registered start-up: no start-up sync")
    r = {"s": {k: sorted(round(v, 3) for v in vs) for k, vs in times.items()}, "load": load_note()}
    return Measured(BY_KEY["prereg-start"], _median(times[OURS]), _median(times[GO])), r


def placed(ctrs: Sequence[Json], updates: Sequence[Json]) -> list[Json]:
    """`ctrs` with the cpus and mems of `updates` applied, as the runtime then reports them."""
    by_id = {u["container_id"]: u for u in updates}
    out = []
    for c in ctrs:
        c = copy.deepcopy(c)
        u = by_id.get(c["id"])
        if u is not None:
            cpu = c.setdefault("linux", {}).setdefault("resources", {}).setdefault("cpu", {})
            cpu.update(u["linux"]["resources"]["cpu"])
        out.append(c)
    return out


def measure_restart(p: peers.Peers, *, reps: int, seed: int = 1) -> tuple[Measured, Json]:
    state = live(LEVEL, prefix="r")
    pods = [pod for pod, _ in state]
    ctrs = [running(ctr) for _, ctr in state]
    # The daemon's first life: a cold Synchronize places every container; its state dir
    # is kept for the restarts.
    state_dir = p.work / "restart-state"
    with go_runtime(peers.VERSION) as rt:
        rt.start(pods=pods, containers=ctrs, request_timeout_ms=peers.SYNC_TIMEOUT_MS)
        p.start(OURS, rt, state_dir=state_dir)
        first = rt.wait_synced(timeout=120)
    now = placed(ctrs, first.updates)
    times: dict[str, list[float]] = {GO: [], OURS: []}
    updates: dict[str, list[int]] = {GO: [], OURS: []}
    rng = random.Random(seed)
    order = [GO, OURS]
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            with go_runtime(peers.VERSION) as rt:
                rt.start(pods=pods, containers=now, request_timeout_ms=peers.SYNC_TIMEOUT_MS)
                t0 = time.perf_counter()
                p.start(name, rt, state_dir=state_dir)
                sync = rt.wait_synced(timeout=120)
                times[name].append(time.perf_counter() - t0)
                updates[name].append(len(sync.updates))
    r = {
        "s": {k: sorted(round(v, 3) for v in vs) for k, vs in times.items()},
        "updates": updates,
        "first_sync_updates": len(first.updates),
        "load": load_note(),
    }
    return Measured(BY_KEY["restart-1000"], _median(times[OURS]), _median(times[GO])), r


def measure_growth(*, samples: int, warmup: int, big: int) -> tuple[list[Measured], Json]:
    r = growth.measure([LEVEL, big], samples=samples, warmup=warmup)
    lo, hi = r[str(LEVEL)], r[str(big)]

    def p50(level: Json, kind: str, *, per_update: bool = False) -> float:
        value = float(level[kind]["cpu"]["p50_us"])
        return value / max(level[kind]["updates"], 1) if per_update else value

    rows = [
        Measured(BY_KEY["shared-growth"], p50(hi, "shared"), p50(lo, "shared")),
        Measured(
            BY_KEY["exclusive-growth"],
            p50(hi, "exclusive", per_update=True),
            p50(lo, "exclusive", per_update=True),
        ),
        Measured(BY_KEY["affinity-1000"], p50(lo, "affinity"), p50(lo, "shared")),
    ]
    return rows, r


def measure_sync_growth(p: peers.Peers, *, reps: int, big: int) -> tuple[Measured, Json]:
    r = scale.synchronize_levels(p, [LEVEL, big], reps=reps, seed=1)  # levels in turns
    m = Measured(
        BY_KEY["sync-growth"], r[str(big)]["median_ms"][OURS], r[str(LEVEL)]["median_ms"][OURS]
    )
    return m, r


def measure_balloons_cpus(*, samples: int, warmup: int) -> tuple[Measured, Json]:
    with open(os.devnull, "w") as devnull:
        configure_logging(LogConfig(level="info", format="json"), stream=devnull)  # type: ignore[arg-type]
        r = {
            name: balloons.measure(
                load_topology(balloons.MACHINES[name]),
                live_count=LEVEL,
                samples=samples,
                warmup=warmup,
            )
            for name in ("1k", "4k")
        }
    m = Measured(
        BY_KEY["balloons-4k"],
        r["4k"]["inflate"]["cpu"]["p50_us"],
        r["1k"]["inflate"]["cpu"]["p50_us"],
    )
    return m, r


def run(ns: argparse.Namespace, *, report: Callable[[Measured], None]) -> dict[str, Any]:
    only = set(filter(None, ns.only.split(","))) if ns.only else set(BY_KEY)
    unknown = only - set(BY_KEY)
    if unknown:
        raise SystemExit(
            f"bench.goals: --only: unknown rows {sorted(unknown)}; "
            f"expected some of {sorted(BY_KEY)}"
        )
    result: dict[str, Any] = {
        "machine": machine(),
        "commit": _commit(),
        "big": ns.big,
        "rows": {},
        "details": {},
    }
    rows: list[Measured] = []

    def keep(key: str, ms: Measured | list[Measured], detail: Json) -> None:
        result["details"][key] = detail
        for m in ms if isinstance(ms, list) else [ms]:
            if m.goal.key in only:
                rows.append(m)
                report(m)

    out_dir = Path(ns.out).parent
    with short_tempdir("nri-goals-") as work:
        p = peers.Peers(work)
        if "noop-rtt" in only:
            keep(
                "noop-rtt",
                *measure_noop(requests=ns.requests, warmup=ns.requests // 10, out_dir=out_dir),
            )
        if only & {"create-1000", "rss-1000"}:
            keep("create-1000", *measure_create(p, samples=ns.samples, warmup=ns.samples // 10))
        if "exclusive-cpu-1000" in only:
            keep("exclusive-cpu-1000", *measure_decision(samples=ns.samples // 2, warmup=5))
        if "sync-1000" in only:
            keep("sync-1000", *measure_sync(p, reps=ns.reps))
        if only & {"prereg-start", "restart-1000"}:
            peers.compile_bytecode()
        if "prereg-start" in only:
            keep("prereg-start", *measure_prereg(p, reps=ns.reps + 2))
        if "restart-1000" in only:
            keep("restart-1000", *measure_restart(p, reps=ns.reps))
        if only & {"shared-growth", "exclusive-growth", "affinity-1000"}:
            keep("growth", *measure_growth(samples=ns.samples // 2, warmup=5, big=ns.big))
        if "sync-growth" in only:
            # an odd count: the median of two is the larger one (`scale.synchronize_levels`)
            keep("sync-growth", *measure_sync_growth(p, reps=ns.reps // 2 | 1, big=ns.big))
        if "balloons-4k" in only:
            keep("balloons-4k", *measure_balloons_cpus(samples=ns.samples // 4, warmup=5))
    order = [g.key for g in GOALS]
    rows.sort(key=lambda m: order.index(m.goal.key))
    result["rows"] = {
        m.goal.key: {
            "label": m.goal.label,
            "unit": m.goal.unit,
            "value": round(m.value, 3),
            "peer": None if m.peer is None else round(m.peer, 3),
            "ratio": None if m.ratio is None else round(m.ratio, 3),
            "target": m.goal.target,
            "on": m.goal.on,
            "ok": m.ok,
            "factor": round(m.factor, 3),
        }
        for m in rows
    }
    result["summary"] = summary(rows)
    result["markdown"] = markdown(rows)
    result["load_after"] = load_note()
    return result


def _commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        cwd=peers.REPO,
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
        cwd=peers.REPO,
    )
    return proc.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="no-op round trips per peer")
    ap.add_argument(
        "--samples",
        type=int,
        default=200,
        help="CreateContainer probes per peer at 1,000 live (half as many in-process decisions)",
    )
    ap.add_argument(
        "--reps",
        type=int,
        default=5,
        help="repetitions of Synchronize and restart (start-up: 2 more)",
    )
    ap.add_argument("--only", default="", help="comma list of row keys to measure")
    ap.add_argument(
        "--big",
        type=int,
        default=BIG,
        help="live containers of the larger node in the growth rows (a test runs fewer)",
    )
    ap.add_argument("--out", default="bench/out/goals.json")
    ns = ap.parse_args()
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    print(f"bench.goals: {load_note()}", flush=True)
    print(header(), flush=True)
    result = run(ns, report=lambda m: print(line(m), flush=True))
    result["seconds"] = round(time.monotonic() - start, 1)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(result["summary"])
    print(
        f"commit {result['commit']}; {result['machine']['load_before']} before, "
        f"{result['load_after']} after; {result['seconds']} s; JSON in {out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
