"""Build (cached) and run a private containerd for the e2e suite.

Theory of operation
-------------------
Each runtime release is a small wrapper Go module under `tests/e2e/build/<name>/`: a
`go.mod`/`go.sum` that requires exactly one containerd (or cri-tools) release and a
`tools.go` that imports its command packages, so `go mod tidy` keeps them. `go build -o`
then builds each command package out of the module cache. No replace directives are
needed by the pinned releases; if a future release needs one, it goes in that wrapper's
go.mod and the cache key follows.

Binaries land in `.cache/e2e/bin/<name>-<key>/`, where `<key>` hashes the wrapper's
go.mod, go.sum and the build recipe (ldflags, tags, Go version). A second call with the
same key returns the cached paths without invoking Go. A lock file serialises concurrent
builders (pytest-xdist workers, two sessions).

`Containerd` (below) writes a config.toml with a private root, state, grpc socket and NRI
socket under a short temp dir (`tests.e2e.layout.Layout`), starts containerd as root,
waits for CRI to answer, and stops it (SIGTERM, then SIGKILL) on exit, killing every shim
it started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from tests.e2e.layout import Layout, kill_shims, remove_shim_sockets, task_ids, unmount_under

HERE = Path(__file__).resolve().parent


REPO = HERE.parent.parent


BUILD_DIR = HERE / "build"


CACHE = Path(os.environ.get("NRI_RESMGR_E2E_CACHE", REPO / ".cache" / "e2e"))


@dataclasses.dataclass(frozen=True, slots=True)
class Release:
    """One wrapper module and the commands built from it."""

    name: str  # directory under tests/e2e/build/
    module: str  # the pinned module path
    version: str  # its version, without the leading v
    commands: tuple[str, ...]  # command package paths
    ldflags: tuple[str, ...]
    #: a cgo build (CRI-O: seccomp, containers/storage) with these tags instead of _TAGS;
    #: part of the cache key only when set, so the containerd keys stay as they were
    cgo_tags: str | None = None
    #: wrapper files besides go.mod, go.sum and tools.go (e.g. a helper command's source)
    sources: tuple[str, ...] = ()


def _containerd_ldflags(pkg: str, version: str) -> tuple[str, ...]:
    return (
        f"-X {pkg}/version.Version={version}",
        f"-X {pkg}/version.Revision=nri-resmgr-e2e",
        f"-X {pkg}/version.Package=github.com/containerd/containerd",
    )


CONTAINERD_17 = Release(
    name="containerd-1.7",
    module="github.com/containerd/containerd",
    version="1.7.35",
    commands=(
        "github.com/containerd/containerd/cmd/containerd",
        "github.com/containerd/containerd/cmd/containerd-shim-runc-v2",
        "github.com/containerd/containerd/cmd/ctr",
    ),
    ldflags=_containerd_ldflags("github.com/containerd/containerd", "1.7.35"),
)


CONTAINERD_2 = Release(
    name="containerd-2",
    module="github.com/containerd/containerd/v2",
    version="2.3.7",
    commands=(
        "github.com/containerd/containerd/v2/cmd/containerd",
        "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
        "github.com/containerd/containerd/v2/cmd/ctr",
    ),
    ldflags=_containerd_ldflags("github.com/containerd/containerd/v2", "2.3.7"),
)


CRI_TOOLS = Release(
    name="cri-tools",
    module="sigs.k8s.io/cri-tools",
    version="1.36.0",
    commands=("sigs.k8s.io/cri-tools/cmd/crictl",),
    ldflags=("-X sigs.k8s.io/cri-tools/pkg/version.Version=1.36.0",),
)


#: runc 1.4.0, the first release that applies the OCI ``linux.memoryPolicy``
#: (set_mempolicy) that NRI v0.12's LinuxMemoryPolicy adjustment becomes; Debian's runc
#: (1.1.5) ignores the field.  Built with seccomp as its Makefile does (cgo, libseccomp).
RUNC = Release(
    name="runc",
    module="github.com/opencontainers/runc",
    version="1.4.0",
    commands=("github.com/opencontainers/runc",),
    ldflags=("-X main.version=1.4.0", "-X main.gitCommit=nri-resmgr-e2e"),
    cgo_tags="seccomp,urfave_cli_no_docs",
)


RELEASES: dict[str, Release] = {r.name: r for r in (CONTAINERD_17, CONTAINERD_2, CRI_TOOLS, RUNC)}


CONTAINERD_RELEASES = (CONTAINERD_17, CONTAINERD_2)


# CGO off: static binaries, and the btrfs snapshotter (the only cgo user) drops out.
_BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=mod"}


_TAGS = "no_btrfs,no_devmapper,no_zfs"


class BuildError(RuntimeError):
    """`go build` failed; the message carries the tail of its output."""


def _recipe(release: Release) -> tuple[dict[str, str], str]:
    """The build environment and tags of `release`."""
    if release.cgo_tags is None:
        return _BUILD_ENV, _TAGS
    return {**_BUILD_ENV, "CGO_ENABLED": "1"}, release.cgo_tags


def _go_version(go: str) -> str:
    return subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout


def cache_key(release: Release, go: str) -> str:
    """Hash of everything that decides the binaries: go.mod, go.sum, recipe, Go."""
    h = hashlib.sha256()
    wrapper = BUILD_DIR / release.name
    for f in ("go.mod", "go.sum", "tools.go", *release.sources):
        h.update(f.encode() + b"\0" + (wrapper / f).read_bytes() + b"\0")
    env, tags = _recipe(release)
    recipe = {
        "commands": release.commands,
        "ldflags": release.ldflags,
        "env": env,
        "tags": tags,
        "go": _go_version(go),
    }
    h.update(json.dumps(recipe, sort_keys=True).encode())
    return h.hexdigest()[:16]


def binary_name(command: str) -> str:
    return command.rstrip("/").rsplit("/", 1)[-1]


def build(release: Release, go: str, *, log: Path | None = None) -> dict[str, Path]:
    """Build `release`'s commands once and return {command name: binary path}."""
    out = CACHE / "bin" / f"{release.name}-{cache_key(release, go)}"
    paths = {binary_name(c): out / binary_name(c) for c in release.commands}
    if all(p.exists() for p in paths.values()):
        return paths
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".build-{release.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(p.exists() for p in paths.values()):
            return paths
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        build_env, tags = _recipe(release)
        env = {**os.environ, **build_env}
        env["PATH"] = f"{Path(go).parent}:{env.get('PATH', '')}"
        started = time.monotonic()
        cmd = [
            go, "build", "-trimpath", "-tags", tags,
            "-ldflags", " ".join(("-s", "-w", *release.ldflags)),
            "-o", str(tmp) + "/", *release.commands,
        ]  # fmt: skip
        proc = subprocess.run(
            cmd, cwd=BUILD_DIR / release.name, env=env, capture_output=True, text=True
        )
        if log is not None:
            log.write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-4000:]
            raise BuildError(f"building {release.name} {release.version} failed:\n{tail}")
        (tmp / "BUILD.json").write_text(
            json.dumps(
                {
                    "release": release.name,
                    "version": release.version,
                    "seconds": round(time.monotonic() - started, 1),
                    "go": _go_version(go).strip(),
                },
                indent=2,
            )
        )
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return paths


