"""Enabling NRI in the container runtime's configuration.

Theory of operation: both edits are pure text-to-text functions so that a dry run and a
real run share every line of logic, and tests can assert exact results.

- containerd keeps NRI under the table `[plugins."io.containerd.nri.v1.nri"]` in the
  version 2 layout (containerd 1.7, where NRI is disabled by default) as in the version 3
  (containerd 2.0-2.2) and version 4 (2.3, as its `config default` prints) layouts, where
  it is enabled by default.  We set `disable = false` and, when asked,
  the registration and request timeouts, with tomlkit so that comments, ordering, quoting
  and every other table survive untouched.  A file without `version` is the version 1
  layout, which predates NRI: it is refused with advice rather than guessed at.  A missing
  file is created in the version 2 layout, which both 1.7 and 2.x accept.
- CRI-O reads drop-ins from `/etc/crio/crio.conf.d/`; we write (or edit) one file with
  `[crio.nri] enable_nri = true` and the optional timeouts.
"""

from __future__ import annotations

import difflib
import enum
import re
from dataclasses import dataclass

from nri_resmgr.model import ConfigError

NRI_TABLE = "io.containerd.nri.v1.nri"
CONTAINERD_DEFAULT_PATH = "/etc/containerd/config.toml"
CRIO_DEFAULT_PATH = "/etc/crio/crio.conf.d/10-enable-nri.conf"
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


#: containerd configuration layouts that have the NRI table, and who writes them; a later
#: layout is accepted too (containerd keeps the NRI table's name across layouts)
LAYOUTS = {2: "containerd 1.7", 3: "containerd 2.0-2.2", 4: "containerd 2.3"}


def _layouts() -> str:
    """``version = 2 (containerd 1.7), version = 3 (...) ... or later``, from `LAYOUTS`."""
    known = [f"version = {v} ({who})" for v, who in sorted(LAYOUTS.items())]
    return ", ".join(known) + f", or a later version (at least {min(LAYOUTS)})"


class Runtime(enum.StrEnum):
    CONTAINERD = "containerd"
    CRIO = "crio"


@dataclass(frozen=True, slots=True)
class NRISettings:
    """What to set besides enabling NRI; None leaves the runtime's value alone."""

    registration_timeout: str | None = None
    request_timeout: str | None = None
    socket_path: str | None = None


def _check_duration(name: str, value: str | None) -> None:
    if value is not None and not _DURATION.match(value):
        raise ConfigError(f"{name} {value!r} is not a Go duration; expected e.g. '5s', '2500ms'")


def enable_containerd(text: str, settings: NRISettings, *, path: str = "config.toml") -> str:
    """Return containerd config `text` with NRI enabled (and timeouts set)."""
    import tomlkit  # here: `nri-resmgr --help` imports this module for its constants
    from tomlkit.exceptions import TOMLKitError

    _check_duration("registration timeout", settings.registration_timeout)
    _check_duration("request timeout", settings.request_timeout)
    if not text.strip():
        doc = tomlkit.document()
        doc["version"] = 2
    else:
        try:
            doc = tomlkit.parse(text)
        except TOMLKitError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    version = doc.get("version")
    if version is None:
        raise ConfigError(
            f"{path}: no 'version' key, so this is the version 1 layout, which predates NRI; "
            f"expected {_layouts()}"
        )
    if isinstance(version, bool) or not isinstance(version, int) or version < min(LAYOUTS):
        raise ConfigError(f"{path}: version = {version!r}; expected {_layouts()}")
    plugins = doc.get("plugins")
    if plugins is None:
        plugins = tomlkit.table(is_super_table=True)
        doc["plugins"] = plugins
    elif not isinstance(plugins, dict):
        raise ConfigError(f"{path}: 'plugins' is a {type(plugins).__name__}; expected a table")
    nri = plugins.get(NRI_TABLE)
    if nri is None:
        nri = tomlkit.table()
        plugins[NRI_TABLE] = nri
    elif not isinstance(nri, dict):
        raise ConfigError(f'{path}: plugins."{NRI_TABLE}" is not a table')
    nri["disable"] = False
    if settings.socket_path is not None:
        nri["socket_path"] = settings.socket_path
    if settings.registration_timeout is not None:
        nri["plugin_registration_timeout"] = settings.registration_timeout
    if settings.request_timeout is not None:
        nri["plugin_request_timeout"] = settings.request_timeout
    return tomlkit.dumps(doc)


def enable_crio(text: str, settings: NRISettings, *, path: str = "10-enable-nri.conf") -> str:
    """Return a CRI-O drop-in (new or edited) with NRI enabled."""
    import tomlkit  # here: `nri-resmgr --help` imports this module for its constants
    from tomlkit.exceptions import TOMLKitError

    _check_duration("registration timeout", settings.registration_timeout)
    _check_duration("request timeout", settings.request_timeout)
    try:
        doc = tomlkit.parse(text) if text.strip() else tomlkit.document()
    except TOMLKitError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    crio = doc.get("crio")
    if crio is None:
        crio = tomlkit.table(is_super_table=True)
        doc["crio"] = crio
    nri = crio.get("nri")
    if nri is None:
        nri = tomlkit.table()
        crio["nri"] = nri
    nri["enable_nri"] = True
    if settings.socket_path is not None:
        nri["nri_listen"] = settings.socket_path
    if settings.registration_timeout is not None:
        nri["nri_plugin_registration_timeout"] = settings.registration_timeout
    if settings.request_timeout is not None:
        nri["nri_plugin_request_timeout"] = settings.request_timeout
    return tomlkit.dumps(doc)


def edit(runtime: Runtime, text: str, settings: NRISettings, *, path: str) -> str:
    if runtime is Runtime.CONTAINERD:
        return enable_containerd(text, settings, path=path)
    return enable_crio(text, settings, path=path)


def unified_diff(before: str, after: str, *, path: str) -> str:
    """A unified diff of the edit, as `--dry-run` shows it."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{path} (current)",
            tofile=f"{path} (with NRI enabled)",
        )
    )
