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

Every NRI event writes at least its decision line, so the chain's own cost counts
(issue 25): the JSON renderer's encoder is made once per configuration (`_JSONDumps`),
and every line goes through one printer on the output (`_Printer`), not one per line.

structlog's configuration is process-wide by structlog's own design; this module keeps no
state of its own, and calling `configure_logging` again replaces the previous setup.

Start-up cost: structlog imports rich (and better_exceptions, colorama) when they are
installed, only to offer them as exception formatters; that took 0.12 s of the daemon's
start, inside the runtime's registration timeout.  Our chain formats exceptions with
``format_exc_info`` before the renderer, so no renderer ever formats one; structlog is
therefore imported with those optional modules hidden (`_hidden_modules`), and the
console renderer is given structlog's plain formatter explicitly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, MutableMapping
from typing import IO, Any, Protocol, TextIO

from nri_resmgr.ops.log_config import LogConfig, LogFormat

#: optional modules structlog imports only to offer them as exception formatters
_STRUCTLOG_EXTRAS = ("rich", "better_exceptions", "colorama")


@contextlib.contextmanager
def _hidden_modules(names: tuple[str, ...]) -> Iterator[None]:
    """While inside, ``import name`` raises ImportError for each name not yet imported.

    A None entry in `sys.modules` is Python's documented way to make an import fail; the
    entries are removed on the way out, so a later import of the module works normally.
    """
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


with _hidden_modules(_STRUCTLOG_EXTRAS):
    import structlog

__all__ = [
    "ComponentLogger",
    "EventLog",
    "LevelFilter",
    "configure_logging",
    "enabled_for",
    "get_logger",
    "level_filter",
    "log_config_warnings",
    "route_stdlib_logging",
]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "exception": logging.ERROR,
}


class EventLog(Protocol):
    """What a component needs of its logger: one structured line per event, with
    key/values (a structlog logger from `get_logger` is one)."""

    def debug(self, event: str, **kw: object) -> object: ...

    def info(self, event: str, **kw: object) -> object: ...

    def warning(self, event: str, **kw: object) -> object: ...

    def exception(self, event: str, **kw: object) -> object:
        """An error line with the traceback of the exception being handled."""
        ...


def get_logger(component: str) -> Any:
    """A structlog logger bound to `component` (the key per-component levels match).

    It is lazy: each call uses the configuration in force at that moment, so a logger
    made before `configure_logging` (or before a reconfiguration) follows it
    (`ComponentLogger`).
    """
    return ComponentLogger(component)


class ComponentLogger:
    """A logger of one component that follows structlog's configuration.

    structlog's lazy proxy binds a new logger at every call (a context, a logger from the
    factory, the wrapper): a tenth of the decision line of every NRI event.  This keeps
    the logger it bound, and binds again when the configuration changed: another
    processor list, logger factory, wrapper or context class (`configure_logging`,
    `structlog.configure`, `structlog.reset_defaults`; a capture that edits the processor
    list in place is seen anyway, the bound logger sharing the list).
    """

    __slots__ = ("_bound", "_under", "component")

    def __init__(self, component: str) -> None:
        self.component = component
        self._bound: Any = None
        #: the configuration `_bound` was bound under (processors, factory, wrapper and
        #: context class), compared by identity
        self._under: tuple[object, ...] = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger(), name)

    def _logger(self) -> Any:
        config = structlog.get_config()
        under = (
            config["processors"],
            config["logger_factory"],
            config["wrapper_class"],
            config["context_class"],
        )
        if len(under) != len(self._under) or any(
            a is not b for a, b in zip(under, self._under, strict=True)
        ):
            self._bound = structlog.get_logger(component=self.component).bind()
            self._under = under
        return self._bound


def log_config_warnings(warnings: tuple[str, ...], *, source: str) -> None:
    """One structured warning per configuration key accepted without effect
    (`nri_resmgr.config.Config.warnings`), logged by the shell that takes the
    configuration into use."""
    log = get_logger("config")
    for warning in warnings:
        log.warning("configuration key has no effect", source=source, problem=warning)


