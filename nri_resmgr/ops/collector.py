"""The cyclic garbage collector around the daemon's start-up.

Theory of operation
-------------------
Starting, the daemon imports some 500 modules and builds its configuration models,
policy classes and pipeline: about 50,000 objects that live as long as the process, and
almost no garbage (a start-up ran 119 young and 10 middle collections that freed 785
objects in all).  With the collector on, each of those collections walks what was
allocated since the last one, about 60 ms of a 0.5 s start-up (10-12 %), for nothing.
Later, every full collection walks all 50,000 again: the first Synchronize of a
restarted daemon with 1,000 containers allocates enough to trigger one, which took
0.2-0.3 s at load 5, against 17-36 ms of collection in all with the start-up frozen
(in-process restarts; docs/benchmarks.md, `restart-1000`).

So `nri-resmgr run` calls `pause` before importing the daemon and `settle` once the
plugin is built, just before it connects: `settle` moves everything alive into the
permanent generation (`gc.freeze`, which full collections skip) and turns the
collector back on.  `resume` only turns it back on (a start-up that failed before
`settle`; nothing is frozen then).  Only a collector this module turned off is turned
back on: with the collector off when `pause` ran (a test, an embedding process), both
leave it off.

What `settle` freezes is never collected: a cycle among start-up objects that becomes
garbage later stays in memory.  The one such object is the pipeline built from the
start-up configuration when a pre-registered daemon's runtime then sends one of its
own (a policy with no containers, some kilobytes).

A Synchronize is a start-up of the state: it builds the view, the grants and the records
of every running container at once, objects that live until their container goes, and
almost no garbage.  With the collector on, its young collections walk them all as they
are built and its full ones again each time the survivors have grown by a quarter: at
10,000 containers about a tenth of the Synchronize (in process, start-up frozen:
4.16 s against 3.68 s), and a growing share as the node grows, which made the
Synchronize grow faster than the containers (`bench.goals`' ``sync-growth``).  So the
daemon runs it `building`: the collector off, and on success what is alive frozen and the
collector on again.  The state's values hold no cycles, so refcounting still frees a
container's objects when it goes; what the freeze keeps for good is only a cycle that
was garbage at that moment (none in a Synchronize that succeeds; a failed one is not
frozen).

An event is a small build and a lot of garbage: a decision allocates its renderings,
the reply and its updates, the records and the log line, and almost all of it dies when
the reply has been sent.  With the collector on, the allocations inside a decision
trigger collections that walk those young containers while they are alive: an exclusive
decision at 10,000 live containers, whose reply updates 2,475 others, ran about six
young collections, a middle one every other probe and a full one every twentieth (a
full one walks the whole heap: 0.2-0.3 s at 10,000 live, load 7): a third of the
probes' CPU, and their p99 (docs/benchmarks.md, `shared-growth`).  So
the daemon handles every event `handling`: the collector off while the pipeline decides
and builds the reply, and back on after the reply has gone out (the same `defer` as the
records, `runtime.after_reply`).  Turning it back on, `_between_events` makes one
tracked allocation: CPython (3.11) runs the collection its thresholds call for at the
first such allocation, so it runs there, between events, with CPython's own choice of
generation (a full one only when the long-lived objects grew by a quarter).  By then the
event's garbage has been freed by refcounting (the allocation count falls as objects
die), so the collection walks only what the event kept, and usually none runs (220
probe events at 10,000 live ran none, against 2,200 collections before).  Nothing
is frozen per event: a cycle made by an event is young when the collector comes back
and is collected at the next collection, and a container's objects are freed by
refcounting when it goes (`tests/unit/resmgr/test_collector.py`: churn through the
daemon's hooks keeps the traced memory flat and collects every event's cycle).  The
in-process benches (`bench.decision.timed_create`) time a decision inside the same
`handling` and the after-reply work, collection included, apart.

A Synchronize inside an event's `handling` is still `building`: it freezes what it built
and leaves the collector to the event's after-reply step.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

__all__ = ["Defer", "building", "handling", "pause", "resume", "settle"]

#: puts a call off until the event's reply has been sent (`runtime.after_reply`;
#: the benches' queue drained after each sample); the shape of `record_store.Defer`
Defer = Callable[[Callable[[], None]], object]

_paused_by_us = False
#: the collector is off for an event of ours; its after-reply step turns it back on
_off_for_event = False


def pause() -> None:
    """Turn the collector off for the start-up, if it is on."""
    global _paused_by_us
    if gc.isenabled():
        gc.disable()
        _paused_by_us = True


def settle() -> None:
    """The start-up is built: freeze what is alive and turn the collector back on (only
    if `pause` turned it off)."""
    global _paused_by_us
    if _paused_by_us:
        gc.freeze()
        gc.enable()
        _paused_by_us = False


def resume() -> None:
    """Turn the collector back on without freezing, if `pause` turned it off and
    `settle` has not run (a start-up that failed)."""
    global _paused_by_us
    if _paused_by_us:
        gc.enable()
        _paused_by_us = False


@contextlib.contextmanager
def building() -> Iterator[None]:
    """The collector off while the block builds long-lived state (a Synchronize), and on
    success what is alive frozen; the collector on again either way, or, inside an
    event's `handling`, left to the event's after-reply step.  A collector that was off
    already for another reason (start-up, a test) is left as it is, and nothing is
    frozen."""
    was_on = gc.isenabled()
    if not was_on and not _off_for_event:
        yield
        return
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if was_on:
            gc.enable()


def handling(after_reply: Defer) -> AbstractContextManager[None]:
    """The collector off while the block handles an event and builds its reply, and back
    on through `after_reply` once the reply is out (`_between_events`), whether the block
    succeeded or not.  A collector that was off already for another reason (start-up, a
    test, an embedding process) is left as it is."""
    return _Event(after_reply)


class _Event:
    """`handling`'s context manager: a class, not a generator (`contextlib.
    contextmanager`), which cost 2.2-2.5 µs of CPU per event against 0.65-0.7."""

    __slots__ = ("_after_reply", "_ours")

    def __init__(self, after_reply: Defer) -> None:
        self._after_reply = after_reply
        self._ours = False

    def __enter__(self) -> None:
        global _off_for_event
        if gc.isenabled() or _off_for_event:
            gc.disable()
            _off_for_event = self._ours = True

    def __exit__(self, *exc: object) -> None:
        if self._ours:
            self._after_reply(_between_events)


def _between_events() -> None:
    """After an event's reply: the collector on again, and the collection CPython's
    thresholds call for run now (one tracked allocation triggers it in CPython 3.11)
    rather than at the next event's first allocation.  A no-op when an earlier event's
    step already did it."""
    global _off_for_event
    if not _off_for_event:
        return
    _off_for_event = False
    gc.enable()
    _: list[None] = []  # a tracked allocation: CPython collects here if its thresholds say so
