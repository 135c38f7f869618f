"""Cost as the node grows: 1,000, 5,000 and 10,000 live containers on the 224-thread machine.

Usage: python -m bench.scale [--levels 1000,5000,10000] [--samples 100] [--reps 3]
                             [--rounds 3] [--cold-mib N] [--no-sync]
                             [--out bench/out/scale.json]

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

Rounds and turns (seventh session): the levels are measured one after another, and on
this VM the machine's speed drifts within a run: in one quiet run every figure of the
10,000 level was 1.5-2x the run before's (shared p50 593 against 370 µs, the exclusive
one 25.3 against 12.7 ms, the Synchronize 2,460 against 1,783 ms), which made the growth
rows the drift's.  So the decision part runs `--rounds` times (3), each a fresh pipeline
grown through the levels, and the growth rows use each level's median p50 over the
rounds; the tables show the first round, and the growth of the first round alone (what
the bench gave before) is printed and kept (``growth_first_round``).  The Synchronizes
run the levels in turns (`synchronize_levels`: each rep runs every level once, shuffled).

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
    RSS after it; the median of `reps` (`synchronize_levels` of one level)."""
    return synchronize_levels(p, [n], reps=reps, seed=seed)[str(n)]


def synchronize_levels(
    p: peers.Peers, levels: list[int], *, reps: int, seed: int
) -> dict[str, dict[str, Any]]:
    """`synchronize` of every level, the levels in turns: each of the `reps` rounds runs
    every level once, in a shuffled order, both peers in a shuffled order each time, so
    that a drift of the machine's speed during the run (seen on this VM: every figure of
    one level 1.5x another run's) falls on every level alike rather than on the level
    that happened to run then."""
    work = {n: _SyncLevel(n) for n in levels}
    rng = random.Random(seed)
    order, names = list(levels), [GO, OURS]
    for _ in range(reps):
        rng.shuffle(order)
        for n in order:
            rng.shuffle(names)
            for name in names:
                work[n].run(p, name)
    return {str(n): w.summary() for n, w in work.items()}


class _SyncLevel:
    """The runs of one level of `synchronize_levels`, and their medians."""

    def __init__(self, n: int) -> None:
        self.n = n
        state = scaled(n, prefix="s")
        self.pods = [pod for pod, _ in state]
        self.ctrs = [running(ctr) for _, ctr in state]
        self.ms: dict[str, list[float]] = {GO: [], OURS: []}
        self.rss: list[int] = []
        self.cpu: list[int] = []
        self.updates = 0

    def run(self, p: peers.Peers, name: str) -> None:
        with go_runtime(peers.VERSION) as rt:
            rt.start(pods=self.pods, containers=self.ctrs, request_timeout_ms=peers.SYNC_TIMEOUT_MS)
            proc = p.start(name, rt)
            try:
                sync = rt.wait_synced(timeout=peers.SYNC_TIMEOUT_MS / 1000)
            except Exception as exc:
                tail = peers._log_tail(rt, name)
                raise RuntimeError(f"{name}: Synchronize of {self.n}: {exc}\n{tail}") from exc
            self.ms[name].append(sync.elapsed_ns / 1e6)
            if name == OURS:
                self.rss.append(rss_kib(proc.pid))
                self.cpu.append(settled_cpu_ns(proc.pid))
                self.updates = len(sync.updates)

    def summary(self) -> dict[str, Any]:
        ms = self.ms
        return {
            "ms": {k: sorted(round(v, 1) for v in vs) for k, vs in ms.items()},
            "median_ms": {k: round(sorted(vs)[len(vs) // 2], 1) for k, vs in ms.items()},
            "rss_mib": round(sorted(self.rss)[len(self.rss) // 2] / 1024, 1),
            # the daemon's own CPU from exec until idle after its Synchronize (`own_cpu_ms`)
            "cpu_ms": round(sorted(self.cpu)[len(self.cpu) // 2] / 1e6, 1),
            "updates": self.updates,
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
    if "decision_p50s" in result:
        p50s, f = result["decision_p50s"], result["growth_first_round"]
        per = "; ".join(
            f"{k} "
            + " -> ".join(
                f"{int(n):,}: " + ", ".join(str(v) for v in p50s[n][k])
                for n in (levels[0], levels[-1])
            )
            for k in p50s[levels[0]]
        )
        rows.append(
            f"decision CPU p50 µs per round ({len(p50s[levels[0]]['shared'])} rounds, growth "
            f"from their medians): {per}; the first round alone: shared "
            f"{f['shared_cpu_p50']}x, exclusive {f['exclusive_cpu_p50']}x"
        )
    return "\n".join(rows)


#: the decision rows' probe kinds, as `bench.decision.decisions` names them
KINDS = ("shared", "exclusive", decision.COLD)


def round_p50s(rounds: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Each level's CPU p50 per probe kind, one per decision round (a fresh pipeline grown
    through the levels each round)."""
    return {
        n: {k: [r[n][k]["cpu"]["p50_us"] for r in rounds] for k in KINDS if k in level}
        for n, level in rounds[0].items()
    }


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def decision_growth(
    p50s: dict[str, dict[str, list[float]]], first: str, last: str
) -> dict[str, float]:
    """The decision rows' growth from level `first` to `last`: the median over the rounds
    of each level's p50 (an odd count of rounds: the middle one)."""
    names = {"shared": "shared_cpu_p50", "exclusive": "exclusive_cpu_p50",
             decision.COLD: "shared_cold_cpu_p50"}  # fmt: skip
    return {names[k]: growth(median(p50s[first][k]), median(p50s[last][k])) for k in p50s[first]}


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
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="decision rounds, each a fresh pipeline grown through the levels (the growth "
        "rows use the median of the rounds' p50s)",
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
    rounds = [
        decision.decisions(
            levels,
            samples=ns.samples,
            warmup=ns.warmup,
            log_level="info",
            workload=scaled,
            cold=_eviction(ns.cold_mib),
        )
        for _ in range(ns.rounds)
    ]
    # the tables show the first round; the growth rows use every round (`round_p50s`)
    result["decision"] = rounds[0]
    result["decision_p50s"] = round_p50s(rounds)
    if not ns.no_sync:
        with short_tempdir("nri-scale-") as work:
            p = peers.Peers(work)
            by_level = synchronize_levels(p, [0, *levels], reps=ns.reps, seed=ns.seed)
            result["synchronize_empty"] = by_level.pop("0")
            result["synchronize"] = by_level
    first, last = str(levels[0]), str(levels[-1])
    dec = result["decision"]
    result["growth"] = {
        **decision_growth(result["decision_p50s"], first, last),
        "exclusive_updates": growth(
            dec[first]["exclusive"]["updates"], dec[last]["exclusive"]["updates"]
        ),
        **(sync_growth(result, first, last) if "synchronize" in result else {}),
    }
    # the growth of the first round alone: what this bench gave before it had rounds
    result["growth_first_round"] = decision_growth(round_p50s(rounds[:1]), first, last)
    result["load_after"] = load_note()
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
