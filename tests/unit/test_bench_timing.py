"""`bench.decision.timed_create`: a sample's reply is freed inside its own window (a reply
kept until the next sample charged its release to the next decision: a shared probe
after an exclusive one at 10,000 live paid for 2,475 updates)."""

from __future__ import annotations

import time
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
    sample = decision.timed_create(cast(Pipeline, Pipe()), api.PodSandbox(), api.Container())
    assert events == ["clock", "create", "freed", "freed", "clock"]
    assert sample.updates == 2 and sample.cpu_ns == 4
