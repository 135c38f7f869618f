"""The example plugins and the guide's code, run for real in both modes."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from nri_api import RPCError, api
from nri_api.events import Event
from nri_api.testing import FakeRuntime, make_container, make_pod
from tests.support.preregistered import launch_preregistered, wait_exit

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "plugins"
GUIDE = REPO / "docs" / "plugin-guide.md"
INSTALL = EXAMPLES / "install-preregistered.sh"

POD = make_pod(
    "pod1",
    name="web",
    annotations={"cpuset.example.nri.io/container.nginx": "cpus=2-3; mems=0"},
)
NGINX = make_container("ctr1", pod=POD, name="nginx")
SIDECAR = make_container("ctr2", pod=POD, name="sidecar")


def run(test: Callable[[], Awaitable[None]], timeout: float = 60.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await test()

    asyncio.run(bounded())


@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = tempfile.mkdtemp(prefix="nri-", dir="/tmp")  # short: AF_UNIX path limit
    try:
        yield Path(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def guide_block(marker: str) -> str:
    """The first ```python block after the HTML comment `marker` in the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- {re.escape(marker)}[^>]*-->\s*```python\n(.*?)```", text, flags=re.DOTALL
    )
    assert found, f"{GUIDE}: no python block after <!-- {marker} -->"
    return found.group(1)


def start_external(argv: list[str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRI_PLUGIN_")}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO
    )


async def finish(proc: subprocess.Popen[bytes], rt: FakeRuntime) -> int:
    await rt.close()
    try:
        return await wait_exit(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def install_launcher(script: Path, idx: str, plugin_dir: Path, log: Path) -> Path:
    done = subprocess.run(
        ["/bin/sh", str(INSTALL), str(script), idx, str(plugin_dir), str(log)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    launcher = Path(done.stdout.strip())
    name = script.stem.replace("_", "-")
    assert launcher == plugin_dir / f"{idx}-{name}"
    assert os.access(launcher, os.X_OK)
    return launcher


@pytest.mark.parametrize("example", ["logger.py", "annotate_cpuset.py", "validate_hooks.py"])
def test_examples_are_short(example: str) -> None:
    lines = (EXAMPLES / example).read_text(encoding="utf-8").splitlines()
    assert len(lines) < 40, f"{example}: {len(lines)} lines"


# -- the guide ---------------------------------------------------------------------------


def guide_file(name: str) -> str:
    """The guide's block for examples/plugins/NAME, checked to be that file verbatim."""
    code = guide_block(f"file examples/plugins/{name}")
    assert code == (EXAMPLES / name).read_text(encoding="utf-8"), (
        f"{GUIDE}: the block shown for examples/plugins/{name} differs from the file"
    )
    return code


@pytest.mark.parametrize("name", ["pin.py", "test_pin.py"])
def test_the_guide_shows_the_example_files_verbatim(name: str) -> None:
    guide_file(name)


def test_ten_line_plugin_from_the_guide(workdir: Path) -> None:
    code = guide_file("pin.py")
    assert len(code.splitlines()) <= 10
    script = workdir / "pin.py"
    script.write_text(code, encoding="utf-8")
    sock = str(workdir / "nri.sock")

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.11.0") as rt:
            await rt.listen(sock)
            proc = start_external(
                [sys.executable, str(script), "--idx", "50", "--name", "pin", "--socket", sock]
            )
            try:
                ready = await rt.wait_ready(timeout=30)
                assert ready.events == Event.CREATE_CONTAINER.bit
                reply = await rt.create_container(POD, NGINX)
                assert reply.adjust.linux.resources.cpu.cpus == "0-1"
                assert [(e.key, e.value) for e in reply.adjust.env] == [("PINNED_BY", "50-pin")]
            finally:
                assert await finish(proc, rt) == 1

    run(body)


def test_the_guides_test_runs_under_pytest_as_written(workdir: Path) -> None:
    """pin.py and test_pin.py copied from the guide, then the guide's pytest command."""
    (workdir / "pin.py").write_text(guide_file("pin.py"), encoding="utf-8")
    (workdir / "test_pin.py").write_text(guide_file("test_pin.py"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_pin.py"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


# -- logger ------------------------------------------------------------------------------


def test_logger_external_on_an_old_runtime(workdir: Path) -> None:
    log = workdir / "logger.log"
    sock = str(workdir / "nri.sock")
    argv = [sys.executable, str(EXAMPLES / "logger.py"), "--socket", sock, "--idx", "10"]
    argv += ["--name", "logger", "--log-file", str(log)]

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.8.0", pods=[POD], containers=[NGINX]) as rt:
            await rt.listen(sock)
            proc = start_external(argv)
            try:
                ready = await rt.wait_ready(timeout=30)
                assert ready.events == 0x7FF  # events 12-14 clipped for NRI v0.8
                await rt.create_container(POD, NGINX)
                await rt.start_container(POD, NGINX)
                await rt.remove_pod_sandbox(POD)
            finally:
                assert await finish(proc, rt) == 1

    run(body)
    text = log.read_text(encoding="utf-8")
    assert "synchronize: 1 pods, 1 containers" in text
    assert "create_container web nginx" in text
    assert "start_container web nginx" in text
    assert "remove_pod_sandbox web" in text
    assert "VALIDATE_CONTAINER_ADJUSTMENT" in text  # the dropped events are logged


def test_logger_preregistered_with_config(workdir: Path) -> None:
    log = workdir / "logger.log"
    launcher = install_launcher(EXAMPLES / "logger.py", "10", workdir / "plugins", log)

    async def body() -> None:
        async with FakeRuntime(config="start_container, remove_container\n") as rt:
            proc = launch_preregistered(
                [str(launcher)], await rt.socketpair(), name="logger", idx="10"
            )
            try:
                ready = await rt.wait_ready(timeout=30)
                assert ready.events == Event.START_CONTAINER.bit | Event.REMOVE_CONTAINER.bit
                assert not await rt.run_pod_sandbox(POD)
                assert await rt.start_container(POD, SIDECAR)
            finally:
                assert await finish(proc, rt) == 1

    run(body)
    text = log.read_text(encoding="utf-8")
    assert "start_container web sidecar" in text
    assert "run_pod_sandbox" not in text


def test_logger_rejects_a_bad_config(workdir: Path) -> None:
    log = workdir / "logger.log"
    launcher = install_launcher(EXAMPLES / "logger.py", "10", workdir / "plugins", log)

    async def body() -> None:
        async with FakeRuntime(config="create_containers") as rt:
            proc = launch_preregistered(
                [str(launcher)], await rt.socketpair(), name="logger", idx="10"
            )
            try:
                with pytest.raises(Exception, match="unknown hooks"):
                    await rt.wait_ready(timeout=30)
            finally:
                assert await finish(proc, rt) == 1

    run(body)


# -- annotate_cpuset ---------------------------------------------------------------------


def test_annotate_cpuset_external(workdir: Path) -> None:
    sock = str(workdir / "nri.sock")
    argv = [sys.executable, str(EXAMPLES / "annotate_cpuset.py"), "--socket", sock]
    argv += ["--idx", "20", "--name", "annotate-cpuset"]

    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock)
            proc = start_external(argv)
            try:
                ready = await rt.wait_ready(timeout=30)
                assert ready.registration.plugin_name == "annotate-cpuset"
                pinned = await rt.create_container(POD, NGINX)
                cpu = pinned.adjust.linux.resources.cpu
                assert (cpu.cpus, cpu.mems) == ("2-3", "0")
                untouched = await rt.create_container(POD, SIDECAR)
                assert not untouched.HasField("adjust")
            finally:
                assert await finish(proc, rt) == 1

    run(body)


def test_annotate_cpuset_preregistered_default_from_config(workdir: Path) -> None:
    log = workdir / "annotate.log"
    launcher = install_launcher(EXAMPLES / "annotate_cpuset.py", "20", workdir / "plugins", log)

    async def body() -> None:
        async with FakeRuntime(config="cpus=0-1\n") as rt:
            proc = launch_preregistered(
                [str(launcher)], await rt.socketpair(), name="annotate-cpuset", idx="20"
            )
            try:
                await rt.wait_ready(timeout=30)
                sidecar = await rt.create_container(POD, SIDECAR)
                assert sidecar.adjust.linux.resources.cpu.cpus == "0-1"
                assert sidecar.adjust.linux.resources.cpu.mems == ""
                nginx = await rt.create_container(POD, NGINX)
                assert nginx.adjust.linux.resources.cpu.cpus == "2-3"
                bad = make_pod("pod2", annotations={"cpuset.example.nri.io/container.x": "cpu=1"})
                with pytest.raises(
                    Exception, match=r"expected keys cpus and mems, found \['cpu'\]"
                ):
                    await rt.create_container(bad, make_container("c", pod=bad, name="x"))
            finally:
                assert await finish(proc, rt) == 1

    run(body)
    assert "web sidecar" in log.read_text(encoding="utf-8")


def test_sigterm_stops_gracefully(workdir: Path) -> None:
    sock = str(workdir / "nri.sock")
    argv = [sys.executable, str(EXAMPLES / "annotate_cpuset.py"), "--socket", sock]
    argv += ["--idx", "20", "--name", "annotate-cpuset"]

    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock)
            proc = start_external(argv)
            try:
                await rt.wait_ready(timeout=30)
                proc.send_signal(signal.SIGTERM)
                assert await wait_exit(proc) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    run(body)


# -- validate_hooks ----------------------------------------------------------------------


def hooked_request(
    pod: api.PodSandbox, owners: str | None
) -> api.ValidateContainerAdjustmentRequest:
    ctr = make_container("ctr9", pod=pod, name="app")
    request = api.ValidateContainerAdjustmentRequest(pod=pod, container=ctr)
    if owners is not None:
        request.adjust.hooks.prestart.add(path="/usr/bin/hook")
        request.owners.owners[ctr.id].simple[api.Field.Value("OciHooks")] = owners
    return request


def test_validate_hooks_external(workdir: Path) -> None:
    sock = str(workdir / "nri.sock")
    argv = [sys.executable, str(EXAMPLES / "validate_hooks.py"), "--socket", sock]
    argv += ["--idx", "99", "--name", "validate-hooks"]
    plain, allowed = (
        make_pod("p1"),
        make_pod("p2", annotations={"hooks.example.nri.io/allow": "true"}),
    )

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.2") as rt:
            await rt.listen(sock)
            proc = start_external(argv)
            try:
                ready = await rt.wait_ready(timeout=30)
                assert ready.events == Event.VALIDATE_CONTAINER_ADJUSTMENT.bit
                verdicts = [
                    await rt.validate_container_adjustment(hooked_request(pod, owners))
                    for pod, owners in [(plain, None), (plain, "10-a,20-b"), (allowed, "10-a")]
                ]
                assert [(v.reject, v.reason) for v in verdicts] == [
                    (False, ""),
                    (True, "OCI hooks by 10-a, 20-b need hooks.example.nri.io/allow=true"),
                    (False, ""),
                ]
            finally:
                assert await finish(proc, rt) == 1

    run(body)


def test_validate_hooks_preregistered_trusts_configured_plugins(workdir: Path) -> None:
    log = workdir / "validate.log"
    launcher = install_launcher(EXAMPLES / "validate_hooks.py", "99", workdir / "plugins", log)

    async def body() -> None:
        async with FakeRuntime(config="10-a, 20-b") as rt:
            proc = launch_preregistered(
                [str(launcher)], await rt.socketpair(), name="validate-hooks", idx="99"
            )
            try:
                await rt.wait_ready(timeout=30)
                pod = make_pod("p1")
                trusted = await rt.validate_container_adjustment(hooked_request(pod, "20-b"))
                assert not trusted.reject
                mixed = await rt.validate_container_adjustment(hooked_request(pod, "10-a,30-c"))
                assert (mixed.reject, mixed.reason) == (
                    True,
                    "OCI hooks by 30-c need hooks.example.nri.io/allow=true",
                )
            finally:
                assert await finish(proc, rt) == 1

    run(body)


def test_validate_hooks_refuses_to_run_on_a_pre_v0_10_runtime(workdir: Path) -> None:
    """Its only event is unknown to NRI v0.8: subscribing to nothing is an error."""
    sock = str(workdir / "nri.sock")
    argv = [sys.executable, str(EXAMPLES / "validate_hooks.py"), "--socket", sock]
    argv += ["--idx", "99", "--name", "validate-hooks"]

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.8.0") as rt:
            await rt.listen(sock)
            proc = start_external(argv)
            try:
                with pytest.raises(RPCError, match="accepts none of the subscribed events"):
                    await rt.wait_ready(timeout=30)
                assert rt.failures
            finally:
                assert await finish(proc, rt) == 1

    run(body)
