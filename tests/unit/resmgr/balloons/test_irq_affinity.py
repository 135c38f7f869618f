"""Interrupt affinity planning: patterns, claims, sink, isolate, denied interrupts, and the
balloons policy's interrupt wishes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_resmgr.policy.irq_affinity import (
    Interrupt,
    IrqBalloon,
    IrqMode,
    IrqUse,
    denied_claims,
    irq_pattern_matches,
    irq_pattern_problem,
    plan_affinities,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from tests.support.balloons import bctr, policy, run

TTY = Interrupt(4, "IO-APIC 4-edge ttyS0")
RTC = Interrupt(8, "IO-APIC 8-edge rtc0")
ACPI = Interrupt(9, "IO-APIC 9-fasteoi acpi")
IRQS = (TTY, RTC, ACPI)
ALL = IDSet.parse("0-15")
ORIGINALS = {i.number: ALL for i in IRQS}


def cpus(text: str) -> CPUSet:
    return IDSet.parse(text)


@pytest.mark.parametrize(
    ("pattern", "description", "matches"),
    [
        ("*ttyS0*", "IO-APIC 4-edge ttyS0", True),
        ("ttyS", "IO-APIC 4-edge ttyS0", False),  # the whole description must match
        ("*rtc?", "IO-APIC 8-edge rtc0", True),
        ("*[0-3]-edge*", "IO-APIC 4-edge ttyS0", False),
        ("*[^0-3]-edge*", "IO-APIC 4-edge ttyS0", True),
        ("*\\*", "a*", True),
        ("*", "PCI-MSI 1/2", False),  # as Go's path.Match: * stops at /
    ],
)
def test_patterns_match_as_go_path_match(pattern: str, description: str, matches: bool) -> None:
    assert irq_pattern_problem(pattern) is None
    assert irq_pattern_matches(pattern, description) is matches


@pytest.mark.parametrize("pattern", ["[", "[]", "[a-]", "x\\", "[b-a]"])
def test_malformed_patterns_have_a_problem_and_match_nothing(pattern: str) -> None:
    assert irq_pattern_problem(pattern) is not None
    assert not irq_pattern_matches(pattern, pattern)


def test_a_claim_names_an_interrupt_by_number_or_pattern() -> None:
    assert TTY.claimed_by("4") and TTY.claimed_by("*ttyS0")
    assert not TTY.claimed_by("40") and not TTY.claimed_by("") and not RTC.claimed_by("4")


def use(*balloons: IrqBalloon, controllable: tuple[str, ...] = ()) -> IrqUse:
    return IrqUse(allowed=ALL, controllable=controllable, balloons=balloons, configured=True)


def test_claimed_interrupts_go_to_the_claimers_others_keep_their_originals() -> None:
    claimer = IrqBalloon("claimer[0]", cpus("2-3"), claims=("*ttyS0*", "*rtc0*"))
    other = IrqBalloon("claimer[1]", cpus("6"), claims=("8",))
    plan = plan_affinities(use(claimer, other), IRQS, ORIGINALS)
    assert plan == {4: cpus("2-3"), 8: cpus("2-3,6"), 9: ALL}


def test_sink_takes_the_unclaimed_interrupts() -> None:
    claimer = IrqBalloon("claimer[0]", cpus("2-3"), claims=("*ttyS0*", "*rtc0*"))
    sink = IrqBalloon("sink[0]", cpus("4-5"), mode=IrqMode.SINK)
    assert plan_affinities(use(sink), IRQS, ORIGINALS) == dict.fromkeys((4, 8, 9), cpus("4-5"))
    plan = plan_affinities(use(claimer, sink), IRQS, ORIGINALS)
    assert plan == {4: cpus("2-3"), 8: cpus("2-3"), 9: cpus("4-5")}


def test_isolate_removes_its_cpus_from_unclaimed_interrupts() -> None:
    iso = IrqBalloon("iso[0]", cpus("4-5"), claims=("*rtc0*",), mode=IrqMode.ISOLATE)
    plan = plan_affinities(use(iso), IRQS, {**ORIGINALS, 9: cpus("4")})
    # rtc0 is claimed by the isolating balloon; acpi only had isolated CPUs: the rest
    assert plan == {4: cpus("0-3,6-15"), 8: cpus("4-5"), 9: cpus("0-3,6-15")}


def test_out_of_scope_interrupts_are_left_alone_by_isolate() -> None:
    iso = IrqBalloon("iso[0]", cpus("4-5"), mode=IrqMode.ISOLATE)
    scoped = IrqUse(allowed=cpus("2-7"), balloons=(iso,), configured=True)
    plan = plan_affinities(scoped, IRQS, {4: cpus("0-1"), 8: cpus("0-5"), 9: ALL})
    assert plan == {4: cpus("0-1"), 8: cpus("0-3"), 9: cpus("0-3,6-15")}


def test_denied_interrupts_are_never_planned_and_a_claim_on_one_is_reported() -> None:
    claimer = IrqBalloon("claimer[0]", cpus("2-3"), claims=("*ttyS0*", "*rtc0*"))
    plan = plan_affinities(use(claimer, controllable=("*rtc0*",)), IRQS, ORIGINALS)
    assert plan == {8: cpus("2-3")}
    claims = (("balloonTypes[claimer].irqClaim", ("*ttyS0*", "*rtc0*")),)
    problems = denied_claims(IrqUse(allowed=ALL, controllable=("*rtc0*",), claims=claims), IRQS)
    assert problems == [
        "balloonTypes[claimer].irqClaim: claim '*ttyS0*' matches irq 4 (IO-APIC 4-edge "
        "ttyS0), which controllableInterrupts ['*rtc0*'] denies (denied interrupt)"
    ]
    assert denied_claims(IrqUse(allowed=ALL, claims=(("x", ("*",)),)), IRQS) == []


def test_interrupts_without_a_known_original_are_not_planned() -> None:
    sink = IrqBalloon("sink[0]", cpus("4-5"), mode=IrqMode.SINK)
    assert plan_affinities(use(sink), IRQS, {8: ALL}) == {8: cpus("4-5")}


_CPU_SETS = st.frozensets(st.integers(0, 15), min_size=1).map(IDSet)


@st.composite
def _balloons(draw: st.DrawFn) -> tuple[IrqBalloon, ...]:
    n = draw(st.integers(0, 4))
    free = set(range(16))
    out = []
    for i in range(n):
        mine = draw(st.frozensets(st.sampled_from(sorted(free)), min_size=1)) if free else None
        if mine is None:
            break
        free -= mine
        claims = draw(st.lists(st.sampled_from(["4", "*ttyS0*", "*rtc*", "*", "x"]), max_size=2))
        mode = draw(st.sampled_from(list(IrqMode)))
        out.append(IrqBalloon(f"b[{i}]", IDSet(mine), claims=tuple(claims), mode=mode))
    return tuple(out)


@settings(max_examples=200, deadline=None)
@given(
    balloons=_balloons(),
    originals=st.fixed_dictionaries({i.number: _CPU_SETS for i in IRQS}),
    controllable=st.sampled_from([(), ("*",), ("*rtc0*",), ("*tty*", "*acpi*")]),
)
def test_plan_properties(
    balloons: tuple[IrqBalloon, ...],
    originals: dict[int, CPUSet],
    controllable: tuple[str, ...],
) -> None:
    u = use(*balloons, controllable=controllable)
    plan = plan_affinities(u, IRQS, originals)
    sinks = [b for b in balloons if b.mode is IrqMode.SINK]
    isolated = IDSet(c for b in balloons if b.mode is IrqMode.ISOLATE for c in b.cpus)
    controlled = u.controlled(IRQS)
    for irq in IRQS:
        if irq not in controlled:
            assert irq.number not in plan  # denied: never touched
            continue
        got = plan[irq.number]
        assert got  # never an empty affinity
        claimers = [b for b in balloons if any(map(irq.claimed_by, b.claims))]
        if claimers:
            assert got == IDSet(c for b in claimers for c in b.cpus)
        elif sinks:
            assert got == IDSet(c for b in sinks for c in b.cpus)
        elif isolated:
            original = originals[irq.number]
            if isolated >= ALL:  # nowhere else to go: left as it was
                assert got == original
            else:  # off the isolated CPUs, within the original ones where it can
                assert got.isdisjoint(isolated)
                assert got <= original or original <= isolated
        else:
            assert got == originals[irq.number]
    # nothing wished: every controllable interrupt gets its original back
    idle = plan_affinities(IrqUse(allowed=ALL, controllable=controllable), IRQS, originals)
    assert idle == {n: cpus_ for n, cpus_ in originals.items() if n in plan}


def test_balloons_policy_hands_out_the_wishes_of_balloons_with_cpus() -> None:
    p = policy(
        {
            "reservedResources": {"cpu": "1"},
            "controllableInterrupts": ["*rtc0*", "*ttyS0*"],
            "balloonTypes": [
                {"name": "claimer", "minCPUs": 2, "maxCPUs": 2, "irqClaim": ["*rtc0*"]},
                {"name": "sink", "irqMode": "sink"},
                {"name": "plain", "minCPUs": 1, "minBalloons": 1},
            ],
        }
    )
    st0 = p.initial_state()
    assert p.irq_use(st0) == IrqUse(
        allowed=p.config.available,
        controllable=("*rtc0*", "*ttyS0*"),
        balloons=(),
        configured=True,
        claims=(("balloonTypes[claimer].irqClaim", ("*rtc0*",)),),
    )
    ann = {"balloon.balloons.resource-policy.nri.io": "claimer"}
    st1 = run(p, bctr("c0", ann=ann))
    (claimer,) = p.irq_use(st1).balloons
    assert claimer.name == "claimer[0]" and claimer.claims == ("*rtc0*",)
    assert claimer.mode is IrqMode.NONE and len(claimer.cpus) == 2
    assert claimer.cpus == st1.balloons["claimer[0]"].cpus
    plain = policy({"balloonTypes": [{"name": "plain", "minBalloons": 1, "minCPUs": 1}]})
    assert not plain.irq_use(plain.initial_state()).configured
