"""NRI lifecycle events, the subscription bit mask, and NRI release versions.

Theory of operation: a plugin tells the runtime which events it wants in
`ConfigureResponse.events`, a bit mask in which event `e` (1..14) is bit `1 << (e - 1)`.
The runtime accepts only bits below its own `LAST` event: NRI v0.10.0 added events
12..14 and moved `LAST` from 12 to 15, so the valid mask is 0x3FFF from v0.10.0 on and
0x7FF before. A mask with any other bit makes an older runtime reject Configure and drop
the plugin, so a plugin must clip its wish list to what the runtime can deliver. A mask
of 0 means "everything valid", which obliges the plugin to answer every event.

`NRIVersion` is a parsed NRI module version (a Go semantic version: release, pre-release,
or a Go pseudo-version such as `v0.3.1-0.20230504231226-94185418e253`, which sorts
just below `v0.3.1`). `git describe` suffixes (`v0.12.2-3-gabc1234`) are read as the
tag they follow. Versions order by semantic-version precedence; build metadata is
ignored. Empty and placeholder strings ("0.0.0-unknown", "(devel)", "unknown") mean
"not known" and parse to `None` via `parse_nri_version`.

Everything here is pure: no I/O, no state.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass


class Event(enum.IntEnum):
    """Mirror of the schema's `enum Event` (without its `LAST` sentinel)."""

    UNKNOWN = 0
    RUN_POD_SANDBOX = 1
    STOP_POD_SANDBOX = 2
    REMOVE_POD_SANDBOX = 3
    CREATE_CONTAINER = 4
    POST_CREATE_CONTAINER = 5
    START_CONTAINER = 6
    POST_START_CONTAINER = 7
    UPDATE_CONTAINER = 8
    POST_UPDATE_CONTAINER = 9
    STOP_CONTAINER = 10
    REMOVE_CONTAINER = 11
    UPDATE_POD_SANDBOX = 12
    POST_UPDATE_POD_SANDBOX = 13
    VALIDATE_CONTAINER_ADJUSTMENT = 14

    @property
    def bit(self) -> int:
        """The subscription bit of this event; UNKNOWN has none."""
        if self is Event.UNKNOWN:
            raise ValueError("event UNKNOWN: expected a subscribable event, found UNKNOWN (0)")
        return 1 << (self.value - 1)


#: Valid subscription mask of runtimes with NRI v0.10.0 or later (events 1..14).
MASK_V0_10 = 0x3FFF
#: Valid subscription mask of runtimes before NRI v0.10.0 (events 1..11).
MASK_BEFORE_V0_10 = 0x7FF

_MAX_EVENT = max(Event)


def event_mask(events: Iterable[Event | int]) -> int:
    """The subscription mask for `events`; raises ValueError for UNKNOWN or unknown values."""
    mask = 0
    for raw in events:
        try:
            event = Event(raw)
        except ValueError as exc:
            raise ValueError(
                f"event {raw!r}: expected one of 1..{int(_MAX_EVENT)}, found an unknown value"
            ) from exc
        mask |= event.bit
    return mask


def events_in_mask(mask: int) -> frozenset[Event]:
    """The events whose bits are set in `mask`; raises ValueError for bits with no event."""
    if mask < 0:
        raise ValueError(
            f"event mask {mask:#x}: expected a non-negative mask, found a negative one"
        )
    unknown = mask & ~((1 << int(_MAX_EVENT)) - 1)
    if unknown:
        raise ValueError(
            f"event mask {mask:#x}: expected bits of events 1..{int(_MAX_EVENT)}, "
            f"found unknown bits {unknown:#x}"
        )
    return frozenset(e for e in Event if e is not Event.UNKNOWN and mask & e.bit)


