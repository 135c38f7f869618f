"""No import cycle in nri_api and nri_resmgr, counting the imports made inside functions.

An import moved into a function still runs, later: it hides a cycle from the interpreter
and from import-linter (which sees it, but only checks the contracts' layers), not from
the design.  This test reads every module's source (`ast`), collects every ``import``
and ``from ... import`` wherever it is (module level, class bodies, functions), except in
an ``if TYPE_CHECKING:`` block (annotations only, never run), and asserts that the graph
of project modules has no cycle.  An import of ``a.b.c`` is an edge to the module
``a.b.c`` (the name imported, when it is a module, else the module it comes from); the
implicit import of a parent package is not an edge (the interpreter always finishes a
package's ``__init__`` before its submodules).

An import inside a function that hides no cycle is still a choice to explain: each module
that has one is listed in `LAZY` with why (start-up before registration, the command
line's parser, an optional dependency); a new one elsewhere fails
`test_imports_inside_functions_are_the_listed_lazy_ones` until it is listed or moved up.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.requirements import REPO

PACKAGES = ("nri_api", "nri_resmgr")

Graph = Mapping[str, frozenset[str]]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.AST, *, in_functions: bool = True) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of `tree`, ``if TYPE_CHECKING:`` bodies aside; with
    `in_functions` false, those inside function bodies aside too."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if not in_functions and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> set[str]:
    """The dotted names `node` imports (``from a.b import c``: ``a.b.c``, which the graph
    maps to the longest prefix that is a module)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return {f"{base}.{alias.name}" for alias in node.names}


def import_graph(*, in_functions: bool = True) -> dict[str, frozenset[str]]:
    """Module -> the project modules it imports."""
    files = {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}
    graph: dict[str, frozenset[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        out: set[str] = set()
        for node in _imports(tree, in_functions=in_functions):
            for name in _targets(node, module, is_package):
                # a.b.c: the module a.b.c when c is one, else a.b (c defined in it)
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    out.add(name)
        graph[module] = frozenset(out)
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle of `graph` (its modules in order, the first repeated at the end) or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        iters = [iter(sorted(graph[start]))]
        state[start] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(sorted(graph.get(nxt, ()))))
    return None


#: the modules that import inside functions, and why (none of these hides a cycle: the
#: cycle test above counts them)
_COMMAND = (
    "the command line imports every command's module to build its parser; a command "
    "imports its work when it runs"
)
LAZY: Mapping[str, str] = {
    "nri_api.connection": "ctypes only where glibc's malloc_trim is called",
    "nri_resmgr.commands.dump": _COMMAND,
    "nri_resmgr.commands.explain": _COMMAND,
    "nri_resmgr.commands.reset": _COMMAND,
    "nri_resmgr.commands.run": _COMMAND,
    "nri_resmgr.commands.scheduler_extender": _COMMAND,
    "nri_resmgr.commands.show": _COMMAND,
    "nri_resmgr.commands.simulate": _COMMAND,
    "nri_resmgr.commands.topology": _COMMAND,
    "nri_resmgr.commands.uninstall": _COMMAND,
    "nri_resmgr.commands.validate_config": _COMMAND,
    "nri_resmgr.runtime.process": "start-up before registration "
    "(tests/unit/resmgr/test_startup_imports.py pins them)",
    "nri_resmgr.control.resctrl": "the package's re-exports past its configuration models, "
    "on first use (start-up before registration: no RDT configured, none loaded)",
    "nri_resmgr.control.wiring": "a controller (RDT, block I/O, the memory components) only "
    "when the configuration enables it (start-up before registration)",
    "nri_resmgr.ops.metrics": "prometheus_client (ops.exposition) only when the metrics are read "
    "(start-up before registration: no HTTP endpoint, none loaded)",
    "nri_resmgr.simulator.run": "the controllers and the logger only when a scenario needs them",
    "nri_resmgr.simulator.kubelet": "block I/O files only when a scenario writes cgroups",
    "nri_resmgr.kube.uninstall": "the API client only in the --on-uninstall mode",
    "nri_resmgr.ops.runtime_config": "tomlkit only when a file is edited (--help reads the "
    "module's constants)",
    "nri_resmgr.control.host_reset": "the resctrl and CPU class controllers only when their "
    "record exists (reset --help)",
    "nri_resmgr.topology.discover": "pyroute2 only when sysfs does not name the links",
    "nri_resmgr.view.pages": "the view model and HTML only for the page asked for",
}


def modules_importing_in_functions() -> set[str]:
    """The project modules with an import inside a function (TYPE_CHECKING aside)."""
    out = set()
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            everywhere = sum(1 for _ in _imports(tree))
            if everywhere != sum(1 for _ in _imports(tree, in_functions=False)):
                out.add(_module_name(path))
    return out


def test_imports_inside_functions_are_the_listed_lazy_ones() -> None:
    found = modules_importing_in_functions()
    assert sorted(found - set(LAZY)) == [], "import inside a function, reason not listed in LAZY"
    assert sorted(set(LAZY) - found) == [], "LAZY lists a module with no import in a function"


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_scan_sees_imports_inside_functions_and_skips_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from nri_resmgr.config import Config\n"
        "def f():\n"
        "    from nri_resmgr.ops import logs\n"
        "class C:\n"
        "    def g(self):\n"
        "        import nri_resmgr.model\n"
    )
    tree = ast.parse(source)
    found = set()
    for node in _imports(tree):
        found |= _targets(node, "nri_resmgr.x", False)
    assert {"nri_resmgr.ops.logs", "nri_resmgr.model"} <= found
    assert not any(name.startswith("nri_resmgr.config") for name in found)
    top = set()
    for node in _imports(tree, in_functions=False):
        top |= _targets(node, "nri_resmgr.x", False)
    assert top == {"typing.TYPE_CHECKING"}


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset()}, None),
        (
            {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})},
            ["a", "b", "c", "a"],
        ),
        (
            {"a": frozenset({"b", "c"}), "b": frozenset({"c"}), "c": frozenset({"b"})},
            ["b", "c", "b"],
        ),
    ],
    ids=["acyclic", "three", "behind-a-branch"],
)
def test_find_cycle(graph: Graph, expected: list[str] | None) -> None:
    assert find_cycle(graph) == expected


def test_relative_imports_resolve_against_the_package() -> None:
    node = ast.parse("from .cpuset import IDSet\nfrom .. import model\n").body
    assert isinstance(node[0], ast.ImportFrom) and isinstance(node[1], ast.ImportFrom)
    assert _targets(node[0], "nri_resmgr.topology.model", False) == {
        "nri_resmgr.topology.cpuset.IDSet"
    }
    assert _targets(node[1], "nri_resmgr.topology.model", False) == {"nri_resmgr.model"}
