"""Interrupt affinity from balloons: which CPUs each controllable IRQ should run on.

Theory of operation: a policy that steers interrupts (the balloons policy's ``irqClaim``,
``irqMode`` and ``controllableInterrupts``, as nri-plugins spells them) hands out an
`IrqUse`: the allowed CPUs, the controllable patterns and every balloon that has CPUs and
an interrupt wish.  `plan_affinities` turns it, with the machine's interrupts
(`Interrupt`: number and the chip/device description ``/proc/interrupts`` shows) and
their *original* affinities (as found before anything was written), into the wanted
affinity of every controllable interrupt, first rule that applies:

1. *claimed*: the union of the CPUs of the balloons whose type claims it (a claim is
   the interrupt's number, or a shell pattern over its description, `irq_pattern_matches`);
2. *sink*: the union of the CPUs of ``irqMode: sink`` balloons, when there are any;
3. *out of scope*: an original affinity with no allowed CPU stays as it is;
4. *isolate*: the original affinity without the CPUs of ``irqMode: isolate`` balloons
   (when that leaves nothing, the allowed CPUs without them);
5. otherwise the original affinity: a balloon that goes gives its interrupts back.

Interrupts whose description matches no ``controllableInterrupts`` pattern (when there
are any) are *denied*: never planned, and a claim that matches one is a configuration
error (`denied_claims`).  This module is pure: reading and writing ``/proc`` is
`nri_resmgr.control.irq`'s.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from nri_resmgr.topology.cpuset import CPUSet, IDSet, union

__all__ = [
    "NO_IRQ_USE",
    "Interrupt",
    "IrqBalloon",
    "IrqMode",
    "IrqUse",
    "denied_claims",
    "irq_pattern_matches",
    "irq_pattern_problem",
    "plan_affinities",
]


class IrqMode(enum.StrEnum):
    """A balloon type's ``irqMode``."""

    NONE = ""
    #: the type's CPUs take every interrupt no balloon claims
    SINK = "sink"
    #: the type's CPUs are removed from interrupts neither claimed nor sunk
    ISOLATE = "isolate"


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """`pattern` (Go's ``path.Match`` syntax: ``*``, ``?``, ``[...]``, ``[^...]``, ``\\``
    escapes; wildcards do not cross ``/``) as a regular expression; ValueError if malformed."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 >= n:
                raise ValueError("ends with an escaping backslash")
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] == "^"
            if negate:
                j += 1
            items: list[str] = []
            while not (j < n and pattern[j] == "]" and items):
                lo, j = _class_char(pattern, j)
                if j < n and pattern[j] == "-":
                    hi, j = _class_char(pattern, j + 1)
                    if hi < lo:
                        raise ValueError(f"has an empty range {lo}-{hi}")
                    items.append(f"{re.escape(lo)}-{re.escape(hi)}")
                else:
                    items.append(re.escape(lo))
            out.append(("[^" if negate else "[") + "".join(items) + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _class_char(pattern: str, j: int) -> tuple[str, int]:
    """The character at `j` in a ``[...]`` class and the index after it (``\\``
    escapes; an unescaped ``-`` or ``]`` there is malformed, as in Go)."""
    if j >= len(pattern) or pattern[j] in "-]":
        raise ValueError("has a malformed or unclosed '[...]'")
    if pattern[j] == "\\":
        if j + 1 >= len(pattern):
            raise ValueError("has a malformed or unclosed '[...]'")
        return pattern[j + 1], j + 2
    return pattern[j], j + 1


def irq_pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not a valid interrupt pattern, or None when it is."""
    try:
        _glob_regex(pattern)
    except ValueError as exc:
        return str(exc)
    return None


