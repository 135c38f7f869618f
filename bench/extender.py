"""The scheduler extender's filter and prioritize latency, over HTTP, at 10, 100 and 1,000
candidate nodes.

Usage: python -m bench.extender [--levels 10,100,1000] [--samples 200] [--out FILE]

The extender's shell (`nri_resmgr.scheduler.server.serve`) runs in this process on a real
TCP socket; each node has a NodeResourceTopology object with two NUMA zones, the free
CPUs of each drawn from a seeded random generator (0-16 of 16); the pod is Guaranteed
with 4 CPUs and 8Gi in one container (so about half of the nodes fail the filter).  A
sample is one request as kube-scheduler sends it (``nodenames``, ``nodeCacheCapable:
true``), timed from the client's write to the end of the answer (``time.perf_counter_ns``),
so it includes the socket, JSON and the decision, and in CPU time of this thread (client
and server together; on a loaded machine the wall time mostly measures waiting).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from itertools import repeat
from pathlib import Path
from typing import Any

import structlog

from bench.common import load_note, machine
from bench.stats import summary_us
from nri_resmgr.scheduler.fit import Strategy, offers_of
from nri_resmgr.scheduler.server import ExtenderMetrics, serve

QUIET = structlog.wrap_logger(structlog.ReturnLogger())


def nrt(free: tuple[int, int]) -> dict[str, Any]:
    return {
        "zones": [
            {"name": f"node-{i}", "type": "Node", "resources": [
                {"name": "cpu", "capacity": "16", "allocatable": "16", "available": str(f)},
                {"name": "memory", "capacity": "64Gi", "allocatable": "64Gi",
                 "available": "32Gi"}]}
            for i, f in enumerate(free)
        ],
        "attributes": [{"name": "topologyManagerPolicy", "value": "best-effort"},
                       {"name": "topologyManagerScope", "value": "container"}],
    }  # fmt: skip


POD = {
    "metadata": {"name": "p", "namespace": "bench"},
    "spec": {"containers": [{"name": "c", "resources": {
        "limits": {"cpu": "4", "memory": "8Gi"}}}]},
}  # fmt: skip


async def _request(port: int, verb: str, body: bytes) -> tuple[int, int]:
    """(wall, CPU) nanoseconds of one request; the server runs in this thread, so the CPU
    time is the client's and the server's together, without the waiting for a CPU."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start, cpu = time.perf_counter_ns(), time.thread_time_ns()
    writer.write(
        f"POST /{verb} HTTP/1.1\r\nHost: b\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    await writer.drain()
    await reader.read()
    elapsed, used = time.perf_counter_ns() - start, time.thread_time_ns() - cpu
    writer.close()
    return elapsed, used


async def measure(levels: list[int], samples: int) -> dict[str, Any]:
    rng = random.Random(26)
    out: dict[str, Any] = {}
    for n in levels:
        nrts = {f"n{i}": nrt((rng.randint(0, 16), rng.randint(0, 16))) for i in range(n)}
        offers = offers_of(list(nrts), nrts)  # parsed once, as the extender's cache does
        server = await serve(repeat(offers).__next__, host="127.0.0.1", port=0,
                             strategy=Strategy.LEAST_ALLOCATED, log=QUIET,
                             metrics=ExtenderMetrics())  # fmt: skip
        port = server.sockets[0].getsockname()[1]
        body = json.dumps({"pod": POD, "nodenames": list(nrts)}).encode()
        row = {}
        async with server:
            for verb in ("filter", "prioritize"):
                await _request(port, verb, body)  # warm up
                got = [await _request(port, verb, body) for _ in range(samples)]
                row[verb] = summary_us([w for w, _ in got])
                row[f"{verb}_cpu"] = summary_us([c for _, c in got])
        out[str(n)] = row
        print(n, json.dumps(row))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="10,100,1000")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--out")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    result = {
        "machine": machine(),
        "load": load_note(),
        "results": asyncio.run(measure(levels, args.samples)),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
