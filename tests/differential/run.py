"""Run one case on both plugins side by side and compare every container after every step.

Theory of operation: `run_case` writes the machine as a host root (`host.host_root`, or
takes the one a `host.HostRoots` of the run already wrote) and the configuration as a
file, starts nri-plugins' plugin (theirs) and our daemon (ours), each behind its own fake
runtime (`plugins.Side`), and sends both the same events in the same order; the two sides
of one event run in two threads, since each waits on its own processes. A *step* is one
event that can move a container: a container's creation (an init container's, too), a
container's stop and removal, a plugin restart. After every step each container live on
either side is one `Observation`: the placement (cpuset CPUs and memory nodes) each side's
runtime holds for it, or the refusal's text where a side refused to create it. An
observation is *identical* when both hold the same; otherwise `classes.classify` names
the documented difference class it belongs to, or none (an undocumented divergence).

The result (`CaseResult`) keeps every observation, so `profile.Tally` counts containers
per machine, policy and class, and the first divergences can be printed with the
sequence that led to them (`python -m tests.differential --divergences N`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tests.conformance.harness import Json, make_container, make_pod, short_tempdir
from tests.differential.classes import Context, classify
from tests.differential.gen import Case, CreatePod, Ctr, DeletePod, Op, Pod, Restart
from tests.differential.host import HostRoots, host_root
from tests.differential.machines import Machine
from tests.differential.plugins import Placement, Side, ours_argv, side, theirs_argv
from tests.peers import NriPlugins

__all__ = ["CaseResult", "Observation", "run_case"]

T = TypeVar("T")

#: what a side holds for a container: its placement, or the refusal's text
Held = Placement | str


@dataclass(frozen=True, slots=True)
class Observation:
    """One container after one step."""

    step: int
    op_index: int  # the operation of the case this step belongs to
    op: str
    container: str  # namespace/pod/container
    ours: Held
    theirs: Held
    cls: str | None  # None: identical; "" : an undocumented difference; else the class

    @property
    def identical(self) -> bool:
        return self.cls is None

    @property
    def undocumented(self) -> bool:
        return self.cls == ""


@dataclass
class CaseResult:
    case: Case
    observations: list[Observation] = field(default_factory=list)
    error: str | None = None  # a side died or the run could not go on

    def first_divergence(self) -> Observation | None:
        return next((o for o in self.observations if o.undocumented), None)

    def ends_identical(self) -> bool:
        last = max((o.step for o in self.observations), default=-1)
        return all(o.identical for o in self.observations if o.step == last)


@dataclass
class _Live:
    pod: Pod
    json: Json
    ctrs: list[tuple[Ctr, Json]]


def _pod_json(pod: Pod) -> Json:
    return make_pod(
        name=pod.name, namespace=pod.namespace, qos=pod.qos, annotations=dict(pod.annotations)
    )


def _ctr_json(pod: Json, c: Ctr) -> Json:
    return make_container(
        pod,
        name=c.name,
        cpu_request_millis=c.cpu_request,
        cpu_limit_millis=c.cpu_limit,
        memory_request=c.memory_request,
        memory_limit=c.memory_limit,
    )


class _Pair:
    """Both sides, driven in step."""

    def __init__(self, ours: Side, theirs: Side, pool: ThreadPoolExecutor) -> None:
        self.ours, self.theirs, self.pool = ours, theirs, pool

    def both(self, fn: Callable[[Side], T]) -> tuple[T, T]:
        fut = self.pool.submit(fn, self.theirs)
        mine = fn(self.ours)
        return mine, fut.result()

    def check_alive(self) -> None:
        for s in (self.ours, self.theirs):
            why = s.alive()
            if why:
                raise RuntimeError(why)


class _Run:
    def __init__(self, case: Case, machine: Machine, pair: _Pair) -> None:
        self.case, self.machine, self.pair = case, machine, pair
        self.result = CaseResult(case)
        self.live: list[_Live] = []
        self.refused: dict[str, tuple[Held, Held]] = {}  # cid -> refusals of this step
        self.names: dict[str, tuple[str, Pod, Ctr]] = {}  # cid -> name, pod, spec
        self.restarted = False
        self.before: dict[str, tuple[Held, Held]] = {}
        self.step = 0
        self.op_index = 0

    def observe(self, op: str) -> None:
        ours, theirs = self.pair.ours, self.pair.theirs
        ids = sorted(set(ours.placements) | set(theirs.placements) | set(self.refused))
        now: dict[str, tuple[Held, Held]] = {}
        for cid in ids:
            mine: Held = ours.placements.get(cid) or self.refused.get(cid, ("", ""))[0]
            their: Held = theirs.placements.get(cid) or self.refused.get(cid, ("", ""))[1]
            now[cid] = (mine, their)
            name, pod, ctr = self.names[cid]
            cls = None
            if mine != their:
                ctx = Context(
                    machine=self.machine.topology,
                    policy=self.case.policy,
                    pod=pod,
                    ctr=ctr,
                    ours=mine,
                    theirs=their,
                    before=self.before.get(cid),
                    after_restart=self.restarted,
                )
                cls = classify(ctx) or ""
            self.result.observations.append(
                Observation(self.step, self.op_index, op, name, mine, their, cls)
            )
        self.before = now
        self.refused = {}
        self.restarted = False
        self.step += 1

    def create(self, live: _Live, c: Ctr) -> str:
        cj = _ctr_json(live.json, c)
        self.names[cj["id"]] = (f"{live.pod.namespace}/{live.pod.name}/{c.name}", live.pod, c)
        mine, their = self.pair.both(lambda s: s.create(live.json, cj))
        if mine is not None or their is not None:
            self.refused[cj["id"]] = (mine or "", their or "")
        return str(cj["id"])

    def stop_remove(self, cid: str) -> None:
        self.pair.both(
            lambda s: s.stop_remove(cid) if cid in s.ctrs else None
        )

    def apply(self, op: Op) -> None:
        if isinstance(op, CreatePod):
            pj = _pod_json(op.pod)
            live = _Live(op.pod, pj, [])
            self.pair.both(lambda s: s.run_pod(pj))
            for c in op.pod.init:
                cid = self.create(live, c)
                self.observe(f"{op} (init {c.name} created)")
                self.stop_remove(cid)
            for c in op.pod.containers:
                self.create(live, c)
                self.observe(f"{op} ({c.name} created)")
                live.ctrs.append((c, _ctr_json(pj, c)))
            self.live.append(live)
        elif isinstance(op, DeletePod):
            if not self.live:
                return
            live = self.live.pop(op.index % len(self.live))
            for c, cj in live.ctrs:
                self.stop_remove(cj["id"])
                self.observe(f"{op} ({live.pod.name}, {c.name} removed)")
            self.pair.both(lambda s: s.remove_pod(live.json["id"]))
        elif isinstance(op, Restart):
            self.pair.both(lambda s: s.restart())
            self.restarted = True
            self.observe(str(op))
        self.pair.check_alive()


@contextlib.contextmanager
def _pair(
    case: Case, machine: Machine, plugins: NriPlugins, work: Path, roots: HostRoots | None
) -> Iterator[_Pair]:
    source = machine.archive or machine.topology
    root = roots.get(machine.name, source) if roots else host_root(source, work / "host")
    config = work / "config.yaml"
    config.write_text(case.config)
    name = case.policy

    def theirs(socket: Path, d: Path) -> list[str]:
        state = d / "state"
        state.mkdir()
        return theirs_argv(
            plugins.binary(case.policy), socket=socket, config=config, root=root,
            state_dir=state, name=name,
        )

    def ours(socket: Path, d: Path) -> list[str]:
        return ours_argv(socket=socket, config=config, root=root, state_dir=d / "state", name=name)

    with ThreadPoolExecutor(1) as pool, contextlib.ExitStack() as stack:
        started = pool.submit(lambda: stack.enter_context(side(theirs, who="theirs")))
        try:
            o = stack.enter_context(side(ours, who="ours"))
        finally:
            t = started.result()
        yield _Pair(o, t, pool)


def run_case(
    case: Case, machine: Machine, plugins: NriPlugins, roots: HostRoots | None = None
) -> CaseResult:
    """Run `case` on `machine` with both plugins; every observation, or the error that
    stopped the run (a plugin that died or did not start)."""
    with short_tempdir("nri-diff-") as work:
        try:
            with _pair(case, machine, plugins, work, roots) as pair:
                run = _Run(case, machine, pair)
                try:
                    for i, op in enumerate(case.ops):
                        run.op_index = i
                        run.apply(op)
                except RuntimeError as exc:
                    run.result.error = str(exc)
                return run.result
        except RuntimeError as exc:
            return CaseResult(case, error=str(exc))
