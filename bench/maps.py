"""Persistent maps for the policy states, measured: a copied dict, `immutables`, `pyrsistent`.

Usage: python -m bench.maps [--sizes 1000,10000]

What a decision does to its state's map of containers, per operation, thread CPU time:
add one entry to a new map, drop one, look one up, walk every value, build one from
scratch.  A dict must be copied to make a new state (the old one stays valid for a
refused decision), so its add and drop are O(n); the persistent maps share all but
O(log n) of the old map.  `immutables` (the HAMT behind `contextvars`, a C extension) is
what the states use (docs/benchmarks.md, "Persistent maps"); `pyrsistent` is measured
when it is installed (`pip install pyrsistent`), and skipped with a note otherwise.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import time
from collections.abc import Callable
from typing import Any

import immutables


def per_call_us(f: Callable[[], object], reps: int) -> float:
    gc.disable()
    try:
        t0 = time.thread_time_ns()
        for _ in range(reps):
            f()
        return (time.thread_time_ns() - t0) / reps / 1000
    finally:
        gc.enable()


def measure(n: int) -> dict[str, dict[str, float]]:
    keys = [f"{i:064x}" for i in range(n)]  # container ids are 64 hex digits
    plain = dict.fromkeys(keys, 1)
    some, new = keys[n // 2], "f" * 64
    im = immutables.Map(plain)

    def dict_drop() -> object:
        c = dict(plain)
        del c[some]
        return c

    out: dict[str, dict[str, float]] = {
        "dict (copied)": {
            "add": per_call_us(lambda: {**plain, new: 1}, 200),
            "drop": per_call_us(dict_drop, 200),
            "get": per_call_us(lambda: plain.get(some), 100_000),
            "walk": per_call_us(lambda: sum(plain.values()), 50),
            "build": per_call_us(lambda: dict.fromkeys(keys, 1), 20),
        },
        "immutables.Map": {
            "add": per_call_us(lambda: im.set(new, 1), 20_000),
            "drop": per_call_us(lambda: im.delete(some), 20_000),
            "get": per_call_us(lambda: im.get(some), 100_000),
            "walk": per_call_us(lambda: sum(im.values()), 50),
            "build": per_call_us(lambda: immutables.Map(plain), 20),
        },
    }
    if importlib.util.find_spec("pyrsistent") is not None:
        pyrsistent: Any = importlib.import_module("pyrsistent")
        pm = pyrsistent.pmap(plain)
        out["pyrsistent.pmap"] = {
            "add": per_call_us(lambda: pm.set(new, 1), 5_000),
            "drop": per_call_us(lambda: pm.remove(some), 5_000),
            "get": per_call_us(lambda: pm.get(some), 100_000),
            "walk": per_call_us(lambda: sum(pm.values()), 50),
            "build": per_call_us(lambda: pyrsistent.pmap(plain), 10),
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ns = ap.parse_args()
    ops = ("add", "drop", "get", "walk", "build")
    print("| entries | map | " + " | ".join(f"{op} µs" for op in ops) + " |")
    print("|---" * (len(ops) + 2) + "|")
    for n in (int(x) for x in ns.sizes.split(",")):
        for name, per_op in measure(n).items():
            cells = " | ".join(f"{per_op[op]:.2f}" for op in ops)
            print(f"| {n:,} | {name} | {cells} |")
    if importlib.util.find_spec("pyrsistent") is None:
        print("\n(pyrsistent is not installed: pip install pyrsistent to compare it too)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