def _compiled(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    """The valid ones of `patterns`, compiled (a malformed pattern matches nothing)."""
    out = []
    for p in patterns:
        try:
            out.append(_glob_regex(p))
        except ValueError:
            continue
    return out


def irq_pattern_matches(pattern: str, description: str) -> bool:
    """Whether shell pattern `pattern` matches all of `description` (invalid: never)."""
    return any(r.fullmatch(description) for r in _compiled([pattern]))


def _claim_test(claims: Iterable[str]) -> Callable[[Interrupt], bool]:
    """Whether an interrupt is named by any of `claims` (a number or a pattern over its
    description), with the patterns compiled once."""
    claims = tuple(claims)
    regexes = _compiled(claims)
    return lambda irq: (
        str(irq.number) in claims or any(r.fullmatch(irq.description) for r in regexes)
    )


@dataclass(frozen=True, slots=True)
class Interrupt:
    """One numbered interrupt of ``/proc/interrupts``: its number and description (the
    chip, hardware IRQ and device names after the per-CPU counters, space-joined)."""

    number: int
    description: str

    def claimed_by(self, claim: str) -> bool:
        """A claim names the interrupt by number or by a pattern over its description."""
        return _claim_test([claim])(self)

    def __str__(self) -> str:
        return f"irq {self.number} ({self.description})"


@dataclass(frozen=True, slots=True)
class IrqBalloon:
    """A balloon with CPUs whose type has ``irqClaim`` or ``irqMode``."""

    name: str
    cpus: CPUSet
    claims: tuple[str, ...] = ()
    mode: IrqMode = IrqMode.NONE


@dataclass(frozen=True, slots=True)
class IrqUse:
    """What a policy wants of interrupts now (`plan_affinities`)."""

    #: the CPUs the policy may use (``availableResources``)
    allowed: CPUSet
    #: ``controllableInterrupts``: () lets every interrupt be controlled
    controllable: tuple[str, ...] = ()
    balloons: tuple[IrqBalloon, ...] = ()
    #: whether the configuration steers interrupts at all (some type has ``irqClaim`` or
    #: ``irqMode``); without it nothing needs reading until something was written
    configured: bool = False
    #: every claim of the configuration, with where it is written (`denied_claims`)
    claims: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def controlled(self, irqs: Iterable[Interrupt]) -> list[Interrupt]:
        """Those of `irqs` matching ``controllableInterrupts`` (all when there are none)."""
        if not self.controllable:
            return list(irqs)
        allowed = _compiled(self.controllable)
        return [i for i in irqs if any(r.fullmatch(i.description) for r in allowed)]

    def cpus_of(self, mode: IrqMode) -> CPUSet:
        """The CPUs of the balloons in ``irqMode`` `mode`."""
        return union(b.cpus for b in self.balloons if b.mode is mode)


#: what a policy that steers no interrupt wants: nothing (earlier writes go back)
NO_IRQ_USE = IrqUse(allowed=IDSet())


def plan_affinities(
    use: IrqUse, irqs: Iterable[Interrupt], originals: Mapping[int, CPUSet]
) -> dict[int, CPUSet]:
    """The wanted affinity of every controllable interrupt in `irqs` with an original
    affinity in `originals` (the module docstring's rules, in order)."""
    sink = use.cpus_of(IrqMode.SINK)
    isolate = use.cpus_of(IrqMode.ISOLATE)
    claimers = [(b.cpus, _claim_test(b.claims)) for b in use.balloons if b.claims]
    out: dict[int, CPUSet] = {}
    for irq in use.controlled(irqs):
        original = originals.get(irq.number)
        if original is None:
            continue
        claimed = union(cpus for cpus, names in claimers if names(irq))
        if claimed:
            out[irq.number] = claimed
        elif sink:
            out[irq.number] = sink
        elif not original & use.allowed or not isolate:
            out[irq.number] = original
        else:
            out[irq.number] = (original - isolate) or (use.allowed - isolate) or original
    return out


def denied_claims(use: IrqUse, irqs: Iterable[Interrupt]) -> list[str]:
    """Every claim of `use` (``IrqUse.claims``) that names an interrupt
    ``controllableInterrupts`` denies, one message each: empty when there is none."""
    irqs = list(irqs)
    allowed = {i.number for i in use.controlled(irqs)}
    denied = [irq for irq in irqs if irq.number not in allowed]
    return [
        f"{where}: claim {claim!r} matches {irq}, which controllableInterrupts "
        f"{list(use.controllable)} denies (denied interrupt)"
        for where, patterns in use.claims
        for claim in patterns
        for irq in denied
        if irq.claimed_by(claim)
    ]
