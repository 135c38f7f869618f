"""What the shell and the reports read of a balloons state.

Theory of operation: after each decision the shell asks the policy (`policy.Policy`
hooks) for the CPU classes to set, the interrupts to steer, and the balloons to report;
each is a pure function of the state here.  CPU classes (`cpu_class_use`): each
balloon's CPUs under its type's ``cpuClass`` (a composite's components carry theirs),
the available CPUs in no balloon under ``idleCPUClass``; an empty name is the class
``default`` when ``cpuClasses`` defines one (`class_name`); `nri_resmgr.control.cpuclass`
writes them.  Interrupts (`irq_use`, planned by `irq_affinity.plan_affinities`, written
by `nri_resmgr.control.irq`): a type's ``irqClaim`` sends the interrupts it names to
its balloons' CPUs, ``irqMode: sink`` balloons take every other interrupt, ``irqMode:
isolate`` balloons' CPUs are kept out of interrupts neither claimed nor sunk.  The
report (`balloons`): every balloon with its CPUs, shared idle CPUs, memory, containers,
a composite's component CPUs nested as nri-plugins shows them and its excess
millicores, for the simulator, the NodeResourceTopology report and the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_resmgr.policy.balloons.sizing import Sizing
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState
from nri_resmgr.policy.balloons.views import views
from nri_resmgr.policy.cpu_classes import CPUClassUse
from nri_resmgr.policy.irq_affinity import IrqBalloon, IrqMode, IrqUse
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet

__all__ = [
    "DEFAULT_CPU_CLASS",
    "BalloonReport",
    "balloons",
    "component_cpus",
    "cpu_class_use",
    "cpu_classes",
    "irq_use",
]

#: the class of CPUs whose balloon type (or idleCPUClass) names none, when cpuClasses has it
DEFAULT_CPU_CLASS = "default"


@dataclass(frozen=True, slots=True)
class BalloonReport:
    """One balloon, for the simulator, the NRT report and the metrics."""

    name: str
    type: str
    cpus: CPUSet
    shared_idle_cpus: CPUSet
    mems: NodeSet
    containers: tuple[str, ...]
    show_containers_in_nrt: bool
    #: a composite's CPUs per component, nested as nri-plugins' "component cpusets"
    #: zone attribute shows them (``{{0}, {4}}``); "" for a plain balloon
    component_cpus: str = ""
    #: nri-plugins' "excess cpus": the millicores of its CPUs its containers did not
    #: request (the largest request that fits without inflating it)
    excess_milli: int = 0


def component_cpus(b: Balloon) -> str:
    """nri-plugins' nesting of a composite balloon's component CPUs ("" when plain)."""
    if not b.components:
        return ""
    inner = (component_cpus(c) or f"{{{c.cpus}}}" for c in b.components)
    return "{" + ", ".join(inner) + "}"


def class_name(ctx: Sizing, name: str) -> str:
    """`name`, or for an empty one the class named ``default`` when cpuClasses has it."""
    if name or not any(c.name == DEFAULT_CPU_CLASS for c in ctx.config.options.cpu_classes):
        return name
    return DEFAULT_CPU_CLASS


def cpu_classes(ctx: Sizing, state: BalloonsState) -> dict[str, CPUSet]:
    """CPU class name -> the CPUs in it: balloons' ``cpuClass`` (a composite's
    components carry theirs), idle ``idleCPUClass``.

    An empty name is the class ``default`` when ``cpuClasses`` defines one.
    """
    out: dict[str, CPUSet] = {}
    for top in state.balloons.values():
        for b in top.walk():
            cls = class_name(ctx, ctx.types[b.type].cpu_class)
            if cls and b.cpus:
                out[cls] = out.get(cls, IDSet()) | b.cpus
    idle_class = class_name(ctx, ctx.config.options.idle_cpu_class)
    idle = ctx.config.available - state.used
    if idle_class and idle:
        out[idle_class] = out.get(idle_class, IDSet()) | idle
    return out


def irq_use(ctx: Sizing, state: BalloonsState) -> IrqUse:
    """The balloons' interrupt wishes (``irqClaim``, ``irqMode``) for an interrupt
    controller (`irq_affinity.plan_affinities`; `nri_resmgr.control.irq` writes them)."""
    wishing = {t.name for t in ctx.config.types if t.irq_claim or t.irq_mode}
    return IrqUse(
        allowed=ctx.config.available,
        controllable=ctx.config.options.controllable_interrupts,
        balloons=tuple(
            IrqBalloon(
                name=name,
                cpus=b.cpus,
                claims=ctx.types[b.type].irq_claim,
                mode=IrqMode(ctx.types[b.type].irq_mode),
            )
            for name, b in sorted(state.balloons.items())
            if b.type in wishing and b.cpus
        ),
        configured=bool(wishing),
        claims=tuple(
            (f"balloonTypes[{t.name}].irqClaim", t.irq_claim)
            for t in ctx.config.types
            if t.irq_claim
        ),
    )


def cpu_class_use(ctx: Sizing, state: BalloonsState) -> CPUClassUse:
    """What the CPU class control sets after a decision (`cpu_classes` of `state`,
    the definitions, the available CPUs as the ones it may touch)."""
    opts = ctx.config.options
    return CPUClassUse(
        cpus=cpu_classes(ctx, state),
        managed=ctx.config.available,
        classes=opts.cpu_classes,
        turbo_domain=opts.turbo_domain,
    )


def balloons(ctx: Sizing, state: BalloonsState) -> tuple[BalloonReport, ...]:
    """Every balloon with its CPUs, memory and containers: the report hook the
    simulator, the NodeResourceTopology report and the metrics read
    (`nri_resmgr.ops.metrics.balloon_snapshots`)."""
    shown = views(ctx, state)
    show_all = ctx.config.options.show_containers_in_nrt
    order = {t.name: i for i, t in enumerate(ctx.config.types)}
    out = []
    for name, b in sorted(
        state.balloons.items(), key=lambda nb: (order[nb[1].type], nb[1].instance)
    ):
        t = ctx.types[b.type]
        show = t.show_containers_in_nrt if t.show_containers_in_nrt is not None else show_all
        out.append(
            BalloonReport(
                name=name,
                type=b.type,
                cpus=b.cpus,
                shared_idle_cpus=b.shared,
                mems=shown[name].mems,
                containers=tuple(sorted(str(m.container_id) for m in state.members_of(name))),
                show_containers_in_nrt=show,
                component_cpus=component_cpus(b),
                excess_milli=1000 * len(b.cpus) - state.milli_of(name),
            )
        )
    return tuple(out)
