"""nri-plugins' configuration documents (custom resource, bare spec) load unchanged."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from nri_resmgr.cli import main
from nri_resmgr.config import Config, config_from_mapping, load_config
from nri_resmgr.documents import DocumentError
from nri_resmgr.model import ConfigError
from nri_resmgr.policy.topology_aware.config import (
    NOT_IMPLEMENTED,
    NriPluginsKeys,
    TopologyAwareConfig,
    not_implemented_keys,
)
from nri_resmgr.policy_documents import (
    COMMON_NOT_IMPLEMENTED,
    COMMON_SECTIONS,
    SERVER_DEFAULTS,
    normalize_document,
    policy_kinds,
)
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.topology.load import load_topology
from nri_resmgr.validation import model_keys
from tests.support.requirements import REPO

DATA = Path(__file__).parent / "data" / "nri-plugins"
CRD = REPO / "charts" / "nri-resmgr" / "crds" / "config.nri_topologyawarepolicies.yaml"
BALLOONS_CRD = REPO / "charts" / "nri-resmgr" / "crds" / "config.nri_balloonspolicies.yaml"
TOPO = "{packages: 2, nodes: 1, cores: 2, threads: 2, memory: 1G}"


def spec_schema(path: Path = CRD) -> Mapping[str, Any]:
    crd = yaml.safe_load(path.read_text())
    version = crd["spec"]["versions"][0]
    schema: Mapping[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def schema_paths(schema: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Every property path of an object schema (not descending into maps or arrays)."""
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        yield path
        yield from schema_paths(sub, path + ".")


def schema_defaults(schema: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, default) of every property whose schema has a default; an object default
    is given per leaf (``agent: {nodeResourceTopology: true}`` ->
    ``agent.nodeResourceTopology``) when its properties are listed."""
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        default = sub.get("default")
        if isinstance(default, dict) and key in ("agent",):
            yield from ((f"{path}.{k}", v) for k, v in default.items())
        elif "default" in sub:
            yield path, default
        yield from schema_defaults(sub, path + ".")


def test_server_defaults_are_those_of_their_crds() -> None:
    ta = dict(schema_defaults(spec_schema()))
    balloons = dict(schema_defaults(spec_schema(BALLOONS_CRD)))
    assert all(ta[k] == balloons[k] for k in ta.keys() & balloons.keys())
    assert ta | balloons == SERVER_DEFAULTS


def test_a_balloons_resource_as_the_api_server_stores_it_gives_no_warning() -> None:
    spec = {
        "reservedResources": {"cpu": "750m"},
        "balloonTypes": [{"name": "a"}],
        **dict(schema_defaults(spec_schema(BALLOONS_CRD))),
    }
    spec["agent"] = {"nodeResourceTopology": True}
    spec["instrumentation"] = {
        "reportPeriod": "30s",
        "metrics": {"enabled": ["policy", "buildinfo"]},
    }
    for key in [k for k in spec if "." in k]:
        del spec[key]
    doc = {"apiVersion": "config.nri/v1alpha1", "kind": "BalloonsPolicy", "spec": spec}
    assert config_from_mapping(doc).warnings == ()


def test_a_value_the_api_server_filled_in_gives_no_warning() -> None:
    spec = {"reservedResources": {"cpu": "1"}, **TOP_LEVEL_DEFAULTS}
    spec["agent"] = {"nodeResourceTopology": True}
    spec["instrumentation"] = {
        "reportPeriod": "30s",
        "metrics": {"enabled": ["policy", "buildinfo"]},
    }
    assert config_from_mapping(resource(spec)).warnings == ()
    spec["availableResources"] = {"memory": "1G"}
    assert [w.split(":")[0] for w in config_from_mapping(resource(spec)).warnings] == [
        "spec.availableResources.memory"
    ]


#: the top-level defaults the API server writes into a TopologyAwarePolicy
TOP_LEVEL_DEFAULTS = {k: v for k, v in schema_defaults(spec_schema()) if "." not in k}


def _accepted_by_config(path: str) -> bool:
    """Whether this project's `Config` has the (common section) key at dotted `path`."""
    *where, key = path.split(".")
    return key in model_keys(Config, tuple(where))


