"""The NodeResourceTopology objects the daemon writes validate against the CRD the chart
ships (charts/nri-resmgr/crds/noderesourcetopologies.yaml), itself valid for
kubernetes-validate; checked with every field the schema does not name refused, since the
API server would prune such a field silently (the real API server reads them back in
tests/integration/test_daemon_nrt.py)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonschema
import pytest
import yaml

from nri_resmgr.kube.report import ClassReporter, ReportManager, TopologyReporter
from tests.parity.machines import N6_HBM_CXL, helm_config
from tests.support.requirements import REPO
from tests.unit.kube.test_nrt import TWO_NODES, delete, pod, run

CRD_PATH = REPO / "charts" / "nri-resmgr" / "crds" / "noderesourcetopologies.yaml"
KUBE_VERSION = "1.34.0"


def crd() -> dict[str, Any]:
    doc = yaml.safe_load(CRD_PATH.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def closed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with every object that names its properties closed to others (pruning)."""
    out = copy.deepcopy(dict(schema))
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
        out["properties"] = {k: closed(v) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = closed(out["items"])
    return out


def validator() -> jsonschema.Draft7Validator:
    (version,) = crd()["spec"]["versions"]
    return jsonschema.Draft7Validator(closed(version["schema"]["openAPIV3Schema"]))


def test_the_crd_is_valid_for_kubernetes_validate() -> None:
    import kubernetes_validate

    kubernetes_validate.validate(crd(), KUBE_VERSION, strict=True)


class Null:
    def apply(self, path: str, obj: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        return dict(obj)


def objects() -> list[dict[str, Any]]:
    """Whole objects as the daemon writes them, for each step of a few workloads."""
    out = []
    runs = [
        run([pod("g", "2", "1G"), pod("m", "1500m", "100M"), pod("b", "500m"), delete("g")]),
        run([pod("g", "2", "100M")], config=helm_config(), topology=N6_HBM_CXL),
        run([pod("g", "1", "100M")], policy="static", topology=TWO_NODES),
        run([pod("g", "1", "100M")], policy="balloons"),
    ]
    for result in runs:
        for step in result.steps:
            mgr = ReportManager("node-a", Null(), clock=lambda: 0.0)
            mgr.register(Fixed(step.nrt))
            mgr.register(ClassReporter(["gold"], []))
            out.append(mgr.collect())
    return out


class Fixed:
    name = "fixed"

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self.fields = fields

    def report(self) -> Mapping[str, Any]:
        return self.fields


def test_every_written_object_validates_against_the_crd() -> None:
    v = validator()
    objs = objects()
    assert len(objs) >= 6
    for obj in objs:
        errors = sorted(str(e.message) for e in v.iter_errors(obj))
        assert errors == [], errors


def test_an_idle_report_validates_too() -> None:
    from nri_resmgr.topology.load import load_topology

    mgr = ReportManager("node-a", Null(), clock=lambda: 0.0)
    mgr.register(TopologyReporter(load_topology(dict(TWO_NODES))))
    assert list(validator().iter_errors(mgr.collect())) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param(("zones", 0, "resources", 0, "available"), [1], id="available-not-quantity"),
        pytest.param(("zones", 0, "bogus"), "x", id="unknown-zone-field"),
        pytest.param(("attributes", 0, "value"), 3, id="attribute-value-not-string"),
    ],
)
def test_the_check_refuses_what_the_api_server_would_refuse_or_prune(
    path: tuple[Any, ...], value: Any
) -> None:
    (obj, *_) = objects()
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert list(validator().iter_errors(obj)), path
