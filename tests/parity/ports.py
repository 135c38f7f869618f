"""Their ``verify`` expressions, evaluated as written, counted per ported test.

nri-plugins' e2e ``verify 'EXPR' ...`` runs ``assert(EXPR)`` in Python over the sets their
``run.sh`` builds (``cpus``, ``mems``, ``nodes``, ``packages``, ``dies``, ``cores``,
``threads``) and its helpers (``disjoint_sets``, ``set_ids`` and the ``*_ids`` lambdas).
A port carries each EXPR as the string their ``code.var.sh`` has and calls `check` with
them at the step where their script calls ``verify``; `check` evaluates each one in the
same namespace over an `Allowed` (`tests.parity.verify.allowed`).  A shell variable inside
an expression (``"cpus['${pod}c0'] == ..."`` in a loop of theirs) stays in the string and
is substituted from `check`'s ``shell`` mapping, as their shell does.  A `Differs` among
the expressions is one of theirs that is false here by design: it is checked false, and
our own expression for it true.

Counting.  `port` registers a test function under their test's name
(``topology-aware/n4c16/test01-always-fits``).  Every `check` adds its expressions to the
current `Tally`; `tally` runs a port with a lenient tally (a false expression is recorded,
not raised), so `tests.parity.test_upstream` can hold each test's ports to the number of
expressions their script evaluates (`tests.parity.upstream.COUNTS`) and find exactly the
false ones of a port marked as an expected failure.  Outside `tally` a false expression
fails the test at once, naming the expression and the sets it read.

Their metric checks (``verify-metrics-has-line REGEX``) grep the policy's Prometheus
output; `metric_lines` renders a step's balloons as their ``nri_policy_balloons_cores``
lines with every label a placement decides (balloon, type, containers, CPUs, idle CPUs,
memory, their locations, the requests), so a check on instance names, membership or
sizes is evaluated as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nri_resmgr.ops.metrics import BalloonSnapshot
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from tests.parity.verify import Allowed, disjoint_sets

__all__ = [
    "PORTS",
    "Differs",
    "Tally",
    "check",
    "check_metrics",
    "metric_lines",
    "port",
    "refused",
    "tally",
]

F = TypeVar("F", bound=Callable[[], None])

#: their test (``POLICY/MACHINE/TEST``) -> the functions porting it
PORTS: dict[str, list[Callable[[], None]]] = {}


def port(test: str) -> Callable[[F], F]:
    """Register the decorated (argument-free) test function as a port of `test`."""
    if test.count("/") != 2:
        raise ValueError(f"port: expected POLICY/MACHINE/TEST, found {test!r}")

    def register(fn: F) -> F:
        PORTS.setdefault(test, []).append(fn)
        return fn

    return register


@dataclass
class Tally:
    """What the checks of one run evaluated (as written) and which were false."""

    strict: bool = True
    calls: int = 0
    evaluated: list[str] = field(default_factory=list)
    #: their metric regexes checked (``verify-metrics-has-line`` and ``-has-no-line``)
    metrics: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        if self.strict:
            raise AssertionError(message)
        self.failed.append(message)


_TALLY: ContextVar[Tally | None] = ContextVar("parity_tally", default=None)


@contextmanager
def tally() -> Iterator[Tally]:
    """Count every check inside; false ones are recorded instead of raised."""
    t = Tally(strict=False)
    token = _TALLY.set(t)
    try:
        yield t
    finally:
        _TALLY.reset(token)


def _current() -> Tally:
    return _TALLY.get() or Tally()


def refused(errors: Sequence[str]) -> None:
    """Containers were refused: their ``create`` waits for Ready and fails the test."""
    if errors:
        _current().fail(f"containers refused: {list(errors)}")


def _set_ids(str_ids: Iterable[str], chars: str = "[a-z]") -> set[Any]:
    """Their ``set_ids``: ``{"node1/core0"}`` -> ``{(1, 0)}``, ``{"cpu04"}`` -> ``{4}``."""
    out: set[Any] = set()
    for s in str_ids:
        if "/" in s:
            out.add(tuple(int(re.sub(chars, "", p)) for p in s.split("/")))
        else:
            out.add(int(re.sub(chars, "", s)))
    return out


def _namespace(v: Allowed) -> dict[str, Any]:
    return {
        "re": re,
        "cpus": v.cpus,
        "mems": v.mems,
        "nodes": v.nodes,
        "packages": v.packages,
        "dies": v.dies,
        "cores": v.cores,
        "threads": v.threads,
        "disjoint_sets": disjoint_sets,
        "set_ids": _set_ids,
        "package_ids": lambda i: _set_ids(i, "[package]"),
        "die_ids": lambda i: _set_ids(i, "[packagedie]"),
        "node_ids": lambda i: _set_ids(i, "[node]"),
        "core_ids": lambda i: _set_ids(i, "[nodecore]"),
        "thread_ids": lambda i: _set_ids(i, "[nodecorethread]"),
        "cpu_ids": lambda i: _set_ids(i, "[cpu]"),
    }


_SHELL_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _substitute(expr: str, shell: Mapping[str, str]) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in shell:
            raise AssertionError(f"verify {expr!r}: shell variable ${name} has no value given")
        return shell[name]

    return _SHELL_VAR.sub(value, expr)


def _evaluate(v: Allowed, text: str, **extra: Any) -> str | None:
    """None when ``assert(text)`` holds over `v`, else why not."""
    try:
        # their expressions, evaluated as their verify does: assert(EXPR)
        ok = eval(f"({text}\n)", {**_namespace(v), **extra})
    except (KeyError, IndexError, NameError, TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return None if ok else "false"


def _context(v: Allowed, text: str) -> str:
    names = sorted(set(re.findall(r"pod\d+c\d+", text)))
    if not names or re.search(r"for \w+ in", text):
        names = sorted(v.cpus)
    rows = [
        f"  {n}: cpus {sorted(v.cpus[n])} mems {sorted(v.mems[n])}" for n in names if n in v.cpus
    ]
    missing = [n for n in names if n not in v.cpus]
    if missing:
        rows.append(f"  absent: {missing}")
    if v.errors:
        rows.append(f"  errors: {list(v.errors)}")
    return "\n".join(rows)


@dataclass(frozen=True)
class Differs:
    """One of their expressions that is false here by design, with what holds instead.

    `ours` is evaluated in their namespace plus ``errors`` (every refusal so far).  Both
    directions are checked: when our policy comes to give their answer, the check fails
    and the difference (`reason`) is no longer one.
    """

    theirs: str
    ours: str
    reason: str


def check(
    v: Allowed,
    *exprs: str | Differs,
    shell: Mapping[str, str] | None = None,
    consts: Mapping[str, object] | None = None,
) -> Allowed:
    """Their ``verify EXPR...`` over `v`: every expression holds (counted in the tally).

    `consts` are their machine's ``py_consts.var.py`` names (``dram0 = "node0"``).
    """
    t = _current()
    extra = dict(consts or {})
    t.calls += 1
    for expr in exprs:
        if isinstance(expr, Differs):
            t.evaluated.append(expr.theirs)
            if _evaluate(v, expr.theirs, **extra) is None:
                t.fail(f"their verify {expr.theirs!r} holds now; {expr.reason!r} is gone")
            why = _evaluate(v, expr.ours, errors=v.errors, **extra)
            if why is not None:
                t.fail(f"ours {expr.ours!r} (for {expr.theirs!r}, {expr.reason}) is {why}")
            continue
        text = _substitute(expr, shell or {})
        t.evaluated.append(expr)
        why = _evaluate(v, text, **extra)
        if why is not None:
            t.fail(f"their verify {text!r} is {why}:\n{_context(v, text)}")
    return v


# ---- their metrics -------------------------------------------------------------------------


def _places(topology: Topology, cpus: IDSet) -> dict[str, list[str]]:
    """Their CPU tree's locations of `cpus`: packages ``p0``, dies ``p0d0``, numas ``p0d0n1``."""
    die_rank = {
        die: i for pkg in topology.package_ids() for i, die in enumerate(topology.die_ids(pkg))
    }
    out: dict[str, set[str]] = {"packages": set(), "dies": set(), "numas": set()}
    for c in cpus:
        cpu = topology.cpu(c)
        pkg = f"p{cpu.package_id}"
        die = f"{pkg}d{die_rank[cpu.die_id]}"
        out["packages"].add(pkg)
        out["dies"].add(die)
        out["numas"].add(f"{die}n{cpu.node_id}")
    return {k: sorted(v) for k, v in out.items()}


