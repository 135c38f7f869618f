"""How many checks each test of nri-plugins' e2e suite makes, as their scripts have them.

`COUNTS` is the table the ports are held to (`tests.parity.test_upstream`): for each
``test/e2e/policies.test-suite/POLICY/MACHINE/TEST/code.var.sh`` at `TAG` (`COMMIT`), the
``verify`` calls, the Python expressions those calls evaluate (one per argument), and
the metric checks (``verify-metrics-has-line`` and ``-has-no-line``).  `RUNS` adds what a
shell loop of theirs evaluates more than once; `LEFT_OUT` names the checks not evaluated
here and why, and `checked` gives what the ports evaluate against what theirs do.  `scan`
derives the numbers from a script; with their module in the Go module cache the table is
checked against it.

`scan` reads a script as bash does as far as these commands go: a backslash at the end
of a line continues it, quotes may span lines, ``#`` starts a comment, and a command
starts a line or follows ``;``, ``&&``, ``||``, ``|``, ``(`` or a keyword like ``then``;
environment assignments before a command are skipped; a backquoted comment between
arguments is an empty substitution, no argument.  ``echo "verify ..."`` is a message,
not a check, and ``verify-cstates`` and the like are their own helpers, not counted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.requirements import go_module_cache

__all__ = [
    "COMMIT",
    "COUNTS",
    "LEFT_OUT",
    "RUNS",
    "TAG",
    "Counts",
    "checked",
    "count",
    "scan",
    "suite_dir",
]

TAG = "v0.14.0"
COMMIT = "83d986e963ad28ca31790102af6d509c7b7e7d45"


@dataclass(frozen=True)
class Counts:
    calls: int
    expressions: int
    metrics: int = 0


COUNTS: dict[str, Counts] = {
    "balloons/n4c16/test01-basic-placement": Counts(8, 24),
    "balloons/n4c16/test02-prometheus-metrics": Counts(1, 3, 24),
    "balloons/n4c16/test03-reserved": Counts(8, 14),
    "balloons/n4c16/test04-groupby": Counts(2, 5, 3),
    "balloons/n4c16/test05-namespace": Counts(8, 23),
    "balloons/n4c16/test06-update-config": Counts(0, 0, 14),
    "balloons/n4c16/test07-maxballoons": Counts(5, 5),
    "balloons/n4c16/test08-numa": Counts(9, 46),
    "balloons/n4c16/test09-isolated": Counts(4, 36, 21),
    "balloons/n4c16/test10-allocator-opts": Counts(6, 20),
    "balloons/n4c16/test11-match-expression": Counts(3, 6),
    "balloons/n4c16/test13-cacheclusters": Counts(6, 34),
    "balloons/n4c16/test15-loadclasses": Counts(8, 19),
    "balloons/n4c16/test16-composite-balloons": Counts(16, 38),
    "balloons/n4c16/test17-cstates-scheduling": Counts(3, 4),
    "balloons/n4c16/test18-turbo-priority": Counts(5, 5),
    "balloons/n4c16/test19-pct": Counts(7, 7),
    "balloons/n4c16/test20-config-status": Counts(0, 0),
    "balloons/n4c16/test21-controller-check": Counts(0, 0),
    "balloons/n4c16/test22-isolcpus": Counts(3, 3),
    "balloons/n4c16/test23-available-cpus": Counts(2, 2),
    "balloons/n4c16/test24-podresources": Counts(3, 4),
    "balloons/n4c16/test25-irq": Counts(1, 0),
    "balloons/n4c16/test30-numa-disabled": Counts(2, 7),
    "balloons/n6-hbm-cxl/test01-memory-types": Counts(1, 9),
    "balloons/n6-hbm-cxl/test04-nrt": Counts(0, 0),
    "balloons/s8c4k/test01-sparse-4kcpus": Counts(1, 3),
    "topology-aware/n4c128/test19-cacheclusters": Counts(17, 36),
    "topology-aware/n4c16/test00-basic-placement": Counts(6, 24),
    "topology-aware/n4c16/test01-always-fits": Counts(12, 47),
    "topology-aware/n4c16/test02-shrink-and-grow-shared": Counts(4, 14),
    "topology-aware/n4c16/test03-simple-affinity": Counts(3, 8),
    "topology-aware/n4c16/test04-available-resources": Counts(3, 8),
    "topology-aware/n4c16/test05-reserved-resources": Counts(6, 8),
    "topology-aware/n4c16/test06-fuzz": Counts(0, 0),
    "topology-aware/n4c16/test07-mixed-allocations": Counts(7, 39),
    "topology-aware/n4c16/test08-cpuprio-allocation": Counts(2, 6),
    "topology-aware/n4c16/test09-container-exit": Counts(4, 4),
    "topology-aware/n4c16/test10-additional-reserved-namespaces": Counts(5, 5),
    "topology-aware/n4c16/test11-reserved-cpu-annotations": Counts(4, 11),
    "topology-aware/n4c16/test12-config-status": Counts(0, 0),
    "topology-aware/n4c16/test13-reject-symlink": Counts(0, 0),
    "topology-aware/n4c16/test14-burstable": Counts(6, 14),
    "topology-aware/n4c16/test14-global-shared-preference": Counts(4, 4),
    "topology-aware/n4c16/test15-busy-shared-pools": Counts(3, 3),
    "topology-aware/n4c16/test16-idle-shared-pools": Counts(11, 21),
    "topology-aware/n4c16/test17-scheduling-classes": Counts(18, 18),
    "topology-aware/n4c16/test18-strict-alignment": Counts(5, 10),
    "topology-aware/n4c16/test19-cpuclass": Counts(0, 0),
    "topology-aware/n4c16/test25-irq": Counts(0, 0),
    "topology-aware/n4c16/test30-numa-disabled": Counts(1, 4),
    "topology-aware/n4c16/test31-duplicate-disambiguation": Counts(0, 0),
    "topology-aware/n4c16/test40-otel-logging": Counts(0, 0),
    "topology-aware/n6-hbm-cxl/test01-memory-types": Counts(3, 13),
    "topology-aware/n6-hbm-cxl/test02-fuzz-memallocs": Counts(0, 0),
    "topology-aware/n6-hbm-cxl/test04-nrt": Counts(0, 0),
    "topology-aware/s8c4k/test01-sparse-4kcpus": Counts(4, 4),
}

#: calls and expressions as their script runs, where a loop repeats a verify call
RUNS: dict[str, Counts] = {
    # for pod in pod3 pod4; do ... verify "cpus['${pod}c0'] == ..."; done
    "topology-aware/n4c16/test05-reserved-resources": Counts(7, 9),
}

#: checks of theirs not evaluated here, with why; the rest of the test is
LEFT_OUT: dict[str, tuple[Counts, str]] = {
    "topology-aware/n4c16/test09-container-exit": (
        Counts(1, 1),
        "its last check looks the container's id up in their policy cache (allocations); "
        "we keep no cache, the release is the check before it",
    ),
    "balloons/n4c16/test04-groupby": (
        Counts(0, 0, 3),
        "its metric checks read the groups label (the group values of a balloon's "
        "containers); our balloon snapshot has no group names. The grouping itself is "
        "its verify expressions'",
    ),
    "balloons/n4c16/test19-pct": (
        Counts(7, 7),
        "Intel SST-CP priority core turbo through their mocked SST backend; no SST control here",
    ),
    "balloons/n4c16/test24-podresources": (
        Counts(3, 4),
        "device hints from the kubelet PodResources API, which is not read here",
    ),
}


def checked(test: str) -> tuple[Counts, Counts]:
    """(what the ports evaluate, what their script evaluates) for `test`."""
    theirs = RUNS.get(test, COUNTS[test])
    left = LEFT_OUT.get(test, (Counts(0, 0), ""))[0]
    ours = Counts(
        theirs.calls - left.calls,
        theirs.expressions - left.expressions,
        theirs.metrics - left.metrics,
    )
    return ours, theirs


CHECKS = ("verify", "verify-metrics-has-line", "verify-metrics-has-no-line")
_SEPARATORS = {"then", "do", "else", "{", "}"}
_PUNCTUATION = set(";&|()")


#: ```# a comment``` inside a command: an empty substitution, no word (their test07 notes)
_BACKTICK_COMMENT = re.compile(r"`#[^`]*`")


def suite_dir() -> Path:
    """Their suite in Go's module cache (absent until ``go mod download``)."""
    cache = go_module_cache()
    base = cache / "github.com" / "containers" / f"nri-plugins@{TAG}"
    return base / "test" / "e2e" / "policies.test-suite"


