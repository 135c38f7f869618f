"""Memory QoS: their configuration and annotations, memory.high computed as theirs (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.config import config_from_mapping
from nri_resmgr.control.memory_config import MemoryQoSConfig
from nri_resmgr.control.memqos import memory_high, qos_for
from nri_resmgr.model import AnnotationError, ConfigError, ContainerInfo
from tests.support.builders import ctr

#: their sample-configs/nri-memory-qos.yaml
SAMPLE: dict[str, Any] = {
    "classes": [
        {"name": "bronze", "swaplimitratio": 0.5},
        {"name": "silver", "swaplimitratio": 0.2},
    ],
    "unifiedannotations": ["memory.swap.max", "memory.high"],
}
WITH_OOM = {**SAMPLE, "unifiedannotations": [*SAMPLE["unifiedannotations"], "memory.oom.group"]}
MI = 1 << 20


def cfg(data: dict[str, Any] = SAMPLE) -> MemoryQoSConfig:
    return MemoryQoSConfig.model_validate(data)


def unified(c: ContainerInfo, data: dict[str, Any] = SAMPLE) -> dict[str, str]:
    return dict(qos_for(c, cfg(data)).unified)


# (limit, swaplimitratio, memory.high) printed by Go 1.26 running their expression
# `int64(float32(limit) * (1.0 - ratio))` with ratio a float32 parsed from the text
GO_FLOAT32 = [
    (104857600, 0.5, 52428800),
    (104857600, 0.2, 83886080),
    (104857600, 0.3333, 69908560),
    (104857600, 0.01, 103809024),
    (1073741824, 0.2, 858993472),
    (1073741824, 0.1, 966367616),
    (123456789, 0.2, 98765432),
    (123456789, 0.1, 111111112),
    (123456789, 0.01, 122222224),
    (268435456, 0.2, 214748368),
    (999999999, 0.3333, 666700032),
    (9223372036854775807, 0.2, 7378697739434983424),
    (1, 0.5, 0),
    (104857600, 1.0, 0),
]


@pytest.mark.parametrize(("limit", "ratio", "expected"), GO_FLOAT32)
def test_memory_high_is_their_float32_arithmetic(limit: int, ratio: float, expected: int) -> None:
    assert memory_high(limit, ratio) == expected


def test_class_sets_memory_high_and_swap_max() -> None:
    c = ctr("c0", ann={"class.memory-qos.nri.io": "silver"}, mem=100 * MI)
    assert unified(c) == {"memory.high": "83886080", "memory.swap.max": "max"}


def test_container_class_overrides_the_pods_and_empty_unsets_it() -> None:
    ann = {
        "class.memory-qos.nri.io": "silver",
        "class.memory-qos.nri.io/c0": "bronze",
        "class.memory-qos.nri.io/c1": "",
    }
    assert unified(ctr("c0", ann=ann, mem=100 * MI))["memory.high"] == "52428800"
    assert unified(ctr("c1", ann=ann, mem=100 * MI)) == {}
    assert unified(ctr("c2", ann=ann, mem=100 * MI))["memory.high"] == "83886080"


def test_our_container_form_is_read_too() -> None:
    ann = {"class.memory-qos.nri.io/container.c0": "bronze"}
    assert unified(ctr("c0", ann=ann, mem=100 * MI))["memory.high"] == "52428800"


def test_direct_annotations_override_the_class() -> None:
    """Their docs' example: noswap never swaps, no container group-kills."""
    ann = {
        "class.memory-qos.nri.io": "bronze",
        "memory.swap.max.memory-qos.nri.io/noswap": "0",
        "memory.high.memory-qos.nri.io/noswap": "max",
        "memory.oom.group.memory-qos.nri.io": "0",
    }
    assert unified(ctr("noswap", ann=ann, mem=100 * MI), WITH_OOM) == {
        "memory.high": "max",
        "memory.swap.max": "0",
        "memory.oom.group": "0",
    }
    assert unified(ctr("other", ann=ann, mem=100 * MI), WITH_OOM) == {
        "memory.high": "52428800",
        "memory.swap.max": "max",
        "memory.oom.group": "0",
    }


