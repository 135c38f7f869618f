"""Python driver of the Go fake runtime that wraps the real NRI runtime library.

Theory of operation
-------------------
`tests/conformance/harness/` holds one Go module per NRI release that containerd
ships (`VERSIONS`). Each builds the same program, `nri-fake-runtime`, against
`github.com/containerd/nri` of that release: a fake container runtime around the
real `pkg/adaptation`. It reads one JSON command per line on stdin and writes one
JSON reply per line on stdout; NRI messages are protojson with proto field names
(`container_id`, `linux`, ...; 64-bit integers come back as strings, as protojson
writes them).

`harness_build.build_harness(version)` compiles a version once and caches the binary
under `.cache/conformance/<version>/<hash>/`, keyed by a hash of the Go sources, go.mod
and go.sum, so repeated test runs and benchmarks reuse it.

`GoRuntime` spawns the binary and offers one typed method per command: it is the real
runtime library driven from Python, not a fake of it (`nri_api.testing.FakeRuntime` is
the in-process Python peer). A command that fails in Go (an NRI error, e.g. a plugin's
CreateContainer error or a conflict between plugins) raises `RuntimeCallError` carrying
the Go error text verbatim. Every reply is kept in `last_reply`; `elapsed_ns` in it is measured in
Go around the single adaptation call.

Plugins under test attach in one of two ways:

* pre-registered: `install_preregistered()` writes an executable launcher
  `<dir>/opt/nri/plugins/NN-name` (it `exec`s the absolute `sys.executable` on
  the plugin file, because the runtime starts it with an empty environment) and
  the config `<dir>/etc/nri/conf.d/NN-name.conf`, both before `start()`;
* external: `start_external()` runs the plugin as a child process pointed at
  `<dir>/nri.sock`, after `start()`.

(`harness_attach.attach_plugin` does either, by name.)  Pod and container dicts that
look like what kubelet and containerd produce come from `harness_pods.make_pod()` and
`harness_pods.make_container()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.conformance.harness_build import CONTAINERD_FOR, HarnessError, build_harness

Json = dict[str, Any]


class RuntimeCallError(Exception):
    """A command failed inside the runtime library; `message` is the Go error text."""

    def __init__(self, *, op: str, message: str, reply: Json) -> None:
        super().__init__(f"{op}: {message}")
        self.op = op
        self.message = message
        self.reply = reply


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one Synchronize round returned to the runtime."""

    updates: list[Json]
    pods: int
    containers: int
    elapsed_ns: int


