"""CreateContainer round trip as the real Go NRI adaptation sees it: Python vs Go stub.

Usage: python -m bench.roundtrip [--requests 2000] [--version v0.12.2] [--out FILE]

One fake runtime (the real `pkg/adaptation` of the given NRI release, from
tests/conformance/harness) serves two no-op plugins in turn, in the same run: the Go
`stub` plugin (in-process in the harness, over its own socket connection) and
bench/plugins/noop.py written with nri_api (an external process). Each CreateContainer is
timed inside Go around the adaptation call (`elapsed_ns`), so both sides pay the same
harness overhead. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from bench.stats import summary_us
from tests.conformance.harness import fake_runtime, make_container, make_pod

PLUGIN = Path(__file__).parent / "plugins" / "noop.py"


def measure(rt: Any, *, requests: int, warmup: int, tag: str) -> list[int]:
    pod = make_pod(name=f"bench-{tag}", qos="burstable")
    rt.run_pod(pod)
    samples: list[int] = []
    for i in range(warmup + requests):
        ctr = make_container(pod, name=f"c{i}", cpu_request_millis=250)
        rt.create_container(pod, ctr)
        if i >= warmup:
            samples.append(int(rt.last_reply["elapsed_ns"]))
    return samples


def run(*, requests: int, version: str, warmup: int) -> dict[str, Any]:
    with fake_runtime(version) as rt:
        rt.start()
        rt.go_plugin(name="gonoop", idx="10", behaviour="noop", events=["CREATE_CONTAINER"])
        rt.wait_synced()
        go = measure(rt, requests=requests, warmup=warmup, tag="go")
        rt.go_plugin_stop("gonoop")
        rt.start_external(PLUGIN, idx="10", name="pynoop")
        rt.wait_synced()
        py = measure(rt, requests=requests, warmup=warmup, tag="py")
    g, p = summary_us(go), summary_us(py)
    return {
        "benchmark": "CreateContainer round trip (no-op plugin), as the Go adaptation sees it",
        "nri_version": version,
        "requests": requests,
        "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "go_stub": g,
        "python_nri_api": p,
        "ratio_p50": round(p["p50_us"] / g["p50_us"], 2),
        "ratio_p99": round(p["p99_us"] / g["p99_us"], 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--version", default="v0.12.2")
    ap.add_argument("--out", default="bench/out/roundtrip.json")
    ns = ap.parse_args()
    result = run(requests=ns.requests, version=ns.version, warmup=ns.warmup)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    g, p = result["go_stub"], result["python_nri_api"]
    print("| plugin | p50 µs | p99 µs | mean µs | n |\n|---|---|---|---|---|")
    for label, s in ((f"Go stub (NRI {ns.version})", g), ("Python nri_api", p)):
        print(f"| {label} | {s['p50_us']} | {s['p99_us']} | {s['mean_us']} | {s['n']} |")
    print(f"ratio Python/Go: p50 {result['ratio_p50']}, p99 {result['ratio_p99']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
