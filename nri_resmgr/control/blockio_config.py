"""Block I/O configuration: the ``control.blockio`` models, validated with every configuration.

Theory of operation: the classes, their devices and limits as the configuration gives
them (the form is in `nri_resmgr.control.blockio`'s docstring), checked where they enter:
device paths and globs under ``/dev/`` without ``..``, byte rates at most 2**63-1 and IOPS
at most 2**32-1, weights 10..1000, class names that are safe path parts.  Nothing here
resolves a device or touches a cgroup: `BlockIOController` (`blockio`) does, and
`nri_resmgr.control.wiring` imports it only when block I/O classes are to be written, so
a daemon without them never loads it.

Pure: no IO.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from nri_resmgr.control.classes import ClassSelection
from nri_resmgr.control.names import validate_name

__all__ = [
    "DEVICE_DIR",
    "MAX_BPS",
    "MAX_IOPS",
    "BlockIOClassDef",
    "BlockIOConfig",
    "DeviceLimits",
    "parse_size",
]

_SIZE_RE = re.compile(r"(\d{1,20})\s*(?:([kKmMgGtT])i?)?[bB]?")
_SCALE = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: the largest throttle in bytes/s: the kernel's limits are 64-bit (and all ones is "max")
MAX_BPS = (1 << 63) - 1
#: the largest throttle in I/O operations per second (the kernel keeps them in 32 bits)
MAX_IOPS = (1 << 32) - 1
#: where block devices live; a device path or glob elsewhere (/etc/passwd) is refused
DEVICE_DIR = "/dev/"


def parse_size(value: object) -> int:
    """Bytes from an int or `"50M"` (k, M, G, T binary; optional `i` and `B`), at most 2**63-1."""
    if isinstance(value, bool):
        raise ValueError(f"expected a byte count like 50M; found {value!r}")
    n: int | None = None
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = _SIZE_RE.fullmatch(value.strip())
        if m:
            n = int(m.group(1)) * _SCALE.get((m.group(2) or "").lower(), 1)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if n is not None and n > MAX_BPS:
        raise ValueError(f"expected a byte count of at most {MAX_BPS} (2**63-1); found {shown}")
    if n is not None and n > 0:
        return n
    raise ValueError(f"expected a positive byte count like 50M or 1048576; found {shown}")


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )


class DeviceLimits(_Model):
    """Limits for a set of devices (paths or globs)."""

    devices: tuple[str, ...]
    weight: int | None = Field(default=None, ge=10, le=1000)
    throttle_read_bps: int | None = Field(default=None, alias="throttleReadBps")
    throttle_write_bps: int | None = Field(default=None, alias="throttleWriteBps")
    throttle_read_iops: int | None = Field(
        default=None, alias="throttleReadIOPS", gt=0, le=MAX_IOPS
    )
    throttle_write_iops: int | None = Field(
        default=None, alias="throttleWriteIOPS", gt=0, le=MAX_IOPS
    )

    @field_validator("throttle_read_bps", "throttle_write_bps", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_size(value)

    @field_validator("devices")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("expected at least one device path or glob")
        for path in value:
            if not path.startswith(DEVICE_DIR) or "\x00" in path or "\n" in path:
                raise ValueError(
                    f"expected a block device path or glob under {DEVICE_DIR}; found {path!r}"
                )
            if ".." in path.split("/"):
                raise ValueError(f"expected a device path without '..'; found {path!r}")
        return value

    @model_validator(mode="after")
    def _something(self) -> DeviceLimits:
        if all(
            v is None
            for v in (
                self.weight,
                self.throttle_read_bps,
                self.throttle_write_bps,
                self.throttle_read_iops,
                self.throttle_write_iops,
            )
        ):
            raise ValueError(
                f"devices {', '.join(self.devices)}: expected a weight or a throttle; found none"
            )
        return self


class BlockIOClassDef(_Model):
    weight: int | None = Field(default=None, ge=10, le=1000)
    devices: tuple[DeviceLimits, ...] = ()


class BlockIOConfig(ClassSelection):
    """`control.blockio`: class selection (enable, ...) plus class definitions."""

    classes: dict[str, BlockIOClassDef] = Field(default_factory=dict)
    #: the runtime has its own block I/O class configuration (goresctrl's, as
    #: nri-plugins expects): nri-resmgr only chooses the names and sends them in the
    #: adjustment, and writes no cgroup files; `classes` then just lists the names
    runtime_classes: bool = Field(default=False, alias="runtimeClasses")

    @field_validator("classes")
    @classmethod
    def _names(cls, value: dict[str, BlockIOClassDef]) -> dict[str, BlockIOClassDef]:
        for name in value:
            validate_name(name, subject=f"control.blockio.classes.{name}", error=ValueError)
        return value
