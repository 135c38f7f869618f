"""Protocol fuzzing of the real daemon process over a real Unix socket.

`nri-resmgr run` runs as a subprocess (external mode, static policy, CPUs 0-7 with n and
n+4 siblings, CPU 0 reserved) and connects to a `FakeRuntime` listening on a socket.  Each
case is drawn, seeded, from these kinds:

* **payload**: a well-framed request for a Plugin method (or an unknown one) whose
  protobuf payload is a valid message damaged by `mutate` (bit flips, truncation, huge
  varints, random bytes, ...);
* **hostile**: a well-formed request with hostile values (`tests.support.hostile`);
* **wire**: raw bytes on the socket: damaged mux frames (ConnID 0, declared lengths up to
  4 GiB, truncation), damaged ttrpc headers (bogus stream ids and types, lengths over
  4 MiB), bit-flipped framed requests, random bytes; then the runtime hangs up;
* **rejected**: 1,000 to 100,000 ttrpc headers the server must reject, in one write;
* **chunks**: Synchronize chunks with ``more: true`` that never end.

After every case the daemon process must be alive; after a wire case it must reconnect
and be synchronized again.  A reply may be an error, but never the daemon's "internal
error" (a decode failure is INTERNAL "cannot decode", as Go's ttrpc answers).  At the end
the daemon must place a valid request exactly (exclusive CPUs 1,5 then 2,6), its RSS
must stay bounded, and its log must hold no traceback.

NRI_RESMGR_FUZZ_CASES (default 800: about 30 s here) and NRI_RESMGR_FUZZ_SEED choose
the run; docs/fuzzing.md has the command for a long run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from google.protobuf.message import Message

from nri_api import api
from nri_api.errors import ConnectionClosed, RPCError, StatusCode
from nri_api.mux import frame_message
from nri_api.testing import FakeRuntime
from nri_api.ttrpc import HEADER, encode_message
from tests.support.hostile import (
    fuzz_cases,
    fuzz_seed,
    hostile_container,
    hostile_pod,
    hostile_resources,
    mutate,
)
from tests.support.requirements import REPO

PLUGIN = api.PLUGIN_SERVICE
METHODS = (
    "CreateContainer",
    "UpdateContainer",
    "StopContainer",
    "RemoveContainer",
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "PostUpdateContainer",
    "UpdatePodSandbox",
    "PostUpdatePodSandbox",
    "StateChange",
    "Synchronize",
    "Configure",
    "ValidateContainerAdjustment",
    "Shutdown",
    "NoSuchMethod",
)
#: RSS the daemon may reach at any point of the run (MiB); it starts at about 60
RSS_LIMIT_MIB = 300
#: a wire case's reconnect must be done within this (the daemon's backoff starts at 0.1 s)
RECONNECT_TIMEOUT = 15.0


def _pod(name: str = "db") -> api.PodSandbox:
    uid = f"uid-{name}"
    pod = api.PodSandbox(id=f"sb-{name}", name=name, uid=uid, namespace="default")
    pod.linux.cgroup_parent = f"kubepods-pod{uid.replace('-', '_')}.slice"
    pod.annotations["noderesource.dev/resources"] = '{"initContainers": []}'
    return pod


def _guaranteed(pod: api.PodSandbox, name: str, cpus: str = "") -> api.Container:
    c = api.Container(
        id=f"{pod.name}-{name}",
        pod_sandbox_id=pod.id,
        name=name,
        state=api.ContainerState.CONTAINER_RUNNING,
    )
    c.linux.cgroups_path = f"{pod.linux.cgroup_parent}:cri-containerd:{c.id}"
    r = c.linux.resources
    for field_, value in (("shares", 2048), ("quota", 200_000), ("period", 100_000)):
        getattr(r.cpu, field_).value = value
        getattr(r.cpu, field_).SetInParent()
    r.memory.limit.value = 1 << 28
    r.memory.limit.SetInParent()
    r.cpu.cpus = cpus
    return c


def _seed_payloads() -> dict[str, bytes]:
    """A valid request for each method, to be damaged."""
    pod, ctr = _pod(), _guaranteed(_pod(), "pg", "1,5")
    res = api.LinuxResources()
    res.CopyFrom(ctr.linux.resources)
    pods = [_pod(f"p{i}") for i in range(3)]
    sync = api.SynchronizeRequest(pods=pods, containers=[_guaranteed(p, "c", "2,6") for p in pods])
    simple: dict[str, type] = {
        "RunPodSandbox": api.RunPodSandboxRequest,
        "StopPodSandbox": api.StopPodSandboxRequest,
        "RemovePodSandbox": api.RemovePodSandboxRequest,
        "PostUpdatePodSandbox": api.PostUpdatePodSandboxRequest,
    }
    out = {name: t(pod=pod).SerializeToString() for name, t in simple.items()}
    for name, t in {
        "CreateContainer": api.CreateContainerRequest,
        "StopContainer": api.StopContainerRequest,
        "RemoveContainer": api.RemoveContainerRequest,
        "PostCreateContainer": api.PostCreateContainerRequest,
        "StartContainer": api.StartContainerRequest,
        "PostStartContainer": api.PostStartContainerRequest,
        "PostUpdateContainer": api.PostUpdateContainerRequest,
    }.items():
        out[name] = t(pod=pod, container=ctr).SerializeToString()
    out["UpdateContainer"] = api.UpdateContainerRequest(
        pod=pod, container=ctr, linux_resources=res
    ).SerializeToString()
    out["UpdatePodSandbox"] = api.UpdatePodSandboxRequest(
        pod=pod, linux_resources=res
    ).SerializeToString()
    out["StateChange"] = api.StateChangeEvent(
        event=api.Event.CREATE_CONTAINER, pod=pod, container=ctr
    ).SerializeToString()
    out["Synchronize"] = sync.SerializeToString()
    out["Configure"] = api.ConfigureRequest(config="policy: none").SerializeToString()
    out["ValidateContainerAdjustment"] = api.ValidateContainerAdjustmentRequest(
        pod=pod, container=ctr
    ).SerializeToString()
    out["Shutdown"] = api.Empty().SerializeToString()
    out["NoSuchMethod"] = b"\x0a\x03abc"
    return out


@dataclass
class Run:
    """What a fuzz run saw."""

    rt: FakeRuntime
    proc: subprocess.Popen[bytes]
    seed: int
    kinds: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)
    max_rss_mib: float = 0.0

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        kib = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")
        )
        rss = kib / 1024
        self.max_rss_mib = max(self.max_rss_mib, rss)
        return rss

    def finding(self, index: int, kind: str, text: str) -> None:
        self.findings.append(f"seed {self.seed} case {index} ({kind}): {text}")

    async def reconnected(self) -> None:
        if not self.rt.connected:
            await self.rt.wait_ready(timeout=RECONNECT_TIMEOUT)


def _judge(run: Run, index: int, kind: str, exc: BaseException | None) -> None:
    """A reply or a clean error; never the daemon's internal error or a hang."""
    if exc is None:
        run.outcomes["answered"] += 1
    elif isinstance(exc, RPCError):
        run.outcomes[f"error {exc.code.name}"] += 1
        internal = exc.code is StatusCode.INTERNAL and "cannot decode" not in exc.message
        if internal or "internal error" in exc.message:
            run.finding(index, kind, f"{exc.code.name}: {exc.message[:300]}")
    elif isinstance(exc, ConnectionClosed):
        run.outcomes["closed"] += 1
    elif isinstance(exc, TimeoutError):
        run.finding(index, kind, "no answer within 5 s")
    else:
        run.finding(index, kind, f"{type(exc).__name__}: {exc}")


