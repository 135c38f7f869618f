"""Cost as the node grows: 1,000, 5,000 and 10,000 live containers on the 224-thread machine.

Usage: python -m bench.scale [--levels 1000,5000,10000] [--samples 100] [--reps 3]
                             [--cold-mib N] [--no-sync] [--out bench/out/scale.json]

No containerd: the machine is `examples/topologies/server-2s-224t.yaml`, the containers
come from `bench.workload.scaled` (the pattern of `live` up to 1,000, then small Burstable
and BestEffort containers so that 10,000 still fit). Per level:

* **decision**: CPU time (`thread_time_ns`) and wall time of `Pipeline.create` in this
  process (`bench.decision.decisions`), p50/p99, for a shared (Burstable 100m) and an
  exclusive (Guaranteed 1 CPU) probe; an exclusive reply updates every shared container of
  its pool, the one part that must grow.  Each probe runs under the daemon's rule for the
  cyclic collector (`nri_resmgr.ops.collector.handling`, the code the daemon's event
  handler runs): off during the decision, back on after the reply, so the collection a
  decision's allocations call for is charged to the after-reply column (``records`` in
  the JSON), as the daemon does it after its reply;
* **shared, cold caches**: as many shared probes again, each right after a buffer at
  least as large as the last-level cache (sysfs; ``--cold-mib``, 0 for none) has been
  written one byte per line (`bench.decision.Eviction`), so that every level's probe
  starts from the same caches: nothing of its own in any of them (below, "What the
  shared growth is");
* **Synchronize**: a fresh daemon (`nri-resmgr run`, external) on a fake runtime (NRI
  v0.12.2) reporting N running containers without cpusets (every one is placed), timed in
  Go; the Go no-op is run the same way, interleaved, as the floor;
* **RSS**: VmRSS of that daemon after its Synchronize of N containers.

``--no-sync`` leaves the last two out (the decision rows only, in a third of the time:
for comparing two trees' decisions in turns).

Each level's Synchronize is the median of `--reps` cold ones (3; it was one until the
sixth session).  One cold Synchronize is a poor sample: on a quiet machine the same
1,000 took 179-321 ms and 10,000 2,327-4,094 ms in three runs of one each (growth 12.7x,
16.5x, 12.9x), while the daemon's own CPU in them grows about linearly (wt-syn, timed in
the daemon: 214-378 ms at 1,000, 1,863-2,845 ms at 10,000); most of what moves is the
wall clock of two processes on a shared machine.  The Go no-op's own growth is printed
beside ours: the fake runtime's share of each Synchronize (building, marshalling and, at
10,000, first trying one oversized message and then six chunks) grows 8-30x by itself
and is inside our figure too (docs/benchmarks.md, wt-syn, sixth session).  So the
growth line also gives what the daemon adds over the Go no-op at each level (`added_ms`:
the difference of the two medians), the part of a Synchronize that is the plugin's, and
the daemon's own CPU for it (`own_cpu_ms`: its CPU from exec until idle after the
Synchronize, less the same on an empty node, run as one more level), which no other
process's work or preemption enters; the raw growth stays beside both.

Growth factor = the value at the largest level / at the smallest.

Why this and `bench.growth` measure the decision rows differently, and why both are
kept: here one pipeline is grown level by level, so the process holds the containers of
one node, as the daemon does, and each level's probes alternate shared / exclusive as
`bench.decision`'s do; the levels are measured one after another, so the load may move
in between (quiet runs only).  `bench.growth` holds a pipeline per level in one process
and shuffles every probe of every level into one order, so both levels see the same
load, the same heap (both nodes') and the same mix of preceding events.  Each sample is
`bench.decision.timed_create`: the decision and the release of its own reply.  Until
the third session a sample's reply was freed in the next sample; here that charged a
shared probe at 10,000 live with the 2,475 updates of the exclusive probe before it
(0.7-1.5 ms), while `bench.growth` spread the same cost over both levels, which is most
of why the two disagreed (3.69x against 1.03x, quiet).  What is left between them is
the exclusive decision right before each shared probe here: at 10,000 live it touches
ten times the memory, and the shared decision after it runs on colder caches.

What the shared growth is (sixth session, measured three ways on 1,000 and 10,000 live,
one level per process as here): the work is the same, 924,000 against 935,000
instructions per shared probe (+1.2%, callgrind, 20 probes each after an exclusive one);
what differs is where its data is when it starts.  Callgrind's cache simulation (48 KiB
L1, 4 MiB last level) counts 530 last-level misses per shared probe after an exclusive
one at 1,000 live and 5,350 at 10,000 (76 and 160 after a shared one): the exclusive
event before it (2,475 containers re-rendered, their updates, records and removal; its
creation peaks at 8.2 MiB allocated at 10,000 live, 0.36 MiB at 1,000) pushes the
shared decision's own code and data (interpreter frames, type and module dictionaries,
the state's trie nodes) out of the caches at 10,000 and not at 1,000.  With every cache
evicted before each probe, 10,000 live costs about what 1,000 does (0.79x-1.11x in four
loaded runs): the cold column shows the decision's own growth; the first column, the
growth row, the decision as it follows an exclusive event on this node, a cost the
daemon has too.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from bench import decision, peers
from bench.common import load_note, machine, rss_kib, settled_cpu_ns
from bench.workload import running, scaled
from tests.conformance.harness import go_runtime, short_tempdir

GO, OURS = "go-noop", "nri-resmgr"


def synchronize(p: peers.Peers, n: int, *, reps: int, seed: int) -> dict[str, Any]:
    """Cold Synchronize of `n` containers for the Go no-op and the daemon, and the daemon's
    RSS after it; the median of `reps`."""
    state = scaled(n, prefix="s")
    pods = [pod for pod, _ in state]
    ctrs = [running(ctr) for _, ctr in state]
    ms: dict[str, list[float]] = {GO: [], OURS: []}
    rss: list[int] = []
    cpu: list[int] = []
    updates = 0
    rng = random.Random(seed)
    order = [GO, OURS]
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            with go_runtime(peers.VERSION) as rt:
                rt.start(pods=pods, containers=ctrs, request_timeout_ms=peers.SYNC_TIMEOUT_MS)
                proc = p.start(name, rt)
                try:
                    sync = rt.wait_synced(timeout=peers.SYNC_TIMEOUT_MS / 1000)
                except Exception as exc:
                    tail = peers._log_tail(rt, name)
                    raise RuntimeError(f"{name}: Synchronize of {n}: {exc}\n{tail}") from exc
                ms[name].append(sync.elapsed_ns / 1e6)
                if name == OURS:
                    rss.append(rss_kib(proc.pid))
                    cpu.append(settled_cpu_ns(proc.pid))
                    updates = len(sync.updates)
    return {
        "ms": {k: sorted(round(v, 1) for v in vs) for k, vs in ms.items()},
        "median_ms": {k: round(sorted(vs)[len(vs) // 2], 1) for k, vs in ms.items()},
        "rss_mib": round(sorted(rss)[len(rss) // 2] / 1024, 1),
        # the daemon's own CPU from exec until idle after its Synchronize (`own_cpu_ms`)
        "cpu_ms": round(sorted(cpu)[len(cpu) // 2] / 1e6, 1),
        "updates": updates,
        "load": load_note(),
    }


def growth(first: float, last: float) -> float:
    return round(last / first, 2) if first > 0 else float("inf")


def added_ms(level: dict[str, Any]) -> float:
    """What the daemon adds to a Synchronize over the Go no-op on the same fake runtime:
    the two medians' difference. Both include the runtime's own share (building and
    marshalling the report, the chunks), which is the same for any plugin and grows
    faster than the containers by itself; the difference is the plugin's reading,
    placing and replying."""
    return float(level["median_ms"][OURS]) - float(level["median_ms"][GO])


def own_cpu_ms(level: dict[str, Any], empty: dict[str, Any]) -> float:
    """The daemon's own CPU for a Synchronize: its CPU from exec until idle after the
    Synchronize of a level, less the same for an empty node (start-up, registration and
    Configure, which do not depend on the containers).  CPU time, so neither the fake
    runtime's share nor the two processes' preemption on a small machine is in it."""
    return float(level["cpu_ms"]) - float(empty["cpu_ms"])


def table(result: dict[str, Any]) -> str:
    levels = [str(n) for n in result["levels"]]
    dec = result["decision"]
    #: without Synchronize (``--no-sync``) its columns are "-"
    none = {"median_ms": {OURS: "-", GO: "-"}, "rss_mib": "-", "load": dec[levels[0]]["load"]}
    syn = result.get("synchronize", {n: none for n in levels})
    rows = [
        "| live containers | shared decision CPU p50 / p99 µs | exclusive decision CPU p50 / "
        "p99 µs | updates in an exclusive reply | shared, cold caches, CPU p50 / p99 µs "
        "| Synchronize ms (Go no-op) | RSS MiB | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in levels:
        s, e = dec[n]["shared"]["cpu"], dec[n]["exclusive"]["cpu"]
        c = dec[n][decision.COLD]["cpu"] if decision.COLD in dec[n] else None
        cold = f"{c['p50_us']} / {c['p99_us']}" if c is not None else "-"
        y = syn[n]
        rows.append(
            f"| {int(n):,} | {s['p50_us']} / {s['p99_us']} | {e['p50_us']} / {e['p99_us']} "
            f"| {dec[n]['exclusive']['updates']} | {cold} | {y['median_ms'][OURS]} "
            f"({y['median_ms'][GO]}) | {y['rss_mib']} | {y['load']} |"
        )
    g = result["growth"]
    rows.append("")
    rows.append(
        f"growth {levels[0]} -> {levels[-1]} (x{int(levels[-1]) // int(levels[0])} containers): "
        f"shared decision CPU p50 {g['shared_cpu_p50']}x, exclusive {g['exclusive_cpu_p50']}x "
        f"(its updates {g['exclusive_updates']}x)"
        + (
            f", Synchronize {g['sync']}x (the Go no-op's {g['sync_go']}x; ours beyond it "
            f"{g['sync_added']}x; the daemon's CPU {g['sync_cpu']}x), RSS {g['rss']}x"
            if "sync" in g
            else ""
        )
        + (
            f"; shared on cold caches {g['shared_cold_cpu_p50']}x"
            if "shared_cold_cpu_p50" in g
            else ""
        )
    )
    return "\n".join(rows)


def sync_growth(result: dict[str, Any], first: str, last: str) -> dict[str, float]:
    """The Synchronize's and the RSS's growth from level `first` to `last`."""
    syn = result["synchronize"]
    return {
        "sync": growth(syn[first]["median_ms"][OURS], syn[last]["median_ms"][OURS]),
        "sync_go": growth(syn[first]["median_ms"][GO], syn[last]["median_ms"][GO]),
        "sync_added": growth(added_ms(syn[first]), added_ms(syn[last])),
        "sync_cpu": growth(
            own_cpu_ms(syn[first], result["synchronize_empty"]),
            own_cpu_ms(syn[last], result["synchronize_empty"]),
        ),
        "rss": growth(syn[first]["rss_mib"], syn[last]["rss_mib"]),
    }


def _eviction(mib: int | None) -> decision.Eviction | None:
    """The cold probes' eviction: `mib` MiB, the last-level cache's size by default; none
    for 0."""
    if mib == 0:
        return None
    return decision.Eviction(decision.last_level_cache() if mib is None else mib << 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--levels", default="1000,5000,10000")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument(
        "--reps", type=int, default=3, help="Synchronize runs per peer and level (the median)"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--cold-mib",
        type=int,
        default=None,
        help="MiB written before each cold shared probe (default: the last-level cache; 0: none)",
    )
    ap.add_argument(
        "--no-sync", action="store_true", help="the decision rows only (no Synchronize, no RSS)"
    )
    ap.add_argument("--out", default="bench/out/scale.json")
    ns = ap.parse_args()
    levels = [int(x) for x in ns.levels.split(",")]
    result: dict[str, Any] = {"machine": machine(), "levels": levels, "samples": ns.samples}
    result["decision"] = decision.decisions(
        levels,
        samples=ns.samples,
        warmup=ns.warmup,
        log_level="info",
        workload=scaled,
        cold=_eviction(ns.cold_mib),
    )
    if not ns.no_sync:
        with short_tempdir("nri-scale-") as work:
            p = peers.Peers(work)
            result["synchronize"] = {
                str(n): synchronize(p, n, reps=ns.reps, seed=ns.seed) for n in levels
            }
            result["synchronize_empty"] = synchronize(p, 0, reps=ns.reps, seed=ns.seed)
    first, last = str(levels[0]), str(levels[-1])
    dec = result["decision"]
    result["growth"] = {
        "shared_cpu_p50": growth(
            dec[first]["shared"]["cpu"]["p50_us"], dec[last]["shared"]["cpu"]["p50_us"]
        ),
        "exclusive_cpu_p50": growth(
            dec[first]["exclusive"]["cpu"]["p50_us"], dec[last]["exclusive"]["cpu"]["p50_us"]
        ),
        "exclusive_updates": growth(
            dec[first]["exclusive"]["updates"], dec[last]["exclusive"]["updates"]
        ),
        **(
            {
                "shared_cold_cpu_p50": growth(
                    dec[first][decision.COLD]["cpu"]["p50_us"],
                    dec[last][decision.COLD]["cpu"]["p50_us"],
                )
            }
            if decision.COLD in dec[first]
            else {}
        ),
        **(sync_growth(result, first, last) if "synchronize" in result else {}),
    }
    result["load_after"] = load_note()
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
