"""The controller fan-out: one rule for a controller that fails in a best-effort hook
(`nri_resmgr.runtime.fanout`): a `ResmgrError` or an `OSError` is logged and the event
goes on; anything else is a bug and goes up."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nri_resmgr.control.hooks import Controller
from nri_resmgr.model import ContainerID, ContainerInfo, Pod, ResmgrError
from nri_resmgr.policy.irq_affinity import IrqBalloon, IrqMode, IrqUse
from nri_resmgr.runtime.fanout import best_effort
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.cpuset import CPUSet
from tests.support.logs import QUIET, CapturedLog
from tests.support.pipeline import CountingPolicy, CountState, container, sandbox


class Failing(Controller):
    """Raises `error` from every best-effort hook of pod and container ends; records
    what it was asked."""

    def __init__(self, name: str, error: Exception | None = None) -> None:
        self.name = name
        self.error = error
        self.seen: list[str] = []

    def _maybe_fail(self) -> None:
        if self.error is not None:
            raise self.error

    def pod_removed(self, pod: Pod) -> None:
        self.seen.append(f"pod-{pod.name}")
        self._maybe_fail()

    def container_released(self, container: ContainerInfo) -> None:
        self.seen.append(f"-{container.name}")
        self._maybe_fail()

    def synchronized(self, pods: Sequence[Pod]) -> None:
        self.seen.append("synchronized")
        self._maybe_fail()


@pytest.mark.parametrize(
    "error",
    [OSError(2, "No such file or directory"), ResmgrError("controller refused")],
    ids=["os-error", "resmgr-error"],
)
def test_best_effort_logs_the_failure_and_calls_the_next_controller(error: Exception) -> None:
    captured = CapturedLog()
    bad, good = Failing("bad", error), Failing("good")

    def hook(ctl: Controller) -> str:
        ctl.synchronized([])
        return ctl.name

    got = best_effort([bad, good], hook, log=captured.log, failed="oops")
    assert got == ["good"]  # what each controller that did not fail returned
    (line,) = captured.lines
    assert (line["event"], line["controller"], line["error"]) == ("oops", "bad", str(error))


def test_best_effort_lets_a_bug_through() -> None:
    def hook(ctl: Controller) -> None:
        raise KeyError(ctl.name)

    with pytest.raises(KeyError):
        best_effort([Failing("bad")], hook, log=QUIET)


def test_a_controller_raising_oserror_in_remove_pod_leaves_the_pod_fully_removed() -> None:
    """RemovePodSandbox released some containers and then failed the event when a
    controller's file was gone (an OSError was caught in one loop and not the others)."""
    policy = CountingPolicy()
    bad = Failing("bad", OSError(2, "No such file or directory: 'tasks'"))
    good = Failing("good")
    captured = CapturedLog()
    p = Pipeline(policy, controllers=[bad, good], log=captured.log)
    s, other = sandbox(), sandbox("p1")
    for pod in (s, other):
        p.run_pod(pod)
    p.create(s, container(s, "a"))
    p.create(s, container(s, "b"))
    p.create(other, container(other, "c"))
    p.remove_pod(s)  # does not raise: the daemon answers the runtime normally
    assert list(p.pods) == ["sb-p1"] and list(p.containers) == ["p1-c"]
    assert set(p.assignments) == {ContainerID("p1-c")}
    assert isinstance(p.state, CountState) and dict(p.state.held) == {"p1-c": 2}
    assert [c for op, c in policy.calls if op == "release"] == ["p0-a", "p0-b"]
    assert good.seen == bad.seen == ["-a", "-b", "pod-p0"]  # every controller, every hook
    failed = captured.events("controller failed")
    assert [(f["controller"], f["error"]) for f in failed] == [
        ("bad", "[Errno 2] No such file or directory: 'tasks'")
    ] * 3
    # the pipeline goes on: the next pod's containers are placed and released as usual
    p.create(other, container(other, "d"))
    p.remove_pod(other)
    assert p.pods == {} and p.containers == {} and p.assignments == {}


def test_a_controller_raising_oserror_at_stop_and_synchronize_does_not_fail_them() -> None:
    policy = CountingPolicy()
    bad = Failing("bad", OSError(13, "Permission denied"))
    p = Pipeline(policy, controllers=[bad], log=QUIET)
    s = sandbox()
    p.create(s, container(s, "a"))
    p.create(s, container(s, "b"))
    assert p.stop(s, container(s, "a")) == []
    assert list(p.containers) == ["p0-b"]
    p.synchronize([s], [container(s, "b", cpus="1")])
    assert list(p.containers) == ["p0-b"] and bad.seen == ["-a", "synchronized"]


def test_a_controller_bug_in_remove_pod_fails_the_event_before_anything_is_released() -> None:
    """Not an expected failure of out-of-band work: it goes up (the daemon reports an
    internal error), with the container it was about not released."""
    policy = CountingPolicy()
    p = Pipeline(policy, controllers=[Failing("bug", RuntimeError("bug"))], log=QUIET)
    s = sandbox()
    p.create(s, container(s, "a"))
    state = p.state
    with pytest.raises(RuntimeError):
        p.remove_pod(s)
    assert p.state is state and list(p.containers) == ["p0-a"]
    assert set(p.assignments) == {ContainerID("p0-a")}


class IrqWishingPolicy(CountingPolicy):
    """Wishes every held CPU to sink interrupts, and nothing after the second container."""

    def irq_use(self, state: CountState) -> IrqUse:
        held = CPUSet(v for v in state.held.values() if v < 2)
        sink = (IrqBalloon("sink[0]", held, mode=IrqMode.SINK),) if held else ()
        return IrqUse(allowed=CPUSet(range(8)), balloons=sink, configured=True)


class IrqRecorder(Controller):
    def __init__(self, name: str, *, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.uses: list[str] = []
        self.stops = 0

    def irq_use_changed(self, use: IrqUse) -> None:
        self.uses.append(",".join(str(b.cpus) for b in use.balloons))
        if self.fail:
            raise OSError(5, "Input/output error")

    def stopped(self) -> None:
        self.stops += 1
        if self.fail:
            raise ResmgrError("cannot restore")


def test_irq_wishes_reach_controllers_when_they_change_and_failures_do_not_stop_it() -> None:
    failing, ok = IrqRecorder("failing", fail=True), IrqRecorder("ok")
    p = Pipeline(IrqWishingPolicy(), controllers=[failing, ok], log=QUIET)
    s = sandbox()
    for name in ("a", "b", "c", "d"):
        p.create(s, container(s, name))
    # a: {0}, b: {0,1}, c and d hold CPUs 2 and 3, which wish nothing: no new call
    assert ok.uses == failing.uses == ["0", "0-1"]
    assert set(p.containers) == {"p0-a", "p0-b", "p0-c", "p0-d"}  # the decisions stand
    p.close()
    assert (failing.stops, ok.stops) == (1, 1)


def test_a_policy_without_irq_wishes_hands_out_an_empty_use() -> None:
    ok = IrqRecorder("ok")
    p = Pipeline(CountingPolicy(), controllers=[ok], log=QUIET)
    s = sandbox()
    p.create(s, container(s, "a"))
    p.create(s, container(s, "b"))
    assert ok.uses == [""]