def test_every_policy_key_of_their_spec_is_a_key_of_ours() -> None:
    """Their CRD (as shipped in our chart) is the list of keys to accept."""
    ours = set(model_keys(TopologyAwareConfig, ()))
    top = {str(k) for k in spec_schema()["properties"]}
    assert top - set(COMMON_SECTIONS) <= ours
    assert {"agent", "control", "log", "instrumentation"} <= top


def test_every_common_key_of_their_spec_maps_to_ours_or_warns() -> None:
    unplaced = []
    for path in schema_paths(spec_schema()):
        section = path.split(".")[0]
        if section not in COMMON_SECTIONS or "." not in path:
            continue
        warned = any(path == p or path.startswith(p + ".") for p in COMMON_NOT_IMPLEMENTED)
        if not warned and not _accepted_by_config(path):
            unplaced.append(path)
    assert unplaced == []


def schema_sample(schema: Mapping[str, Any], key: str = "") -> Any:
    """A value of `schema` with every property set (map keys: ``cpu`` for their resource
    maps, ``all`` for the RDT cache ids; strings in the form the key takes)."""
    if schema.get("type") == "array":  # an enum here is that of the items (their flags)
        items = dict(schema.get("items") or {})
        if "enum" in schema:
            items["enum"] = schema["enum"]
        return [schema_sample(items, key)]
    if "enum" in schema:
        return schema["enum"][-1]
    if "properties" in schema:
        return {k: schema_sample(sub, k) for k, sub in schema["properties"].items()}
    kind = schema.get("type")
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            map_key = "cpu" if key in ("reservedResources", "availableResources") else "all"
            return {map_key: schema_sample(values, key)}
        return {}
    if kind == "array":
        return [schema_sample(schema.get("items") or {}, key)]
    if kind == "integer":
        return 1
    if kind == "boolean":
        return False
    return "50%" if key in ("unified", "code", "data", "mbAllocation") else "1"


def test_a_spec_with_every_key_of_their_schema_loads() -> None:
    """Every key their CRD has, set at once: accepted; the ones without effect warned."""
    doc = resource(schema_sample(spec_schema()))
    config = config_from_mapping(doc)
    warned = [w.split(":")[0].removeprefix("spec.") for w in config.warnings]
    expected = []
    for path in [*COMMON_NOT_IMPLEMENTED, *NOT_IMPLEMENTED]:
        value: Any = doc["spec"]
        for part in path.split("."):
            if isinstance(value, list):  # a list of entries (cpuClasses): the first one's
                value = value[0] if value else None
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and value != SERVER_DEFAULTS.get(path):
            expected.append(path)
    assert warned == expected
    assert len(warned) >= len(COMMON_NOT_IMPLEMENTED)
    assert config.policy_config["colocatePods"] is False
    assert config.control.rdt.enable is False


def resource(spec: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "TopologyAwarePolicy",
        "metadata": {"name": "default", "namespace": "kube-system"},
        "spec": dict(spec),
        **extra,
    }


SPEC = {
    "reservedResources": {"cpu": "750m"},
    "pinMemory": False,
    "colocatePods": True,
    "control": {"rdt": {"enable": False, "usePodQoSAsDefaultClass": True}},
    "log": {"debug": ["policy"]},
    "instrumentation": {"httpEndpoint": ":8891"},
}


@pytest.mark.parametrize(
    "doc",
    [resource(SPEC), SPEC, resource(SPEC, status={"nodes": {}})],
    ids=["custom-resource", "bare-spec", "custom-resource-with-status"],
)
def test_both_forms_mean_the_same_config(doc: Mapping[str, Any]) -> None:
    config = config_from_mapping(doc)
    assert config.policy == "topology-aware"
    assert config.policy_config == {
        "reservedResources": {"cpu": "750m"},
        "pinMemory": False,
        "colocatePods": True,
    }
    assert config.control.rdt.use_pod_qos_as_default_class is True
    assert config.log.debug == ("policy",)
    assert config.instrumentation.http_endpoint == ":8891"
    assert config.warnings == ()


