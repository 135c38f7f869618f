"""Topology-aware's per-container interrupt wishes (``irq-affinity``): the annotation's
syntax and the rule that turns claims and masks into affinities, as nri-plugins v0.14.0's
``parseIrqAffinity`` and ``applyIrqAffinity`` do."""

from __future__ import annotations

import pytest

from nri_resmgr.model import ConfigError, ContainerID, QoSClass
from nri_resmgr.policy.irq_affinity import (
    IRQ_AFFINITY,
    Interrupt,
    IrqAffinity,
    IrqAffinityMode,
    IrqContainer,
    IrqUse,
    parse_irq_affinity,
    plan_affinities,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.state import supply_from_scratch
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small

TTY, RTC, ACPI = (
    Interrupt(4, "IO-APIC 4-edge ttyS0"),
    Interrupt(8, "IO-APIC 8-edge rtc0"),
    Interrupt(9, "IO-APIC 9-fasteoi acpi"),
)
IRQS = (TTY, RTC, ACPI)
ALL = IDSet.parse("0-15")
ORIGINALS = {4: ALL, 8: ALL, 9: IDSet.parse("0-3")}
C0, C1 = IDSet.parse("4-5"), IDSet.parse("6-7")


def plan(*containers: IrqContainer, controllable: tuple[str, ...] = ()) -> dict[int, str]:
    use = IrqUse(allowed=ALL, controllable=controllable, annotated=True, containers=containers)
    return {n: str(c) for n, c in plan_affinities(use, IRQS, ORIGINALS).items()}


def wish(
    cpus: IDSet, claims: tuple[str, ...] = (), masks: tuple[str, ...] = (), mode: str = "mask-first"
) -> IrqContainer:
    return IrqContainer("c", cpus, IrqAffinity(claims, masks, IrqAffinityMode(mode)))


def test_parse_defaults_to_mask_first() -> None:
    assert parse_irq_affinity('claim: [ "*ttyS0*" ]\n', subject="s") == IrqAffinity(
        ("*ttyS0*",), (), IrqAffinityMode.MASK_FIRST
    )
    assert parse_irq_affinity("mask: [9, '*rtc0*']\nmode: claim-first", subject="s") == (
        IrqAffinity((), ("9", "*rtc0*"), IrqAffinityMode.CLAIM_FIRST)
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "claim: xyzzy, foobar",
            r"^s: claim: expected a list of interrupt numbers or patterns; found 'xyzzy, foobar'$",
        ),
        (
            'claim: [ "*ttyS0*" ]\nmode: xyzzy',
            r"^s: mode: expected one of mask-first, claim-first; found 'xyzzy'$",
        ),
        ("claim: [ '[' ]", r"^s: claim: pattern '\[' has a malformed or unclosed '\[\.\.\.\]'$"),
        (
            "claim: [\n",
            r"^s: expected YAML \{claim: \[\.\.\.\], mask: \[\.\.\.\], mode: \.\.\.\}; "
            r"found 'claim: \[\\n', which does not parse",
        ),
        ("cliam: [x]", r"^s: expected a mapping of claim, mask and mode; found \['cliam'\]$"),
        ("x" * 5000, r"^s: expected at most 4096 characters; found 5000$"),
    ],
    ids=["not-a-list", "bad-mode", "bad-pattern", "bad-yaml", "unknown-key", "too-long"],
)
def test_parse_refuses_naming_subject_expected_found(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_irq_affinity(text, subject="s")


def test_claim_gets_the_claimers_cpus_others_keep_their_original() -> None:
    assert plan(wish(C0, claims=("*ttyS0*",)), wish(C1, claims=("*rtc0*",))) == {
        4: "4-5",
        8: "6-7",
        9: "0-3",  # named by no one: its original (theirs: every allowed CPU)
    }


def test_mask_takes_the_maskers_cpus_away() -> None:
    assert plan(wish(C0, masks=("*ttyS0*",)), wish(C1, masks=("*rtc0*",))) == {
        4: "0-3,6-15",
        8: "0-5,8-15",
        9: "0-3",
    }


def test_mask_first_claims_win_claim_first_masks_win() -> None:
    # their test25 pod2: c0 claims ttyS0 and masks everything, c1 masks rtc0
    got = plan(wish(C0, claims=("*ttyS0*",), masks=("*",)), wish(C1, masks=("*rtc0*",)))
    assert got == {4: "4-5", 8: "0-3,8-15", 9: "0-3,6-15"}
    # claim-first: c1's pre-mask of ttyS0 stays out even of c0's claim
    both = IDSet.parse("4-7")
    got = plan(wish(both, claims=("4",)), wish(C1, masks=("4",), mode="claim-first"))
    assert got[4] == "4-5"


def test_nothing_left_keeps_the_original() -> None:
    got = plan(wish(C0, claims=("4",)), wish(C0, masks=("4",), mode="claim-first"))
    assert got[4] == "0-15"  # the kernel refuses an empty affinity


def test_controllable_interrupts_limit_what_is_planned() -> None:
    assert plan(wish(C0, claims=("*",)), controllable=("*rtc0*",)) == {8: "4-5"}


def test_topology_aware_refuses_a_malformed_controllable_pattern() -> None:
    with pytest.raises(
        ConfigError,
        match=r"controllableInterrupts: pattern '\[' has a malformed or unclosed '\[\.\.\.\]'; "
        r"expected an interrupt number or a shell pattern",
    ):
        TopologyAwarePolicy(
            topology=small(),
            config={"reservedResources": {"cpu": "750m"}, "controllableInterrupts": ["["]},
        )


def _walked(state: TopologyAwareState) -> tuple[IrqContainer, ...]:
    """The wishes by a walk of every grant (what the index must give)."""
    return tuple(
        IrqContainer(str(cid), g.exclusive, g.request.irq_affinity)
        for cid, g in sorted(state.grants.items())
        if g.request.irq_affinity is not None and g.exclusive
    )


def test_topology_aware_irq_use_follows_the_annotated_grants_only() -> None:
    """`irq_use` reads the state's index of annotated grants (one commit costs
    O(annotated), not O(live)); it gives what a walk of every grant gives, through
    creations and releases, and `configured` only while an annotated grant lives."""
    p = TopologyAwarePolicy(topology=small(), config={"reservedResources": {"cpu": "750m"}})
    claim = {IRQ_AFFINITY: "claim: [ '*ttyS0*' ]"}
    made = [
        ctr("a", pod="a", milli=2000, ann=claim, cid="a"),
        ctr("b", pod="b", qos=QoSClass.BURSTABLE, milli=100, cid="b"),
        ctr("c", pod="c", milli=1000, ann={IRQ_AFFINITY: "mask: [ 8 ]"}, cid="c"),
        ctr("d", pod="d", milli=1000, cid="d"),
    ]
    s = p.initial_state()
    assert not p.irq_use(s).configured
    for c in made:
        s = p.allocate(s, c).state
        assert p.irq_use(s).containers == _walked(s)
    assert set(s.supply.irq) == {"a", "c"}
    assert [w.name for w in p.irq_use(s).containers] == ["a", "c"]
    assert p.irq_use(s).configured
    for cid in ("a", "b", "c"):
        s = p.release(s, ContainerID(cid)).state
        assert s.supply == supply_from_scratch(p.tree, s.grants.values())
        assert p.irq_use(s).containers == _walked(s)
    assert not p.irq_use(s).configured
