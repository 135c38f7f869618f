"""Fixtures of the e2e suite: prerequisites, cached builds, images, a private runtime.

Every test here is marked `e2e` and parametrised over `RUNTIMES`: the containerd releases
in `containerd.CONTAINERD_RELEASES` (ids `ctd1.7` and `ctd2`) and CRI-O (`crio.CRIO`, id
`crio`, a `crio.Crio` behind the same `containerd` fixture). Prerequisites are checked with
`require`, so a laptop without root skips with a reason and CI (NRI_RESMGR_STRICT=1)
fails. Missing Debian packages (runc, busybox-static) are installed when running as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.e2e import containerd as ctdmod
from tests.e2e import cri
from tests.e2e import crio as criomod
from tests.e2e.images import BUSYBOX, build_images
from tests.e2e.layout import Layout, unmount_under
from tests.support.requirements import REPO, go_binary, require

RELEASE_IDS = {"containerd-1.7": "ctd1.7", "containerd-2": "ctd2", "crio": "crio"}
#: every runtime the suite runs on: the containerd releases and CRI-O
RUNTIMES = (*ctdmod.CONTAINERD_RELEASES, criomod.CRIO)
SETUP = Path(__file__).resolve().parent / "setup.sh"


#: per-test timeout: the first test of a session may build containerd and crictl cold
E2E_TIMEOUT = 2400


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "request_timeout(value): NRI plugin_request_timeout of the test's containerd"
    )
    config.addinivalue_line(
        "markers",
        "registration_timeout(value): NRI plugin_registration_timeout of the test's containerd",
    )
    config.addinivalue_line(
        "markers", "built_runc: the test's containerd runs the runc built from its Go module"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))


def _is_static(path: Path) -> bool:
    if not path.exists():
        return False
    r = subprocess.run(["file", "-L", str(path)], capture_output=True, text=True)
    if r.returncode != 0:  # no `file`: trust the package name instead
        return True
    return "statically linked" in r.stdout or "static-pie" in r.stdout


def _cpuset_controller() -> bool:
    v1 = Path("/sys/fs/cgroup/cpuset/cpuset.cpus")
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    return v1.exists() or (v2.exists() and "cpuset" in v2.read_text().split())


@pytest.fixture(scope="session")
def e2e_host() -> str:
    """Check root, Go, runc, busybox-static and cpuset; install the Debian parts as root."""
    require(os.geteuid() == 0, "e2e tests run containerd and runc, which need root")
    go = go_binary()
    require(go, "the Go toolchain is not installed (needed to build containerd and crictl)")
    assert go is not None
    runc = shutil.which("runc") or ("/usr/sbin/runc" if Path("/usr/sbin/runc").exists() else "")
    if not runc or not _is_static(BUSYBOX):
        subprocess.run(["sh", str(SETUP)], capture_output=True, text=True, timeout=900)
        runc = shutil.which("runc") or ("/usr/sbin/runc" if Path("/usr/sbin/runc").exists() else "")
    require(runc, f"runc is not installed and `sh {SETUP}` could not install it")
    require(
        _is_static(BUSYBOX),
        f"{BUSYBOX} is not Debian's busybox-static and `sh {SETUP}` could not install it",
    )
    require(_cpuset_controller(), "no cgroup cpuset controller is mounted under /sys/fs/cgroup")
    return go


@pytest.fixture(scope="session")
def crictl_bin(e2e_host: str) -> Path:
    return ctdmod.build(ctdmod.CRI_TOOLS, e2e_host)["crictl"]


@pytest.fixture(scope="session")
def image_archives(e2e_host: str) -> list[Path]:
    return build_images(
        ctdmod.CACHE / "images",
        sandbox_ref=ctdmod.SANDBOX_IMAGE,
        test_ref=ctdmod.TEST_IMAGE,
    )


@pytest.fixture(
    scope="session",
    params=[r.name for r in RUNTIMES],
    ids=[RELEASE_IDS[r.name] for r in RUNTIMES],
)
def release(request: pytest.FixtureRequest) -> ctdmod.Release:
    return next(r for r in RUNTIMES if r.name == request.param)


@pytest.fixture(scope="session")
def _built() -> dict[str, dict[str, Path]]:
    return {}


@pytest.fixture
def containerd_bins(
    e2e_host: str, release: ctdmod.Release, _built: dict[str, dict[str, Path]]
) -> dict[str, Path]:
    if release.name not in _built:
        if release is criomod.CRIO:
            require(criomod.CONMON.exists(), f"{criomod.CONMON} (Debian's conmon) is not installed")
            _built[release.name] = criomod.build(e2e_host)
        else:
            _built[release.name] = ctdmod.build(release, e2e_host)
    return _built[release.name]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short private dir (unix socket paths must stay under 108 bytes)."""
    base = Path(tempfile.mkdtemp(prefix="e2e-", dir="/tmp"))
    try:
        yield base
    finally:
        unmount_under(base)
        shutil.rmtree(base, ignore_errors=True)