def test_a_ratio_of_zero_sets_nothing() -> None:
    data = {"classes": [{"name": "plain", "swaplimitratio": 0}]}
    assert unified(ctr("c", ann={"class.memory-qos.nri.io": "plain"}), data) == {}


def test_keys_match_in_any_case() -> None:
    got = cfg({"Classes": [{"Name": "x", "SwapLimitRatio": 0.5}], "UnifiedAnnotations": []})
    assert got.classes[0].swap_limit_ratio == 0.5


def test_without_the_section_nothing_is_read() -> None:
    assert config_from_mapping({}).control.memory_qos is None


# -- hostile input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "message"),
    [
        pytest.param(
            {"classes": [{"name": "x", "swaplimitratio": 1.5}]},
            "control.memoryQos.classes[0].swaplimitratio: expected less than or equal to 1, "
            "found 1.5",
            id="ratio-above-one",
        ),
        pytest.param(
            {"classes": [{"name": "x", "swaplimitratio": -0.1}]},
            "swaplimitratio: expected greater than or equal to 0",
            id="negative-ratio",
        ),
        pytest.param(
            {"classes": [{"name": "x", "swaplimitratio": "lots"}]},
            "swaplimitratio: expected a valid number",
            id="ratio-not-a-number",
        ),
        pytest.param(
            {"classes": [{"swaplimitratio": 0.1}]},
            "control.memoryQos.classes[0].name",
            id="no-name",
        ),
        pytest.param(
            {"classes": [{"name": "x"}, {"name": "x"}]},
            "expected unique class names, found 'x' twice",
            id="duplicate",
        ),
        pytest.param(
            {"unifiedannotations": ["../../etc/passwd"]},
            "expected cgroup v2 file names like memory.high, found '../../etc/passwd'",
            id="path-as-key",
        ),
        pytest.param({"classes": "bronze"}, "control.memoryQos.classes", id="not-a-list"),
        pytest.param(
            {"classes": [{"name": "x", "swapLimit": 0.1}]},
            "swapLimit",
            id="misspelt",
        ),
    ],
)
def test_bad_configuration_is_an_error_naming_it(section: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"control": {"memoryQos": section}})
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {"class.memory-qos.nri.io": "gold"},
            "annotation class.memory-qos.nri.io names memory QoS class 'gold'; expected one "
            "of control.memoryQos.classes (bronze, silver)",
            id="unknown-class",
        ),
        pytest.param(
            {"memory.oom.group.memory-qos.nri.io": "1"},
            "annotation memory.oom.group.memory-qos.nri.io: expected class.memory-qos.nri.io "
            "or a key of control.memoryQos.unifiedannotations (memory.swap.max, memory.high), "
            "found 'memory.oom.group'",
            id="key-not-listed",
        ),
        pytest.param(
            {"memory.high.memory-qos.nri.io": "lots"},
            "expected max or a byte count (K, M, G... suffixes allowed) for memory.high, "
            "found 'lots'",
            id="bad-bytes",
        ),
        pytest.param(
            {"memory.high.memory-qos.nri.io": "1\nmemory.max 0"},
            "expected max or a byte count",
            id="newline",
        ),
        pytest.param(
            {"class.memory-qos.nri.io": "bronze"},
            "memory QoS class bronze (swaplimitratio 0.5) sets memory.high from the memory "
            "limit; expected a memory limit, found none",
            id="no-limit",
        ),
    ],
)
def test_bad_annotation_fails_the_container_naming_it(
    annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(AnnotationError) as err:
        unified(ctr("app", pod="web", ann=annotations))
    assert str(err.value).startswith("pod default/web container app: ")
    assert message in str(err.value)


def test_oom_group_takes_zero_or_one() -> None:
    with pytest.raises(AnnotationError, match=r"expected 0 or 1 for memory\.oom\.group, found '2'"):
        unified(ctr("a", ann={"memory.oom.group.memory-qos.nri.io": "2"}), WITH_OOM)
    assert unified(ctr("a", ann={"memory.high.memory-qos.nri.io": "512M"})) == {
        "memory.high": "512M"
    }
