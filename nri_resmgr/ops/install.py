"""Pre-registered installation: a launcher in the runtime's plugin directory.

Theory of operation: a runtime started with NRI scans `/opt/nri/plugins` for executables
named `NN-name`, starts each with the socket on fd 3, an environment holding only
NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET, and stdout/stderr discarded, and
hands it the content of `/etc/nri/conf.d/NN-name.conf` in Configure.  So the launcher we
write must name its interpreter by absolute path (no PATH), must not rely on PYTHONPATH,
and must send logs to a file.  It is a Python script whose shebang is the interpreter that
ran `install`, running `nri_resmgr.cli.main(["run", ...])` in isolated mode.

Every file we write carries a marker line; `uninstall` removes exactly the files that
carry it and were written for that index, and nothing else.

Removing the launcher does not stop the instance the runtime already started: the runtime
never stops a launched plugin while it runs, and that instance would keep re-pinning
containers at every event.  So `nri-resmgr uninstall` also stops it: `find_launched` finds
the processes the kernel started from our launcher (argv exactly ``[interpreter, "-I",
<launcher path>]``, what the shebang line produces; nothing else matches), and
`stop_launched` sends them SIGTERM (the daemon exits at once) and, after a grace period,
SIGKILL.  Only then does `uninstall` run `nri-resmgr reset`, so nothing re-pins after it.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from nri_resmgr.model import ConfigError

MARKER = "# nri-resmgr pre-registered launcher"
CONF_MARKER = "# nri-resmgr plugin configuration"
PLUGIN_DIR = Path("opt/nri/plugins")
CONF_DIR = Path("etc/nri/conf.d")
DEFAULT_NAME = "resmgr"
DEFAULT_LOG_FILE = "/var/log/nri-resmgr.log"
_IDX = re.compile(r"^[0-9]{2}$")
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True, slots=True)
class InstallPlan:
    launcher: Path
    config: Path
    launcher_text: str
    config_text: str


def _paths(root: Path, index: str, name: str) -> tuple[Path, Path]:
    if not _IDX.match(index):
        raise ConfigError(f"plugin index {index!r} is invalid; expected two digits, e.g. 90")
    if not _NAME.match(name):
        raise ConfigError(f"plugin name {name!r} is invalid; expected characters [A-Za-z0-9_.+-]")
    return root / PLUGIN_DIR / f"{index}-{name}", root / CONF_DIR / f"{index}-{name}.conf"


def plan_install(
    *,
    root: Path,
    index: str,
    name: str = DEFAULT_NAME,
    policy: str = "topology-aware",
    config_text: str = "",
    log_file: str = DEFAULT_LOG_FILE,
    python: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> InstallPlan:
    """Compute what `install` writes, without writing it."""
    launcher, config = _paths(root, index, name)
    interpreter = python or sys.executable
    if not os.path.isabs(interpreter):
        raise ConfigError(f"interpreter {interpreter!r} is not an absolute path")
    # the policy travels in the config file (Configure), so a config edit is all it takes
    argv = ["run", "--log-file", log_file, *extra_args]
    launcher_text = (
        f"#!{interpreter} -I\n"
        f"{MARKER} (index {index}, name {name}); written by `nri-resmgr install`.\n"
        "# The runtime starts this with the NRI socket on fd 3, an empty environment and\n"
        "# stdout/stderr discarded: logs go to the --log-file below.\n"
        "import sys\n"
        "from nri_resmgr.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    body = config_text if config_text.strip() else f"policy: {policy}\n"
    config_out = f"{CONF_MARKER} (index {index}, name {name})\n{body}"
    if not config_out.endswith("\n"):
        config_out += "\n"
    return InstallPlan(launcher, config, launcher_text, config_out)


def install(plan: InstallPlan) -> list[Path]:
    """Write the launcher (mode 0755) and the config (0644); return what was written."""
    for path, marker in ((plan.launcher, MARKER), (plan.config, CONF_MARKER)):
        if path.exists() and marker not in path.read_text(encoding="utf-8", errors="replace"):
            raise ConfigError(
                f"{path} exists and was not written by nri-resmgr; refusing to overwrite"
            )
    plan.launcher.parent.mkdir(parents=True, exist_ok=True)
    plan.config.parent.mkdir(parents=True, exist_ok=True)
    plan.launcher.write_text(plan.launcher_text, encoding="utf-8")
    plan.launcher.chmod(0o755)
    plan.config.write_text(plan.config_text, encoding="utf-8")
    plan.config.chmod(0o644)
    return [plan.launcher, plan.config]


def uninstall(*, root: Path, index: str, name: str = DEFAULT_NAME) -> list[Path]:
    """Remove exactly the files `install` wrote for this index and name."""
    removed: list[Path] = []
    launcher, config = _paths(root, index, name)
    for path, marker in ((launcher, MARKER), (config, CONF_MARKER)):
        if not path.exists():
            continue
        if marker not in path.read_text(encoding="utf-8", errors="replace"):
            raise ConfigError(f"{path} was not written by nri-resmgr; leaving it in place")
        path.unlink()
        removed.append(path)
    return removed


def launcher_path(*, root: Path, index: str, name: str = DEFAULT_NAME) -> Path:
    """Where `install` writes the launcher for this index and name."""
    return _paths(root, index, name)[0]


def _argv(proc: Path, pid: str) -> list[str]:
    try:
        raw = (proc / pid / "cmdline").read_bytes()
    except OSError:  # gone meanwhile, or not ours to read
        return []
    return raw.decode("utf-8", "surrogateescape").split("\0")[:-1] if raw else []


def find_launched(launcher: Path, *, proc: Path = Path("/proc")) -> list[int]:
    """Pids of live processes started from `launcher` (argv ``[python, "-I", launcher]``)."""
    want = os.path.normpath(str(launcher))
    pids: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        argv = _argv(proc, entry.name)
        if len(argv) >= 3 and argv[1] == "-I" and os.path.normpath(argv[2]) == want:
            pids.append(int(entry.name))
    return sorted(pids)


def _alive(pid: int, proc: Path) -> bool:
    """True while `pid` runs (a zombie, exited but not yet reaped by the runtime, does not)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def stop_launched(pids: list[int], *, grace: float = 10.0, proc: Path = Path("/proc")) -> list[str]:
    """SIGTERM `pids`, SIGKILL what still runs after `grace` seconds; what was done, per pid."""
    results: dict[int, str] = {}
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            results[pid] = "already gone"
        except PermissionError as exc:
            raise ConfigError(
                f"uninstall: the running pre-registered instance (pid {pid}): expected to "
                f"stop it; found {exc} (run as root)"
            ) from exc
    waiting = [pid for pid in pids if pid not in results]
    deadline = time.monotonic() + grace
    while waiting and time.monotonic() < deadline:
        waiting = [pid for pid in waiting if _alive(pid, proc)]
        if waiting:
            time.sleep(0.05)
    for pid in pids:
        if pid in results:
            continue
        results[pid] = "stopped (SIGTERM)"
        if pid in waiting:
            try:
                os.kill(pid, signal.SIGKILL)
                results[pid] = f"killed (SIGKILL after {grace:g} s)"
            except ProcessLookupError:
                pass
    return [f"pid {pid}: {results[pid]}" for pid in pids]
