"""Which cases a differential run makes, and the counts it reports.

Theory of operation: a case is named by (machine, policy, seed); `make_case` draws its
configuration and operations from `RandomDraw(seed)`, so the same name is the same case
on every run. `ci_cases()` is the CI profile: every shipped machine and `RANDOM_MACHINES`
random ones (machine seeds 1..N), both policies, `SEEDS_PER_MACHINE` sequences each.
`long_cases(n)` adds sequence seeds per machine and more random machines. `cases()` is
the same generator as a hypothesis strategy, for shrinking a divergence.

`Tally` counts observations (one container after one step) per machine and policy:
identical, per documented class, undocumented; `Tally.table()` prints the percentages.
Two agreements: *agreement* counts an observation identical or of a documented class
(direct, carried or knock-on, `run.py`); *strict* counts knock-on observations as
divergences, so it rests on the direct and carried classes alone; *in scope* counts
every knock-on observation as a divergence except those after a restart
(`OUT_OF_SCOPE_KNOCK_ON`): issue 22 keeps our restart rule (a restart moves no valid
placement, where nri-plugins re-allocates every container) out of the comparison's
scope by design, and what the two sides place after such a restart follows from it.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.differential.gen import (
    Case,
    Draw,
    HypothesisDraw,
    RandomDraw,
    balloons_config,
    machine_spec,
    operations,
)
from tests.differential.machines import (
    BALLOONS_SAMPLES,
    TA_CONFIG,
    Machine,
    random_machine,
    shipped,
)
from tests.differential.run import KNOCK_ON, CaseResult

__all__ = [
    "POLICIES",
    "RANDOM_MACHINES",
    "Tally",
    "case_strategy",
    "ci_cases",
    "long_cases",
    "machines",
    "make_case",
    "shortest_divergence",
]

POLICIES = ("topology-aware", "balloons")
RANDOM_MACHINES = 50
#: sequence seeds per machine and policy in the CI profile (seed 1 up)
SEEDS_PER_MACHINE = 1
#: their Helm values keys that need a Kubernetes API or a port: left out of the file
_NO_KUBE_KEYS = ("agent", "instrumentation", "control")


def sample_config(name: str) -> str:
    """Their balloons sample `name` as a custom resource both plugins read from a file."""
    doc: dict[str, Any] = yaml.safe_load(BALLOONS_SAMPLES[name].read_text())
    spec = doc.get("spec", doc)
    spec = {k: v for k, v in spec.items() if k not in _NO_KUBE_KEYS}
    return yaml.safe_dump(
        {
            "apiVersion": "config.nri/v1alpha1",
            "kind": "BalloonsPolicy",
            "metadata": {"name": "default"},
            "spec": spec,
        },
        sort_keys=False,
    )


def _draw_case(d: Draw, machine: Machine, policy: str, seed: int | None) -> Case:
    topo = machine.topology
    types: tuple[str, ...] = ()
    if policy == "topology-aware":
        config = TA_CONFIG
    else:
        which = d.choice(("generated", "sample", "helm"))
        if which == "generated":
            config, types = balloons_config(d, topo)
        else:
            config = sample_config(which)
    ops = operations(d, policy, topo, balloon_types=types)
    return Case(machine.name, policy, config, ops, seed)


def make_case(machine: Machine, policy: str, seed: int) -> Case:
    """The case named (machine, policy, seed): drawn from a generator seeded by all
    three, so no two machines run the same sequence."""
    return _draw_case(RandomDraw(f"{machine.name}|{policy}|{seed}"), machine, policy, seed)


@st.composite
def _case(draw: Any, policy: str, machine: Machine | None) -> tuple[Machine, Case]:
    d = HypothesisDraw(draw)
    m = machine or Machine("random/hypothesis", machine_spec(d))
    return m, _draw_case(d, m, policy, None)


def case_strategy(policy: str, machine: Machine | None = None) -> st.SearchStrategy[Any]:
    """(machine, case) as a hypothesis strategy: a random machine unless one is given."""
    strategy: st.SearchStrategy[Any] = _case(policy, machine)
    return strategy


def machines(randoms: int = RANDOM_MACHINES) -> list[Machine]:
    """Every shipped machine and `randoms` random ones (machine seeds 1..randoms); cheap:
    no topology is built until a case needs it."""
    return shipped() + [random_machine(s) for s in range(1, randoms + 1)]


def shortest_divergence(
    policy: str,
    machine: Machine | None,
    run: Callable[[Machine, Case], CaseResult],
    *,
    examples: int,
) -> tuple[Machine, CaseResult] | None:
    """Search `examples` cases of hypothesis (on `machine`, else on random machines) for
    an undocumented divergence or a run error, and shrink the first found: the shortest
    case hypothesis reaches, with its result, or None."""
    found: list[tuple[Machine, CaseResult]] = []

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=True,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(case_strategy(policy, machine))
    def probe(mc: tuple[Machine, Case]) -> None:
        m, case = mc
        result = run(m, case)
        if result.first_divergence() is not None or result.error:
            found.append((m, result))
            raise AssertionError(f"{case.policy} on {m.name} diverges")

    with contextlib.suppress(AssertionError):
        probe()
    # hypothesis runs the shortest failing case last, to report it
    return found[-1] if found else None


def ci_cases(policies: Iterable[str] = POLICIES) -> Iterator[tuple[Machine, Case]]:
    """The CI profile: every shipped machine and RANDOM_MACHINES random ones."""
    yield from long_cases(SEEDS_PER_MACHINE, RANDOM_MACHINES, policies)


def long_cases(
    seeds: int, randoms: int, policies: Iterable[str] = POLICIES, *, first_seed: int = 1
) -> Iterator[tuple[Machine, Case]]:
    """`seeds` sequences per machine and policy on the shipped and `randoms` random
    machines (machine seeds 1..randoms)."""
    for policy in policies:
        for m in machines(randoms):
            for seed in range(first_seed, first_seed + seeds):
                yield m, make_case(m, policy, seed)


@dataclass
class Row:
    observations: int = 0
    identical: int = 0
    undocumented: int = 0
    classes: Counter[str] = field(default_factory=Counter)
    cases: int = 0
    ends_identical: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        """Share of observations identical or of a documented class."""
        return 1.0 - self.undocumented / self.observations if self.observations else 1.0

    @property
    def knock_on(self) -> int:
        """Observations counted as knock-on of a documented class."""
        return sum(n for cls, n in self.classes.items() if cls.startswith(KNOCK_ON))

    @property
    def strict(self) -> float:
        """Share of observations identical or of a direct or carried class: knock-on
        observations count as divergences."""
        if not self.observations:
            return 1.0
        return 1.0 - (self.undocumented + self.knock_on) / self.observations

    @property
    def in_scope(self) -> float:
        """`strict`, but the knock-on of a restart (`OUT_OF_SCOPE_KNOCK_ON`) is not
        counted against it: every other knock-on observation is a divergence."""
        if not self.observations:
            return 1.0
        counted = self.knock_on - self.classes[OUT_OF_SCOPE_KNOCK_ON]
        return 1.0 - (self.undocumented + counted) / self.observations

    def merge(self, other: Row) -> None:
        self.observations += other.observations
        self.identical += other.identical
        self.undocumented += other.undocumented
        self.classes.update(other.classes)
        self.cases += other.cases
        self.ends_identical += other.ends_identical
        self.errors += other.errors


#: the knock-on kept out of the strictest figure, `Row.in_scope`: what follows a restart,
#: where ours keeps every valid placement by design and theirs re-allocates them all
OUT_OF_SCOPE_KNOCK_ON = f"{KNOCK_ON}restart-keeps-placements"


class Tally:
    """Observations counted per (machine, policy), and in total per policy."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = defaultdict(Row)

    def add(self, result: CaseResult) -> None:
        row = self.rows[(result.case.machine, result.case.policy)]
        row.cases += 1
        if result.error:
            row.errors.append(f"seed {result.case.seed}: {result.error.splitlines()[0]}")
        row.ends_identical += result.ends_identical() and not result.error
        for o in result.observations:
            row.observations += 1
            row.identical += o.identical
            row.undocumented += o.undocumented
            if o.cls:
                row.classes[o.cls] += 1

    def total(self, policy: str, prefix: str = "", *, shipped: bool = False) -> Row:
        """The rows of `policy` whose machine starts with `prefix` (or, `shipped`, every
        machine but the random ones) summed."""
        out = Row()
        for (machine, p), row in self.rows.items():
            if p != policy or not machine.startswith(prefix):
                continue
            if shipped and machine.startswith("random/"):
                continue
            out.merge(row)
        return out

    def agreement(self, policy: str, prefix: str = "") -> float:
        """Share of observations identical or of a documented class."""
        return self.total(policy, prefix).agreement

    def table(self) -> str:
        lines = [
            "| machine | policy | sequences | ends identical | containers x steps | identical "
            "| documented classes | undocumented | agreement | strict | in scope | errors |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]

        def line(name: str, policy: str, r: Row) -> str:
            agree = 100.0 * r.agreement
            same = 100.0 * r.identical / r.observations if r.observations else 100.0
            classes = ", ".join(f"{k} {v}" for k, v in sorted(r.classes.items())) or "-"
            return (
                f"| {name} | {policy} | {r.cases} | {r.ends_identical} | {r.observations} "
                f"| {same:.1f}% | {classes} | {r.undocumented} | {agree:.1f}% "
                f"| {100.0 * r.strict:.1f}% | {100.0 * r.in_scope:.1f}% | {len(r.errors)} |"
            )

        for (machine, policy), row in sorted(self.rows.items(), key=lambda kv: kv[0][::-1]):
            lines.append(line(machine, policy, row))
        for policy in sorted({p for _m, p in self.rows}):
            lines.append(line("**shipped**", policy, self.total(policy, shipped=True)))
            lines.append(line("**random**", policy, self.total(policy, "random/")))
            lines.append(line("**all**", policy, self.total(policy)))
        return "\n".join(lines)
