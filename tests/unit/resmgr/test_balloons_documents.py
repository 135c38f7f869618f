"""Balloons configuration documents go through `nri_resmgr.policy_documents` (issue 15)."""

import pytest
import yaml

from nri_resmgr.cli import main
from nri_resmgr.policy_documents import normalize_document
from tests.support.requirements import REPO


def test_balloons_policy_resource_names_the_balloons_policy() -> None:
    doc = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "BalloonsPolicy",
        "spec": {"reservedResources": {"cpu": "750m"}, "balloonTypes": [{"name": "a"}]},
    }
    got = normalize_document(doc)
    assert got.data["policy"] == "balloons"
    assert got.data["policyConfig"]["balloonTypes"] == [{"name": "a"}]
    assert got.warnings == ()


def test_bare_balloons_spec_is_balloons_and_warns_once_per_key() -> None:
    doc = {
        "reservedResources": {"cpu": "750m"},
        "cpuClasses": [{"name": "x", "pctPriority": "high"}, {"name": "y", "pctPriority": "low"}],
        "balloonTypes": [{"name": "a", "cpuClass": "x"}, {"name": "b", "cpuClass": "y"}],
    }
    got = normalize_document(doc)
    assert got.data["policy"] == "balloons"
    assert len(got.warnings) == 1
    assert got.warnings[0].startswith("cpuClasses.pctPriority: accepted, not implemented")


def test_shared_keys_alone_stay_topology_aware() -> None:
    assert normalize_document({"reservedResources": {"cpu": "750m"}}).data["policy"] == (
        "topology-aware"
    )


def test_their_sample_balloons_config_loads_with_validate_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 15 acceptance: their sample-configs/balloons-config.yaml (comments removed)."""
    path = REPO / "tests/unit/resmgr/data/nri-plugins/balloons-config.yaml"
    assert main(["validate-config", str(path)]) == 0
    assert f"{path}: valid" in capsys.readouterr().out


@pytest.mark.parametrize(
    "topology", sorted(p.name for p in (REPO / "examples/topologies").glob("*.yaml"))
)
def test_simulate_balloons_with_their_sample_config_on_every_shipped_topology(
    topology: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15 acceptance: `simulate --policy balloons --config C --scenario S`."""
    args = [
        "simulate",
        "--policy",
        "balloons",
        "--config",
        str(REPO / "tests/unit/resmgr/data/nri-plugins/balloons-config.yaml"),
        "--scenario",
        str(REPO / "examples/scenarios/balloons-inference.yaml"),
        "--topology",
        str(REPO / "examples/topologies" / topology),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "policy:   balloons" in out
    assert "reserved[0]" in out


def test_their_helm_balloons_values_config_is_a_valid_balloons_spec(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Their helm chart's balloons values (`config:`), a bare spec: balloons, with warnings."""
    path = REPO / "tests/unit/resmgr/data/nri-plugins/helm-balloons-config.yaml"
    assert main(["validate-config", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"{path}: valid" in captured.out
    assert f"{path}: warning: log.klog: accepted, not implemented" in captured.err
    doc = yaml.safe_load(path.read_text())
    assert normalize_document(doc).data["policy"] == "balloons"
