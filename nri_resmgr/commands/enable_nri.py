"""`nri-resmgr enable-nri`: turn NRI on in containerd's or CRI-O's configuration."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from nri_resmgr.model import ConfigError
from nri_resmgr.ops.runtime_config import (
    CONTAINERD_DEFAULT_PATH,
    CRIO_DEFAULT_PATH,
    TOLERATE_ANNOTATION,
    NRISettings,
    Runtime,
    edit,
    require_note,
    unified_diff,
)

NAME = "enable-nri"
HELP = "enable NRI in the containerd config.toml or a CRI-O drop-in (restart the runtime after)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime", choices=[r.value for r in Runtime], required=True)
    parser.add_argument(
        "--config",
        help=f"file to edit (default {CONTAINERD_DEFAULT_PATH} or {CRIO_DEFAULT_PATH})",
    )
    parser.add_argument("--registration-timeout", help="e.g. 5s (runtime default 5s)")
    parser.add_argument("--request-timeout", help="e.g. 2s (runtime default 2s)")
    parser.add_argument("--socket-path", help="NRI socket (runtime default /var/run/nri/nri.sock)")
    required = parser.add_mutually_exclusive_group()
    required.add_argument(
        "--require",
        action="store_true",
        help="fail closed: the runtime's default validator refuses to create containers while "
        "the plugin is not connected (containerd 2.2+, CRI-O 1.34+)",
    )
    required.add_argument(
        "--no-require",
        action="store_true",
        help="take the plugin out of the required ones again (do this before uninstalling)",
    )
    parser.add_argument(
        "--plugin-name", default="resmgr", help="the plugin --require names (default resmgr)"
    )
    parser.add_argument(
        "--tolerate-annotation",
        default=TOLERATE_ANNOTATION,
        help=f"pod annotation exempting a pod from --require (default {TOLERATE_ANNOTATION})",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    runtime = Runtime(args.runtime)
    default = CONTAINERD_DEFAULT_PATH if runtime is Runtime.CONTAINERD else CRIO_DEFAULT_PATH
    path = Path(args.config or default)
    settings = NRISettings(
        registration_timeout=args.registration_timeout,
        request_timeout=args.request_timeout,
        socket_path=args.socket_path,
        require=(args.plugin_name,) if args.require else (),
        tolerate_annotation=args.tolerate_annotation,
        unrequire=(args.plugin_name,) if args.no_require else (),
    )
    try:
        before = path.read_text(encoding="utf-8") if path.exists() else ""
        after = edit(runtime, before, settings, path=str(path))
    except (ConfigError, OSError) as exc:
        print(f"enable-nri: {exc}", file=sys.stderr)
        return 1
    diff = unified_diff(before, after, path=str(path))
    if settings.require:
        sys.stderr.write(f"enable-nri: --require: {require_note(runtime, settings)}")
    if args.dry_run:
        sys.stdout.write(diff or f"{path}: NRI is already enabled as requested; no change\n")
        return 0
    if not diff:
        print(f"{path}: NRI is already enabled as requested; no change")
        return 0
    try:
        _write_atomic(path, after)
    except OSError as exc:
        print(f"enable-nri: cannot write {path}: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: NRI enabled; restart {runtime.value} for it to take effect")
    return 0
