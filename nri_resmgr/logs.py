"""Structured logging for the daemon and the simulator.

Theory of operation
-------------------
Every module logs through structlog with a ``component`` key (``get_logger("pipeline")``);
one decision is one line whose keys are container, cpus, mems, kind, pool, rdt, blockio
and reason.  `configure_logging(LogConfig)` installs one processor chain:

* a level filter that passes an event when its level is at least the global level, or
  when its component is listed in ``log.debug`` (per-component debug without flooding
  everything else);
* ISO timestamps and the level name;
* a renderer: JSON lines when ``format`` is ``json``, or ``auto`` and the output is not
  a terminal (DaemonSet logs); a human console renderer otherwise;
* the output: stderr, or ``log.file`` (opened for append, line-buffered) because a
  pre-registered plugin's stdout and stderr go to /dev/null.

structlog's configuration is process-wide by structlog's own design; this module keeps no
state of its own, and calling `configure_logging` again replaces the previous setup.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import IO, Any, TextIO

import structlog

from nri_resmgr.config import LogConfig, LogFormat

__all__ = ["configure_logging", "get_logger", "level_filter"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "exception": logging.ERROR,
}


def get_logger(component: str) -> Any:
    """A structlog logger bound to `component` (the key per-component levels match)."""
    return structlog.get_logger().bind(component=component)


def level_filter(level: str, debug_components: tuple[str, ...] = ()) -> Any:
    """A processor dropping events below `level` unless their component is in debug."""
    threshold = _LEVELS[level.lower()]
    debug = frozenset(debug_components)
    everything = "all" in debug or "*" in debug

    def _filter(
        _logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        lvl = _LEVELS.get(method, logging.INFO)
        if lvl >= threshold:
            return event
        if everything or event.get("component") in debug:
            return event
        raise structlog.DropEvent

    return _filter


def configure_logging(
    config: LogConfig, *, stream: TextIO | None = None
) -> IO[str] | None:
    """Install the processor chain for `config`; returns the log file it opened, if any.

    `stream` overrides the output (tests); otherwise ``config.file`` or stderr.
    """
    opened: IO[str] | None = None
    out: TextIO
    if stream is not None:
        out = stream
    elif config.file:
        opened = open(config.file, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        out = opened
    else:
        out = sys.stderr
    fmt = config.format
    if fmt is LogFormat.AUTO:
        isatty = getattr(out, "isatty", None)
        fmt = LogFormat.CONSOLE if callable(isatty) and isatty() else LogFormat.JSON
    renderer: Any
    if fmt is LogFormat.JSON:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            level_filter(config.level, config.debug),
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    return opened
