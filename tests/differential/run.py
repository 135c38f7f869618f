"""Run one case on both plugins side by side and compare every container after every step.

Theory of operation: `run_case` writes the machine as a host root (`host.host_root`, or
takes the one a `host.HostRoots` of the run already wrote) and the configuration as a
file, starts nri-plugins' plugin (theirs) and our daemon (ours), each behind its own fake
runtime (`plugins.Side`), and sends both the same events in the same order; the two sides
of one event run in two threads, since each waits on its own processes. A *step* is one
event that can move a container: a container's creation (an init container's, too), a
container's stop and removal, a plugin restart. After every step each container live on
either side is one `Observation`: the placement (cpuset CPUs and memory nodes) each side's
runtime holds for it, or the refusal's text where a side refused to create it (kept
until the container is removed). An observation is *identical* when both hold the same
placement or both refused the container (their texts differ, the outcome does not);
otherwise it gets a class by these rules, in order:

1. *direct*: the documented difference class `classes.classify` names for it;
2. *carried*: a container keeps the class it last had (direct or knock-on) at every
   later step while it differs, through restarts and its own later moves; the first
   step at which it is identical clears it;
3. *knock-on*: a case is *disturbed* from the first step with a direct class until the
   first step at which every live container is identical on both sides; a divergence of
   a disturbed case with no class of its own is ``knock-on:CLASS`` (CLASS the direct class
   that disturbed it), the same step included, since one documented difference moves
   what the sides take next (a refused container leaves CPUs the other side used, a
   restart's re-allocation leaves other CPUs free); a plugin restart disturbs the case
   as ``restart-keeps-placements`` even where every container is identical after it,
   for as long as a container live at the restart is still live: theirs re-allocates
   every balloon or grant at a restart and ours keeps what it held (a balloon's own
   CPUs, idle CPUs, the reading of a grant), a difference no placement shows until a
   later step takes CPUs by it;
4. otherwise undocumented (class ``""``).

So nothing stays hidden for good: once the sides converge (every container identical
after one step) the case is undisturbed and every carried class is gone, and a later
divergence must be explained anew; knock-on observations are counted under their own
name, apart from the direct classes.

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

from tests.conformance.harness import Json, short_tempdir
from tests.conformance.harness_pods import make_container, make_pod
from tests.differential.classes import Context, classify
from tests.differential.gen import Case, CreatePod, Ctr, DeletePod, Op, Pod, Restart
from tests.differential.host import HostRoots, host_root
from tests.differential.machines import Machine
from tests.differential.plugins import Held, Side, ours_argv, side, theirs_argv
from tests.differential.shadow import VARIANTS, Shadow, applies
from tests.peers import NriPlugins

__all__ = ["KNOCK_ON", "CaseResult", "Observation", "ctr_json", "pod_json", "run_case"]

T = TypeVar("T")

#: the class of a plugin restart (`classes.py`): it disturbs its case (rule 3)
RESTART_CLASS = "restart-keeps-placements"

#: the prefix of a knock-on class's name: ``knock-on:CLASS``
KNOCK_ON = "knock-on:"


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


def _same(mine: Held, their: Held) -> bool:
    """Both sides hold the same placement, or both refused the container."""
    refused = isinstance(mine, str) and isinstance(their, str) and bool(mine) and bool(their)
    return mine == their or refused


@dataclass
class _Live:
    pod: Pod
    json: Json
    ctrs: list[tuple[Ctr, Json]]


def pod_json(pod: Pod) -> Json:
    return make_pod(
        name=pod.name,
        namespace=pod.namespace,
        qos=pod.qos,
        labels=dict(pod.labels),
        annotations=dict(pod.annotations),
    )


def ctr_json(pod: Json, c: Ctr) -> Json:
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
        self.refused: dict[str, tuple[Held, Held]] = {}  # cid -> refusals, until removed
        self.names: dict[str, tuple[str, Pod, Ctr]] = {}  # cid -> name, pod, spec
        self.restarted = False
        self.before: dict[str, tuple[Held, Held]] = {}
        self.carried: dict[str, str] = {}  # cid -> the class it keeps while it differs
        self.disturbed: str | None = None  # the direct class that disturbed the case
        self.at_restart: set[str] = set()  # the containers live at the last restart
        self.step = 0
        self.op_index = 0
        # ours with one rule of theirs each, where it changes anything (shadow.py)
        self.shadows: list[Shadow] = []
        if case.policy == "topology-aware":
            self.shadows = [
                Shadow(machine.topology, case.config, v)
                for v in VARIANTS
                if applies(v, machine.topology, case.config)
            ]

    def observe(self, op: str) -> None:
        ours, theirs = self.pair.ours, self.pair.theirs
        ids = sorted(set(ours.placements) | set(theirs.placements) | set(self.refused))
        now: dict[str, tuple[Held, Held]] = {}
        for cid in ids:
            no_mine, no_their = self.refused.get(cid, ("", ""))
            now[cid] = (ours.placements.get(cid) or no_mine, theirs.placements.get(cid) or no_their)
        same = {cid: _same(*held) for cid, held in now.items()}
        direct = {cid: self.direct(cid, now) for cid in now if not same[cid]}
        if self.restarted:
            self.at_restart = set(now)
        # the restart's hidden difference lasts while a container it re-read lives (rule 3)
        restart_lives = RESTART_CLASS if self.at_restart & now.keys() else None
        if self.disturbed is None:
            self.disturbed = next((c for c in direct.values() if c), None) or restart_lives
        classes: dict[str, str | None] = {}
        for cid in now:
            if same[cid]:
                classes[cid] = None
                continue
            cls = direct[cid] or self.carried.get(cid)
            if not cls and self.disturbed is not None:
                cls = f"{KNOCK_ON}{self.disturbed}"
            classes[cid] = cls or ""
        for cid, (mine, their) in now.items():
            name = self.names[cid][0]
            self.result.observations.append(
                Observation(self.step, self.op_index, op, name, mine, their, classes[cid])
            )
        self.carried = {cid: cls for cid, cls in classes.items() if cls}
        if all(cls is None for cls in classes.values()):
            # converged: nothing carries past this step, but a restart's hidden difference
            self.disturbed = restart_lives
        self.before = now
        self.restarted = False
        self.step += 1

    def direct(self, cid: str, now: dict[str, tuple[Held, Held]]) -> str:
        """The documented class of container `cid`'s divergence in `now`, or ""."""
        _name, pod, ctr = self.names[cid]
        mine, their = now[cid]
        others = tuple((self.names[o][1], *now[o]) for o in now if o != cid)
        neighbours = tuple((self.names[o][2], now[o][0]) for o in now if o != cid)
        ctx = Context(
            machine=self.machine.topology,
            policy=self.case.policy,
            config=self.case.config,
            pod=pod,
            ctr=ctr,
            ours=mine,
            theirs=their,
            before=self.before.get(cid),
            after_restart=self.restarted,
            others=others,
            neighbours=neighbours,
            shadows={
                s.variant: held
                for s in self.shadows
                if (held := s.held(cid)) is not None
            },
        )
        return classify(ctx) or ""

    def create(self, live: _Live, c: Ctr) -> Json:
        cj = ctr_json(live.json, c)
        self.names[cj["id"]] = (f"{live.pod.namespace}/{live.pod.name}/{c.name}", live.pod, c)
        mine, their = self.pair.both(lambda s: s.create(live.json, cj))
        for s in self.shadows:
            s.create(live.json, cj)
        if mine is not None or their is not None:
            self.refused[cj["id"]] = (mine or "", their or "")
        return cj

    def stop_remove(self, cid: str) -> None:
        self.pair.both(
            lambda s: s.stop_remove(cid) if cid in s.ctrs else None
        )
        self.refused.pop(cid, None)
        for s in self.shadows:
            s.remove(cid)

    def apply(self, op: Op) -> None:
        if isinstance(op, CreatePod):
            pj = pod_json(op.pod)
            live = _Live(op.pod, pj, [])
            self.pair.both(lambda s: s.run_pod(pj))
            for c in op.pod.init:
                cj = self.create(live, c)
                self.observe(f"{op} (init {c.name} created)")
                self.stop_remove(cj["id"])
            for c in op.pod.containers:
                cj = self.create(live, c)
                self.observe(f"{op} ({c.name} created)")
                live.ctrs.append((c, cj))
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
            for s in self.shadows:
                s.restart()
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