def _logical_lines(text: str) -> Iterator[tuple[int, list[str]]]:
    buf: list[str] = []
    start = 0
    for no, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = no
        line = _BACKTICK_COMMENT.sub("", line)
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        lex = shlex.shlex("\n".join(buf), posix=True, punctuation_chars=";&|()")
        lex.whitespace_split = True
        lex.commenters = "#"
        try:
            tokens = list(lex)
        except ValueError:  # a quote still open: the command goes on
            continue
        yield start, tokens
        buf = []
    if buf:
        raise ValueError(f"line {start}: a quote is never closed")


def _separates(token: str) -> bool:
    return token in _SEPARATORS or (bool(token) and set(token) <= _PUNCTUATION)


def scan(text: str) -> list[tuple[int, str, list[str]]]:
    """Every check command of a script: (line, command, its arguments)."""
    out = []
    for no, tokens in _logical_lines(text):
        command_position = True
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if _separates(tok):
                command_position = True
            elif command_position and re.match(r"^[A-Za-z_]\w*=", tok):
                pass
            elif command_position and tok in CHECKS:
                j = i + 1
                while j < len(tokens) and not _separates(tokens[j]):
                    j += 1
                out.append((no, tok, tokens[i + 1 : j]))
                i = j
                continue
            else:
                command_position = False
            i += 1
    return out


def count(text: str) -> Counts:
    found = scan(text)
    verifies = [args for _, cmd, args in found if cmd == "verify"]
    return Counts(len(verifies), sum(map(len, verifies)), len(found) - len(verifies))
