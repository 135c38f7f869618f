"""Balloons configuration documents go through `nri_resmgr.policy_documents` (issue 15)."""

from nri_resmgr.policy_documents import normalize_document


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
        "balloonTypes": [{"name": "a", "loads": ["x"]}, {"name": "b", "loads": ["y"]}],
    }
    got = normalize_document(doc)
    assert got.data["policy"] == "balloons"
    assert len(got.warnings) == 1
    assert got.warnings[0].startswith("balloonTypes.loads: accepted, not implemented")


def test_shared_keys_alone_stay_topology_aware() -> None:
    assert normalize_document({"reservedResources": {"cpu": "750m"}}).data["policy"] == (
        "topology-aware"
    )