class Cgroups:
    """Remembers pod cgroup parents so teardown can rmdir what runc left behind."""

    def __init__(self) -> None:
        self.parents: list[str] = []

    def cleanup(self) -> None:
        for parent in self.parents:
            cri.kill_cgroup_tree("cpuset", parent)  # anything a killed shim left running
            for controller in os.listdir(cri.CGROUP_ROOT):
                for leaf in sorted(
                    (cri.CGROUP_ROOT / controller / parent.lstrip("/")).glob("*/"), reverse=True
                ):
                    with contextlib.suppress(OSError):
                        leaf.rmdir()
                cri.remove_cgroup_tree(controller, parent)


@pytest.fixture
def containerd(
    release: ctdmod.Release,
    containerd_bins: dict[str, Path],
    crictl_bin: Path,
    image_archives: list[Path],
    short_tmp: Path,
    request: pytest.FixtureRequest,
) -> Iterator[ctdmod.Containerd]:
    """A running private containerd with the test images imported; stopped after the test.

    `@pytest.mark.request_timeout("5s")` changes NRI's plugin request timeout,
    `@pytest.mark.registration_timeout("15s")` its registration timeout;
    `@pytest.mark.built_runc` runs runc 1.4 built from its Go module instead of Debian's.
    """
    marker = request.node.get_closest_marker("request_timeout")
    timeout = str(marker.args[0]) if marker else "2s"
    reg_marker = request.node.get_closest_marker("registration_timeout")
    registration = str(reg_marker.args[0]) if reg_marker else "5s"
    layout = Layout(short_tmp)
    runc = None
    if request.node.get_closest_marker("built_runc") is not None:
        go = go_binary()
        require(go, "the Go toolchain is not installed (needed to build runc)")
        assert go is not None
        runc = ctdmod.build(ctdmod.RUNC, go)["runc"]
    ctd: ctdmod.Containerd
    if release is criomod.CRIO:
        ctd = criomod.Crio(
            containerd_bins, crictl_bin, layout,
            request_timeout=timeout, registration_timeout=registration,
        )  # fmt: skip
    else:
        ctd = ctdmod.Containerd(
            release, containerd_bins, crictl_bin, layout,
            request_timeout=timeout, registration_timeout=registration, runc=runc,
        )  # fmt: skip
    tracked = Cgroups()
    try:
        ctd.start()
        for archive in image_archives:
            ctd.import_image(archive)
        yield ctd
    finally:
        try:
            ctd.cleanup()
        finally:
            tracked.parents.extend(_pod_parents(ctd))
            tracked.cleanup()
            log = ctd.log_text()
            if log:
                dest = ctdmod.CACHE / "logs"
                dest.mkdir(parents=True, exist_ok=True)
                (dest / f"{request.node.name}-{short_tmp.name}.containerd.log").write_text(log)


def _pod_parents(ctd: ctdmod.Containerd) -> list[str]:
    return criomod.pod_parents(ctd.layout)


# -- plugin processes --------------------------------------------------------------------


