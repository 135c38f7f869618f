"""Where a Python plugin's time goes: summarize py-spy's collapsed stacks.

Usage: python -m bench.profile FILE [--top 25]

FILE is `py-spy record --format raw` output (one line per distinct stack:
``frame;frame;...;leaf COUNT``, each frame ``function (file:line)``), e.g. the one
`python -m bench.roundtrip --profile py-spy` writes. py-spy leaves idle samples out by
default, but on a loaded machine it counts many samples in the event loop's
`EpollSelector.select` (waiting for the socket) as busy; those are dropped here too, so
the counts are the plugin's busy time.

Two views:

* **self time by layer**: each sample goes to the layer of its innermost frame (the code
  that was running), so the layers add up to 100 %;
* **inclusive time** of the main steps of one request (a sample counts for every step on
  its stack).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")

#: (layer, predicate on (function, file)), first match wins; checked on the leaf frame.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("protobuf decode/encode", ("google/protobuf", "FromString", "SerializeToString",
                                "ParseFromString", "_pb2")),
    ("logging", ("/logging/", "structlog")),
    ("nri_api mux + ttrpc framing (sans-IO)", ("nri_api/mux.py", "nri_api/ttrpc.py",
                                               "nri_api/errors.py")),
    ("nri_api transport (Trunk)", ("nri_api/transport.py",)),
    ("nri_api stub dispatch + hook", ("nri_api/stub.py", "nri_api/dispatch.py",
                                      "nri_api/connection.py", "nri_api/session.py",
                                      "nri_api/rpc.py", "nri_api/events.py",
                                      "nri_api/builders.py", "nri_api/api.py",
                                      "bench/plugins/")),
    ("nri_resmgr (adapter, pipeline, policy)", ("nri_resmgr/",)),
    ("asyncio streams (socket read/write)", ("asyncio/streams.py", "asyncio/selector_events.py",
                                              "socket.py")),
    ("asyncio event loop, tasks, locks", ("asyncio/", "selectors.py", "contextvars",
                                          "inspect.py", "<frozen abc>", "enum.py",
                                          "typing.py", "functools.py")),
)

#: (label, function name as py-spy prints it) for the inclusive view
STEPS: tuple[tuple[str, str], ...] = (
    ("event loop iteration (_run_once)", "_run_once"),
    ("reading: Trunk._read_loop (recv + mux + ttrpc parse)", "_read_loop"),
    ("  Trunk._process (mux + ttrpc parse)", "_process"),
    ("handling: Trunk._handle (task per request)", "_handle"),
    ("  stub dispatch (decode, hook, encode)", "dispatch"),
    ("    the plugin's create_container hook", "create_container"),
    ("  Trunk._write (frame + send)", "_write"),
    ("logging calls", "_log"),
)


def parse(lines: Iterable[str]) -> list[tuple[list[tuple[str, str]], int]]:
    """[(frames root..leaf as (function, file)), count)] from py-spy raw lines."""
    out: list[tuple[list[tuple[str, str]], int]] = []
    for raw in lines:
        raw = raw.rstrip("\n")
        if not raw:
            continue
        stack, _, count = raw.rpartition(" ")
        frames: list[tuple[str, str]] = []
        for part in stack.split(";"):
            m = _FRAME.match(part)
            if m:
                frames.append((m["func"], m["file"]))
            else:
                frames.append((part, ""))
        out.append((frames, int(count)))
    return out


def layer_of(func: str, file: str) -> str:
    for layer, needles in LAYERS:
        if any(n in file or n in func for n in needles):
            return layer
    return "other (interpreter, stdlib)"


def summarize(stacks: list[tuple[list[tuple[str, str]], int]]) -> dict[str, object]:
    total_busy = 0
    by_layer: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for frames, count in stacks:
        # the thread line ("process N:..." / "thread ...") may be the root; skip non-code
        code = [f for f in frames if f[1]]
        if not code:
            continue
        func, file = code[-1]
        if func.endswith("select") and file.endswith("selectors.py"):
            continue  # waiting in epoll: idle
        total_busy += count
        by_layer[layer_of(func, file)] += count
        leaves[f"{func} ({file.rsplit('/', 2)[-1] if '/' in file else file})"] += count
        names = {f[0].rsplit(".", 1)[-1] for f in code}
        for label, name in STEPS:
            if name in names:
                steps[label] += count
    return {"samples": total_busy, "layers": by_layer, "steps": steps, "leaves": leaves}


def render(summary: dict[str, object], *, top: int) -> str:
    total = int(summary["samples"])  # type: ignore[call-overload]
    layers: Counter[str] = summary["layers"]  # type: ignore[assignment]
    steps: Counter[str] = summary["steps"]  # type: ignore[assignment]
    leaves: Counter[str] = summary["leaves"]  # type: ignore[assignment]

    def pct(n: int) -> str:
        return f"{100 * n / total:.1f} %" if total else "-"

    rows = [f"{total} busy samples", "", "| layer (self time) | share |", "|---|---|"]
    rows += [f"| {name} | {pct(n)} |" for name, n in layers.most_common()]
    rows += ["", "| step (inclusive) | share |", "|---|---|"]
    rows += [f"| {label} | {pct(steps[label])} |" for label, _ in STEPS]
    rows += ["", f"| top {top} innermost functions | share |", "|---|---|"]
    rows += [f"| `{name}` | {pct(n)} |" for name, n in leaves.most_common(top)]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=25)
    ns = ap.parse_args()
    stacks = parse(Path(ns.file).read_text().splitlines())
    print(render(summarize(stacks), top=ns.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
