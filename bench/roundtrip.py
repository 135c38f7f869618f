"""CreateContainer round trip as the real Go NRI adaptation sees it: Python vs the Go stub.

Usage: python -m bench.roundtrip [--requests 2000] [--version v0.12.2] [--out FILE]
                                 [--profile none|pyinstrument|py-spy]

Three fake runtimes (the real `pkg/adaptation` of the given NRI release, from
tests/conformance/harness) run side by side, each with one no-op plugin subscribed to
CreateContainer only:

* ``go-inproc``: the Go `stub` plugin inside the harness process (its own socket
  connection; the harness's reference peer);
* ``go-external``: the same no-op written with the Go stub as its own process
  (`bench/go/noop`), attached like a DaemonSet plugin;
* ``python``: bench/plugins/noop.py written with nri_api, attached the same way.

Requests are interleaved: each round sends one CreateContainer to every runtime, in a
shuffled order, so all three see the same machine load. Each is timed inside Go around
the adaptation call (`elapsed_ns`). The headline ratio is Python / go-external (both
separate processes, same path through the kernel); Python / go-inproc is also given.

`--profile` wraps the Python plugin in pyinstrument (text report) or attaches py-spy
(collapsed stacks, summarized by `bench.profile`) for the measured requests.

`--candidate DIR` adds a fourth peer, ``python-candidate``: the same plugin with DIR first
on PYTHONPATH (e.g. a scratch copy of nri_api with a proposed change), for an A/B
comparison in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import (
    CACHE,
    build_go_noop,
    cpu_ns,
    load_note,
    machine,
    python_plugin_argv,
    spawn,
)
from bench.stats import summary_us
from tests.conformance.harness import GoRuntime, go_runtime
from tests.conformance.harness_pods import make_container, make_pod

PLUGIN = Path(__file__).resolve().parent / "plugins" / "noop.py"
PEERS = ("go-inproc", "go-external", "python")


def _python_argv(rt: GoRuntime, profile: str, out_dir: Path) -> list[str]:
    argv = python_plugin_argv(PLUGIN, socket=rt.socket, idx="10", name="pynoop")
    if profile == "pyinstrument":
        report = out_dir / "roundtrip-pyinstrument.txt"
        return [
            sys.executable,
            "-m",
            "pyinstrument",
            "--interval",
            "0.0001",
            "-r",
            "text",
            "--show-all",
            "-o",
            str(report),
            *argv[1:],
        ]
    return argv


@contextlib.contextmanager
def attached(
    peer: str, *, version: str, profile: str, out_dir: Path, candidate: str | None = None
) -> Iterator[GoRuntime]:
    """A started fake runtime with `peer` attached and synchronized."""
    with go_runtime(version) as rt:
        rt.start()
        if peer == "go-inproc":
            rt.go_plugin(name="gonoop", idx="10", behaviour="noop", events=["CREATE_CONTAINER"])
        elif peer == "go-external":
            argv = [
                str(build_go_noop()),
                "-socket",
                str(rt.socket),
                "-idx",
                "10",
                "-name",
                "gonoop",
            ]
            rt.externals.append(spawn(argv, log_path=rt.dir / "gonoop.log"))
        elif peer == "python-candidate":
            argv = python_plugin_argv(PLUGIN, socket=rt.socket, idx="10", name="pynoop")
            # DIR goes first, in front of the caller's PYTHONPATH (a worktree's checkout)
            path = os.pathsep.join(filter(None, [str(candidate), os.environ.get("PYTHONPATH")]))
            rt.externals.append(
                spawn(argv, log_path=rt.dir / "pynoop.log", env={"PYTHONPATH": path})
            )
        else:
            argv = _python_argv(rt, profile, out_dir)
            rt.externals.append(spawn(argv, log_path=rt.dir / "pynoop.log"))
        rt.wait_synced(timeout=60)
        yield rt


def run(
    *,
    requests: int,
    version: str,
    warmup: int,
    profile: str,
    seed: int,
    out_dir: Path,
    candidate: str | None = None,
) -> dict[str, Any]:
    peers = PEERS + (("python-candidate",) if candidate else ())
    samples: dict[str, list[int]] = {p: [] for p in peers}
    notes = machine()
    spy: subprocess.Popen[bytes] | None = None
    with contextlib.ExitStack() as stack:
        rts = {
            p: stack.enter_context(
                attached(p, version=version, profile=profile, out_dir=out_dir, candidate=candidate)
            )
            for p in peers
        }
        pods = {}
        for p, rt in rts.items():
            pods[p] = make_pod(name=f"bench-{p}", qos="burstable")
            rt.run_pod(pods[p])
        rng = random.Random(seed)
        order = list(peers)
        procs = {p: rts[p].externals[-1].pid for p in peers if p != "go-inproc"}
        cpu0: dict[str, int] = {}
        for i in range(warmup + requests):
            if i == warmup:
                cpu0 = {p: cpu_ns(pid) for p, pid in procs.items()}
            if i == warmup and profile == "py-spy":
                pid = rts["python"].externals[-1].pid
                spy = subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "--pid",
                        str(pid),
                        "--rate",
                        "2000",
                        "--format",
                        "raw",
                        "--full-filenames",
                        "-o",
                        str(out_dir / "roundtrip-py-spy.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            rng.shuffle(order)
            for p in order:
                rt = rts[p]
                rt.create_container(
                    pods[p], make_container(pods[p], name=f"c{i}", cpu_request_millis=250)
                )
                if i >= warmup:
                    samples[p].append(int(rt.last_reply["elapsed_ns"]))
        cpu_per_request = {
            p: round((cpu_ns(pid) - cpu0[p]) / requests / 1000, 1) for p, pid in procs.items()
        }
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
    summary = {p: summary_us(s) for p, s in samples.items()}
    py, ext, inproc = summary["python"], summary["go-external"], summary["go-inproc"]
    return {
        "benchmark": "CreateContainer round trip (no-op plugin), as the Go adaptation sees it",
        "nri_version": version,
        "requests": requests,
        "warmup": warmup,
        "machine": notes,
        "load_after": load_note(),
        "summary": summary,
        "ratio_vs_go_external": {
            "p50": round(py["p50_us"] / ext["p50_us"], 2),
            "p99": round(py["p99_us"] / ext["p99_us"], 2),
        },
        "ratio_vs_go_inproc": {
            "p50": round(py["p50_us"] / inproc["p50_us"], 2),
            "p99": round(py["p99_us"] / inproc["p99_us"], 2),
        },
        "plugin_cpu_us_per_request": cpu_per_request,
        "ratio_candidate_vs_python": (
            {
                "p50": round(summary["python-candidate"]["p50_us"] / py["p50_us"], 2),
                "p99": round(summary["python-candidate"]["p99_us"] / py["p99_us"], 2),
            }
            if candidate
            else None
        ),
        "profile": profile,
        "candidate": candidate,
        "samples_ns": samples,
    }


def table(result: dict[str, Any]) -> str:
    rows = ["| plugin | p50 µs | p99 µs | mean µs | n |", "|---|---|---|---|---|"]
    labels = {
        "go-inproc": "Go stub, in the harness process",
        "go-external": "Go stub, external process",
        "python": "Python nri_api, external process",
    }
    labels["python-candidate"] = "Python nri_api candidate (--candidate), external process"
    for p in result["summary"]:
        s = result["summary"][p]
        rows.append(f"| {labels[p]} | {s['p50_us']} | {s['p99_us']} | {s['mean_us']} | {s['n']} |")
    cpu = result["plugin_cpu_us_per_request"]
    rows.append("")
    rows.append(
        "plugin process CPU per request: "
        + ", ".join(f"{labels[p].split(',')[0]} {v} µs" for p, v in cpu.items())
    )
    ext, inproc = result["ratio_vs_go_external"], result["ratio_vs_go_inproc"]
    rows.append("")
    rows.append(f"ratio Python / Go external: p50 {ext['p50']}, p99 {ext['p99']}")
    rows.append(f"ratio Python / Go in-process: p50 {inproc['p50']}, p99 {inproc['p99']}")
    cand = result.get("ratio_candidate_vs_python")
    if cand:
        rows.append(f"ratio candidate / Python: p50 {cand['p50']}, p99 {cand['p99']}")
    rows.append(f"{result['machine']['load_before']} before, {result['load_after']} after")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--version", default="v0.12.2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", choices=("none", "pyinstrument", "py-spy"), default="none")
    ap.add_argument("--candidate", help="directory put first on PYTHONPATH for a 4th peer")
    ap.add_argument("--out", default="bench/out/roundtrip.json")
    ns = ap.parse_args()
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    result = run(
        requests=ns.requests,
        version=ns.version,
        warmup=ns.warmup,
        profile=ns.profile,
        seed=ns.seed,
        out_dir=out.parent,
        candidate=ns.candidate,
    )
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
