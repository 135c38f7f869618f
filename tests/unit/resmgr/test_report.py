"""Node reporting: merge rules, the NRT object, one request per cycle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from nri_resmgr.kube.report import (
    NRT_PATH,
    ClassReporter,
    PoolReporter,
    ReportManager,
    TopologyReporter,
    merge_reports,
    merge_value,
)
from nri_resmgr.ops.metrics import PoolSnapshot, StateSnapshot
from nri_resmgr.topology.synthetic import build_topology


@pytest.mark.parametrize(
    ("earlier", "later", "merged"),
    [
        pytest.param({"a": 1}, {"b": 2}, {"a": 1, "b": 2}, id="maps-merge-by-key"),
        pytest.param({"a": {"x": 1}}, {"a": {"y": 2}}, {"a": {"x": 1, "y": 2}}, id="nested-maps"),
        pytest.param({"l": [1, 2]}, {"l": [3]}, {"l": [1, 2, 3]}, id="lists-concatenate-in-order"),
        pytest.param({"s": "old"}, {"s": "new"}, {"s": "new"}, id="scalar-later-wins"),
        pytest.param({"s": [1]}, {"s": "x"}, {"s": "x"}, id="type-mismatch-later-wins"),
        pytest.param(
            {"a": {"x": 1}}, {"a": {"x": 5}}, {"a": {"x": 5}}, id="nested-scalar-later-wins"
        ),
    ],
)
def test_merge_rules(
    earlier: dict[str, Any], later: dict[str, Any], merged: dict[str, Any]
) -> None:
    assert merge_value(earlier, later) == merged


def test_merge_does_not_alias_inputs() -> None:
    a = {"l": [{"k": 1}]}
    out = merge_reports([a, {"l": []}])
    out["l"][0]["k"] = 99
    assert a == {"l": [{"k": 1}]}


@dataclass
class Recorder:
    calls: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)

    def apply(self, path: str, obj: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        assert manager == "nri-resmgr"
        self.calls.append((path, obj))
        return dict(obj)


@dataclass
class Fixed:
    name: str
    fields: dict[str, Any]

    def report(self) -> Mapping[str, Any]:
        return self.fields


def test_registration_order_decides_and_one_request_per_cycle() -> None:
    now = [0.0]
    rec = Recorder()
    mgr = ReportManager("node-a", rec, min_interval=10, clock=lambda: now[0])
    mgr.register(Fixed("first", {"attributes": [{"name": "a", "value": "1"}], "x": "first"}))
    mgr.register(Fixed("second", {"attributes": [{"name": "b", "value": "2"}], "x": "second"}))
    with pytest.raises(ValueError, match="already registered"):
        mgr.register(Fixed("first", {}))
    assert mgr.cycle() is True
    (path, obj), = rec.calls
    assert path == f"{NRT_PATH}/node-a"
    assert obj["metadata"]["name"] == "node-a"
    assert obj["attributes"] == [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]
    assert obj["x"] == "second"
    # within the interval: no request even if changed; after it: only if changed
    mgr.reporters[0] = Fixed("first", {"x": "changed"})
    now[0] = 5
    assert mgr.cycle() is False
    now[0] = 11
    assert mgr.cycle() is True
    now[0] = 30
    assert mgr.cycle() is False  # unchanged
    assert mgr.requests == 2 == len(rec.calls)


def test_built_in_reporters_on_a_two_socket_machine() -> None:
    topo = build_topology({"packages": 2, "dies": 1, "nodes": 1, "cores": 2, "threads": 2,
                           "memory": "1G"})
    snap = StateSnapshot(pools=(PoolSnapshot("node0", 4, 2, 2, 3),),
                         containers_by_kind={"exclusive": 1, "shared": 2})
    mgr = ReportManager("n", Recorder(), clock=lambda: 0.0)
    mgr.register(TopologyReporter(topo))
    mgr.register(PoolReporter(lambda: snap, "topology-aware"))
    mgr.register(ClassReporter(["guaranteed", "besteffort"], ["slow"]))
    obj = mgr.collect()
    names = [z["name"] for z in obj["zones"]]
    assert names == ["node-0", "node-1", "pool-node0"]
    node0 = obj["zones"][0]
    assert node0["costs"] == [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}]
    assert node0["resources"][0] == {"name": "cpu", "capacity": "4", "allocatable": "4",
                                     "available": "4"}
    assert node0["resources"][1]["capacity"] == str(1 << 30)
    attrs = {a["name"]: a["value"] for a in obj["attributes"]}
    assert attrs["nri-resmgr.policy"] == "topology-aware"
    assert attrs["nri-resmgr.containers.shared"] == "2"
    assert attrs["nri-resmgr.rdt-classes"] == "besteffort,guaranteed"