async def _payload_case(run: Run, rng: random.Random, index: int, seeds: dict[str, bytes]) -> None:
    method = rng.choice(METHODS)
    payload = seeds[method]
    for _ in range(rng.randint(1, 3)):
        payload = mutate(payload, rng)
    error = await _call(run, index, "payload", method, payload)
    decoded = not (isinstance(error, RPCError) and error.code is StatusCode.INTERNAL)
    if method == "Synchronize" and isinstance(error, RPCError) and decoded:
        run.finding(index, "payload", f"Synchronize failed: {error.message[:300]}")


async def _hostile_case(run: Run, rng: random.Random, index: int) -> None:
    pod = hostile_pod(rng, index)
    ctr = hostile_container(rng, pod, index)
    method = rng.choice(
        [
            "CreateContainer",
            "UpdateContainer",
            "RunPodSandbox",
            "Synchronize",
            "StopContainer",
            "PostStartContainer",
        ]
    )
    message: Message
    if method == "CreateContainer":
        message = api.CreateContainerRequest(pod=pod, container=ctr)
    elif method == "UpdateContainer":
        message = api.UpdateContainerRequest(
            pod=pod, container=ctr, linux_resources=hostile_resources(rng)
        )
    elif method == "RunPodSandbox":
        message = api.RunPodSandboxRequest(pod=pod)
    elif method == "Synchronize":
        pods = [hostile_pod(rng, index * 10 + i) for i in range(4)]
        message = api.SynchronizeRequest(
            pods=pods,
            containers=[hostile_container(rng, p, index * 10 + i) for i, p in enumerate(pods)],
        )
    elif method == "StopContainer":
        message = api.StopContainerRequest(pod=pod, container=ctr)
    else:
        message = api.PostStartContainerRequest(pod=pod, container=ctr)
    error = await _call(run, index, "hostile", method, message.SerializeToString())
    if method == "Synchronize" and isinstance(error, RPCError):
        # one container's input must never fail the whole Synchronize
        run.finding(index, "hostile", f"Synchronize failed: {error.message[:300]}")