def metric_lines(
    balloons: Iterable[BalloonSnapshot],
    topology: Topology,
    namespace_of: Mapping[str, str],
    milli_of: Mapping[str, int],
    types: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """The step's balloons as their ``nri_policy_balloons_cores`` gauge lines.

    Labels in their (alphabetical) order, with the values their metrics callback gives
    (cmd/plugins/balloons/policy/metrics.go ``Observe``): containers as
    ``NAMESPACE/POD/CONTAINER`` (`namespace_of` by pod), ``tot_req_millicpu`` the sum of
    the containers' CPU requests (`milli_of` by ``pod/container``), cpu_class, cpus_min
    and cpus_max the balloon type's (`types`: its configuration by name; a built-in type
    absent there has none, zero and zero).  ``groups`` is written empty for a type
    without ``groupBy`` and left out otherwise (our snapshot has no group names), so a
    check on a group does not match.
    """
    lines = []
    for b in balloons:
        cpus = IDSet.parse(b.cpus) if b.cpus else IDSet()
        idle = IDSet.parse(b.shared_idle_cpus) if b.shared_idle_cpus else IDSet()
        places = _places(topology, cpus)
        names = sorted(f"{namespace_of.get(k.split('/')[0], 'default')}/{k}" for k in b.containers)
        conf = types.get(b.type, {})
        labels = {
            "balloon": b.name,
            "balloon_type": b.type,
            "containers": ",".join(names),
            "cpu_class": str(conf.get("cpuClass", "")),
            "cpus": str(cpus),
            "cpus_allowed": str(cpus | idle),
            "cpus_allowed_count": str(len(cpus | idle)),
            "cpus_count": str(len(cpus)),
            "cpus_max": str(conf.get("maxCPUs", 0)),
            "cpus_min": str(conf.get("minCPUs", 0)),
            "dies": ",".join(places["dies"]),
            "dies_count": str(len(places["dies"])),
            "groups": "",
            "mems": b.mems,
            "numas": ",".join(places["numas"]),
            "numas_count": str(len(places["numas"])),
            "packages": ",".join(places["packages"]),
            "packages_count": str(len(places["packages"])),
            "sharedidlecpus": str(idle),
            "sharedidlecpus_count": str(len(idle)),
            "tot_req_millicpu": str(sum(milli_of.get(k, 0) for k in b.containers)),
        }
        if conf.get("groupBy"):
            del labels["groups"]
        body = ",".join(f'{k}="{val}"' for k, val in labels.items())
        lines.append(f"nri_policy_balloons_cores{{{body}}} {len(cpus)}")
    return lines


def check_metrics(
    lines: Sequence[str], has: Sequence[str] = (), has_no: Sequence[str] = ()
) -> None:
    """Their ``verify-metrics-has-line RE`` (each of `has`) and ``-has-no-line`` (`has_no`).

    Counted apart from the expressions: each regex is one check of their script.
    """
    t = _current()
    for regex in has:
        t.metrics.append(regex)
        if not any(re.search(regex, line) for line in lines):
            t.fail(f"no metrics line matches {regex!r}:\n  " + "\n  ".join(lines))
    for regex in has_no:
        t.metrics.append(regex)
        found = [line for line in lines if re.search(regex, line)]
        if found:
            t.fail(f"metrics lines match {regex!r}, expected none: {found}")
