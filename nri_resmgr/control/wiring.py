"""The class controllers the pipeline drives, built from the daemon's ``control`` section.

Theory of operation: `class_control_from_config` turns `ControlConfig` into the
`Controller`s (`hooks`) and the `ClassSelector` a `Pipeline` takes.  `RdtGroups` adapts
`resctrl.RdtController` (class groups, pod groups, monitoring) and `BlockIOFiles` adapts
`blockio.BlockIOController` (a class's files in a container's cgroup) to the hooks.
Without a resctrl root or a cgroup root the class *names* still go to the runtime, and
nothing here writes; with them, the controllers write when their hooks run.
`IrqControl` adapts `irq.IrqFiles` (interrupt affinities under the procfs mount point;
one instance for the daemon's life, so its originals survive a reconfiguration) to the
hooks; `irq_control` makes it for a policy, refusing claims on denied interrupts.
`CPUClassControl` adapts `cpuclass.files.CPUClassFiles` (cpufreq, cpuidle and uncore files
under the sysfs root; one instance for the daemon's life, so its originals survive a
reconfiguration) to the hooks, with ``control.cpu.classes`` under the policy's classes.
`memory_control` builds the memory policy and memory QoS controllers (`control.memory`)
from ``control.memoryPolicy``, ``control.memoryQos`` and ``control.sgxEpc``.

A controller's module, and what it imports past its configuration model, is imported
where its section switches it on (RDT, block I/O files, the memory components): a daemon
with them off never loads them, before registration or after
(`tests/unit/resmgr/test_startup_imports.py`).  Nothing imported here imports this
module, so none of these imports hides a cycle (`tests/unit/test_import_cycles.py`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nri_api import api
from nri_resmgr.control.hooks import ClassSelector, Controller
from nri_resmgr.model import AnnotationError, Assignment, ContainerInfo, Pod, ResmgrError
from nri_resmgr.ops.logs import get_logger
from nri_resmgr.policy.irq_affinity import IRQ_AFFINITY, irq_affinity_of

if TYPE_CHECKING:
    from nri_resmgr.control.blockio import BlockIOController
    from nri_resmgr.control.config import ControlConfig
    from nri_resmgr.control.cpuclass.files import CPUClassFiles
    from nri_resmgr.control.irq import IrqFiles
    from nri_resmgr.control.resctrl import MonSample, RdtController
    from nri_resmgr.policy.base import Policy
    from nri_resmgr.policy.cpu_classes import CPUClassSettings, CPUClassUse
    from nri_resmgr.policy.irq_affinity import IrqUse
    from nri_resmgr.topology.model import Topology

__all__ = [
    "BlockIOFiles",
    "CPUClassControl",
    "IrqControl",
    "RdtGroups",
    "class_control_from_config",
    "irq_control",
    "memory_control",
]


class RdtGroups(Controller):
    """`Controller` over `RdtController`: class groups, pod groups, monitoring.

    `runtime_rdt` says whether the connected runtime takes NRI's `LinuxRdt` adjustment
    (v0.11+): then a monitored container with an RDT class gets ``closID`` and
    ``enableMonitoring`` and its runtime starts the task in a monitoring group; otherwise
    (and where the runtime did not) its PID goes into the pod's monitoring group at
    PostStartContainer.  Monitoring failures there are logged, not raised: the event's
    other work (reasserting updates) must go on.
    """

    name = "rdt"

    def __init__(
        self, controller: RdtController, *, runtime_rdt: Callable[[], bool] | None = None
    ) -> None:
        self.controller: RdtController = controller
        self.runtime_rdt: Callable[[], bool] = runtime_rdt or (lambda: False)
        controller.apply_classes()

    def pod_added(self, pod: Pod) -> None:
        self.controller.ensure_pod_group(pod)

    def pod_removed(self, pod: Pod) -> None:
        self.controller.remove_pod_group(pod)

    def adjustment(
        self, container: ContainerInfo, assignment: Assignment
    ) -> api.ContainerAdjustment | None:
        plan = self.controller.monitor_container(
            container.pod, container.id, assignment.rdt_class, runtime_rdt=self.runtime_rdt()
        )
        if plan is None or plan.clos_id is None:
            return None
        adjust = api.ContainerAdjustment()
        rdt = adjust.linux.rdt
        rdt.clos_id.value = plan.clos_id
        rdt.clos_id.SetInParent()
        rdt.enable_monitoring.value = True
        rdt.enable_monitoring.SetInParent()
        return adjust

    def task_started(self, container: ContainerInfo, assignment: Assignment, pid: int) -> None:
        try:
            self.controller.task_started(container.pod, container.id, assignment.rdt_class, pid)
        except ResmgrError as exc:
            self.controller.log.warning(
                "container not monitored", container=container.pretty, error=str(exc)
            )

    def monitoring_samples(
        self, containers: Iterable[tuple[str, str | None]]
    ) -> Sequence[MonSample]:
        return self.controller.monitoring_samples(containers)

    def synchronized(self, pods: Sequence[Pod]) -> None:
        """After a restart: drop owned groups of pods that are gone, make the others."""
        self.controller.reconcile([p.uid for p in pods])
        failed: list[str] = []
        for pod in pods:
            try:
                self.controller.ensure_pod_group(pod)
            except ResmgrError as exc:  # one pod's bad annotation must not stop the rest
                failed.append(str(exc))
        if failed:
            raise ResmgrError("; ".join(failed))


class BlockIOFiles(Controller):
    """`Controller` over `BlockIOController`: writes a class into a container cgroup.

    Block I/O settings go into the container's own cgroup, which the runtime creates with
    the task (at StartContainer, after CreateContainer); so they are applied once the
    container has started (PostStartContainer), in `container_started`.
    """

    name = "blockio"

    def __init__(self, controller: BlockIOController) -> None:
        self.controller: BlockIOController = controller

    def container_started(self, container: ContainerInfo, assignment: Assignment) -> None:
        if assignment.blockio_class is not None:
            self.controller.apply(container.cgroups_path, assignment.blockio_class)


class IrqControl(Controller):
    """`Controller` over `IrqFiles`: a policy's interrupt wishes into smp_affinity_list
    files; at shutdown every interrupt written to gets its original affinity back."""

    name = "irq"

    def __init__(self, files: IrqFiles, initial: IrqUse | None = None) -> None:
        self.files = files
        #: the policy's wishes at the start: whether containers' annotations are wishes,
        #: and ``controllableInterrupts``
        self.initial = initial

    def container_assigned(self, container: ContainerInfo, assignment: Assignment) -> None:
        """Refuse a container whose ``irq-affinity`` names an interrupt that
        ``controllableInterrupts`` denies (topology-aware; their ``parseIrqAffinity``)."""
        use = self.initial
        if use is None or not use.annotated or not use.controllable:
            return
        wish, _ = irq_affinity_of(container)
        if wish is None:
            return
        where = f"annotation {IRQ_AFFINITY}"
        self.files.check_claims(
            dataclasses.replace(use, claims=((where, wish.claims + wish.masks),)),
            subject=container.pretty,
            error=AnnotationError,
        )

    def irq_use_changed(self, use: IrqUse) -> None:
        self.files.apply(use)

    def stopped(self) -> None:
        self.files.restore()


class CPUClassControl(Controller):
    """`Controller` over `CPUClassFiles`: a policy's CPU classes into sysfs files.

    `base` is ``control.cpu.classes``; the policy's own ``cpuClasses`` replace classes of
    the same name (`merged_classes`).  At shutdown every file gets its original back.
    """

    name = "cpuclass"

    def __init__(self, files: CPUClassFiles, base: Mapping[str, CPUClassSettings]) -> None:
        self.files = files
        self.base = base

    def cpu_classes_changed(self, use: CPUClassUse) -> None:
        from nri_resmgr.policy.cpu_classes import merged_classes

        self.files.apply(use, merged_classes(self.base, use.classes))

    def stopped(self) -> None:
        self.files.restore()


def irq_control(policy: Policy, files: IrqFiles | None) -> list[Controller]:
    """The interrupt controller for `policy` over `files` (none without files).

    The policy's claims (``irq_use`` of its initial state) are checked against the
    machine's interrupts first: `ConfigError` when one names an interrupt its
    ``controllableInterrupts`` denies.  A policy without interrupt wishes claims nothing
    and gets the controller too, so that what an earlier configuration wrote goes back to
    its original.
    """
    if files is None:
        return []
    initial = policy.irq_use(policy.initial_state())
    files.check_claims(initial)
    return [IrqControl(files, initial)]


def class_control_from_config(
    control: ControlConfig,
    *,
    resctrl_root: str | None = None,
    cgroup_root: str | None = None,
    state_dir: str | None = None,
    runtime_rdt: Callable[[], bool] | None = None,
    cpu_class_files: CPUClassFiles | None = None,
) -> tuple[list[Controller], ClassSelector | None]:
    """Controllers and a class selector for the daemon config's ``control`` section.

    ``control.rdt`` and ``control.blockio`` each carry the class selection (``enable``,
    ...) and the class definitions.  Resctrl groups are made under `resctrl_root` (the
    ownership record in `state_dir`, else in a new temporary directory) and block I/O
    files written under `cgroup_root` only when those are given; without them the class
    names still go to the runtime.  `runtime_rdt` tells whether the runtime takes NRI's
    LinuxRdt (see `RdtGroups`).  With `cpu_class_files`, a `CPUClassControl` sets CPU
    classes (it reads nothing while no class is defined).  RDT and block I/O with nothing
    enabled and nothing defined: no selector and no controllers for them.
    """
    from nri_resmgr.control.classes import select_classes

    rdt, blockio = control.rdt, control.blockio
    controllers: list[Controller] = []
    if cpu_class_files is not None:
        controllers.append(CPUClassControl(cpu_class_files, control.cpu.classes))
    if not (rdt.enable or blockio.enable or rdt.partitions or blockio.classes):
        return controllers, None
    known_rdt: tuple[str, ...] = tuple(rdt.class_names())
    if resctrl_root is not None:
        import tempfile  # only when a record may need a home (about 3 ms of import)

        # the controller's modules only when RDT is on (control/resctrl/__init__.py)
        from nri_resmgr.control.resctrl import RdtController

        ctl = RdtController(
            resctrl_root,
            rdt,
            state_dir=state_dir or tempfile.mkdtemp(prefix="nri-resmgr-state-"),
        )
        controllers.append(RdtGroups(ctl, runtime_rdt=runtime_rdt))
        known_rdt = tuple(ctl.planned())
    known_blockio: tuple[str, ...] = tuple(blockio.classes)
    if cgroup_root and not blockio.runtime_classes:
        # the block I/O writer only when it has classes to write (module docstring)
        from nri_resmgr.control.blockio import BlockIOController

        bctl = BlockIOController(cgroup_root, blockio)
        controllers.append(BlockIOFiles(bctl))
        known_blockio = tuple(bctl.class_names)
    select: ClassSelector = functools.partial(
        select_classes, config=control, known_rdt=known_rdt, known_blockio=known_blockio
    )
    return controllers, select


def memory_control(
    control: ControlConfig, *, topology: Topology, cgroup_root: Path
) -> list[Controller]:
    """The memory controllers ``control`` configures (none for a section left out).

    Raises `ConfigError` for a memory policy class naming nodes the machine lacks.
    """
    out: list[Controller] = []
    if control.memory_policy is not None:
        # the memory components' modules only when one is on (module docstring)
        from nri_resmgr.control.memory import MemoryPolicyControl

        out.append(MemoryPolicyControl(control.memory_policy, topology, get_logger("memory")))
    if control.memory_qos is not None or control.sgx_epc.enable:
        from nri_resmgr.control.memory import MemoryQoSControl

        out.append(
            MemoryQoSControl(
                control.memory_qos,
                cgroup_root=cgroup_root,
                log=get_logger("memory"),
                sgx_epc=control.sgx_epc.enable,
            )
        )
    return out
