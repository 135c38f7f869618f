"""The collector around the daemon's start-up and its events (`nri_resmgr.ops.collector`).

Freezing is process-wide and cannot be undone for the objects it moved, so the tests
that reach `settle` run a fresh interpreter; the others restore the collector's state.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cli import main
from nri_resmgr.model import QoSClass
from nri_resmgr.ops import collector
from nri_resmgr.runtime.daemon import ResmgrPlugin
from tests.support.daemon import MACHINE, daemon_session, discovered, resmgr_plugin, run
from tests.support.messages import ctr, pod
from tests.support.requirements import REPO, require_sysfs


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        collector.resume()
        if not was:
            gc.disable()


def _python(code: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NRI_", "NODE_NAME"))}
    env.update(NRI_PLUGIN_NAME="resmgr", NRI_PLUGIN_IDX="90")
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[-1]


def test_pause_then_resume_turns_it_back_on_without_freezing(collector_on: None) -> None:
    frozen = gc.get_freeze_count()
    collector.pause()
    assert not gc.isenabled()
    collector.resume()
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_a_collector_that_was_off_stays_off(collector_on: None) -> None:
    gc.disable()
    collector.pause()
    collector.resume()
    collector.settle()  # nothing of ours to settle: no freeze either
    assert not gc.isenabled()


def test_a_command_that_fails_at_start_up_leaves_the_collector_on(
    collector_on: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    assert main(["run", "--config", str(missing), "--state-dir", str(tmp_path)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert gc.isenabled()


def test_settle_freezes_what_is_alive_and_turns_the_collector_on() -> None:
    code = (
        "import gc, json\n"
        "from nri_resmgr.ops import collector\n"
        "collector.pause()\n"
        "kept = [[i] for i in range(1000)]\n"
        "paused = not gc.isenabled()\n"
        "collector.settle()\n"
        "print(json.dumps([paused, gc.isenabled(), gc.get_freeze_count()]))\n"
    )
    paused, enabled, frozen = json.loads(_python(code))
    assert paused and enabled
    assert frozen >= 1000


#: the launcher's path up to connecting, with serve() probed (as test_startup_imports)
_AT_CONNECT = """
import gc, json, sys
import nri_api.stub

async def probe(self):
    print(json.dumps([gc.isenabled(), gc.get_freeze_count(), gc.get_stats()[0]["collections"]]))
    return 0

nri_api.stub.Plugin.serve = probe
from nri_resmgr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_daemon_connects_with_its_start_up_frozen_and_the_collector_on(
    tmp_path: Path,
) -> None:
    require_sysfs()
    enabled, frozen, young = json.loads(
        _python(
            _AT_CONNECT, "run", "--log-file", str(tmp_path / "log"), "--state-dir", str(tmp_path)
        )
    )
    assert enabled
    # the daemon's modules, models, policy and pipeline: tens of thousands of objects
    assert frozen > 20_000
    # what ran before `cli.main` paused it (interpreter start, the probe's nri_api.stub)
    # only: an unpaused start-up runs over 100 young collections
    assert young < 60


def test_building_freezes_what_it_built_and_turns_the_collector_back_on() -> None:
    code = (
        "import gc, json\n"
        "from nri_resmgr.ops import collector\n"
        "gc.enable()\n"
        "young = gc.get_stats()[0]['collections']\n"
        "with collector.building():\n"
        "    off = not gc.isenabled()\n"
        "    kept = [[i] for i in range(10_000)]\n"
        "    ran = gc.get_stats()[0]['collections'] - young\n"
        "print(json.dumps([off, ran, gc.isenabled(), gc.get_freeze_count()]))\n"
    )
    off, ran, enabled, frozen = json.loads(_python(code))
    # 10,000 lists would have run over a dozen young collections with the collector on
    assert off and ran == 0
    assert enabled
    assert frozen >= 10_000


def test_building_that_fails_freezes_nothing(collector_on: None) -> None:
    frozen = gc.get_freeze_count()
    with pytest.raises(ValueError, match="the block's own"), collector.building():
        assert not gc.isenabled()
        raise ValueError("the block's own")
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_building_leaves_a_collector_that_was_off_off(collector_on: None) -> None:
    frozen = gc.get_freeze_count()
    gc.disable()
    with collector.building():
        pass
    assert not gc.isenabled()
    assert gc.get_freeze_count() == frozen


#: the daemon's Synchronize with the pipeline's probed: the collector's state inside it
_SYNCHRONIZE = """
import asyncio, gc, json
from tests.support.daemon import MACHINE, STATIC, discovered, resmgr_plugin
plugin = resmgr_plugin(STATIC, discovered(MACHINE))
inside = []
real = plugin.pipeline.synchronize
def probe(pods, containers):
    inside.append(gc.isenabled())
    return real(pods, containers)
plugin.pipeline.synchronize = probe
gc.enable()
frozen = gc.get_freeze_count()
asyncio.run(plugin.synchronize([], []))
print(json.dumps([inside, gc.isenabled(), gc.get_freeze_count() - frozen]))
"""


