"""Loggers for tests: one that drops everything, one that keeps every line.

`QUIET` is a structlog logger that writes nothing (for a component that must be given a
logger).  `CapturedLog` keeps each line as a dict of its key/values, with the level it
was logged at under ``"method"``, for tests that assert what was logged.
"""

from __future__ import annotations

from typing import Any

import structlog

__all__ = ["QUIET", "CapturedLog"]

#: a logger that drops every line
QUIET: Any = structlog.wrap_logger(structlog.ReturnLogger())


class CapturedLog:
    """A structlog logger (`log`) whose lines are kept in `lines`, in order."""

    def __init__(self) -> None:
        #: every line logged: its key/values, the event under "event", the level under "method"
        self.lines: list[dict[str, Any]] = []
        self.log: Any = structlog.wrap_logger(structlog.ReturnLogger(), processors=[self._keep])

    def _keep(self, _logger: Any, method: str, event: Any) -> Any:
        self.lines.append({**event, "method": method})
        raise structlog.DropEvent

    def events(self, name: str) -> list[dict[str, Any]]:
        """The lines whose event is `name`, in order."""
        return [line for line in self.lines if line["event"] == name]