#: a value the key's type takes, other than their default (else a string)
VALUES: dict[str, Any] = {
    "pctPriority": "high",
    "sstClosID": 1,
    "pctMinFreq": "2GHz",
    "pctMaxFreq": "3GHz",
    "publishExtendedResource": True,
    "schedulingClasses": [{"name": "rt"}],
    "namespaceSchedulingClasses": {"db": "rt"},
    "podQoSSchedulingClasses": {"Burstable": "rt"},
    "controllableInterrupts": ["42"],
}


@pytest.mark.parametrize("path", sorted(NOT_IMPLEMENTED) + sorted(COMMON_NOT_IMPLEMENTED), ids=str)
def test_a_key_without_effect_gives_one_warning_naming_it(path: str) -> None:
    spec: dict[str, Any] = {"reservedResources": {"cpu": "1"}}
    node = spec
    *parents, key = path.split(".")
    for part in parents:
        if part == "cpuClasses":  # a list of named entries
            node = node.setdefault(part, [{"name": "c"}])[0]
            continue
        node = node.setdefault(part, {})
    node[key] = VALUES.get(key, "set by the operator")
    config = config_from_mapping(resource(spec))
    assert len(config.warnings) == 1
    assert config.warnings[0].startswith(f"spec.{path}: accepted, not implemented here")


def test_a_key_without_effect_in_our_form_warns_too() -> None:
    config = config_from_mapping(
        {"policy": "topology-aware", "policyConfig": {"availableResources": {"memory": "1G"}}}
    )
    assert [w.split(":")[0] for w in config.warnings] == ["policyConfig.availableResources.memory"]


def test_the_policy_is_built_with_keys_without_effect() -> None:
    spec = {
        "reservedResources": {"cpu": "750m", "memory": "1G"},
        "cpuClasses": [{"name": "turbo", "minFreq": "2GHz"}],
        "schedulingClasses": [{"name": "rt", "policy": "fifo", "priority": 42}],
        "namespaceSchedulingClasses": {"db": "rt"},
        "unlimitedBurstable": "system",
        "controllableInterrupts": ["42"],
    }
    config = config_from_mapping(resource(spec))
    policy = load_policy(config.policy, topology=load_topology(TOPO), config=config.policy_config)
    assert policy.name == "topology-aware"
    # the keys still without effect (helpers implementing one shrink NOT_IMPLEMENTED)
    assert "reservedResources.memory" in NOT_IMPLEMENTED
    assert [w.split(":")[0] for w in config.warnings] == ["spec.reservedResources.memory"]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            resource({"pinCPUs": True}),
            "spec: unknown key pinCPUs; expected one of",
        ),
        (
            {"reservedResources": {"cpu": 1}, "pinCPUs": True},
            "(document): unknown key pinCPUs; expected one of",
        ),
        (resource({"log": {"dbug": ["x"]}}), "spec.log: unknown key dbug;"),
        (resource({"agent": {"nodeResourceTopolgy": True}}), "spec.agent: unknown key"),
        (resource({}, apiVersion="config.nri/v1"), "apiVersion: expected config.nri/v1alpha1"),
        (resource({}, kind="TopologyAware"), "kind: expected one of TopologyAwarePolicy"),
        (resource({}, specs={}), "(document): unknown key specs;"),
    ],
    ids=["policy-key", "bare-spec-key", "log-key", "agent-key", "api-version", "kind", "cr-key"],
)
def test_a_misspelt_key_is_still_an_error(
    doc: Mapping[str, Any], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(dict(doc)))
    rc = main(["validate-config", str(f), "--topology", TOPO])
    lines = [ln.removeprefix(f"{f}: ") for ln in capsys.readouterr().err.splitlines()]
    assert rc == 1
    assert any(ln.startswith(expected) for ln in lines), lines
    if "unknown key" in expected:
        assert any("did you mean" in ln for ln in lines), lines