def test_the_daemon_synchronizes_building() -> None:
    inside, enabled, frozen = json.loads(_python(_SYNCHRONIZE))
    assert inside == [False]
    assert enabled
    assert frozen > 0


# -- per event (`collector.handling`) ---------------------------------------------------


class _Cycle:
    """Garbage only the cyclic collector frees: it refers to itself.  `alive` counts the
    ones not freed yet (a counter, so that counting them keeps no memory)."""

    alive = 0

    def __init__(self, weight: int = 0) -> None:
        self.me = self
        #: tracked objects it holds, so that its events push the young count up
        self.load: list[list[None]] = [[] for _ in range(weight)]
        _Cycle.alive += 1

    def __del__(self) -> None:
        _Cycle.alive -= 1


def test_handling_turns_the_collector_off_until_the_reply_is_out(collector_on: None) -> None:
    later: list[Callable[[], None]] = []
    with collector.handling(later.append):
        assert not gc.isenabled()
    assert not gc.isenabled()  # the reply is not out yet
    assert len(later) == 1
    later.pop()()
    assert gc.isenabled()


def test_a_cycle_made_by_an_event_is_collected_after_its_reply(collector_on: None) -> None:
    later: list[Callable[[], None]] = []
    with collector.handling(later.append):
        cycle = weakref.ref(_Cycle())
        # enough young objects that CPython's threshold calls for a collection
        kept: list[list[None]] = [[] for _ in range(gc.get_threshold()[0] + 100)]
    assert cycle() is not None  # the event ran without collections
    later.pop()()
    assert cycle() is None  # collected right after the reply, not at the next event
    assert gc.get_count()[0] < len(kept)


def test_an_event_that_fails_still_turns_the_collector_back_on(collector_on: None) -> None:
    later: list[Callable[[], None]] = []
    with pytest.raises(ValueError, match="the event's own"), collector.handling(later.append):
        raise ValueError("the event's own")
    later.pop()()
    assert gc.isenabled()


def test_handling_leaves_a_collector_that_was_off_off(collector_on: None) -> None:
    gc.disable()
    later: list[Callable[[], None]] = []
    with collector.handling(later.append):
        assert not gc.isenabled()
    assert later == []
    assert not gc.isenabled()


def test_two_events_before_either_reply_step_leave_the_collector_off_until_then(
    collector_on: None,
) -> None:
    """The next event may start before the last one's after-reply step ran (it waited on
    the lock): it is still the events' doing, and the first step turns it back on."""
    later: list[Callable[[], None]] = []
    with collector.handling(later.append):
        pass
    with collector.handling(later.append):
        assert not gc.isenabled()
    assert len(later) == 2
    later.pop(0)()
    assert gc.isenabled()
    later.pop(0)()  # nothing left to do
    assert gc.isenabled()


_BUILDING_IN_AN_EVENT = """
import gc, json
from nri_resmgr.ops import collector
gc.enable()
later = []
frozen = gc.get_freeze_count()
with collector.handling(later.append):
    with collector.building():
        built = [[i] for i in range(1000)]
    after_building = gc.isenabled()
later.pop()()
print(json.dumps([gc.get_freeze_count() - frozen, after_building, gc.isenabled()]))
"""


def test_a_synchronize_in_an_event_freezes_and_leaves_the_collector_to_the_reply() -> None:
    frozen, after_building, enabled = json.loads(_python(_BUILDING_IN_AN_EVENT))
    assert frozen >= 1000
    assert not after_building
    assert enabled


