"""Simulator scenarios for tests: `scenario(steps)` is a whole scenario document on `SMALL`
(one package, four cores with two threads each) under the static policy with CPU 0
reserved; keywords override any of its keys.
"""

from __future__ import annotations

from typing import Any

SMALL = {"packages": 1, "dies": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"}


def scenario(steps: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {
        "topology": SMALL,
        "policy": "static",
        "config": {"reservedSystemCPUs": "0"},
        "steps": steps,
        **kw,
    }