def test_a_policy_key_misspelt_in_the_daemon_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"spec: unknown key pinCPUs.*did you mean pinCPU\?"):
        config_from_mapping(resource({"pinCPUs": True}))
    with pytest.raises(ConfigError, match=r"^<config>: pinCPU: expected a valid boolean"):
        config_from_mapping({"reservedResources": {"cpu": 1}, "pinCPU": "maybe"})
    with pytest.raises(ConfigError, match=r"spec\.log: unknown key dbug.*did you mean debug"):
        config_from_mapping(resource({"log": {"dbug": []}}))
    with pytest.raises(DocumentError, match="kind: expected one of"):
        config_from_mapping(resource({}, kind="BalloonPolicy"))


SAMPLES = sorted(DATA.glob("*.yaml"))


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_their_sample_configs_load(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config(sample)  # run --config, simulate --config
    assert config.policy == ("balloons" if "balloons" in sample.name else "topology-aware")
    assert load_config(sample.read_text()) == config  # a pre-registered plugin's conf.d text
    load_policy(config.policy, topology=load_topology(TOPO), config=config.policy_config)
    capsys.readouterr()
    assert main(["validate-config", str(sample), "--topology", TOPO]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == f"{sample}: valid"
    warned = [ln for ln in out.err.splitlines() if ": warning: " in ln]
    assert len(warned) == len(config.warnings)
    # their sample balloons-config.yaml sets only keys implemented here
    assert config.warnings or sample.name == "balloons-config.yaml"


def test_simulate_takes_their_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = REPO / "examples" / "scenarios" / "basic-qos.yaml"
    config = tmp_path / "cr.yaml"
    config.write_text(
        yaml.safe_dump(resource({"reservedResources": {"cpu": "750m"}, "pinMemory": False}))
    )
    assert main(["simulate", "--scenario", str(scenario)]) == 0
    pinned = [ln.split() for ln in capsys.readouterr().out.splitlines() if "db/postgres" in ln]
    assert main(["simulate", "--scenario", str(scenario), "--config", str(config)]) == 0
    unpinned = [ln.split() for ln in capsys.readouterr().out.splitlines() if "db/postgres" in ln]
    assert pinned[0][:4] == ["db/postgres", "exclusive", "2,10", "1"]
    assert unpinned[0][:4] == ["db/postgres", "exclusive", "2,10", "node1"]  # no mems


def test_implementing_a_key_takes_it_out_of_the_table() -> None:
    """A field of TopologyAwareConfig replaces the placeholder, and is not warned
    (``controllableInterrupts``, implemented for the ``irq-affinity`` annotation)."""

    class Bare(NriPluginsKeys):
        pass

    assert "controllableInterrupts" in not_implemented_keys(Bare)
    got = TopologyAwareConfig.model_validate({"controllableInterrupts": ["a"]})
    assert got.controllable_interrupts == ("a",)
    with pytest.raises(ValidationError):
        TopologyAwareConfig.model_validate({"controllableInterrupts": [{"not": "a string"}]})
    assert "controllableInterrupts" not in not_implemented_keys(TopologyAwareConfig)
    assert "controllableInterrupts" not in NOT_IMPLEMENTED


def test_kinds_table_names_policies_that_exist() -> None:
    for kind in policy_kinds():
        assert kind.spec_model() is not None
        assert set(kind.not_implemented()) <= {
            k for k in kind.not_implemented() if k.split(".")[0] in kind.spec_keys()
        }


def test_an_own_form_document_is_left_alone() -> None:
    doc = {"policy": "static", "policyConfig": {"x": 1}, "log": {"level": "debug"}}
    assert normalize_document(doc).data == doc