async def _call(
    run: Run, index: int, kind: str, method: str, payload: bytes
) -> BaseException | None:
    """Send one request and judge the outcome; the error, if any."""
    error: BaseException | None = None
    try:
        await run.rt.call_raw(PLUGIN, method, payload, timeout=5.0)
    except (RPCError, ConnectionClosed, TimeoutError) as exc:
        error = exc
    _judge(run, index, kind, error)
    return error


def _wire_bytes(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    request = encode_message(
        stream_id=1001 + 2 * rng.randrange(1000), type=1, body=seeds["CreateContainer"][:64]
    )
    choice = rng.randrange(9)
    if choice == 0:  # ConnID 0
        return struct.pack(">II", 0, 10) + request[:10]
    if choice == 1:  # a declared mux length up to 4 GiB, then too few bytes
        return struct.pack(">II", 1, rng.choice([1 << 24, (1 << 24) + 1, 0xFFFFFFFF])) + b"x"
    if choice == 2:  # truncated frame
        framed = frame_message(1, request)
        return framed[: rng.randrange(1, len(framed))]
    if choice == 3:  # unknown ConnIDs (skipped unbuffered), then a good frame
        return (
            struct.pack(">II", rng.randint(3, 0xFFFFFFFF), 100)
            + bytes(100)
            + frame_message(1, request)
        )
    if choice == 4:  # ttrpc length over 4 MiB (body discarded as it arrives)
        header = HEADER.pack(rng.choice([(4 << 20) + 1, 0xFFFFFFFF]), 1001, 1, 0)
        return frame_message(1, header + rng.randbytes(rng.randint(0, 4000)))[:4104]
    if choice == 5:  # bogus stream id / type / flags
        sid = rng.choice([0, 2, 1, 0xFFFFFFFF, 0xFFFFFFFE])
        return frame_message(
            1, HEADER.pack(10, sid, rng.randint(0, 255), rng.randint(0, 255)) + bytes(10)
        )
    if choice == 6:  # a framed request, bit-flipped anywhere (headers included)
        return mutate(frame_message(1, request), rng)
    if choice == 7:  # the runtime side's conn: a bogus reply to nothing
        return frame_message(2, HEADER.pack(4, 7, 2, 0) + b"\x08\x01\x12\x00")
    return rng.randbytes(rng.randint(1, 2048))


async def _wire_case(run: Run, rng: random.Random, index: int, seeds: dict[str, bytes]) -> None:
    try:
        await run.rt.send_raw(_wire_bytes(rng, seeds))
        if rng.random() < 0.5:
            await asyncio.sleep(0.02)
    except ConnectionClosed:
        pass
    await run.rt.disconnect()
    run.outcomes["hung up"] += 1


async def _rejected_case(run: Run, rng: random.Random, index: int) -> None:
    count = rng.choice([1000, 10_000, 100_000])
    body = b"".join(HEADER.pack(0, 2 * (i + 1), 1, 0) for i in range(count))
    loop = asyncio.get_running_loop()
    start = loop.time()
    with contextlib.suppress(ConnectionClosed):
        await run.rt.send_raw(struct.pack(">II", 1, len(body)) + body)
    while run.rt.connected and loop.time() - start < 5:
        await asyncio.sleep(0.01)
    if run.rt.connected:
        run.finding(index, "rejected", f"{count} rejected headers did not close the connection")
        await run.rt.disconnect()
    run.outcomes["closed by the daemon"] += 1


async def _chunks_case(run: Run, rng: random.Random, index: int) -> None:
    big = rng.random() < 0.3
    pods = [_pod(f"chunk{i}") for i in range(2000 if big else 2)]
    request = api.SynchronizeRequest(pods=pods, more=True).SerializeToString()
    for sent in range(1, 1000):
        try:
            await run.rt.call_raw(PLUGIN, "Synchronize", request, timeout=5.0)
        except (RPCError, ConnectionClosed):
            run.outcomes["closed by the daemon"] += 1
            return
        except TimeoutError:
            run.finding(index, "chunks", f"no answer to chunk {sent}")
            return
    run.finding(index, "chunks", "999 chunks with more=true did not close the connection")


async def _run_cases(run: Run, cases: int) -> None:
    seeds = _seed_payloads()
    kinds: list[tuple[str, float]] = [
        ("payload", 0.45),
        ("hostile", 0.30),
        ("wire", 0.20),
        ("rejected", 0.025),
        ("chunks", 0.025),
    ]
    for index in range(cases):
        rng = random.Random(f"{run.seed}/{index}")
        kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        run.kinds[kind] += 1
        try:
            await run.reconnected()
        except Exception as exc:
            run.finding(index, kind, f"the daemon did not come back: {exc!r}")
            return
        try:
            if kind == "payload":
                await _payload_case(run, rng, index, seeds)
            elif kind == "hostile":
                await _hostile_case(run, rng, index)
            elif kind == "wire":
                await _wire_case(run, rng, index, seeds)
            elif kind == "rejected":
                await _rejected_case(run, rng, index)
            else:
                await _chunks_case(run, rng, index)
        except Exception as exc:  # the harness's own surprise: report it, go on
            tail = "".join(traceback.format_exception(exc)[-3:])
            run.finding(index, kind, f"unexpected {type(exc).__name__}: {exc!s:.200}\n{tail}")
            if run.rt.connected:
                await run.rt.disconnect()
        if run.proc.poll() is not None:
            run.finding(index, kind, f"the daemon exited with {run.proc.returncode}")
            return
        if index % 10 == 0 and run.rss_mib() > RSS_LIMIT_MIB:
            run.finding(index, kind, f"RSS {run.max_rss_mib:.0f} MiB > {RSS_LIMIT_MIB}")
            return


def _start_daemon(tmp_path: Path, sock: str, log_file: Path) -> subprocess.Popen[bytes]:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "policy": "static",
                "policyConfig": {"reservedSystemCPUs": "0"},
                "log": {"file": str(log_file), "format": "json", "level": "warning"},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRI_PLUGIN_")}
    with open(tmp_path / "stderr", "wb") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nri_resmgr.cli",
                "run",
                "--socket",
                sock,
                "--config",
                str(config),
                "--topology",
                "packages=1,nodes=1,cores=4,threads=2",
                "--state-dir",
                str(tmp_path / "state"),
            ],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