_SEMVER = re.compile(
    r"""^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)(?:\.(?P<patch>0|[1-9]\d*))?
        (?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?
        (?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$""",
    re.VERBOSE,
)
# "N-gHEX" (optionally ".dirty"-like tails) left by `git describe` after a tag.
_GIT_DESCRIBE = re.compile(r"^\d+-g[0-9a-fA-F]+(?:\..*)?$")
# Go pseudo-version tail: a 14-digit UTC timestamp and a 12-digit commit hash.
_PSEUDO_TAIL = re.compile(r"(?:^|\.)\d{14}-[0-9a-f]{12}$")
_UNKNOWN_SPELLINGS = frozenset({"", "unknown", "(devel)", "0.0.0-unknown", "v0.0.0-unknown"})


def _pre_key(pre: str) -> tuple[tuple[int, int, str], ...]:
    """Semantic-version precedence key of a pre-release string (numeric < alphanumeric)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class NRIVersion:
    """A parsed NRI release version, ordered by semantic-version precedence."""

    major: int
    minor: int
    patch: int
    prerelease: str = ""

    @classmethod
    def parse(cls, text: str) -> NRIVersion:
        """Parse "v0.12.2", "0.12.2", "v0.3.1-0.2023...-abc", "v0.12.0-rc.1", "v0.12.2-3-gabc".

        Raises ValueError for anything else, including the empty string.
        """
        stripped = text.strip()
        m = _SEMVER.match(stripped)
        if m is None:
            raise ValueError(
                f"NRI version {text!r}: expected a semantic version like v0.12.2, found no match"
            )
        pre = m.group("pre") or ""
        if _GIT_DESCRIBE.match(pre):
            pre = ""
        return cls(
            major=int(m.group("major")),
            minor=int(m.group("minor")),
            patch=int(m.group("patch") or 0),
            prerelease=pre,
        )

    @property
    def release(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    @property
    def is_pseudo(self) -> bool:
        """True for a Go pseudo-version (an untagged commit, sorting below this release)."""
        return _PSEUDO_TAIL.search(self.prerelease) is not None

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, NRIVersion):
            return NotImplemented
        if self.release != other.release:
            return self.release < other.release
        if self.prerelease == other.prerelease:
            return False
        if not self.prerelease:
            return False
        if not other.prerelease:
            return True
        return _pre_key(self.prerelease) < _pre_key(other.prerelease)

    def __str__(self) -> str:
        text = f"v{self.major}.{self.minor}.{self.patch}"
        return f"{text}-{self.prerelease}" if self.prerelease else text


def parse_nri_version(text: str) -> NRIVersion | None:
    """Like `NRIVersion.parse`, but empty and placeholder spellings give None (unknown)."""
    if text.strip().lower() in _UNKNOWN_SPELLINGS:
        return None
    return NRIVersion.parse(text)


#: First release with events 12..14 (UpdatePodSandbox, PostUpdatePodSandbox, validation).
V0_10_0 = NRIVersion(0, 10, 0)
#: First release with dedicated RPCs for the events formerly sent through StateChange.
V0_12_0 = NRIVersion(0, 12, 0)


def valid_events_mask(nri_version: NRIVersion | None) -> int:
    """The largest subscription mask a runtime of `nri_version` accepts (None: unknown)."""
    if nri_version is not None and nri_version >= V0_10_0:
        return MASK_V0_10
    return MASK_BEFORE_V0_10


def supported_events(nri_version: NRIVersion | None) -> frozenset[Event]:
    """The events a runtime of `nri_version` can deliver (None: assume the oldest)."""
    return events_in_mask(valid_events_mask(nri_version))


def has_dedicated_event_rpcs(nri_version: NRIVersion | None) -> bool:
    """Whether the runtime calls RunPodSandbox, StartContainer, ... instead of StateChange.

    Runtimes from v0.12.0 on try the dedicated call first and fall back to StateChange
    only when the plugin answers UNIMPLEMENTED; older ones only use StateChange.
    """
    return nri_version is not None and nri_version >= V0_12_0
