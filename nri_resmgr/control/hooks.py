"""What the pipeline asks of a controller, and of the class selection.

Theory of operation: the pipeline (`nri_resmgr.runtime.pipeline`) decides; a *controller* does the
out-of-band work an accepted decision needs (resctrl groups, block I/O files, see
`wiring`).  `Controller` declares every hook the pipeline calls, each with a default that
does nothing, so a controller inherits the class and overrides only the hooks it needs;
the pipeline calls every hook on every controller, with no lookup by name.

When the hooks run, per NRI event:

- RunPodSandbox: `pod_added`; RemovePodSandbox: `pod_removed` (best effort);
- CreateContainer: `container_assigned`, then `adjustment`, whose `ContainerAdjustment`
  (or None) is merged into the reply; a `ResmgrError` from either fails the event and
  nothing is committed;
- PostStartContainer: `container_started` (the container's cgroup exists now: runtimes
  create it with the task, at StartContainer), then `task_started` with the task's PID;
- StopContainer / RemoveContainer / RemovePodSandbox: `container_released` (best effort);
- Synchronize and live reconfiguration: `synchronized` with the live pods (restart
  cleanup; best effort);
- a /metrics scrape: `monitoring_samples` with the live (container id, RDT class) pairs;
- after every committed decision whose interrupt wishes changed (a policy with an
  ``irq_use(state)`` method, the balloons policy; others wish nothing):
  `irq_use_changed` with the policy's `IrqUse` (best effort: the decision stands);
- after every committed decision whose CPU classes changed: `cpu_classes_changed` with the
  policy's `CPUClassUse` (its ``cpu_class_use(state)``: balloons, topology-aware; an empty
  one for a policy without the method), best effort: the decision stands;
- the daemon stops: `stopped` (undo what must not outlive the daemon; best effort);
- at Configure and at every reconfiguration: `nri_requirements`, the adjustment fields
  the controller sends and the NRI release that brought each (`RuntimeField`): the daemon
  refuses a runtime whose release lacks one (it would drop the field silently).

A `ClassSelector` picks a container's RDT and block I/O classes (`ClassChoice`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from nri_resmgr.control.classes import ClassChoice
from nri_resmgr.model import ContainerInfo

if TYPE_CHECKING:
    from nri_api import api
    from nri_resmgr.control.resctrl.monitor import MonSample
    from nri_resmgr.model import Assignment, Pod
    from nri_resmgr.policy.cpu_classes import CPUClassUse
    from nri_resmgr.policy.irq_affinity import IrqUse

__all__ = ["ClassChoice", "ClassSelector", "Controller", "RuntimeField"]

#: picks the classes of a container (`classes.select_classes` with the configuration);
#: raises AnnotationError on a bad annotation
ClassSelector = Callable[[ContainerInfo], ClassChoice]


@dataclass(frozen=True, slots=True)
class RuntimeField:
    """An adjustment field a controller sends, and the NRI release that brought it."""

    field: str
    since: tuple[int, int, int]
    #: the configuration that makes the controller send it (``control.memoryPolicy``)
    wanted_by: str

    def describe(self) -> str:
        since = "v" + ".".join(str(p) for p in self.since)
        return f"{self.wanted_by} sets {self.field} (NRI {since}+)"


class Controller(Protocol):
    """Out-of-band work on accepted decisions; every hook defaults to doing nothing.

    Subclass it and override what the controller needs (module docstring: when each
    hook runs).  A hook may raise `ResmgrError`; see the module docstring for which
    events that fails and which hooks are best effort.
    """

    #: names the controller in logs ("rdt", "blockio")
    name: str

    def pod_added(self, pod: Pod) -> None:
        """RunPodSandbox: set up pod-level state (a pod's resctrl group)."""
        return None

    def pod_removed(self, pod: Pod) -> None:
        """RemovePodSandbox: tear down pod-level state."""
        return None

    def container_assigned(self, container: ContainerInfo, assignment: Assignment) -> None:
        """CreateContainer (and UpdateContainer's new assignment): before the commit."""
        return None

    def adjustment(
        self, container: ContainerInfo, assignment: Assignment
    ) -> api.ContainerAdjustment | None:
        """CreateContainer, after `container_assigned`: more for the reply, or None."""
        return None

    def container_started(self, container: ContainerInfo, assignment: Assignment) -> None:
        """PostStartContainer: the container's cgroup exists now."""
        return None

    def task_started(self, container: ContainerInfo, assignment: Assignment, pid: int) -> None:
        """PostStartContainer, after `container_started`: the task runs with `pid`."""
        return None

    def container_released(self, container: ContainerInfo) -> None:
        """The container's resources were released (stop, remove, or with its pod)."""
        return None

    def synchronized(self, pods: Sequence[Pod]) -> None:
        """After Synchronize or a reconfiguration: the pods that live now."""
        return None

    def monitoring_samples(
        self, containers: Iterable[tuple[str, str | None]]
    ) -> Sequence[MonSample]:
        """Counters read now, for /metrics; `containers` are (id, RDT class) pairs."""
        return ()

    def irq_use_changed(self, use: IrqUse) -> None:
        """After a commit: the policy's interrupt wishes changed to `use`."""
        return None

    def cpu_classes_changed(self, use: CPUClassUse) -> None:
        """After a commit: the policy's CPU classes and their CPUs changed to `use`."""
        return None

    def stopped(self) -> None:
        """The daemon stops: put back what must not outlive it."""
        return None

    def nri_requirements(self) -> Sequence[RuntimeField]:
        """The adjustment fields this controller sends that not every NRI release has."""
        return ()