class GoRuntime:
    """A running `nri-fake-runtime` for one NRI version, driven over a pipe."""

    def __init__(
        self,
        *,
        version: str,
        dir: Path,
        binary: Path | None = None,
        stderr_path: Path | None = None,
        call_timeout: float = 60.0,
    ) -> None:
        self.version = version
        self.dir = dir
        self.socket = dir / "nri.sock"
        self.plugin_dir = dir / "opt" / "nri" / "plugins"
        self.config_dir = dir / "etc" / "nri" / "conf.d"
        self.call_timeout = call_timeout
        self.last_reply: Json = {}
        self.externals: list[subprocess.Popen[bytes]] = []
        self.stderr_path = stderr_path or (dir / "harness.stderr")
        binary = binary or build_harness(version)
        dir.mkdir(parents=True, exist_ok=True)
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self._stderr: IO[bytes] = open(self.stderr_path, "wb")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [str(binary)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=_clean_env(),
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    # -- plumbing --

    def _read_loop(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def call(
        self, op: str, *, timeout: float | None = None, check: bool = True, **fields: Any
    ) -> Json:
        """Send one command; return its reply. Raise RuntimeCallError if it failed and check."""
        if self._proc.poll() is not None:
            raise HarnessError(
                f"fake runtime {self.version} exited with {self._proc.returncode}; "
                f"stderr in {self.stderr_path}"
            )
        assert self._proc.stdin is not None
        cmd = {"op": op, **{k: v for k, v in fields.items() if v is not None}}
        try:
            self._proc.stdin.write(json.dumps(cmd).encode() + b"\n")
            self._proc.stdin.flush()
        except BrokenPipeError as exc:
            raise HarnessError(f"fake runtime {self.version} closed its stdin") from exc
        try:
            line = self._lines.get(timeout=timeout or self.call_timeout)
        except queue.Empty:
            raise HarnessError(
                f"fake runtime {self.version}: no reply to {op!r} within "
                f"{timeout or self.call_timeout} s; stderr in {self.stderr_path}"
            ) from None
        if not line:
            raise HarnessError(
                f"fake runtime {self.version} died during {op!r}; stderr in {self.stderr_path}"
            )
        reply: Json = json.loads(line)
        self.last_reply = reply
        if reply.get("op") != op:
            raise HarnessError(
                f"reply out of order: sent {op!r}, got a reply to {reply.get('op')!r}"
            )
        if check and not reply.get("ok"):
            raise RuntimeCallError(op=op, message=str(reply.get("error", "")), reply=reply)
        return reply

    def close(self) -> None:
        """Stop external plugins, tell the harness to quit, reap it."""
        for proc in self.externals:
            _terminate(proc)
        self.externals.clear()
        if self._proc.poll() is None:
            with contextlib.suppress(Exception):
                self.call("quit", timeout=15)
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self) -> GoRuntime:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- runtime lifecycle --

    def nri_version(self) -> str:
        return str(self.call("version")["nri_version"])

    def start(
        self,
        *,
        pods: Sequence[Json] = (),
        containers: Sequence[Json] = (),
        runtime_name: str = "containerd",
        runtime_version: str | None = None,
        request_timeout_ms: int | None = None,
        registration_timeout_ms: int | None = None,
        disable_external: bool = False,
        default_validator: Mapping[str, Any] | None = None,
    ) -> SyncResult | None:
        """Start the adaptation in `dir` (discovering pre-registered plugins).

        `pods`/`containers` are what the runtime reports when a plugin synchronizes.
        Returns the start-up synchronization of the pre-registered plugins, which
        NRI v0.8+ runs inside Start (also with none installed); None on older
        versions, which never synchronize pre-registered plugins.
        `default_validator` is the runtime's default validator table, keyed by the names
        containerd's configuration uses (`required_plugins`, ...; NRI v0.10+, refused
        before); the harness refuses a key the library does not read.
        """
        reply = self.call(
            "start",
            dir=str(self.dir),
            runtime_name=runtime_name,
            runtime_version=runtime_version or CONTAINERD_FOR.get(self.version, "0.0.0"),
            pods=list(pods),
            containers=list(containers),
            request_timeout_ms=request_timeout_ms,
            registration_timeout_ms=registration_timeout_ms,
            disable_external=disable_external or None,
            default_validator=dict(default_validator) if default_validator is not None else None,
        )
        startup = reply.get("startup_sync")
        if startup is None:
            return None
        if startup.get("error"):
            raise RuntimeCallError(op="start", message=startup["error"], reply=reply)
        return _sync_result(startup)

    def stop(self) -> int:
        """Stop the runtime: Adaptation.Stop (closes the listener, kills launched plugins),
        then shut down the connections of external plugins, as a runtime's exit would
        (Stop itself leaves them open). Returns how many connections were shut down."""
        return int(self.call("stop").get("closed_connections", 0))

    def set_state(self, *, pods: Sequence[Json], containers: Sequence[Json]) -> None:
        """Change what the runtime reports to plugins that synchronize from now on."""
        self.call("set_state", pods=list(pods), containers=list(containers))

    def wait_synced(self, *, timeout: float = 20.0) -> SyncResult:
        """Wait until a plugin that connected finished Synchronize and is registered."""
        reply = self.call("wait_synced", timeout_ms=int(timeout * 1000), timeout=timeout + 30)
        return _sync_result(reply)

    def updates(self) -> list[list[Json]]:
        """UpdateContainers calls received since the last call (each a list of ContainerUpdate)."""
        calls: list[list[Json]] = self.call("updates")["calls"]
        return calls

    def fail_updates(self, container_ids: Sequence[str]) -> None:
        """Make UpdateContainers report these container ids as failed."""
        self.call("fail_updates", fail=list(container_ids))

    def logs(self, *, clear: bool = False) -> list[str]:
        """Log lines of the NRI library inside the harness ("level: message")."""
        lines: list[str] = self.call("logs", clear=clear or None)["lines"]
        return lines

    # -- pod and container events --

    def run_pod(self, pod: Json) -> None:
        self.call("run_pod", pod=pod)

    def update_pod(
        self,
        pod: Json,
        *,
        linux_resources: Json | None = None,
        overhead_linux_resources: Json | None = None,
    ) -> Json:
        reply = self.call(
            "update_pod",
            pod=pod,
            linux_resources=linux_resources,
            overhead_linux_resources=overhead_linux_resources,
        )
        return dict(reply.get("response", {}))

    def post_update_pod(self, pod: Json) -> None:
        self.call("post_update_pod", pod=pod)

    def stop_pod(self, pod: Json) -> None:
        self.call("stop_pod", pod=pod)

    def remove_pod(self, pod: Json) -> None:
        self.call("remove_pod", pod=pod)

    def create_container(self, pod: Json, container: Json) -> Json:
        """Relay CreateContainer; return the merged CreateContainerResponse (protojson)."""
        return dict(self.call("create_container", pod=pod, container=container).get("response", {}))

    def post_create(self, pod: Json, container: Json) -> None:
        self.call("post_create", pod=pod, container=container)

    def start_container(self, pod: Json, container: Json) -> None:
        self.call("start_container", pod=pod, container=container)

    def post_start(self, pod: Json, container: Json) -> None:
        self.call("post_start", pod=pod, container=container)

    def update_container(self, pod: Json, container: Json, linux_resources: Json) -> Json:
        reply = self.call(
            "update_container", pod=pod, container=container, linux_resources=linux_resources
        )
        return dict(reply.get("response", {}))

    def post_update(self, pod: Json, container: Json) -> None:
        self.call("post_update", pod=pod, container=container)

    def stop_container(self, pod: Json, container: Json) -> Json:
        return dict(self.call("stop_container", pod=pod, container=container).get("response", {}))

    def remove_container(self, pod: Json, container: Json) -> None:
        self.call("remove_container", pod=pod, container=container)

    # -- in-process Go stub plugins (same NRI version) --

    def go_plugin(
        self,
        *,
        name: str,
        idx: str,
        behaviour: str = "noop",
        cpus: str | None = None,
        events: Sequence[str] | None = None,
    ) -> None:
        """Connect a Go `stub` plugin: behaviour noop, cpuset (sets `cpus`) or fail.

        `events` (NRI Event enum names) narrows its subscription; default: all
        events the version has. Returns after Configure; call wait_synced() next.
        """
        self.call(
            "go_plugin",
            name=name,
            idx=idx,
            behaviour=behaviour,
            cpus=cpus,
            events=list(events) if events is not None else None,
        )

    def go_plugin_events(self, name: str) -> list[Json]:
        events: list[Json] = self.call("go_plugin_events", name=name)["events"]
        return events

    def go_plugin_stop(self, name: str) -> None:
        self.call("go_plugin_stop", name=name)

    # -- Python plugins --

    def install_preregistered(
        self,
        plugin: Path,
        *,
        idx: str,
        name: str,
        config: str | None = None,
        args: Sequence[str] = (),
    ) -> Path:
        """Install `plugin` (a Python file) as pre-registered `idx-name`; call before start()."""
        return install_preregistered(self.dir, plugin, idx=idx, name=name, config=config, args=args)

    def start_external(
        self,
        plugin: Path,
        *,
        idx: str,
        name: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Run `plugin` as an external plugin connecting to this runtime's socket."""
        proc = start_external(
            plugin,
            socket=self.socket,
            idx=idx,
            name=name,
            args=args,
            env=env,
            log_path=log_path or self.dir / f"{idx}-{name}.log",
        )
        self.externals.append(proc)
        return proc


def _sync_result(reply: Mapping[str, Any]) -> SyncResult:
    return SyncResult(
        updates=list(reply.get("updates", [])),
        pods=int(reply.get("pods", 0)),
        containers=int(reply.get("containers", 0)),
        elapsed_ns=int(reply.get("elapsed_ns", 0)),
    )


def _clean_env() -> dict[str, str]:
    """The environment for harness and plugins: no NRI_* variables leaking in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("NRI_PLUGIN_")}


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def install_preregistered(
    dir: Path,
    plugin: Path,
    *,
    idx: str,
    name: str,
    config: str | None = None,
    args: Sequence[str] = (),
) -> Path:
    """Write `dir/opt/nri/plugins/idx-name` (a launcher) and `dir/etc/nri/conf.d/idx-name.conf`.

    The runtime execs the launcher with an environment of exactly NRI_PLUGIN_NAME,
    NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET=3 (no PATH), so the launcher names the
    interpreter by absolute path.
    """
    plugin_dir = dir / "opt" / "nri" / "plugins"
    config_dir = dir / "etc" / "nri" / "conf.d"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    config_dir.mkdir(parents=True, exist_ok=True)
    launcher = plugin_dir / f"{idx}-{name}"
    quoted = " ".join(_sh_quote(a) for a in (sys.executable, str(plugin.resolve()), *args))
    launcher.write_text(f"#!/bin/sh\nexec {quoted}\n")
    launcher.chmod(0o755)
    if config is not None:
        (config_dir / f"{idx}-{name}.conf").write_text(config)
    return launcher


def start_external(
    plugin: Path,
    *,
    socket: Path,
    idx: str,
    name: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `plugin` as an external plugin: `python plugin --socket S --idx NN --name N ARGS`."""
    full_env = _clean_env()
    full_env.update(env or {})
    out: Any = subprocess.DEVNULL
    if log_path is not None:
        out = open(log_path, "ab")  # noqa: SIM115
    try:
        return subprocess.Popen(
            [
                sys.executable,
                str(plugin.resolve()),
                "--socket",
                str(socket),
                "--idx",
                idx,
                "--name",
                name,
                *args,
            ],
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    finally:
        if log_path is not None:
            out.close()


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


@contextlib.contextmanager
def short_tempdir(prefix: str = "nri-") -> Iterator[Path]:
    """A fresh directory under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def go_runtime(version: str, *, stderr_path: Path | None = None) -> Iterator[GoRuntime]:
    """Build (if needed) and spawn the fake runtime for `version` in a fresh short dir."""
    binary = build_harness(version)
    with (
        short_tempdir() as dir,
        GoRuntime(version=version, dir=dir, binary=binary, stderr_path=stderr_path) as rt,
    ):
        yield rt


def read_jsonl(path: Path) -> list[Json]:
    """All records of a JSON-lines file ([] if it does not exist yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prune_empty(value: Any) -> Any:
    """Drop empty dicts, lists and None recursively (the runtime library leaves empty
    sub-messages such as `"hooks": {}` in merged replies; they carry no content)."""
    if isinstance(value, dict):
        pruned = {k: prune_empty(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        items = [prune_empty(v) for v in value]
        return [v for v in items if v not in ({}, [], None)]
    return value
