"""docs/policies.md's nri-plugins table covers every test of their suite and names real tests."""

from __future__ import annotations

import re
from pathlib import Path

from tests.parity import (
    test_topology_aware_n4c16,
    test_topology_aware_n4c128,
    test_topology_aware_n6_hbm_cxl,
    test_topology_aware_s8c4k,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"

#: their test/e2e/policies.test-suite/topology-aware/*/test* directories
THEIR_TESTS = {
    *(
        f"n4c16/{t}"
        for t in [
            "test00-basic-placement",
            "test01-always-fits",
            "test02-shrink-and-grow-shared",
            "test03-simple-affinity",
            "test04-available-resources",
            "test05-reserved-resources",
            "test06-fuzz",
            "test07-mixed-allocations",
            "test08-cpuprio-allocation",
            "test09-container-exit",
            "test10-additional-reserved-namespaces",
            "test11-reserved-cpu-annotations",
            "test12-config-status",
            "test13-reject-symlink",
            "test14-burstable",
            "test14-global-shared-preference",
            "test15-busy-shared-pools",
            "test16-idle-shared-pools",
            "test17-scheduling-classes",
            "test18-strict-alignment",
            "test19-cpuclass",
            "test25-irq",
            "test30-numa-disabled",
            "test31-duplicate-disambiguation",
            "test40-otel-logging",
        ]
    ),
    "n4c128/test19-cacheclusters",
    "n6-hbm-cxl/test01-memory-types",
    "n6-hbm-cxl/test02-fuzz-memallocs",
    "n6-hbm-cxl/test04-nrt",
    "s8c4k/test01-sparse-4kcpus",
}

MODULES = {
    "n4c16": test_topology_aware_n4c16,
    "n4c128": test_topology_aware_n4c128,
    "n6-hbm-cxl": test_topology_aware_n6_hbm_cxl,
    "s8c4k": test_topology_aware_s8c4k,
}


def _rows() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### nri-plugins test suite", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| ([\w-]+/test[\w-]+) \| (.+) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_test_of_theirs_has_a_row() -> None:
    assert set(_rows()) == THEIR_TESTS


ROOT = DOC.parents[1]

#: a named test elsewhere in our suite: `tests/<path>.py::test_name`
OTHER = re.compile(r"`(tests/[\w/]+\.py)::(test\w+)`")
#: a named test of the machine's parity module: `test_name`
LOCAL = re.compile(r"`(test\w+)`")


def _is_xfail(module: object, name: str) -> bool:
    marks = getattr(getattr(module, name), "pytestmark", [])
    return any(m.name == "xfail" for m in marks)


def test_named_tests_exist() -> None:
    for theirs, here in _rows().items():
        machine = theirs.split("/")[0]
        for name in LOCAL.findall(here):
            assert hasattr(MODULES[machine], name), f"{theirs}: {name} not in {machine}'s module"
        for path, name in OTHER.findall(here):
            source = (ROOT / path).read_text(encoding="utf-8")
            assert re.search(rf"^def {name}\(", source, re.M), f"{theirs}: {name} not in {path}"


def test_rows_say_xfail_exactly_when_a_named_test_is_xfail() -> None:
    for theirs, here in _rows().items():
        module = MODULES.get(theirs.split("/")[0])
        names = LOCAL.findall(here)
        xfails = {n for n in names if module is not None and _is_xfail(module, n)}
        if "xfail" in here:
            assert xfails, f"{theirs}: the row says xfail but none of {names} is marked xfail"
        else:
            assert not xfails, f"{theirs}: {sorted(xfails)} marked xfail, the row does not say so"
        if here.startswith("passes"):
            assert names or OTHER.search(here), f"{theirs}: the row says passes but names no test"
