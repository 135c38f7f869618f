"""`bench.decision.timed_create`: a sample's reply is freed inside its own window (a reply
kept until the next sample charged its release to the next decision: a shared probe
after an exclusive one at 10,000 live paid for 2,475 updates)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import cast

import pytest

from bench import decision
from nri_api import api
from nri_resmgr.runtime.pipeline import Pipeline


def test_the_reply_is_freed_before_the_clock_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    class Update:
        def __del__(self) -> None:
            events.append("freed")

    class Pipe:
        def create(self, sandbox: object, container: object) -> tuple[object, list[Update]]:
            events.append("create")
            return object(), [Update(), Update()]

    def clock() -> int:
        events.append("clock")
        return len(events)

    monkeypatch.setattr(time, "thread_time_ns", clock)  # the module bench.decision reads
    monkeypatch.setattr(time, "perf_counter_ns", lambda: 0)
    later: list[Callable[[], None]] = []
    sample = decision.timed_create(
        cast(Pipeline, Pipe()), api.PodSandbox(), api.Container(), defer=later.append
    )
    assert events == ["clock", "create", "freed", "freed", "clock"]
    assert sample.updates == 2 and sample.cpu_ns == 4


def test_the_decision_runs_under_the_daemons_collector_rule() -> None:
    """The sample is taken with the collector off, as the daemon handles an event
    (`ops.collector.handling`); it is back on only once the after-reply step runs."""
    seen: list[bool] = []

    class Pipe:
        def create(self, sandbox: object, container: object) -> tuple[object, list[object]]:
            seen.append(gc.isenabled())
            return object(), []

    was = gc.isenabled()
    gc.enable()
    try:
        later: list[Callable[[], None]] = []
        decision.timed_create(
            cast(Pipeline, Pipe()), api.PodSandbox(), api.Container(), defer=later.append
        )
        assert seen == [False] and not gc.isenabled()
        decision.after_reply(later)
        assert gc.isenabled() and not later
    finally:
        if not was:
            gc.disable()
