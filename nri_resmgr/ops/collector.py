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
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["building", "pause", "resume", "settle"]

_paused_by_us = False


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
    success what is alive frozen; the collector on again either way.  A collector that
    was off already (start-up, a test) is left as it is, and nothing is frozen."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        gc.enable()
