"""Which event loop a plugin process runs on: uvloop when installed, else asyncio's own.

A plugin's per-request cost is mostly the event loop and its socket transport, not
nri_api's code (docs/benchmarks.md, section 1); uvloop (libuv, the ``fast`` extra:
``pip install nri-resmgr[fast]``) does that part in C. It is optional: without it, or
with ``NRI_API_EVENT_LOOP=asyncio``, the default asyncio loop runs, which the test suite
covers. ``NRI_API_EVENT_LOOP=uvloop`` demands it (an error names the missing module).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Coroutine
from typing import Final, TypeVar

__all__ = ["ENV", "loop_factory", "run"]

T = TypeVar("T")

#: environment variable choosing the loop: auto (default), asyncio or uvloop
ENV: Final = "NRI_API_EVENT_LOOP"
_CHOICES: Final = ("auto", "asyncio", "uvloop")


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for `choice` (default: $NRI_API_EVENT_LOOP, else auto); None means
    asyncio's default loop."""
    choice = (choice if choice is not None else os.environ.get(ENV, "")) or "auto"
    if choice not in _CHOICES:
        raise ValueError(f"{ENV}: expected one of {', '.join(_CHOICES)}, found {choice!r}")
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError as exc:
        if choice == "uvloop":
            raise ValueError(
                f"{ENV}=uvloop: expected the uvloop module (pip install nri-resmgr[fast]), "
                f"found none: {exc}"
            ) from exc
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[object, object, T], *, choice: str | None = None) -> T:
    """`asyncio.run(main)` on the loop `loop_factory(choice)` picks."""
    try:
        factory = loop_factory(choice)
    except ValueError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
