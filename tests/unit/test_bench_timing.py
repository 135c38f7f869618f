"""`bench.decision.timed_create`: a sample's reply is freed inside its own window (a reply
kept until the next sample charged its release to the next decision: a shared probe
after an exclusive one at 10,000 live paid for 2,475 updates)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
import structlog

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


def test_an_eviction_writes_every_line_of_its_buffer_and_alternates() -> None:
    """`Eviction` writes one byte in every cache line of a buffer of at least the size
    asked (a line left alone could keep a decision's data cached)."""
    evict = decision.Eviction(10 * decision.LINE + 1)  # rounded up to whole lines
    buf = evict._buf
    assert len(buf) == 11 * decision.LINE
    evict()
    assert buf[:: decision.LINE] == b"\x01" * 11
    evict()
    assert buf[:: decision.LINE] == bytes(11)


def test_cold_shared_probes_are_timed_right_after_an_eviction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`decisions(cold=...)` times as many extra shared probes per level, each created
    right after the eviction (nothing in between that could warm the caches again)."""
    events: list[str] = []
    timed = decision.timed_create

    def watched(
        pipe: Pipeline, sandbox: api.PodSandbox, container: api.Container, **kw: Any
    ) -> decision.Sample:
        events.append(f"create {container.name}")
        return timed(pipe, sandbox, container, **kw)

    class Counted(decision.Eviction):
        def __call__(self) -> None:
            events.append("evict")
            super().__call__()

    run_pod = Pipeline.run_pod

    def pod_run(pipe: Pipeline, sandbox: api.PodSandbox) -> None:
        events.append("run pod")
        run_pod(pipe, sandbox)

    monkeypatch.setattr(decision, "timed_create", watched)
    monkeypatch.setattr(Pipeline, "run_pod", pod_run)
    logging = structlog.get_config()  # `decisions` logs to a /dev/null it closes
    try:
        result = decision.decisions(
            [1], samples=2, warmup=1, log_level="info", cold=Counted(decision.LINE)
        )
    finally:
        structlog.configure(**logging)
    cold = result["1"][decision.COLD]
    assert cold["cpu"]["n"] == 2 and cold["evicted_mib"] == 0.0
    creates = [i for i, e in enumerate(events) if e.startswith("create probe")]
    assert len(creates) == 3 * 2 + 3  # warm-up and samples: both kinds, then the cold ones
    evictions = [i for i, e in enumerate(events) if e == "evict"]
    assert evictions == [i - 1 for i in creates[-3:]]