class LevelFilter:
    """A processor dropping events below `level` unless their component is in debug."""

    def __init__(self, level: str, debug_components: tuple[str, ...] = ()) -> None:
        self.threshold = _LEVELS[level.lower()]
        self.debug = frozenset(debug_components)
        self.everything = "all" in self.debug or "*" in self.debug

    def enabled(self, method: str, component: object) -> bool:
        """Whether a `method` line (``debug``, ``info``...) of `component` is written."""
        if _LEVELS.get(method, logging.INFO) >= self.threshold:
            return True
        return self.everything or component in self.debug

    def __call__(
        self, _logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if self.enabled(method, event.get("component")):
            return event
        raise structlog.DropEvent


def level_filter(level: str, debug_components: tuple[str, ...] = ()) -> LevelFilter:
    """The `LevelFilter` for `level` and the components logged at debug."""
    return LevelFilter(level, debug_components)


def enabled_for(method: str, component: str) -> bool:
    """Whether a `method` line of `component` would be written under the configuration
    in force (yes when no `LevelFilter` is installed): the level check that keeps a
    debug trace from being built at all (a decision may move hundreds of containers)."""
    for processor in structlog.get_config()["processors"]:
        if isinstance(processor, LevelFilter):
            return processor.enabled(method, component)
    return True


def configure_logging(config: LogConfig, *, stream: TextIO | None = None) -> IO[str] | None:
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
    fmt = _resolve_format(config, out)
    renderer: Any
    if fmt is LogFormat.JSON:
        renderer = structlog.processors.JSONRenderer(serializer=_JSONDumps(), sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    structlog.configure(
        processors=[
            level_filter(config.level, config.debug),
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        logger_factory=_Printer(out),
        cache_logger_on_first_use=False,
    )
    return opened


class _Printer:
    """The logger factory `configure_logging` installs: one `structlog.PrintLogger` on its
    output for every line (structlog's factory makes one per line, as its lazy loggers
    bind per call: part of the decision line's cost on every NRI event, issue 25)."""

    __slots__ = ("printer",)

    def __init__(self, out: TextIO) -> None:
        self.printer = structlog.PrintLogger(out)

    def __call__(self, *_args: Any) -> structlog.PrintLogger:
        return self.printer


class _JSONDumps:
    """`json.dumps` for the JSON renderer, with the encoder made once: given the
    renderer's keywords (its ``default``), `json.dumps` makes a `json.JSONEncoder` per
    call.  Renders exactly as `json.dumps(obj, **kw)`; new keywords make a new encoder."""

    __slots__ = ("_encoder", "_kw")

    def __init__(self) -> None:
        self._kw: dict[str, Any] | None = None
        self._encoder = json.JSONEncoder()

    def __call__(self, obj: Any, **kw: Any) -> str:
        if kw != self._kw:
            self._encoder = json.JSONEncoder(**kw)
            self._kw = kw
        return self._encoder.encode(obj)


#: marks the stdlib handler `route_stdlib_logging` installed, so a later call replaces it
_HANDLER_NAME = "nri-resmgr"


def route_stdlib_logging(config: LogConfig) -> None:
    """Send stdlib `logging` records (the NRI stub's) where `config` sends ours.

    Replaces the handler a previous call installed; other handlers are left alone.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
            handler.close()
    new = _ToStructlog()
    new.set_name(_HANDLER_NAME)
    root.addHandler(new)
    root.setLevel(_LEVELS[config.level])


class _ToStructlog(logging.Handler):
    """stdlib records written by structlog, as ``component`` = the logger's name.

    One writer per stream: structlog's `PrintLogger` writes a line under its lock as two
    writes (the text, then the newline), so a second writer with a lock of its own (a
    stdlib `StreamHandler`) could put its line between them from another thread (the
    placement records' writer logs while the event loop's NRI stub does), and a log
    reader would see two JSON documents on one line.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            log = get_logger(record.name)
            if record.exc_info:
                log.log(record.levelno, record.getMessage(), exc_info=record.exc_info)
            else:
                log.log(record.levelno, record.getMessage())
        except Exception:  # logging.Handler's own rule for a failed emit
            self.handleError(record)


def _resolve_format(config: LogConfig, out: object) -> LogFormat:
    """`auto` is JSON unless `out` is a terminal."""
    if config.format is not LogFormat.AUTO:
        return config.format
    isatty = getattr(out, "isatty", None)
    return LogFormat.CONSOLE if callable(isatty) and isatty() else LogFormat.JSON
