"""The ``log`` section of the daemon's configuration: `LogConfig`, a value.

Theory of operation: the model lives apart from `nri_resmgr.ops.logs` (which installs
logging from it) and from `nri_resmgr.config` (which holds it as a section), so that both
import it and neither imports the other: ``config`` needs no logger, and the logger no
configuration root.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["LOG_LEVELS", "LogConfig", "LogFormat"]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class LogFormat(enum.StrEnum):
    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


class LogConfig(BaseModel):
    """``level``, ``format`` (``auto`` = JSON unless stderr is a terminal), ``file`` and
    ``debug`` (components logged at debug level whatever the global level)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    level: str = "info"
    format: LogFormat = LogFormat.AUTO
    file: str | None = None
    debug: tuple[str, ...] = ()

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        low = value.lower()
        if low == "warn":
            low = "warning"
        if low not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, found {value!r}")
        return low