class Process:
    """A child process in its own session, killed (group-wide) at teardown."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None):
        self.argv = list(argv)
        self.log = log
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                self.argv, stdout=logf, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True, cwd=REPO,
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()

    def kill9(self) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.proc.wait()

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stacks(self, timeout: float = 5.0) -> str:
        """For a failure's message: where a live Python child is stuck.  SIGABRT makes
        `faulthandler` (on through `python_env`'s PYTHONFAULTHANDLER) write every thread's
        stack into the log, then the child dies; a dead one is left alone."""
        if not self.alive():
            return "(the process had exited)"
        assert self.proc is not None
        self.signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        text = self.output()
        start = text.rfind("Fatal Python error: Aborted")
        return text[start:][-6000:] if start >= 0 else "(no stacks were written)"


@pytest.fixture
def processes() -> Iterator[Callable[..., Process]]:
    """Factory of `Process`es; all are stopped at teardown, even on failure."""
    started: list[Process] = []

    def spawn(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Process:
        p = Process(argv, log, env).start()
        started.append(p)
        return p

    try:
        yield spawn
    finally:
        for p in reversed(started):
            p.stop()


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO}:{env.get('PYTHONPATH', '')}".rstrip(":")
    env["PYTHONFAULTHANDLER"] = "1"  # Process.stacks: where a hung child is
    return env


def python() -> str:
    return sys.executable


def synchronized_line(line: str, plugin: str) -> bool:
    """Whether a line of the runtime's log says `plugin` (NN-name) was synchronized (NRI's
    "connected and synchronized", or a pre-installed plugin's "synchronization success")."""
    return plugin in line and (
        "connected and synchronized" in line or "synchronization success" in line
    )


def wait_plugin_synchronized(
    ctd: ctdmod.Containerd, plugin: str, *, count: int = 1, timeout: float = 30.0,
    proc: Process | None = None,
) -> None:  # fmt: skip
    """Wait until containerd has logged `plugin` (NN-name) synchronized `count` times."""

    def synced() -> bool:
        if proc is not None and not proc.alive():
            raise AssertionError(f"plugin {plugin} exited:\n{proc.output()[-3000:]}")
        n = sum(1 for line in ctd.log_text().splitlines() if synchronized_line(line, plugin))
        return n >= count

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if synced():
            return
        time.sleep(0.1)
    raise AssertionError(
        f"containerd never synchronized plugin {plugin}:\n{ctd.log_tail(40)}"
        + (f"\n--- plugin output ---\n{proc.output()[-3000:]}" if proc else "")
        + (f"\n--- plugin stacks ---\n{proc.stacks()}" if proc else "")
    )


def plugin_failures(ctd: ctdmod.Containerd) -> list[str]:
    """containerd log lines saying a plugin was closed, timed out or failed."""
    bad = ("closing plugin", "plugin registration timed out", "context deadline exceeded",
           "failed to synchronize", "DeadlineExceeded")  # fmt: skip
    return [ln for ln in ctd.log_text().splitlines() if any(b in ln for b in bad)]


def record_prereg_startup(ctd: ctdmod.Containerd, plugin: str, what: str) -> float:
    """Seconds from containerd launching pre-registered `plugin` (NN-name) to its
    synchronization, from containerd's log; appended to .cache/e2e/latency/ (no asserts)."""
    import json

    base = plugin.split("-", 1)[1]
    started = done = None
    for line in ctd.log_text().splitlines():
        t = ctdmod.log_time(line)
        if t is None:
            continue
        if f'starting pre-installed NRI plugin \\"{base}\\"' in line:
            started, done = t, None
        elif plugin in line and "synchronization success" in line:
            done = t
    if started is None or done is None:
        return float("nan")
    seconds = done - started
    out = ctdmod.CACHE / "latency"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "preregistered-startup.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "what": what,
                    "plugin": plugin,
                    "containerd": ctd.release.version,
                    "seconds": round(seconds, 3),
                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
            + "\n"
        )
    return seconds
