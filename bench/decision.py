"""Decision latency and full round trip at 1, 100 and 1,000 live containers.

Usage: python -m bench.decision [--levels 1,100,1000] [--samples 200] [--log-level info]
                                [--skip-roundtrip] [--out FILE]

Machine: `examples/topologies/server-2s-224t.yaml` (2 sockets, 4 NUMA nodes, 224 threads),
topology-aware policy with its defaults (750m reserved). Workload: `bench.workload`
(shared burstable/besteffort containers and one guaranteed exclusive container in ten).

* **decision**: `Pipeline.create` for a new container (adapter, policy, rendering of the
  adjustment and of the other containers' updates, commit, the decision's log lines),
  in this process, timed with `time.perf_counter_ns` (wall) and `time.thread_time_ns`
  (CPU: on a loaded machine the wall time mostly measures waiting for a CPU); logs go
  as JSON to /dev/null.  The placement records and the decision lines are written after
  each event, as the daemon writes them after its reply (`RecordStore`'s and
  `DecisionLog`'s `defer`), and their CPU time is reported apart (``records``).  The
  decision runs inside the daemon's per-event rule for the cyclic collector
  (`nri_resmgr.ops.collector.handling`: off during the event, back on after the reply),
  so the collection an event calls for is charged, as in the daemon, after the reply:
  to ``records``, which is all the after-reply work.
* **round trip**: CreateContainer through the real NRI adaptation (harness, NRI v0.12.2)
  to the real daemon (`nri-resmgr run --policy topology-aware --topology ...`, attached as
  an external plugin, logging JSON to a file), timed inside Go.

At each level, probes alternate: a *shared* container (burstable 100m) and an *exclusive*
one (guaranteed, 1 CPU). An exclusive grant shrinks the shared pool, so the reply updates
every shared container of that pool: O(shared containers) by nature, reported apart with
its update count. Every probe is stopped and removed after its sample (the live count
stays put). Growth factor = p50 at the largest level / p50 at the smallest.

Each sample is one `timed_create`: the decision and the release of its reply, as the
daemon frees a reply once it is sent, within the same event.  (Until the third session
the benches kept the reply in a variable until the next sample, so the next decision
paid for freeing it: a shared probe after an exclusive one at 10,000 live paid for its
2,475 updates, about 0.7-1.5 ms, which was most of `bench.scale`'s shared growth.)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from bench.common import load_note, machine, state_dir
from bench.stats import summary_us
from bench.workload import live, probe
from nri_api import api
from nri_resmgr.config import Config, LogConfig
from nri_resmgr.ops import collector
from nri_resmgr.ops.logs import configure_logging
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.load import load_topology
from tests.conformance.harness import Json, go_runtime

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = REPO / "examples" / "topologies" / "server-2s-224t.yaml"
DAEMON = Path(__file__).resolve().parent / "plugins" / "resmgr.py"
KINDS = ("shared", "exclusive")


def pb_pod(d: Json) -> api.PodSandbox:
    return json_format.ParseDict(d, api.PodSandbox())


def pb_ctr(d: Json) -> api.Container:
    return json_format.ParseDict(d, api.Container())


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed CreateContainer: thread CPU and wall nanoseconds, and the updates of
    other containers in its reply."""

    cpu_ns: int
    wall_ns: int
    updates: int


def timed_create(
    pipe: Pipeline,
    sandbox: api.PodSandbox,
    container: api.Container,
    *,
    defer: collector.Defer,
) -> Sample:
    """`pipe.create` timed with the release of its reply (module docstring: a reply kept
    past its sample is freed inside the next one), inside the daemon's collector rule
    for an event (`collector.handling`), whose after-reply step goes to `defer`: run it
    (`after_reply`) once the sample is taken."""
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    with collector.handling(defer):
        reply = pipe.create(sandbox, container)
        updates = len(reply[1])
        del reply
    wall = time.perf_counter_ns() - t0
    return Sample(cpu_ns=time.thread_time_ns() - c0, wall_ns=wall, updates=updates)


#: the kind under which `decisions` reports its shared probes timed on evicted caches
COLD = "shared_cold"
#: bytes of a cache line (x86-64, arm64)
LINE = 64


def last_level_cache(default: int = 64 << 20) -> int:
    """Bytes of the largest cache sysfs reports for CPU 0; `default` where it reports none."""
    sizes = [default]
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes)


