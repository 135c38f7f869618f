"""Command line of the differential test: agreement tables, first divergences, shrinking.

    python -m tests.differential                       # the CI profile, both policies
    python -m tests.differential --long                # 5 sequences per machine, 200 random
    python -m tests.differential --long --seeds 20 --randoms 500 --policy balloons
    python -m tests.differential --divergences 5       # the first five per policy, readable
    python -m tests.differential --shrink --policy topology-aware [--machine NAME]
    python -m tests.differential --machine hbm-server --seeds 3 --repeat 3   # self-agreement

The table gives, per machine and policy, the containers x steps compared, the share
identical, the count per documented class, the agreement (identical or documented) and
the strict agreement (knock-on observations counted as divergences).
`--divergences` prints the first undocumented divergences of the run: machine, seed,
configuration, the sequence up to the step, the container, ours and theirs. `--shrink`
lets hypothesis search (on `--machine`, else on random machines) and shrink the first
divergence it finds to its shortest sequence, then prints it the same way. `--repeat N`
runs every case N times and says, per case and side, whether that side placed every
container the same on every run (the premise of the comparison: a plugin agrees with
itself).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.conformance.harness import short_tempdir
from tests.differential.gen import Case
from tests.differential.host import HostRoots
from tests.differential.machines import Machine, random_machine, shipped
from tests.differential.profile import (
    POLICIES,
    RANDOM_MACHINES,
    Tally,
    long_cases,
    shortest_divergence,
)
from tests.differential.run import CaseResult, Observation, run_case
from tests.peers import NriPlugins, build_nri_plugins


def describe(machine: Machine, result: CaseResult, div: Observation | None) -> str:
    """A divergence (or a run's error) with everything needed to replay it by hand."""
    case = result.case
    out = [f"== {case.policy} on {machine.name} (seed {case.seed})"]
    if isinstance(machine.source, dict):
        out.append(f"machine spec: {json.dumps(machine.source)}")
    if case.policy == "balloons":
        out.append("config:\n  " + case.config.strip().replace("\n", "\n  "))
    out.append("sequence:")
    last = len(case.ops) - 1 if div is None else div.op_index
    for i, op in enumerate(case.ops[: last + 1]):
        out.append(f"  {i}: {op}")
    if div is not None:
        out.append(f"step {div.step}: {div.op}")
        out.append(f"  container {div.container}")
        out.append(f"    ours:   {div.ours}")
        out.append(f"    theirs: {div.theirs}")
        step = [o for o in result.observations if o.step == div.step]
        for o in (o for o in step if o is not div and not o.identical):
            out.append(f"  also {o.container} [{o.cls or 'undocumented'}]: ours {o.ours} / "
                       f"theirs {o.theirs}")
    if result.error:
        out.append(f"error: {result.error}")
    return "\n".join(out)


def run_all(
    cases: Iterable[tuple[Machine, Case]], plugins: NriPlugins, jobs: int
) -> list[tuple[Machine, CaseResult]]:
    """Run the cases, `jobs` at once, sharing one host root per machine."""
    items = list(cases)
    done = 0

    def one(mc: tuple[Machine, Case]) -> CaseResult:
        nonlocal done
        r = run_case(mc[1], mc[0], plugins, roots)
        done += 1
        same = sum(o.identical for o in r.observations)
        print(
            f"[{done}/{len(items)}] {r.case.policy} {r.case.machine} seed {r.case.seed}: "
            f"{same}/{len(r.observations)} identical{' ERROR' if r.error else ''}",
            file=sys.stderr,
            flush=True,
        )
        return r

    with short_tempdir("nri-diff-roots-") as base, ThreadPoolExecutor(jobs) as pool:
        roots = HostRoots(base)
        results = list(pool.map(one, items))
    return [(m, r) for (m, _c), r in zip(items, results, strict=True)]


def self_agreement(runs: list[list[tuple[Machine, CaseResult]]]) -> list[str]:
    """Per case and side: the same observations on every run, or where a run differs."""
    out = []
    for per_run in zip(*runs, strict=True):
        case = per_run[0][1].case
        for who in ("ours", "theirs"):
            views = [
                [(o.step, o.container, getattr(o, who)) for o in r.observations]
                for _m, r in per_run
            ]
            errors = [r.error.splitlines()[0] for _m, r in per_run if r.error]
            differs = [i for i, v in enumerate(views) if v != views[0]]
            verdict = "same on every run" if not differs else f"runs {differs} differ from run 0"
            out.append(
                f"{case.policy} {case.machine} seed {case.seed} {who}: {verdict}"
                + (f" (errors: {errors})" if errors else "")
            )
    return out


def shrink(policy: str, machine: Machine | None, plugins: NriPlugins, examples: int) -> str:
    found = shortest_divergence(
        policy, machine, lambda m, case: run_case(case, m, plugins), examples=examples
    )
    if found is None:
        return f"{policy}: no divergence in {examples} examples"
    m, result = found
    return "shortest found:\n" + describe(m, result, result.first_divergence())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--policy", choices=(*POLICIES, "both"), default="both")
    ap.add_argument("--long", action="store_true", help="the long run (see --seeds, --randoms)")
    ap.add_argument("--seeds", type=int, help="sequences per machine (CI 1, long 5)")
    ap.add_argument("--randoms", type=int, help=f"random machines (CI {RANDOM_MACHINES}, long 200)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--machine", help="only machines whose name contains this")
    ap.add_argument(
        "--divergences", type=int, default=0, help="print the first N divergences per policy"
    )
    ap.add_argument("--shrink", action="store_true", help="search and shrink one divergence")
    ap.add_argument("--examples", type=int, default=50, help="hypothesis examples for --shrink")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--out", type=Path, help="write the counts as JSON here")
    ap.add_argument("--repeat", type=int, default=1, help="run every case N times")
    ns = ap.parse_args(argv)
    policies = POLICIES if ns.policy == "both" else (ns.policy,)
    plugins = build_nri_plugins()
    if ns.shrink:
        machines = [m for m in shipped() if ns.machine and ns.machine in m.name]
        if ns.machine and ns.machine.startswith("random/"):
            machines = [random_machine(int(ns.machine.split("/")[1]))]
        for policy in policies:
            print(shrink(policy, machines[0] if machines else None, plugins, ns.examples))
        return 0
    seeds = ns.seeds or (5 if ns.long else 1)
    randoms = ns.randoms if ns.randoms is not None else (200 if ns.long else RANDOM_MACHINES)
    cases = [
        (m, c)
        for m, c in long_cases(seeds, randoms, policies, first_seed=ns.first_seed)
        if not ns.machine or ns.machine in m.name
    ]
    start = time.monotonic()
    results = run_all(cases, plugins, ns.jobs)
    took = time.monotonic() - start
    if ns.repeat > 1:
        runs = [results] + [run_all(cases, plugins, ns.jobs) for _ in range(ns.repeat - 1)]
        print("\n".join(self_agreement(runs)))
    tally = Tally()
    for _m, r in results:
        tally.add(r)
    print(tally.table())
    print()
    for policy in policies:
        row = tally.total(policy)
        print(
            f"{policy}: {row.observations} containers x steps, agreement "
            f"{100 * tally.agreement(policy):.1f}% (shipped "
            f"{100 * tally.total(policy, shipped=True).agreement:.1f}%, random "
            f"{100 * tally.total(policy, 'random/').agreement:.1f}%), strict "
            f"{100 * row.strict:.1f}% ({row.knock_on} knock-on), in scope "
            f"{100 * row.in_scope:.1f}%, identical "
            f"{100 * row.identical / max(1, row.observations):.1f}%, classes "
            f"{dict(row.classes) or '-'}, {row.ends_identical}/{row.cases} sequences end "
            f"identical, {len(row.errors)} errors"
        )
    print(f"{len(cases)} cases in {took:.0f} s")
    shown: dict[str, int] = {}
    for m, r in results:
        div = r.first_divergence()
        policy = r.case.policy
        if (div is not None or r.error) and shown.get(policy, 0) < ns.divergences:
            print()
            print(describe(m, r, div))
            shown[policy] = shown.get(policy, 0) + 1
    if ns.out:
        ns.out.write_text(json.dumps({
            f"{m}|{p}": {"observations": row.observations, "identical": row.identical,
                         "undocumented": row.undocumented, "knock_on": row.knock_on,
                         "agreement": row.agreement, "strict": row.strict,
                         "in_scope": row.in_scope,
                         "classes": dict(row.classes),
                         "errors": row.errors}
            for (m, p), row in tally.rows.items()
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