def build_all(go: str, names: Sequence[str] | None = None) -> dict[str, dict[str, Path]]:
    return {n: build(RELEASES[n], go) for n in (names or list(RELEASES))}


SANDBOX_IMAGE = "nri-resmgr.e2e/pause:1"


TEST_IMAGE = "nri-resmgr.e2e/busybox:1"


def render_config(
    release: Release,
    layout: Layout,
    *,
    request_timeout: str = "2s",
    registration_timeout: str = "5s",
) -> str:
    """A containerd config.toml: private paths, NRI on, CRI with runc and cgroupfs."""
    nri = f"""
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "{layout.nri_socket}"
  plugin_path = "{layout.plugin_path}"
  plugin_config_path = "{layout.plugin_config_path}"
  plugin_registration_timeout = "{registration_timeout}"
  plugin_request_timeout = "{request_timeout}"
"""
    head = f"""
root = "{layout.root}"
state = "{layout.state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{layout.grpc_socket}"

[ttrpc]
  address = "{layout.grpc_socket}.ttrpc"

[debug]
  level = "debug"

[metrics]
  address = ""
"""
    runc = str(layout.runc_wrapper)
    if release.name == "containerd-1.7":
        return (
            "version = 2\n"
            + head
            + nri
            + f"""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  enable_selinux = false
  disable_cgroup = false
  disable_apparmor = true
  restrict_oom_score_adj = true  # the test host may not lower it
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{layout.base}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{layout.base}/cni-bin"
    conf_dir = "{layout.base}/cni-conf"
"""
        )
    return (
        "version = 3\n"
        + head
        + nri
        + f"""
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{SANDBOX_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true  # the test host may not lower it
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{layout.base}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{layout.base}/cni-bin"]
    conf_dir = "{layout.base}/cni-conf"
"""
    )


