"""The CI profile of the differential test: our policies against nri-plugins v0.14.0.

Every shipped machine and RANDOM_MACHINES random ones, both policies, fixed seeds
(`profile.ci_cases`), run through the real NRI runtime library with nri-plugins' plugin
built unchanged from its Go module beside our daemon. The profile runs in chunks of
machines (`test_profile_runs`, each well inside the per-test timeout), which also check
that both plugins ran every case to its end; the agreement tests then read the counts.

Agreement: the share of observations (one container after one step) that are identical
or of a documented difference class, carried or knock-on (`run`). The target is 99%
(`test_agreement_target`); a policy in `MEASURED` (none since wt-bl3) is a strict
expected failure stating the rate measured when the mark was set, and
`test_agreement_floor` keeps the rate from falling below `FLOORS` (tightened as the gap
closes), `test_strict_agreement_floor` the strict rate (knock-on counted as divergence)
below `STRICT_FLOORS`. `python -m tests.differential` prints the table and
`--divergences N` the first divergences (docs/policies.md, "Differential test").
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conformance.harness import short_tempdir
from tests.differential.host import HostRoots
from tests.differential.profile import (
    POLICIES,
    SEEDS_PER_MACHINE,
    Tally,
    machines,
    make_case,
)
from tests.differential.run import CaseResult, run_case
from tests.peers import NriPlugins, build_nri_plugins

pytestmark = pytest.mark.conformance

#: machines per chunk of the profile, and cases run at once
CHUNK = 8
JOBS = 2
#: agreement (identical or documented) of the CI profile that must not be lost, per policy:
#: the rate measured, less a margin (topology-aware: three points, since nri-plugins'
#: topology-aware does not always re-place the same containers at a restart, so the steps
#: after one vary from run to run; balloons gave the same counts on every run); raise it
#: as the policies close the gap (both at the target: balloons 99.8-100% measured, wt-bl3;
#: topology-aware 99.6% on two runs, wt-ta3, its restart variance inside the classes)
FLOORS = {"topology-aware": 0.99, "balloons": 0.99}
#: the agreement measured when a policy's target was last an expected failure; a policy
#: absent here meets the target (both since wt-bl3's carried and knock-on classes:
#: `python -m tests.differential --policy both --jobs 2` gave topology-aware 99.6%,
#: balloons 99.8-100%; before them topology-aware was 86.2%)
MEASURED: dict[str, str] = {}
TARGET = 0.99
#: the strict agreement (knock-on counted as divergence) that must not be lost: measured
#: by wt-par (`python -m tests.differential --policy P --jobs 2`: topology-aware 96.8%,
#: balloons 99.6%), less three points for topology-aware's restart variance (balloons
#: gives the same counts on every run). Balloons' placement records (issue 24) keep every
#: balloon's own CPUs at a restart where theirs re-allocates them, the restart's knock-on
#: that took balloons to 98.5% (random/19: 58 observations after a restart at which every
#: container was identical), so its floor is 0.98 and the in-scope floor below holds
#: everything else to 99%
STRICT_FLOORS = {"topology-aware": 0.93, "balloons": 0.98}
#: the in-scope agreement (every knock-on a divergence but a restart's, which issue 22
#: keeps out of scope by design): the issue's 99%; measured at 456532a (`python -m
#: tests.differential --policy P --jobs 1`): topology-aware 99.3%, balloons 99.7%
IN_SCOPE_FLOOR = 0.99


MACHINES = machines()
CHUNKS = [MACHINES[i : i + CHUNK] for i in range(0, len(MACHINES), CHUNK)]
RESULTS: dict[tuple[str, int], list[CaseResult]] = {}


@pytest.fixture(scope="module")
def plugins() -> NriPlugins:
    return build_nri_plugins()


@pytest.fixture(scope="module")
def roots() -> Iterator[HostRoots]:
    with short_tempdir("nri-diff-roots-") as d:
        yield HostRoots(Path(d))


def results(policy: str, chunk: int, plugins: NriPlugins, roots: HostRoots) -> list[CaseResult]:
    """The results of one chunk, run once per session."""
    key = (policy, chunk)
    if key not in RESULTS:
        cases = [
            (m, make_case(m, policy, seed))
            for m in CHUNKS[chunk]
            for seed in range(1, SEEDS_PER_MACHINE + 1)
        ]
        # two at once: each case spends most of its time waiting on its processes
        with ThreadPoolExecutor(JOBS) as pool:
            RESULTS[key] = list(pool.map(lambda mc: run_case(mc[1], mc[0], plugins, roots), cases))
    return RESULTS[key]


def tally(policy: str, plugins: NriPlugins, roots: HostRoots) -> Tally:
    t = Tally()
    for chunk in range(len(CHUNKS)):
        for r in results(policy, chunk, plugins, roots):
            t.add(r)
    return t


@pytest.mark.parametrize(
    ("policy", "chunk"),
    [(p, i) for p in POLICIES for i in range(len(CHUNKS))],
    ids=[f"{p}-{i}" for p in POLICIES for i in range(len(CHUNKS))],
)
def test_profile_runs(policy: str, chunk: int, plugins: NriPlugins, roots: HostRoots) -> None:
    """Both plugins start on every machine of the chunk and answer every step."""
    errors = [
        f"{r.case.machine} seed {r.case.seed}: {r.error}"
        for r in results(policy, chunk, plugins, roots)
        if r.error
    ]
    assert not errors, "\n\n".join(errors)


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("policy", POLICIES)
def test_agreement_floor(policy: str, plugins: NriPlugins, roots: HostRoots) -> None:
    """The CI profile's agreement does not fall below the floor last measured."""
    t = tally(policy, plugins, roots)
    rate = t.agreement(policy)
    assert rate >= FLOORS[policy], (
        f"{policy}: agreement {100 * rate:.1f}% fell below the floor "
        f"{100 * FLOORS[policy]:.1f}%\n{t.table()}"
    )


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("policy", POLICIES)
def test_in_scope_agreement_floor(policy: str, plugins: NriPlugins, roots: HostRoots) -> None:
    """At least 99% of the CI profile's observations are identical or of a direct or
    carried class, counting every knock-on but a restart's as a divergence."""
    t = tally(policy, plugins, roots)
    rate = t.total(policy).in_scope
    assert rate >= IN_SCOPE_FLOOR, (
        f"{policy}: in-scope agreement {100 * rate:.1f}% fell below "
        f"{100 * IN_SCOPE_FLOOR:.1f}%\n{t.table()}"
    )


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("policy", POLICIES)
def test_strict_agreement_floor(policy: str, plugins: NriPlugins, roots: HostRoots) -> None:
    """The CI profile's strict agreement (a knock-on observation is a divergence) does not
    fall below the floor last measured: a documented difference must not start to
    explain more of its case than it did."""
    t = tally(policy, plugins, roots)
    rate = t.total(policy).strict
    assert rate >= STRICT_FLOORS[policy], (
        f"{policy}: strict agreement {100 * rate:.1f}% fell below the floor "
        f"{100 * STRICT_FLOORS[policy]:.1f}%\n{t.table()}"
    )


@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(
            p,
            marks=pytest.mark.xfail(
                strict=True,
                reason=f"issue 22: {p} agrees with nri-plugins on {MEASURED[p]} of the "
                "CI profile's containers x steps (target 99%)",
            ),
        )
        if p in MEASURED
        else p
        for p in POLICIES
    ],
)
def test_agreement_target(policy: str, plugins: NriPlugins, roots: HostRoots) -> None:
    """At least 99% of containers identical to nri-plugins after every step, outside the
    documented difference classes."""
    t = tally(policy, plugins, roots)
    rate = t.agreement(policy)
    assert rate >= TARGET, f"{policy}: agreement {100 * rate:.1f}%\n{t.table()}"