class _Probe:
    """Wraps a plugin's pipeline's create and remove: whether the collector was ever on
    in them, and a `_Cycle` of `weight` left behind by each."""

    def __init__(self, plugin: ResmgrPlugin, weight: int = 0) -> None:
        self.calls = 0
        self.collector_on = False
        pipe = plugin.pipeline
        create, remove = pipe.create, pipe.remove

        def probed(real: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                self.calls += 1
                self.collector_on |= gc.isenabled()
                _Cycle(weight)
                return real(*args)

            return call

        pipe.create = probed(create)  # type: ignore[method-assign]
        pipe.remove = probed(remove)  # type: ignore[method-assign]


def test_the_daemon_decides_with_the_collector_off_and_turns_it_on_after_the_reply(
    collector_on: None,
) -> None:
    async def scenario() -> None:
        async with daemon_session(discovered(MACHINE)) as (rt, plugin, _):
            probe = _Probe(plugin)
            sandbox = pod("web", QoSClass.BURSTABLE)
            await rt.run_pod_sandbox(sandbox)
            reply = await rt.create_container(sandbox, ctr(sandbox, "nginx", cpu="500m"))
            assert reply.adjust.linux.resources.cpu.cpus
            await asyncio.sleep(0)
            assert probe.calls == 1 and not probe.collector_on
            assert gc.isenabled()

    run(scenario)


#: create / remove rounds of the churn test before it measures, and measured
_WARM, _CHURN = 40, 200
#: the churn test's measure leaves out what the loggers and tracemalloc itself allocate
_NOT_THE_LOGGERS = [
    tracemalloc.Filter(False, "*/structlog/*"),
    tracemalloc.Filter(False, tracemalloc.__file__),
]


def test_create_remove_churn_keeps_memory_flat_and_collects_every_events_cycles(
    collector_on: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the daemon's hooks over its socket, a container created and removed again
    and again, each event leaving a cycle behind: the cycles are collected by the
    collections between events (at most those since the last one are alive), and the
    traced memory after `_CHURN` more rounds is what it was after `_WARM` (each
    container's objects freed when it goes).  The decision record keeps a note per
    container up to its bound (`view.record`): here a bound the warm-up fills.  What
    the test's side keeps is kept out: the runtime's list of calls, emptied each round,
    the log records pytest captures (none below warnings) and what structlog's
    default configuration (the tests') allocates."""
    caplog.set_level(logging.WARNING)

    async def scenario() -> None:
        async with daemon_session(discovered(MACHINE)) as (rt, plugin, _):
            plugin.decisions.max_containers = _WARM // 2
            probe = _Probe(plugin, weight=40)
            before = _Cycle.alive
            sandbox = pod("web", QoSClass.BURSTABLE)
            await rt.run_pod_sandbox(sandbox)

            async def churn(rounds: int) -> int:
                """`rounds` creations and removals; the traced bytes after them, once
                what they left for the collector is collected."""
                for i in range(rounds):
                    c = ctr(sandbox, f"c{i}", cpu="250m")
                    await rt.create_container(sandbox, c)
                    await rt.remove_container(sandbox, c)
                    rt.calls.clear()
                await asyncio.sleep(0)  # the last after-reply step
                # collections ran between events: at most the cycles since the last one
                alive = _Cycle.alive - before
                assert alive < 40, f"{alive} of {probe.calls} events' cycles still alive"
                gc.collect()
                kept = tracemalloc.take_snapshot().filter_traces(_NOT_THE_LOGGERS)
                return sum(stat.size for stat in kept.statistics("filename"))

            warm = await churn(_WARM)
            after = await churn(_CHURN)
            assert probe.calls == 2 * (_WARM + _CHURN)
            assert not probe.collector_on  # every decision ran with the collector off
            assert after - warm < 4 * 1024, f"traced memory grew by {after - warm} bytes"

    tracemalloc.start()
    try:
        run(scenario)
    finally:
        tracemalloc.stop()


def test_an_events_writes_after_the_reply_share_one_turn_in_order_and_survive_a_failure(
    collector_on: None,
) -> None:
    """issue 25 (create-1000): what a creation puts after its reply (records, decision
    lines, the issue-27 note, the collector's return) is run by one ``call_soon``, in the
    order queued; one write that fails goes to the loop's exception handler and the writes
    after it still run; a write queued by a write runs in a later turn."""
    plugin = resmgr_plugin({"policy": "none"}, discovered(MACHINE))
    ran: list[str] = []
    failures: list[BaseException | None] = []

    def fail() -> None:
        ran.append("fail")
        raise RuntimeError("disk full")

    def chained() -> None:
        ran.append("chained")
        plugin._after_reply(lambda: ran.append("later"))

    async def scenario() -> tuple[int, list[str], list[str]]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: failures.append(ctx.get("exception")))
        scheduled_before = len(loop._ready)  # type: ignore[attr-defined]
        plugin._after_reply(lambda: ran.append("a"))
        plugin._after_reply(fail)
        plugin._after_reply(chained)
        plugin._after_reply(lambda: ran.append("b"))
        scheduled = len(loop._ready) - scheduled_before  # type: ignore[attr-defined]
        await asyncio.sleep(0)
        first_turn = list(ran)
        await asyncio.sleep(0)
        return scheduled, first_turn, list(ran)

    scheduled, first_turn, after = asyncio.run(scenario())
    assert scheduled == 1
    assert first_turn == ["a", "fail", "chained", "b"]
    assert after == ["a", "fail", "chained", "b", "later"]
    assert len(failures) == 1 and isinstance(failures[0], RuntimeError)