class Eviction:
    """A buffer at least as large as the last-level cache, one byte of each of its lines
    written per call, so that afterwards no cache holds anything a decision uses: every
    level's probe then starts from the same, cold, caches (`bench.scale`'s docstring)."""

    def __init__(self, size: int) -> None:
        lines = -(-size // LINE)
        self._buf = bytearray(lines * LINE)
        self._fills = (bytes(lines), b"\x01" * lines)
        self._turn = 0
        self.mib = round(lines * LINE / (1 << 20), 1)

    def __call__(self) -> None:
        self._turn ^= 1
        self._buf[::LINE] = self._fills[self._turn]


def after_reply(later: list[Callable[[], None]]) -> int:
    """Run what the event put off until its reply (the records' writes, the collector's
    return and the collection it calls for), in order; their CPU nanoseconds."""
    c0 = time.thread_time_ns()
    while later:
        later.pop(0)()
    return time.thread_time_ns() - c0


def _growth(per_level: dict[str, dict[str, Any]], kind: str) -> float:
    levels = sorted(per_level, key=int)
    first, last = per_level[levels[0]][kind], per_level[levels[-1]][kind]
    return round(float(last["p50_us"]) / float(first["p50_us"]), 2)


def decisions(
    levels: list[int],
    *,
    samples: int,
    warmup: int,
    log_level: str,
    workload: Callable[..., list[tuple[Json, Json]]] = live,
    cold: Eviction | None = None,
) -> dict[str, Any]:
    """In-process `Pipeline.create` latency per level and probe kind; the live containers
    come from `workload(n, start=...)` (`bench.workload.live` or `scaled`).  With `cold`,
    each level also times as many shared probes with every cache evicted right before
    each (``shared_cold``: `Eviction`)."""
    with open(os.devnull, "w") as devnull:
        configure_logging(LogConfig(level=log_level, format="json"), stream=devnull)  # type: ignore[arg-type]
        later: list[Callable[[], None]] = []
        pipe = build_pipeline(
            Config(),
            topology=load_topology(str(TOPOLOGY)),
            policy="topology-aware",
            state_dir=state_dir(),
            defer_records=later.append,
            defer_lines=later.append,
        )
        out: dict[str, Any] = {}
        count = 0
        for n in levels:
            for pod, ctr in workload(n, start=count):
                sp = pb_pod(pod)
                pipe.run_pod(sp)
                pipe.create(sp, pb_ctr(ctr))
                after_reply(later)
            count = n
            times: dict[str, list[int]] = {k: [] for k in KINDS}
            cpu: dict[str, list[int]] = {k: [] for k in KINDS}
            records: dict[str, list[int]] = {k: [] for k in KINDS}
            updates: dict[str, list[int]] = {k: [] for k in KINDS}
            for i in range(warmup + samples):
                for kind in KINDS:
                    sample, dr = _probed(pipe, kind, i, later)
                    if i >= warmup:
                        times[kind].append(sample.wall_ns)
                        cpu[kind].append(sample.cpu_ns)
                        records[kind].append(dr)
                        updates[kind].append(sample.updates)
            out[str(n)] = {
                k: {
                    **summary_us(times[k]),
                    "updates": max(updates[k]),
                    "cpu": summary_us(cpu[k]),
                    "records": summary_us(records[k]),
                }
                for k in KINDS
            }
            if cold is not None:
                cold_cpu = [
                    _probed(pipe, "shared", i, later, before=cold)[0].cpu_ns
                    for i in range(warmup + samples)
                ][warmup:]
                out[str(n)][COLD] = {"cpu": summary_us(cold_cpu), "evicted_mib": cold.mib}
            out[str(n)]["load"] = load_note()
    return out


def _probed(
    pipe: Pipeline,
    kind: str,
    i: int,
    later: list[Callable[[], None]],
    *,
    before: Callable[[], None] | None = None,
) -> tuple[Sample, int]:
    """The i-th probe of `kind` created (timed, after `before`), its after-reply step
    run, and removed again as the daemon's events are handled; the sample and the
    after-reply CPU nanoseconds."""
    pod, ctr = probe(kind, i)
    sp, sc = pb_pod(pod), pb_ctr(ctr)
    pipe.run_pod(sp)
    if before is not None:
        before()
    sample = timed_create(pipe, sp, sc, defer=later.append)
    dr = after_reply(later)
    with collector.handling(later.append):  # as the daemon's events
        pipe.stop(sp, sc)
        pipe.remove(sp, sc)
        pipe.remove_pod(sp)
    after_reply(later)
    return sample, dr


def roundtrips(
    levels: list[int], *, samples: int, warmup: int, log_level: str, version: str
) -> dict[str, Any]:
    """CreateContainer through the harness to the external daemon, per level and kind."""
    out: dict[str, Any] = {}
    with go_runtime(version) as rt:
        config = rt.dir / "resmgr.json"
        config.write_text(
            json.dumps(
                {
                    "policy": "topology-aware",
                    "log": {
                        "level": log_level,
                        "format": "json",
                        "file": str(rt.dir / "daemon.log"),
                    },
                }
            )
        )
        rt.start()
        rt.start_external(
            DAEMON,
            idx="90",
            name="resmgr",
            args=[
                "--config",
                str(config),
                "--topology",
                str(TOPOLOGY),
                "--state-dir",
                str(rt.dir / "state"),
            ],
        )
        rt.wait_synced(timeout=60)
        count = 0
        for n in levels:
            for pod, ctr in live(n, start=count):
                rt.run_pod(pod)
                rt.create_container(pod, ctr)
                rt.start_container(pod, ctr)
            count = n
            times: dict[str, list[int]] = {k: [] for k in KINDS}
            updates: dict[str, list[int]] = {k: [] for k in KINDS}
            for i in range(warmup + samples):
                for kind in KINDS:
                    pod, ctr = probe(kind, i)
                    rt.run_pod(pod)
                    reply = rt.create_container(pod, ctr)
                    dt = int(rt.last_reply["elapsed_ns"])
                    rt.stop_container(pod, ctr)
                    rt.remove_container(pod, ctr)
                    rt.stop_pod(pod)
                    rt.remove_pod(pod)
                    if i >= warmup:
                        times[kind].append(dt)
                        updates[kind].append(len(reply.get("update", [])))
            out[str(n)] = {k: {**summary_us(times[k]), "updates": max(updates[k])} for k in KINDS}
            out[str(n)]["load"] = load_note()
    return out


def cpu_table(per_level: dict[str, Any]) -> str:
    rows = [
        "**decision CPU time (thread_time_ns), in process**",
        "",
        "| live containers | shared p50 µs | shared p99 µs | exclusive p50 µs "
        "| exclusive p99 µs | updates in an exclusive reply "
        "| records after the reply p50 µs, shared / exclusive |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, r in per_level.items():
        s, e = r["shared"]["cpu"], r["exclusive"]["cpu"]
        rs, re_ = r["shared"]["records"], r["exclusive"]["records"]
        rows.append(
            f"| {n} | {s['p50_us']} | {s['p99_us']} | {e['p50_us']} | {e['p99_us']} "
            f"| {r['exclusive']['updates']} | {rs['p50_us']} / {re_['p50_us']} |"
        )
    cpu_levels = {n: {k: r[k]["cpu"] for k in KINDS} for n, r in per_level.items()}
    rows.append("")
    rows.append(
        f"growth factor (CPU p50, largest / smallest level): shared "
        f"{_growth(cpu_levels, 'shared')}, exclusive {_growth(cpu_levels, 'exclusive')}"
    )
    return "\n".join(rows)


def table(title: str, per_level: dict[str, Any]) -> str:
    rows = [
        f"**{title}**",
        "",
        "| live containers | shared p50 µs | shared p99 µs | exclusive p50 µs "
        "| exclusive p99 µs | updates in an exclusive reply | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, r in per_level.items():
        s, e = r["shared"], r["exclusive"]
        rows.append(
            f"| {n} | {s['p50_us']} | {s['p99_us']} | {e['p50_us']} | {e['p99_us']} "
            f"| {e['updates']} | {r['load']} |"
        )
    rows.append("")
    rows.append(
        f"growth factor (p50, largest / smallest level): shared "
        f"{_growth(per_level, 'shared')}, exclusive {_growth(per_level, 'exclusive')}"
    )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--levels", default="1,100,1000")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--version", default="v0.12.2")
    ap.add_argument("--skip-roundtrip", action="store_true")
    ap.add_argument("--out", default="bench/out/decision.json")
    ns = ap.parse_args()
    levels = [int(x) for x in ns.levels.split(",")]
    result: dict[str, Any] = {
        "machine": machine(),
        "levels": levels,
        "samples": ns.samples,
        "log_level": ns.log_level,
    }
    result["decision"] = decisions(
        levels, samples=ns.samples, warmup=ns.warmup, log_level=ns.log_level
    )
    print(cpu_table(result["decision"]))
    print()
    print(table("decision wall time (Pipeline.create, in process)", result["decision"]))
    if not ns.skip_roundtrip:
        result["roundtrip"] = roundtrips(
            levels, samples=ns.samples, warmup=ns.warmup, log_level=ns.log_level, version=ns.version
        )
        print()
        print(table("round trip (harness -> external daemon, timed in Go)", result["roundtrip"]))
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
