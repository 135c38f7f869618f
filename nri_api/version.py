"""Which NRI release is the runtime on the other end of the socket running?

Theory of operation: what a plugin may subscribe to (events 12..14 need NRI v0.10.0) and
how events arrive (dedicated RPCs need v0.12.0) depend on the runtime's NRI release.
Runtimes from NRI v0.12.0 on say it in `ConfigureRequest.NRI_version`; older ones only
give their own name and version (`runtime_name`, `runtime_version`). So, in order:

1. `NRI_version`, when it holds a real version (not "", "unknown", "0.0.0-unknown" or
   "(devel)");
2. else the runtime name and version, looked up in a table of which containerd and
   CRI-O releases vendor which NRI release (from the runtimes' go.mod files; the same
   data NRI itself ships in `pkg/api/version.go`);
3. else the oldest release a plugin can meet, v0.3.0, whose subscription mask limit
   (0x7FF) is safe for every runtime.

The table holds lower bounds: each row says "from this runtime version on, this NRI
release", and a runtime version takes the last row at or below it in semantic-version
order. That fills gaps between sampled patch releases, lets a pre-release such as
"2.2.0-rc.1" fall back to the previous line's release (it sorts below "2.2.0"), and
maps runtime versions newer than the table to the newest known NRI release, which is
safe because runtimes never downgrade NRI. Versions older than the first row (containerd
1.6, CRI-O 1.25), unknown runtimes and unparsable versions yield the default.

Pure functions over strings; no I/O.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from types import MappingProxyType

from nri_api.events import NRIVersion, parse_nri_version, valid_events_mask


class VersionSource(enum.StrEnum):
    """Where an inferred runtime NRI version came from."""

    REPORTED = "reported"
    RUNTIME_TABLE = "runtime-table"
    DEFAULT = "default"


class Runtime(enum.StrEnum):
    """Runtimes whose NRI history is known."""

    CONTAINERD = "containerd"
    CRI_O = "cri-o"


#: The conservative assumption when nothing better is known.
DEFAULT_NRI_VERSION = NRIVersion(0, 3, 0)

# Aliases of runtime names as they might be reported.
_RUNTIME_ALIASES = MappingProxyType(
    {
        "containerd": Runtime.CONTAINERD,
        "io.containerd": Runtime.CONTAINERD,
        "cri-o": Runtime.CRI_O,
        "crio": Runtime.CRI_O,
        "cri_o": Runtime.CRI_O,
    }
)

_CRIO_V0_3_1_PSEUDO = "v0.3.1-0.20230504231226-94185418e253"
_CRIO_V0_9_1_PSEUDO = "v0.9.1-0.20250219030224-e597e7849f24"

# (runtime, first runtime version of the row, NRI release from there on), ascending.
_TABLE: tuple[tuple[Runtime, str, str], ...] = (
    (Runtime.CONTAINERD, "1.7.0", "v0.3.0"),
    (Runtime.CONTAINERD, "1.7.7", "v0.4.0"),
    (Runtime.CONTAINERD, "1.7.14", "v0.6.0"),
    (Runtime.CONTAINERD, "1.7.16", "v0.6.1"),
    (Runtime.CONTAINERD, "1.7.26", "v0.8.0"),
    (Runtime.CONTAINERD, "2.0.0", "v0.8.0"),
    (Runtime.CONTAINERD, "2.1.0", "v0.8.0"),
    (Runtime.CONTAINERD, "2.2.0", "v0.10.0"),
    (Runtime.CONTAINERD, "2.2.1", "v0.11.0"),
    (Runtime.CONTAINERD, "2.3.0", "v0.12.0"),
    (Runtime.CONTAINERD, "2.4.0-beta.0", "v0.12.1"),
    (Runtime.CRI_O, "1.26.0", "v0.2.0"),
    (Runtime.CRI_O, "1.26.2", "v0.3.0"),
    (Runtime.CRI_O, "1.26.4", _CRIO_V0_3_1_PSEUDO),
    (Runtime.CRI_O, "1.27.0", "v0.3.0"),
    (Runtime.CRI_O, "1.27.1", _CRIO_V0_3_1_PSEUDO),
    (Runtime.CRI_O, "1.29.0", "v0.5.0"),
    (Runtime.CRI_O, "1.29.2", "v0.6.0"),
    (Runtime.CRI_O, "1.31.0", "v0.6.1"),
    (Runtime.CRI_O, "1.32.0", "v0.9.0"),
    (Runtime.CRI_O, "1.33.0", _CRIO_V0_9_1_PSEUDO),
    (Runtime.CRI_O, "1.34.0", "v0.10.0"),
    (Runtime.CRI_O, "1.35.0", "v0.11.0"),
)

# A leading "X.Y[.Z]" of a runtime version that is not a clean semantic version
# (distribution builds such as "1.7.24~ds1-1"); the tail is then ignored.
_LEADING_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class RuntimeNRIVersion:
    """The NRI release attributed to the runtime, and how it was decided."""

    version: NRIVersion
    source: VersionSource
    detail: str

    @property
    def events_mask(self) -> int:
        """The largest subscription mask this runtime accepts."""
        return valid_events_mask(self.version)


def parse_runtime_version(text: str) -> NRIVersion | None:
    """Parse a runtime's own version ("v2.1.4", "1.7.27", "2.2.0-rc.1"); None if hopeless."""
    try:
        return NRIVersion.parse(text)
    except ValueError:
        pass
    m = _LEADING_RELEASE.match(text.strip())
    if m is None:
        return None
    return NRIVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def runtime_kind(runtime_name: str) -> Runtime | None:
    """The known runtime that `runtime_name` names, or None."""
    return _RUNTIME_ALIASES.get(runtime_name.strip().lower())


def nri_version_of_runtime(runtime_name: str, runtime_version: str) -> NRIVersion | None:
    """The NRI release vendored by a containerd or CRI-O release; None if not known."""
    kind = runtime_kind(runtime_name)
    if kind is None:
        return None
    parsed = parse_runtime_version(runtime_version)
    if parsed is None:
        return None
    found: str | None = None
    for runtime, first, nri in _TABLE:
        if runtime is kind and NRIVersion.parse(first) <= parsed:
            found = nri
    return None if found is None else NRIVersion.parse(found)


def infer_runtime_nri_version(
    *, nri_version: str, runtime_name: str, runtime_version: str
) -> RuntimeNRIVersion:
    """Decide the runtime's NRI release from the fields of ConfigureRequest."""
    problem = ""
    try:
        reported = parse_nri_version(nri_version)
    except ValueError:
        reported = None
        problem = f"NRI_version {nri_version!r} is not a version; "
    if reported is not None:
        return RuntimeNRIVersion(
            version=reported,
            source=VersionSource.REPORTED,
            detail=f"runtime reported NRI {reported}",
        )
    inferred = nri_version_of_runtime(runtime_name, runtime_version)
    if inferred is not None:
        return RuntimeNRIVersion(
            version=inferred,
            source=VersionSource.RUNTIME_TABLE,
            detail=f"{problem}{runtime_name} {runtime_version} maps to NRI {inferred}",
        )
    return RuntimeNRIVersion(
        version=DEFAULT_NRI_VERSION,
        source=VersionSource.DEFAULT,
        detail=(
            f"{problem}no NRI release known for runtime {runtime_name!r} "
            f"version {runtime_version!r}; assuming the oldest, {DEFAULT_NRI_VERSION}"
        ),
    )
