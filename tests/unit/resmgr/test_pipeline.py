"""The pipeline: decisions commit only on success; release points; short-circuit; sync."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nri_api import api
from nri_resmgr.control.classes import inherit_classes
from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    ContainerKind,
    CPUKind,
    DeviceRef,
    HintSource,
    MountRef,
    Pod,
    ResmgrError,
    TopologyHint,
)
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.runtime.pipeline import ClassChoice, Controller, Pipeline
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.synthetic import build_topology
from tests.support.logs import QUIET
from tests.support.pipeline import (
    CountingPolicy,
    CountState,
    EmptyClassPolicy,
    container,
    gold_slow,
    sandbox,
    static_pipeline,
)


def test_create_renders_the_assignment_and_commits() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    adjust, updates = p.create(s, container(s, "a"))
    assert adjust.linux.resources.cpu.cpus == "0"
    assert adjust.linux.resources.cpu.mems == "0"
    assert updates == []
    assert list(p.containers) == ["p0-a"]
    assert p.assignments[ContainerID("p0-a")].cpus == CPUSet([0])
    assert isinstance(p.state, CountState) and dict(p.state.held) == {"p0-a": 0}


def test_a_new_containers_devices_and_mounts_go_to_the_hint_resolver_not_the_record() -> None:
    asked: list[tuple[tuple[DeviceRef, ...], tuple[MountRef, ...]]] = []
    found = TopologyHint("/dev/nvme0n1", HintSource.DEVICES, cpus=CPUSet([2, 3]))

    def resolve(
        devices: tuple[DeviceRef, ...], mounts: tuple[MountRef, ...]
    ) -> tuple[TopologyHint, ...]:
        asked.append((devices, mounts))
        return (found,)

    p = Pipeline(CountingPolicy(), resolve_hints=resolve, log=QUIET)
    s = sandbox()
    c = container(s, "a")
    c.linux.devices.add(path="/dev/nvme0n1", type="b", major=259, minor=0)
    c.mounts.add(destination="/data", source="/mnt/fast", options=["rbind", "ro"])
    p.create(s, c)
    assert asked == [
        ((DeviceRef("/dev/nvme0n1", "b", 259, 0),), (MountRef("/mnt/fast", "/data", True),))
    ]
    assert p.containers[ContainerID("p0-a")].topology_hints == (found,)
    bare = container(s, "b")  # neither devices nor mounts: nothing to resolve
    p.create(s, bare)
    assert len(asked) == 1
    assert p.containers[ContainerID("p0-b")].topology_hints == ()
    gpu = container(s, "c")  # a device alone is asked about too
    gpu.linux.devices.add(path="/dev/dri/card0", type="c", major=226, minor=0)
    p.create(s, gpu)
    assert asked[1:] == [((DeviceRef("/dev/dri/card0", "c", 226, 0),), ())]


@pytest.mark.parametrize(
    "error",
    [AllocationError("no room"), AnnotationError("bad annotation")],
    ids=["allocation", "annotation"],
)
def test_failure_leaves_state_unchanged(error: ResmgrError) -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    p.create(s, container(s, "a"))
    before = (p.state, dict(p.containers), dict(p.assignments), dict(p.pods))
    policy.fail_next = error
    with pytest.raises(type(error), match=str(error)):
        p.create(s, container(s, "b"))
    assert (p.state, dict(p.containers), dict(p.assignments), dict(p.pods)) == before


def test_class_selection_error_leaves_state_unchanged() -> None:
    def select(c: ContainerInfo) -> ClassChoice:
        if c.name == "b":
            raise AnnotationError(f"{c.pretty}: annotation rdtclass... unknown class 'x'")
        return ClassChoice(rdt_class="gold", blockio_class=None)

    p = Pipeline(CountingPolicy(), select_classes=select, log=QUIET)
    s = sandbox()
    adjust, _ = p.create(s, container(s, "a"))
    assert adjust.linux.resources.rdt_class.value == "gold"
    assert not adjust.linux.resources.HasField("blockio_class")
    state = p.state
    with pytest.raises(AnnotationError, match="pod ns/p0 container b"):
        p.create(s, container(s, "b"))
    assert p.state is state and list(p.containers) == ["p0-a"]
    assert p.assignments[ContainerID("p0-a")].rdt_class == "gold"


class FailingController(Controller):
    name = "failing"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def pod_added(self, pod: Pod) -> None:
        self.seen.append(f"pod+{pod.name}")

    def pod_removed(self, pod: Pod) -> None:
        self.seen.append(f"pod-{pod.name}")

    def container_assigned(self, container: ContainerInfo, assignment: Assignment) -> None:
        if container.name == "bad":
            raise ResmgrError(f"{container.pretty}: controller refused")
        self.seen.append(f"+{container.name}:{assignment.cpus}")

    def container_released(self, container: ContainerInfo) -> None:
        self.seen.append(f"-{container.name}")


def test_controllers_act_on_accepted_decisions_only() -> None:
    ctl = FailingController()
    p = Pipeline(CountingPolicy(), controllers=[ctl], log=QUIET)
    s = sandbox()
    p.run_pod(s)
    p.create(s, container(s, "a"))
    with pytest.raises(ResmgrError, match="controller refused"):
        p.create(s, container(s, "bad"))
    assert list(p.containers) == ["p0-a"]
    p.stop(s, container(s, "a"))
    p.remove_pod(s)
    assert ctl.seen == ["pod+p0", "+a:0", "-a", "pod-p0"]


def test_release_at_stop_then_remove_is_a_noop() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox(annotations={"init-containers.resource-policy.nri.io": "init"})
    p.create(s, container(s, "init"))
    assert p.containers[ContainerID("p0-init")].kind is ContainerKind.INIT
    assert p.stop(s, container(s, "init")) == []
    assert p.remove(s, container(s, "init")) == []
    assert policy.calls == [("allocate", "p0-init"), ("release", "p0-init")]
    assert p.containers == {} and p.assignments == {}


def test_remove_pod_releases_leftovers() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    p.run_pod(s)
    p.create(s, container(s, "a"))
    p.create(s, container(s, "b"))
    p.remove_pod(s)
    assert sorted(c for op, c in policy.calls if op == "release") == ["p0-a", "p0-b"]
    assert p.pods == {} and p.containers == {}


def test_update_short_circuit_reasserts_without_asking_the_policy() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    c = container(s, "a")
    p.create(s, c)
    p.create(s, container(s, "b"))
    kubelet = api.LinuxResources()
    kubelet.CopyFrom(c.linux.resources)
    kubelet.cpu.cpus = "0-63"  # a CPU manager's idea; ours must win
    updates = p.update(s, c, kubelet)
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updates] == [("p0-a", "0")]
    assert ("update", "p0-a") not in policy.calls


def test_update_with_changed_resources_goes_to_the_policy() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    c = container(s, "a")
    p.create(s, c)
    bigger = container(s, "a", cpu="2", limit="2").linux.resources
    updates = p.update(s, c, bigger)
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updates] == [("p0-a", "100")]
    assert ("update", "p0-a") in policy.calls
    assert p.containers[ContainerID("p0-a")].request.cpu_request_milli == 2000


def test_update_of_unknown_container_is_ignored() -> None:
    p = Pipeline(CountingPolicy(), log=QUIET)
    s = sandbox()
    assert p.update(s, container(s, "ghost"), api.LinuxResources()) == []


def test_static_shared_pool_shrinks_and_grows() -> None:
    p = static_pipeline()
    web, db = sandbox("web", guaranteed=False), sandbox("db")
    adjust, updates = p.create(web, container(web, "app", cpu="500m", limit=None))
    assert adjust.linux.resources.cpu.cpus == "0-7" and updates == []
    adjust, updates = p.create(db, container(db, "pg", cpu="2", limit="2"))
    assert adjust.linux.resources.cpu.cpus == "1,5"
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updates] == [
        ("web-app", "0,2-4,6-7")
    ]
    updates = p.stop(db, container(db, "pg", cpu="2", limit="2"))
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updates] == [("web-app", "0-7")]
    snap = {info.name: a for info, a in p.snapshot()}
    assert snap["app"] is not None and snap["app"].kind is CPUKind.SHARED


def test_a_container_started_unseen_is_taken_in_off_exclusive_cpus() -> None:
    """A container the runtime created while no plugin was registered, and that the
    restart's Synchronize did not list (CRI-O lists it only once created), starts on
    every CPU: at its PostStartContainer it is placed, and sent off CPUs exclusive to
    another (found by tests/e2e test_kill9_during_churn_keeps_invariants on CRI-O)."""
    p = static_pipeline()
    db, late = sandbox("db"), sandbox("late")
    p.synchronize([db], [container(db, "pg", cpu="2", limit="2", cpus="1,5")])
    unseen = container(late, "app", cpu="2", limit="2", cpus="0-7")
    updates = p.started(late, unseen)
    assert [u.container_id for u in updates] == ["late-app"]
    got = {cid: asg.cpus for cid, asg in p.assignments.items()}
    assert got[ContainerID("db-pg")] == CPUSet.parse("1,5")  # the valid placement stays
    assert got[ContainerID("late-app")].isdisjoint(got[ContainerID("db-pg")])
    assert p.assignments[ContainerID("late-app")].kind is CPUKind.EXCLUSIVE
    # known from now on: a second PostStartContainer changes nothing
    assert p.started(late, unseen) == []


class NoScan(dict[ContainerID, ContainerInfo]):
    """The live containers, refusing to be walked (lookups and changes are fine)."""

    def __iter__(self) -> Any:
        raise AssertionError("walked every live container")

    def items(self) -> Any:
        raise AssertionError("walked every live container")

    def values(self) -> Any:
        raise AssertionError("walked every live container")


def test_remove_pod_releases_its_containers_without_walking_every_container() -> None:
    """RemovePodSandbox found the pod's containers by scanning all live ones: O(live)
    per pod removal, 0.4 ms at 10,000 live containers (bench.scale)."""
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    pods = [sandbox(f"p{i}") for i in range(3)]
    for pod in pods:
        p.run_pod(pod)
        p.create(pod, container(pod, "a"))
        p.create(pod, container(pod, "b"))
    bigger = container(pods[1], "a", cpu="2", limit="2").linux.resources
    p.update(pods[1], container(pods[1], "a"), bigger)  # replaces its info
    p.containers = NoScan(p.containers)
    p.remove_pod(pods[1])
    assert sorted(dict.keys(p.containers)) == ["p0-a", "p0-b", "p2-a", "p2-b"]
    assert ("update", "p1-a") in policy.calls
    assert [c for c in policy.calls if c[0] == "release"] == [
        ("release", "p1-a"),
        ("release", "p1-b"),
    ]
    p.remove_pod(pods[1])  # again: nothing left of it
    assert len(p.containers) == 4


def test_repeated_create_that_fails_keeps_the_first_allocation() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    p.create(s, container(s, "a"))
    state = p.state
    policy.fail_next = AllocationError("no room")
    with pytest.raises(AllocationError):
        p.create(s, container(s, "a"))
    assert p.state is state
    assert p.assignments[ContainerID("p0-a")].cpus == CPUSet([0])
    adjust, _ = p.create(s, container(s, "a"))  # and a retry that succeeds starts afresh
    assert adjust.linux.resources.cpu.cpus == "0"
    assert isinstance(p.state, CountState) and dict(p.state.held) == {"p0-a": 0}


def test_adopt_keeps_valid_placements_and_moves_invalid_ones() -> None:
    old = static_pipeline()
    db, web = sandbox("db"), sandbox("web", guaranteed=False)
    old.create(web, container(web, "app", cpu="500m", limit=None))
    old.create(db, container(db, "pg", cpu="2", limit="2"))  # 1,5
    old.create(db, container(db, "cache", cpu="2", limit="2"))  # 2,6
    topo = build_topology({"packages": 1, "nodes": 1, "cores": 4, "threads": 2})
    # the new configuration reserves core 1 too: pg's CPUs are no longer allowed
    new = Pipeline(StaticPolicy(topology=topo, config={"reservedSystemCPUs": "0-1,4-5"}), log=QUIET)
    updates = new.adopt(old)
    moved = {u.container_id: u.linux.resources.cpu.cpus for u in updates}
    assert "db-cache" not in moved
    assert moved["db-pg"] == "3,7"
    assert new.assignments[ContainerID("db-cache")].cpus == CPUSet.parse("2,6")
    assert set(new.containers) == set(old.containers)
    # the old pipeline is untouched
    assert old.assignments[ContainerID("db-pg")].cpus == CPUSet.parse("1,5")


def test_adopt_from_the_none_policy_places_everything() -> None:
    from nri_resmgr.policy.none import NonePolicy

    topo = build_topology({"packages": 1, "nodes": 1, "cores": 4, "threads": 2})
    old = Pipeline(NonePolicy(topology=topo, config={}), log=QUIET)
    db = sandbox("db")
    adjust, _ = old.create(db, container(db, "pg", cpu="2", limit="2"))
    assert not adjust.HasField("linux")
    new = static_pipeline()
    updates = new.adopt(old)
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updates] == [("db-pg", "1,5")]


# -- class inheritance: one rule, "" counts as unset ---------------------------------


def _a(cid: str, rdt: str | None, blockio: str | None) -> Assignment:
    return Assignment(
        ContainerID(cid),
        CPUSet([1]),
        CPUSet([0]),
        CPUKind.SHARED,
        rdt_class=rdt,
        blockio_class=blockio,
    )


@pytest.mark.parametrize(
    ("new", "old", "expected"),
    [
        ((None, None), ("gold", "slow"), ("gold", "slow")),
        (("silver", "fast"), ("gold", "slow"), ("silver", "fast")),
        (("", ""), ("gold", "slow"), ("gold", "slow")),
        (("", None), (None, None), (None, None)),
        (("silver", None), None, ("silver", None)),
        ((None, ""), None, (None, None)),
    ],
    ids=[
        "unset-inherits",
        "set-wins",
        "empty-inherits",
        "empty-over-none-is-none",
        "no-old",
        "empty-without-old-is-none",
    ],
)
def test_inherit_classes(
    new: tuple[str | None, str | None],
    old: tuple[str | None, str | None] | None,
    expected: tuple[str | None, str | None],
) -> None:
    got = inherit_classes(_a("c", *new), None if old is None else ClassChoice(*old))
    assert (got.rdt_class, got.blockio_class) == expected
    assert got.cpus == CPUSet([1]) and got.kind is CPUKind.SHARED  # only classes change
    if old is not None:  # an old assignment counts as its classes
        assert inherit_classes(_a("c", *new), _a("c", *old)) == got


def test_inherit_classes_keeps_the_assignment_when_it_takes_nothing() -> None:
    """No copy when nothing is inherited: an exclusive grant's reply renders one update
    per shared container of its pool through here."""
    a = _a("c", "gold", None)
    assert inherit_classes(a, None) is a
    assert inherit_classes(a, _a("c", "silver", "")) is a
    assert inherit_classes(a, ClassChoice(None, "slow")) == _a("c", "gold", "slow")


def test_empty_class_from_the_policy_takes_the_chosen_class_at_create() -> None:
    p = Pipeline(EmptyClassPolicy(), select_classes=gold_slow, log=QUIET)
    s = sandbox()
    adjust, _ = p.create(s, container(s, "a"))
    assert adjust.linux.resources.rdt_class.value == "gold"
    assert adjust.linux.resources.blockio_class.value == "slow"
    a = p.assignments[ContainerID("p0-a")]
    assert (a.rdt_class, a.blockio_class) == ("gold", "slow")


def test_empty_class_in_a_policy_update_keeps_the_container_s_class() -> None:
    classes = iter(["gold", "silver"])

    def select(_c: ContainerInfo) -> ClassChoice:
        return ClassChoice(rdt_class=next(classes))

    p = Pipeline(EmptyClassPolicy(), select_classes=select, log=QUIET)
    s = sandbox()
    p.create(s, container(s, "a"))
    p.create(s, container(s, "b"))  # its decision re-sends "a" with "" classes
    assert p.assignments[ContainerID("p0-a")].rdt_class == "gold"
    assert p.assignments[ContainerID("p0-b")].rdt_class == "silver"


# -- controller hooks: typed members, each called at its event --------------------------


class RecordingController(Controller):
    """Overrides every hook but the pod ones (those keep the no-op defaults)."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def container_assigned(self, container: ContainerInfo, assignment: Assignment) -> None:
        self.seen.append(f"assigned {container.name}")

    def adjustment(
        self, container: ContainerInfo, assignment: Assignment
    ) -> api.ContainerAdjustment | None:
        self.seen.append(f"adjustment {container.name}")
        extra = api.ContainerAdjustment()
        extra.annotations["recorded"] = assignment.rdt_class or "-"
        return extra

    def container_started(self, container: ContainerInfo, assignment: Assignment) -> None:
        self.seen.append(f"started {container.name} {assignment.cpus}")

    def task_started(self, container: ContainerInfo, assignment: Assignment, pid: int) -> None:
        self.seen.append(f"task {container.name} {pid}")

    def container_released(self, container: ContainerInfo) -> None:
        self.seen.append(f"released {container.name}")

    def synchronized(self, pods: Sequence[Pod]) -> None:
        self.seen.append("synchronized " + ",".join(p.name for p in pods))


def test_every_hook_is_called_at_its_event() -> None:
    ctl = RecordingController()
    p = Pipeline(CountingPolicy(), controllers=[ctl], select_classes=gold_slow, log=QUIET)
    s = sandbox()
    p.run_pod(s)  # pod_added: the default no-op
    c = container(s, "a")
    c.pid = 4242
    adjust, _ = p.create(s, c)
    assert adjust.annotations["recorded"] == "gold"  # merged into the reply
    p.started(s, c)
    p.synchronize([s], [c])
    p.stop(s, c)
    p.remove_pod(s)
    assert ctl.seen == [
        "assigned a",
        "adjustment a",
        "started a 0",
        "task a 4242",
        "synchronized p0",
        "released a",
    ]
    assert list(ctl.monitoring_samples([("p0-a", "gold")])) == []  # the default