def _runc() -> Path:
    found = shutil.which("runc") or "/usr/sbin/runc"
    return Path(found)


_LOG_TIME = re.compile(r'time="([^"]+)"')


def log_time(line: str) -> float | None:
    """The epoch seconds of a containerd log line (its `time="...Z"` field), or None.

    containerd writes RFC 3339 with nanoseconds; Python keeps microseconds.
    """
    m = _LOG_TIME.search(line)
    if m is None:
        return None
    head, _, frac = m.group(1).rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()
    except ValueError:
        return None


class ContainerdError(RuntimeError):
    pass


class Containerd:
    """One running private containerd. Use `start()`/`stop()` or as a context manager."""

    def __init__(
        self,
        release: Release,
        binaries: dict[str, Path],
        crictl: Path,
        layout: Layout,
        *,
        request_timeout: str = "2s",
        registration_timeout: str = "5s",
        runc: Path | None = None,
    ) -> None:
        self.release = release
        self.binaries = binaries
        self.crictl_bin = crictl
        self.layout = layout
        #: the runc behind the wrapper: Debian's unless given (a built `RUNC`)
        self.runc = runc or _runc()
        self.request_timeout = request_timeout
        self.registration_timeout = registration_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        for d in (
            layout.root, layout.state, layout.plugin_path, layout.plugin_config_path,
            layout.bin, layout.base / "cni-bin", layout.base / "cni-conf",
        ):  # fmt: skip
            d.mkdir(parents=True, exist_ok=True)
        layout.runc_wrapper.write_text(
            "#!/bin/sh\n"
            f"flag='{layout.slow_runc_flag}'\n"
            'if [ -e "$flag" ]; then\n'
            '  for a in "$@"; do [ "$a" = create ] && { sleep "$(cat "$flag")"; break; }; done\n'
            "fi\n"
            f"exec '{self.runc}' \"$@\"\n"
        )
        layout.runc_wrapper.chmod(0o755)
        self.write_config()
        (layout.base / "crictl.yaml").write_text(
            f"runtime-endpoint: {layout.endpoint}\nimage-endpoint: {layout.endpoint}\ntimeout: 30\n"
        )

    def write_config(self) -> None:
        """The runtime's configuration (a subclass runs another runtime: tests/e2e/crio.py)."""
        # containerd finds the shim on PATH; give it exactly the one we built.
        shim = self.layout.bin / "containerd-shim-runc-v2"
        if not shim.exists():
            shim.symlink_to(self.binaries["containerd-shim-runc-v2"])
        self.layout.config.write_text(
            render_config(
                self.release,
                self.layout,
                request_timeout=self.request_timeout,
                registration_timeout=self.registration_timeout,
            )
        )

    def command(self) -> list[str]:
        return [str(self.binaries["containerd"]), "--config", str(self.layout.config)]

    # -- process -------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        path = f"{self.layout.bin}:{self.runc.parent}:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"PATH": path, "HOME": str(self.layout.base), "LANG": "C.UTF-8"}

    def start(self, *, timeout: float = 60.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise ContainerdError("containerd is already running")
        self.layout.nri_socket.unlink(missing_ok=True)
        logf = open(self.layout.log, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            self.command(),
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ContainerdError(
                    f"containerd exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if self.layout.grpc_socket.exists():
                r = self.crictl("info", check=False, timeout=10)
                if r.returncode == 0:
                    return
            time.sleep(0.2)
        raise ContainerdError(f"containerd did not become ready:\n{self.log_tail()}")

    def stop(self, *, timeout: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL containerd (shims and containers survive, as on a real node)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Remove every pod and stop containerd, then reap leftover shims and mounts."""
        tasks = task_ids(self.layout)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.remove_all_pods()
        self.stop()
        kill_shims(self.layout)
        unmount_under(self.layout.base)
        remove_shim_sockets(self.layout, tasks)

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def log_text(self) -> str:
        try:
            return self.layout.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- clients -------------------------------------------------------------------

    def crictl(
        self, *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.crictl_bin), "--config", str(self.layout.base / "crictl.yaml"), *args]
        r = subprocess.run(
            cmd, capture_output=True, text=True, env=self.env(), timeout=timeout, input=stdin
        )
        if check and r.returncode != 0:
            raise ContainerdError(
                f"crictl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}"
            )
        return r

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binaries["ctr"]), "--address", str(self.layout.grpc_socket), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, env=self.env(), timeout=300)
        if check and r.returncode != 0:
            raise ContainerdError(f"ctr {' '.join(args)} failed: {r.stderr.strip()}")
        return r

    def import_image(self, archive: Path) -> None:
        self.ctr("-n", "k8s.io", "images", "import", str(archive))

    def remove_all_pods(self) -> None:
        """Stop and remove every pod; stop trying at the first call that runs out of time.

        containerd (seen on 1.7.35 with NRI v0.8.0; 2.3.7 has the same code) can
        deadlock: `RemovePodSandbox` holds the NRI plugin-sync read lock and takes it
        again in `RemoveContainer`; a plugin that
        registers in between (the chart's reset plugin at uninstall, while the kubelet
        removes pods) waits for the write lock, the second read waits for the writer, and
        every later pod call for the writer too (seen in a fresh-clone run, seventh session:
        a goroutine dump showed both). Each call then takes crictl's 30 s, 60 pods an hour;
        `cleanup` kills containerd and reaps its shims and mounts instead."""
        r = self.crictl("pods", "-q", check=False, timeout=60)
        for pod in r.stdout.split():
            for args in (("stopp", pod), ("rmp", "-f", pod)):
                done = self.crictl(*args, check=False, timeout=60)
                if done.returncode != 0 and "eadline" in done.stderr:  # DeadlineExceeded
                    return


@contextlib.contextmanager
def running(
    release: Release,
    binaries: dict[str, Path],
    crictl: Path,
    base: Path,
    *,
    images: Sequence[Path] = (),
    request_timeout: str = "2s",
) -> Iterator[Containerd]:
    ctd = Containerd(release, binaries, crictl, Layout(base), request_timeout=request_timeout)
    try:
        ctd.start()
        for archive in images:
            ctd.import_image(archive)
        yield ctd
    finally:
        ctd.cleanup()


if __name__ == "__main__":  # python -m tests.e2e.containerd [names...]: warm the cache
    import sys

    from tests.support.requirements import go_binary

    go = go_binary()
    if go is None:
        raise SystemExit("no Go toolchain")
    for name in sys.argv[1:] or list(RELEASES):
        t0 = time.monotonic()
        paths = build(RELEASES[name], go, log=CACHE / f"build-{name}.log")
        print(f"{name}: {time.monotonic() - t0:.0f}s", *map(str, paths.values()))
