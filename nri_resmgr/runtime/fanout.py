"""Calling every controller's hook: the one rule for a controller that fails.

Theory of operation
-------------------
The pipeline hands each accepted decision to its controllers
(`nri_resmgr.control.hooks.Controller`) in order.  A hook is one of two kinds, by what
depends on it:

* **the event's own work** (`pod_added`, `container_assigned`, `adjustment`,
  `container_started`, `task_started`): the pipeline calls these in a plain loop and an
  error goes up, failing the event; nothing is committed after a failed hook, so the
  pipeline's state stays what it was and the runtime is told why;
* **best effort** (`pod_removed`, `container_released`, `synchronized`,
  `cpu_classes_changed`, `irq_use_changed`, `stopped`, `monitoring_samples`): the hook
  follows a decision that is taken whatever the controller does (a container is gone, a
  pod is gone, the runtime's view is what it is, the daemon stops).  These go through
  `best_effort`, the one place their failures are handled.

The rule of `best_effort`: a `ResmgrError` (the controller refused) or an `OSError` (the
kernel refused, or a file vanished: controllers write resctrl groups, cgroup files,
``/proc/irq`` and cpufreq files, and a pod's cgroup can go away under us) is logged
with the controller's name, and the next controller is still called.  Both kinds are
expected of out-of-band work on a live machine; letting either through halfway would
skip the remaining controllers and leave the pipeline's event half done (a pod removed
with some of its containers released and the rest not).  Any other exception is a bug
in the controller: it goes up, and the daemon reports it as an internal error.

`MachineUse` is the best-effort hand-over of what a committed state wants of the machine
besides the containers' adjustments (CPU classes, interrupt affinities), each part only
when it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from nri_resmgr.control.hooks import Controller
from nri_resmgr.model import PolicyState, ResmgrError
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.cpu_classes import CPUClassUse
from nri_resmgr.policy.irq_affinity import IrqUse

if TYPE_CHECKING:
    from nri_resmgr.ops.logs import EventLog

__all__ = ["BEST_EFFORT_ERRORS", "MachineUse", "best_effort"]

#: what a best-effort hook may raise and have logged (module docstring: why these two)
BEST_EFFORT_ERRORS: tuple[type[Exception], ...] = (ResmgrError, OSError)

_T = TypeVar("_T")


def best_effort(
    controllers: Iterable[Controller],
    hook: Callable[[Controller], _T],
    *,
    log: EventLog,
    failed: str = "controller failed",
) -> list[_T]:
    """`hook(controller)` for each controller, in order; what each returned.

    A controller that raises one of `BEST_EFFORT_ERRORS` is logged as `failed` with its
    name and the error, and left out of the result; the others are still called.
    """
    out: list[_T] = []
    for ctl in controllers:
        try:
            out.append(hook(ctl))
        except BEST_EFFORT_ERRORS as exc:
            log.warning(failed, controller=ctl.name, error=str(exc))
    return out


class MachineUse:
    """What the committed policy state wants of the machine, handed to the controllers.

    At each commit `apply` asks the policy for its CPU class use (``cpu_class_use``) and
    its interrupt wishes (``irq_use``) and hands each, when it changed since the last
    commit, to every controller (`cpu_classes_changed`, `irq_use_changed`) by the
    best-effort rule: the decision is taken, a controller's failure is logged.  A policy
    without CPU classes or interrupt wishes wants none (the contract's defaults): after a
    reconfiguration from one that had, the files get their originals back.
    """

    def __init__(self, controllers: Sequence[Controller], log: EventLog) -> None:
        self.controllers = tuple(controllers)
        self.log = log
        #: the CPU class use last handed over (None: not yet)
        self.cpu_classes: CPUClassUse | None = None
        #: the interrupt wishes last handed over (None: not yet)
        self.irqs: IrqUse | None = None

    def apply(self, policy: Policy[Any], state: PolicyState) -> None:
        """Hand over the parts of `state`'s machine use that changed (module docstring)."""
        if not self.controllers:
            return
        cpu = policy.cpu_class_use(state)
        if cpu != self.cpu_classes:
            self.cpu_classes = cpu
            best_effort(self.controllers, lambda ctl: ctl.cpu_classes_changed(cpu), log=self.log)
        irq = policy.irq_use(state)
        if irq != self.irqs:
            self.irqs = irq
            best_effort(self.controllers, lambda ctl: ctl.irq_use_changed(irq), log=self.log)