async def _wait(proc: subprocess.Popen[bytes]) -> int:
    return await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)


@pytest.mark.timeout(max(600, 300 + fuzz_cases(800) // 10))  # a long run takes its time
def test_protocol_fuzz_against_the_daemon_process(tmp_path: Path) -> None:
    seed, cases = fuzz_seed(), fuzz_cases(800)
    directory = Path(tempfile.mkdtemp(prefix="nri-fz-", dir="/tmp"))  # AF_UNIX path limit
    sock = str(directory / "nri.sock")
    log_file = tmp_path / "daemon.log"
    report: dict[str, object] = {"seed": seed, "cases": cases}
    placed: list[str] = []
    findings: list[str] = []

    async def scenario() -> None:
        rt = FakeRuntime()
        await rt.listen(sock)
        proc = _start_daemon(tmp_path, sock, log_file)
        run = Run(rt=rt, proc=proc, seed=seed)
        try:
            await rt.wait_ready(timeout=60)
            report["rss_baseline_mib"] = round(run.rss_mib())
            loop = asyncio.get_running_loop()
            start = loop.time()
            await _run_cases(run, cases)
            report["seconds"] = round(loop.time() - start, 1)
            findings.extend(run.findings)
            # afterwards: a fresh connection places a valid request exactly
            if rt.connected:
                await rt.disconnect()
            await rt.wait_ready(timeout=RECONNECT_TIMEOUT)
            db = _pod()
            for name in ("a", "b"):
                reply = await rt.create_container(db, _guaranteed(db, name))
                placed.append(reply.adjust.linux.resources.cpu.cpus)
            report.update(
                kinds=dict(run.kinds),
                outcomes=dict(run.outcomes),
                rss_max_mib=round(run.max_rss_mib),
                rss_end_mib=round(run.rss_mib()),
                placed=placed,
                findings=len(run.findings),
            )
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                await _wait(proc)
            await rt.close()

    try:
        asyncio.run(asyncio.wait_for(scenario(), max(120.0, cases * 2.0)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        print(json.dumps(report))  # the numbers of the run (pytest -s), for docs/fuzzing.md
    assert not findings, f"{len(findings)} findings:\n" + "\n".join(findings[:10])
    assert placed == ["1,5", "2,6"]
    end = report["rss_end_mib"]
    assert isinstance(end, int) and end < RSS_LIMIT_MIB, f"RSS at the end: {end} MiB"
    traces = [
        line
        for line in log_file.read_text().splitlines()
        if "Traceback" in line or "internal error" in line
    ]
    assert not traces, "the daemon logged tracebacks:\n" + "\n".join(traces[:3])
    stderr = (tmp_path / "stderr").read_text()
    assert "Traceback" not in stderr, stderr[-3000:]
