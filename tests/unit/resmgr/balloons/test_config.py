"""The balloons configuration: nri-plugins' spec, built-in types, warnings and errors."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.model import ConfigError
from nri_resmgr.policy.balloons.config import resolve_config, spec_of
from nri_resmgr.policy_documents import kind_of_policy, policy_warnings
from nri_resmgr.policy_registry import available_policies, load_policy
from nri_resmgr.topology.cpuset import IDSet
from tests.unit.resmgr.balloons.support import machine


def test_builtin_reserved_first_and_default_last() -> None:
    cfg = resolve_config(machine(), {"balloonTypes": [{"name": "a", "minCPUs": 2}]})
    assert [t.name for t in cfg.types] == ["reserved", "a", "default"]
    reserved = cfg.types[0]
    assert (reserved.min_balloons, reserved.max_balloons, reserved.min_cpus) == (1, 1, 1)


def test_explicit_reserved_keeps_its_place() -> None:
    cfg = resolve_config(
        machine(),
        {"balloonTypes": [{"name": "own"}, {"name": "reserved", "shareIdleCPUsInSame": "numa"}]},
    )
    assert [t.name for t in cfg.types] == ["own", "reserved", "default"]


@pytest.mark.parametrize(
    ("spec", "reserved"),
    [("cpuset:2,18", "2,18"), ("exclude-cpuset:3-31", "0-2"), ("2", "0,16"), ("1500m", "0,16")],
    ids=["cpuset", "exclude-cpuset", "quantity", "millis"],
)
def test_reserved_resources_forms(spec: str, reserved: str) -> None:
    cfg = resolve_config(machine(), {"reservedResources": {"cpu": spec}})
    assert cfg.reserved == IDSet.parse(reserved)


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"balonTypes": []}, "unknown key 'balonTypes'; did you mean 'balloonTypes'?"),
        (
            {"balloonTypes": [{"name": "x", "minCPU": 1}]},
            "balloonTypes.0.minCPU: unknown key 'minCPU'; did you mean 'minCPUs'?",
        ),
        (
            {"balloonTypes": [{"name": "x", "minCPUs": 3, "maxCPUs": 2}]},
            "balloon type x: minCPUs 3 > maxCPUs 2",
        ),
        (
            {
                "balloonTypes": [
                    {"name": "x", "matchExpressions": [{"key": "name", "operator": "Eq"}]}
                ]
            },
            "balloonTypes.0.matchExpressions.0.operator",
        ),
        ({"balloonTypes": [{"name": "x"}, {"name": "x"}]}, "defines x more than once"),
        (
            {"balloonTypes": [{"name": "x", "components": [{"balloonType": "nope"}]}]},
            "component balloonType 'nope' is not another balloon type",
        ),
        ({"balloonTypes": [{"name": "x", "memoryTypes": ["HBMX"]}]}, "memoryTypes has 'HBMX'"),
        ({"balloonTypes": [{"name": "reserved", "maxBalloons": 2}]}, "exactly one reserved"),
        ({"kind": "TopologyAwarePolicy", "spec": {}}, "expected BalloonsPolicy"),
        (
            {
                "balloonTypes": [
                    {
                        "name": "x",
                        "matchExpressions": [
                            {"key": "name", "operator": "Equals", "values": ["a", "b"]}
                        ],
                    }
                ]
            },
            "balloonTypes.0.matchExpressions.0: Value error, Equals expression: Equals takes "
            "exactly one value, found 2",
        ),
        (
            {
                "balloonTypes": [
                    {"name": "x", "matchExpressions": [{"key": "pod/colour", "operator": "Exists"}]}
                ]
            },
            "unknown key 'pod/colour'",
        ),
    ],
    ids=[
        "misspelt-top",
        "misspelt-type-key",
        "min-over-max",
        "bad-operator",
        "duplicate-type",
        "unknown-component",
        "memory-type",
        "two-reserved",
        "wrong-kind",
        "operator-arity",
        "expression-key",
    ],
)
def test_errors_name_the_key(config: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve_config(machine(), config)
    assert fragment in str(exc.value)


def warned(raw: dict[str, Any]) -> list[str]:
    """The keys `policy_documents` warns about in a balloons spec, in its order."""
    kind = kind_of_policy("balloons")
    assert kind is not None
    lines = policy_warnings(kind, raw, prefix="")
    return [line.split(":", 1)[0] for line in lines]


def test_unimplemented_keys_warn_once_each() -> None:
    raw: dict[str, Any] = {
        "turboDomain": "x",
        "balloonTypes": [
            {"name": "a", "cpuClass": "x"},
            {"name": "b", "cpuClass": "y", "minCPUs": 1},
        ],
    }
    cfg = resolve_config(machine(), raw)
    assert cfg.types  # the keys without effect do not stop it
    assert warned(raw) == ["turboDomain", "balloonTypes.cpuClass"]


def test_implemented_keys_do_not_warn() -> None:
    raw: dict[str, Any] = {
        "pinCPU": True,
        "pinMemory": False,
        "reservedPoolNamespaces": ["monitoring"],
        "showContainersInNrt": True,
        "balloonTypes": [
            {
                "name": "a",
                "namespaces": ["x"],
                "minCPUs": 1,
                "maxCPUs": 4,
                "minBalloons": 1,
                "maxBalloons": 2,
                "preferNewBalloons": True,
                "shareIdleCPUsInSame": "numa",
                "groupBy": "${pod/labels/app}",
                "hideHyperthreads": True,
                "memoryTypes": ["DRAM"],
                "irqClaim": ["*ttyS0*", "4"],
                "irqMode": "isolate",
            }
        ],
        "controllableInterrupts": ["*"],
    }
    assert resolve_config(machine(), raw).types
    assert warned(raw) == []
    # no controller sets CPU frequencies or C-states yet: a class is a warning
    raw["idleCPUClass"] = "idle"
    raw["balloonTypes"][0]["cpuClass"] = "turbo"
    assert warned(raw) == ["idleCPUClass", "balloonTypes.cpuClass"]


def test_custom_resource_form_takes_its_spec() -> None:
    doc = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "BalloonsPolicy",
        "metadata": {"name": "default"},
        "spec": {"balloonTypes": [{"name": "a"}]},
    }
    assert spec_of(doc) == doc["spec"]
    assert [t.name for t in resolve_config(machine(), doc).types] == ["reserved", "a", "default"]


def test_registered_as_balloons() -> None:
    assert "balloons" in available_policies()
    p = load_policy("balloons", topology=machine(), config={})
    assert type(p).__name__ == "BalloonsPolicy"


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        (
            {"balloonTypes": [{"name": "a", "irqMode": "drain"}]},
            ("balloonTypes[a].irqMode is 'drain'", "expected one of sink, isolate"),
        ),
        (
            {"balloonTypes": [{"name": "a", "irqClaim": ["ok", "[tty"]}]},
            ("balloonTypes[a].irqClaim: pattern '[tty'", "unclosed"),
        ),
        (
            {"controllableInterrupts": ["rtc\\"]},
            ("controllableInterrupts: pattern 'rtc\\\\'", "backslash"),
        ),
        (
            {"controllableInterrupts": ["[z-a]"]},
            ("controllableInterrupts: pattern '[z-a]'", "empty range"),
        ),
    ],
    ids=["irq-mode", "irq-claim-pattern", "controllable-escape", "controllable-range"],
)
def test_interrupt_keys_are_checked(config: dict[str, Any], fragments: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve_config(machine(), config)
    for fragment in fragments:
        assert fragment in str(exc.value)
