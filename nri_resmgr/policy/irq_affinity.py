"""Interrupt affinity from balloons and topology-aware: which CPUs each IRQ should run on.

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

Topology-aware steers interrupts per container instead (nri-plugins v0.14.0's
``irq-affinity.resource-policy.nri.io`` annotation, `parse_irq_affinity`: ``claim`` and
``mask`` pattern lists and ``mode`` ``mask-first``, the default, or ``claim-first``); its
`IrqUse` lists `IrqContainer` values, each container's exclusive CPUs with its wishes.  For an
interrupt some container claims or masks, as their ``applyIrqAffinity`` computes it:
*claim* is the union of the claimers' CPUs, *mask* the union of the mask-first maskers'
(less the claimed CPUs: a claim wins), *pre-mask* the union of the claim-first maskers';
the affinity is the allowed CPUs without the pre-mask, within the claim when there is
one, without the mask (when that leaves nothing, the original stays: the kernel refuses
an empty affinity).  An interrupt no container names keeps or gets back its original
affinity, as rule 5 above (theirs gets every allowed CPU; see docs/policies.md).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import yaml

from nri_resmgr.model import AnnotationError, ContainerInfo, QoSClass
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union

__all__ = [
    "IRQ_AFFINITY",
    "NO_IRQ_USE",
    "Interrupt",
    "IrqAffinity",
    "IrqAffinityMode",
    "IrqBalloon",
    "IrqContainer",
    "IrqMode",
    "IrqUse",
    "denied_claims",
    "irq_affinity_of",
    "irq_pattern_matches",
    "irq_pattern_problem",
    "parse_irq_affinity",
    "plan_affinities",
]

#: topology-aware's annotation (``KEY``, ``KEY/pod`` or ``KEY/container.NAME``)
IRQ_AFFINITY = "irq-affinity.resource-policy.nri.io"
#: the longest annotation value read
MAX_IRQ_AFFINITY_LENGTH = 4096


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


class IrqAffinityMode(enum.StrEnum):
    """An ``irq-affinity`` annotation's ``mode``: which of claim and mask wins."""

    #: masks apply after claims and never take a claimed CPU (their default)
    MASK_FIRST = "mask-first"
    #: masks apply first: a masked CPU is out even where it is claimed
    CLAIM_FIRST = "claim-first"


@dataclass(frozen=True, slots=True)
class IrqAffinity:
    """One container's ``irq-affinity`` annotation: interrupts its CPUs take (claims) and
    interrupts kept off them (masks), each a number or a pattern over the description."""

    claims: tuple[str, ...] = ()
    masks: tuple[str, ...] = ()
    mode: IrqAffinityMode = IrqAffinityMode.MASK_FIRST


def parse_irq_affinity(text: str, *, subject: str) -> IrqAffinity:
    """The annotation value `text` (YAML ``{claim: [...], mask: [...], mode: ...}``);
    ValueError naming `subject`, what was expected and what was found."""
    if len(text) > MAX_IRQ_AFFINITY_LENGTH:
        raise ValueError(
            f"{subject}: expected at most {MAX_IRQ_AFFINITY_LENGTH} characters; found {len(text)}"
        )
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(
            f"{subject}: expected YAML {{claim: [...], mask: [...], mode: ...}}; found "
            f"{text[:80]!r}, which does not parse ({str(exc).splitlines()[0]})"
        ) from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict) or not set(doc) <= {"claim", "mask", "mode"}:
        found = sorted(map(str, doc)) if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{subject}: expected a mapping of claim, mask and mode; found {found}")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("claim", "mask"):
        value = doc.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
            raise ValueError(
                f"{subject}: {key}: expected a list of interrupt numbers or patterns; "
                f"found {str(value)[:80]!r}"
            )
        for v in map(str, value):
            problem = irq_pattern_problem(v)
            if problem is not None:
                raise ValueError(f"{subject}: {key}: pattern {v!r} {problem}")
        lists[key] = tuple(map(str, value))
    mode = doc.get("mode") or IrqAffinityMode.MASK_FIRST.value
    try:
        parsed_mode = IrqAffinityMode(mode)
    except ValueError:
        raise ValueError(
            f"{subject}: mode: expected one of {', '.join(m.value for m in IrqAffinityMode)}; "
            f"found {str(mode)[:40]!r}"
        ) from None
    return IrqAffinity(claims=lists["claim"], masks=lists["mask"], mode=parsed_mode)


def irq_affinity_of(container: ContainerInfo) -> tuple[IrqAffinity | None, bool]:
    """The container's ``irq-affinity`` wish and whether it is container-scoped
    (``KEY/container.NAME``), by their ``irqAffinityPreference``: only a Guaranteed
    container's counts; a container-scoped one on another QoS class, or one that does not
    parse, is an `AnnotationError` naming the container."""
    text = container.annotation(IRQ_AFFINITY)
    if text is None:
        return None, False
    key = f"{IRQ_AFFINITY}/container.{container.name}"
    scoped = key in container.pod.annotations or key in container.annotations
    subject = f"{container.pretty}: annotation {IRQ_AFFINITY}"
    try:
        wish = parse_irq_affinity(text, subject=subject)
    except ValueError as exc:
        raise AnnotationError(str(exc)) from None
    if container.qos_class is QoSClass.GUARANTEED:
        return wish, scoped
    if scoped:
        raise AnnotationError(
            f"{subject}: invalid IRQ affinity, QoS class {container.qos_class} is not "
            "Guaranteed; expected a Guaranteed container"
        )
    return None, False  # a pod-wide wish leaves its other containers alone


@dataclass(frozen=True, slots=True)
class IrqContainer:
    """A container with exclusive CPUs and an ``irq-affinity`` wish (topology-aware)."""

    name: str
    cpus: CPUSet
    affinity: IrqAffinity


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
    #: topology-aware: containers' ``irq-affinity`` annotations are wishes, checked
    #: against ``controllableInterrupts`` at CreateContainer (`IrqControl`)
    annotated: bool = False
    containers: tuple[IrqContainer, ...] = ()

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
    wishes = [
        (c.cpus, _claim_test(c.affinity.claims), _claim_test(c.affinity.masks), c.affinity.mode)
        for c in use.containers
    ]
    out: dict[int, CPUSet] = {}
    for irq in use.controlled(irqs):
        original = originals.get(irq.number)
        if original is None:
            continue
        if wishes:
            out[irq.number] = _container_affinity(irq, use.allowed, original, wishes)
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


Wish = tuple[CPUSet, Callable[[Interrupt], bool], Callable[[Interrupt], bool], IrqAffinityMode]


def _container_affinity(
    irq: Interrupt, allowed: CPUSet, original: CPUSet, wishes: Iterable[Wish]
) -> CPUSet:
    """`irq`'s affinity under the containers' wishes (module docstring, their
    ``irqCpus`` and ``applyIrqAffinity``)."""
    claim, mask, pre_mask = IDSet(), IDSet(), IDSet()
    touched = False
    for cpus, claims, masks, mode in wishes:
        if claims(irq):
            claim, touched = claim | cpus, True
        if masks(irq):
            touched = True
            if mode is IrqAffinityMode.CLAIM_FIRST:
                pre_mask = pre_mask | cpus
            else:
                mask = mask | cpus
    if not touched:
        return original
    cpus = allowed - pre_mask
    if claim:
        cpus = cpus & claim
    cpus = cpus - (mask - claim)
    return cpus or original


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
