"""The balloons configuration: nri-plugins' spec, built-in types, warnings and errors."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nri_resmgr.model import ConfigError
from nri_resmgr.policy.balloons.config import resolve_config, spec_of
from nri_resmgr.policy_documents import kind_of_policy, policy_warnings
from nri_resmgr.policy_registry import available_policies, load_policy
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import machine


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
    ("spec", "reserved", "milli"),
    [
        ("cpuset:2,18", "2,18", 2000),
        ("exclude-cpuset:3-31", "0-2", 3000),
        # a quantity names no CPUs: the CPU tree allocator picks them (policy)
        ("2", "", 2000),
        ("1500m", "", 1500),
    ],
    ids=["cpuset", "exclude-cpuset", "quantity", "millis"],
)
def test_reserved_resources_forms(spec: str, reserved: str, milli: int) -> None:
    cfg = resolve_config(machine(), {"reservedResources": {"cpu": spec}})
    assert (cfg.reserved, cfg.reserved_milli) == (IDSet.parse(reserved), milli)
    assert cfg.types[0].min_cpus == -(-milli // 1000)


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (
            {"balonTypes": []},
            ("unknown key balonTypes; expected one of pinCPU, ", "did you mean balloonTypes?"),
        ),
        (
            {"balloonTypes": [{"name": "x", "minCPU": 1}]},
            (
                "balloonTypes[0]: unknown key minCPU; expected one of name, ",
                "did you mean minCPUs?",
            ),
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
            "balloonTypes[0].matchExpressions[0].operator: expected 'Equals', ",
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
            "balloonTypes[0].matchExpressions[0]: Equals expression: Equals takes exactly one "
            "value, found 2",
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
def test_errors_name_the_key(config: dict[str, Any], fragment: str | tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve_config(machine(), config)
    for part in (fragment,) if isinstance(fragment, str) else fragment:
        assert part in str(exc.value)


def warned(raw: dict[str, Any]) -> list[str]:
    """The keys `policy_documents` warns about in a balloons spec, in its order."""
    kind = kind_of_policy("balloons")
    assert kind is not None
    lines = policy_warnings(kind, raw, prefix="")
    return [line.split(":", 1)[0] for line in lines]


def test_unimplemented_keys_warn_once_each() -> None:
    raw: dict[str, Any] = {
        "cpuClasses": [{"name": "c", "pctPriority": "high"}, {"name": "d", "pctPriority": "low"}],
        "instrumentation": {"reportPeriod": "60s"},
        "balloonTypes": [
            {"name": "a", "cpuClass": "c"},
            {"name": "b", "cpuClass": "d", "minCPUs": 1},
        ],
    }
    cfg = resolve_config(machine(), raw)
    assert cfg.types  # the keys without effect do not stop it
    assert warned(raw) == ["cpuClasses.pctPriority", "instrumentation"]


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
    # CPU classes are set by the CPU class control: no warning
    raw["idleCPUClass"] = "idle"
    raw["balloonTypes"][0]["cpuClass"] = "turbo"
    raw["turboDomain"] = "system"
    raw["cpuClasses"] = [
        {"name": "idle", "maxFreq": "base", "disabledCstates": []},
        {"name": "turbo", "minFreq": "2.1GHz", "maxFreq": "turbo", "turboPriority": 1},
    ]
    assert resolve_config(machine(), raw).options.cpu_classes[1].min_freq == 2_100_000
    assert warned(raw) == []


def cpu_config(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "idleCPUClass": "idle",
        "balloonTypes": [{"name": "a", "cpuClass": "fast"}],
        "cpuClasses": [{"name": "idle"}, {"name": "fast", "maxFreq": "3GHz"}],
    }
    raw.update(changes)
    return raw


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"balloonTypes": [{"name": "a", "cpuClass": "fats"}]},
            "balloonTypes[a].cpuClass: CPU class 'fats' is not in cpuClasses; expected one of "
            "fast, idle",
            id="unknown-balloon-class",
        ),
        pytest.param(
            {"idleCPUClass": "idel"},
            "idleCPUClass: CPU class 'idel' is not in cpuClasses; expected one of fast, idle",
            id="unknown-idle-class",
        ),
        pytest.param(
            {"cpuClasses": [{"name": "idle"}, {"name": "fast"}, {"name": "idle"}]},
            "class 'idle' is defined twice",
            id="twice",
        ),
        pytest.param(
            {"cpuClasses": [{"name": "idle"}, {"name": "fast", "maxFreq": "3 GHz!"}]},
            "cpuClasses[1].maxFreq: frequency '3 GHz!': expected a number",
            id="bad-frequency",
        ),
        pytest.param(
            {"cpuClasses": [{"name": "idle"}, {"name": "fast", "uncoreMaxFreq": "turbo"}]},
            "uncoreMinFreq/uncoreMaxFreq are symbolic",
            id="symbolic-uncore",
        ),
        pytest.param(
            {"cpuClasses": [{"name": "idle"}, {"name": "fast", "maxFrq": 1}]},
            "cpuClasses[1]: unknown key maxFrq; expected one of minFreq, maxFreq, "
            "energyPerformancePreference, uncoreMinFreq, uncoreMaxFreq, freqGovernor, "
            "disabledCstates, turboPriority, name, pctPriority, sstClosID, pctMinFreq, "
            "pctMaxFreq, publishExtendedResource; did you mean maxFreq?",
            id="misspelt",
        ),
        pytest.param({"turboDomain": "numa"}, "turboDomain", id="turbo-domain"),
        pytest.param(  # their test19-pct balloons-pct-invalid.cfg
            {
                "cpuClasses": [
                    {"name": "idle"},
                    {"name": "fast", "pctPriority": "high", "sstClosID": 0},
                ]
            },
            "class 'fast': pctPriority and sstClosID are mutually exclusive",
            id="pct-and-clos",
        ),
        pytest.param(
            {
                "cpuClasses": [
                    {"name": "idle", "pctPriority": "low"},
                    {"name": "fast", "sstClosID": 1},
                ]
            },
            "classes idle (pctPriority) and fast (sstClosID) mix managed and assoc-only",
            id="pct-modes",
        ),
        pytest.param(
            {
                "cpuClasses": [
                    {"name": "idle", "pctPriority": "high"},
                    {"name": "fast", "pctPriority": "high"},
                ]
            },
            "classes fast, idle all have pctPriority high; expected at most one",
            id="pct-two-high",
        ),
        pytest.param(
            {"cpuClasses": [{"name": "idle"}, {"name": "fast", "pctMaxFreq": "3GHz"}]},
            "class 'fast': pctMinFreq/pctMaxFreq need pctPriority",
            id="pct-freq",
        ),
        pytest.param(
            {"cpuClasses": [{"name": "idle"}, {"name": "fast", "publishExtendedResource": True}]},
            "class 'fast': publishExtendedResource needs pctPriority or sstClosID",
            id="pct-publish",
        ),
        pytest.param(
            {
                "cpuClasses": [
                    {"name": "idle"},
                    {"name": "fast", "minFreq": "3GHz", "maxFreq": "2GHz"},
                ]
            },
            "class 'fast': minFreq > maxFreq (3000000 > 2000000 kHz)",
            id="min-above-max",
        ),
    ],
)
def test_cpu_class_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve_config(machine(), cpu_config(**changes))


def test_cpu_class_names_are_free_without_cpu_classes() -> None:
    # the names may be the daemon's control.cpu.classes, which the policy does not see
    raw = cpu_config(cpuClasses=[])
    assert resolve_config(machine(), raw).options.idle_cpu_class == "idle"


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
            ("balloonTypes[a].irqMode: expected one of sink, isolate", "found 'drain'"),
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
