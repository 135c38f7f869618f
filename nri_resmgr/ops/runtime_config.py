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

Failing closed (`NRISettings.require`): NRI v0.10 and later carry a built-in "default
validator" which, with `required_plugins`, refuses to create a container unless every named
plugin is connected (NRI's `validateRequiredPlugins`: its error reads `validation error:
required plugin "resmgr" not present`).  The names are plugin names without the index, as
the validator's plugin map holds both.  A pod annotated `<tolerate annotation>: "true"` is
exempt: the daemon's own pod must be, or it could never start while the plugin is away.
The table is `[plugins."io.containerd.nri.v1.nri".default_validator]` (keys `enable`,
`required_plugins`, `tolerate_missing_plugins_annotation`: containerd 2.2+, NRI v0.10+)
and `[crio.nri.default_validator]` (keys `nri_enable_default_validator`,
`nri_validator_required_plugins`, `nri_validator_tolerate_missing_plugins_annotation`:
CRI-O 1.34+).  Older runtimes ignore the table (containerd 1.7 and 2.0-2.1 decode their NRI
section into a struct without it), so there a container created while the plugin is away
runs unplaced until the plugin's next Synchronize: `VALIDATOR_SINCE` says so in the
command's output.  Required names already in the file are kept, ours is added once;
`unrequire` takes ours out again (to be done before uninstalling: with the plugin gone for
good, a requirement left behind refuses every new container on the node).
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
#: the annotation key that exempts a pod from `required_plugins` (our default)
TOLERATE_ANNOTATION = "tolerate-missing-plugins.nri-resmgr.io"
#: the runtime releases whose NRI has the default validator with required plugins
VALIDATOR_SINCE = {"containerd": "2.2", "crio": "1.34"}
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
    #: plugin names the runtime's default validator must see connected (fail closed)
    require: tuple[str, ...] = ()
    #: the annotation that exempts a pod from `require`
    tolerate_annotation: str = TOLERATE_ANNOTATION
    #: plugin names to take out of the required ones again (before uninstalling)
    unrequire: tuple[str, ...] = ()


_PLUGIN_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_ANNOTATION_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


def _check_require(settings: NRISettings) -> None:
    for name in settings.require + settings.unrequire:
        if not _PLUGIN_NAME.match(name):
            raise ConfigError(
                f"required plugin {name!r} is not a plugin name; expected e.g. 'resmgr' "
                f"(letters, digits, '_', '.', '+', '-')"
            )
    key = settings.tolerate_annotation
    if settings.require and not _ANNOTATION_KEY.match(key):
        raise ConfigError(
            f"tolerate annotation {key!r} is not an annotation name without a prefix; "
            f"expected e.g. {TOLERATE_ANNOTATION!r} (NRI appends '/pod' or '/container.NAME')"
        )


def _merged(
    existing: object, names: tuple[str, ...], *, where: str, drop: tuple[str, ...] = ()
) -> list[str]:
    """`existing` required plugins (a TOML array or absent), less `drop`, with `names`
    appended once."""
    if existing is None:
        current: list[str] = []
    elif isinstance(existing, list) and all(isinstance(n, str) for n in existing):
        current = [str(n) for n in existing]
    else:
        raise ConfigError(f"{where} is {existing!r}; expected a list of plugin names")
    kept = [n for n in current if n not in drop]
    return kept + [n for n in names if n not in kept]


def _check_duration(name: str, value: str | None) -> None:
    if value is not None and not _DURATION.match(value):
        raise ConfigError(f"{name} {value!r} is not a Go duration; expected e.g. '5s', '2500ms'")


def enable_containerd(text: str, settings: NRISettings, *, path: str = "config.toml") -> str:
    """Return containerd config `text` with NRI enabled (and timeouts set)."""
    import tomlkit  # here: `nri-resmgr --help` imports this module for its constants
    from tomlkit.exceptions import TOMLKitError

    _check_duration("registration timeout", settings.registration_timeout)
    _check_duration("request timeout", settings.request_timeout)
    _check_require(settings)
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
    validator = nri.get("default_validator")
    if validator is not None and not isinstance(validator, dict):
        raise ConfigError(f'{path}: plugins."{NRI_TABLE}".default_validator is not a table')
    if settings.unrequire and validator is not None and "required_plugins" in validator:
        validator["required_plugins"] = _merged(
            validator["required_plugins"], (), drop=settings.unrequire,
            where=f'{path}: plugins."{NRI_TABLE}".default_validator.required_plugins',
        )  # fmt: skip
    if settings.require:
        if validator is None:
            validator = tomlkit.table()
            nri["default_validator"] = validator
        validator["enable"] = True
        validator["required_plugins"] = _merged(
            validator.get("required_plugins"),
            settings.require,
            where=f'{path}: plugins."{NRI_TABLE}".default_validator.required_plugins',
        )
        validator["tolerate_missing_plugins_annotation"] = settings.tolerate_annotation
    return tomlkit.dumps(doc)


def enable_crio(text: str, settings: NRISettings, *, path: str = "10-enable-nri.conf") -> str:
    """Return a CRI-O drop-in (new or edited) with NRI enabled."""
    import tomlkit  # here: `nri-resmgr --help` imports this module for its constants
    from tomlkit.exceptions import TOMLKitError

    _check_duration("registration timeout", settings.registration_timeout)
    _check_duration("request timeout", settings.request_timeout)
    _check_require(settings)
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
    validator = nri.get("default_validator")
    if validator is not None and not isinstance(validator, dict):
        raise ConfigError(f"{path}: crio.nri.default_validator is not a table")
    required = "nri_validator_required_plugins"
    if settings.unrequire and validator is not None and required in validator:
        validator[required] = _merged(
            validator[required], (), drop=settings.unrequire,
            where=f"{path}: crio.nri.default_validator.{required}",
        )  # fmt: skip
    if settings.require:
        if validator is None:
            validator = tomlkit.table()
            nri["default_validator"] = validator
        validator["nri_enable_default_validator"] = True
        validator["nri_validator_required_plugins"] = _merged(
            validator.get("nri_validator_required_plugins"),
            settings.require,
            where=f"{path}: crio.nri.default_validator.nri_validator_required_plugins",
        )
        validator["nri_validator_tolerate_missing_plugins_annotation"] = (
            settings.tolerate_annotation
        )
    return tomlkit.dumps(doc)


def require_note(runtime: Runtime, settings: NRISettings) -> str:
    """What `require` means on this runtime, for the command's output."""
    names = ", ".join(repr(n) for n in settings.require)
    return (
        f"containers fail to create while plugin(s) {names} are not connected, unless their "
        f"pod is annotated {settings.tolerate_annotation}: \"true\" (the kubelet retries); "
        f"this needs {runtime.value} {VALIDATOR_SINCE[runtime.value]} or later, older "
        f"releases ignore the setting and create such containers unplaced\n"
    )


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
