"""The `limits:` configuration section and the bounded annotation-JSON reader."""

from __future__ import annotations

import pytest

from nri_resmgr.config import Config, config_from_mapping
from nri_resmgr.control.resctrl import parse_pod_resctrl
from nri_resmgr.limits import DEFAULT_LIMITS, Limits, json_depth, load_annotation_json
from nri_resmgr.model import AnnotationError, ConfigError


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('"[[[[["', 0),  # brackets inside a string do not count
        (r'["\"[[[", []]', 2),  # nor after an escaped quote
        (r'["\\", [[]]]', 3),  # an escaped backslash ends the escape
        ("[" * 5000 + "]" * 5000, 5000),
        ("]]]][", 1),  # not JSON: the scan does not validate, and never goes below 0
    ],
    ids=[
        "empty",
        "scalar",
        "list",
        "nested",
        "in-string",
        "escaped-quote",
        "escaped-backslash",
        "5000",
        "garbage",
    ],
)
def test_json_depth(text: str, depth: int) -> None:
    assert json_depth(text) == depth


def test_load_annotation_json_within_limits() -> None:
    assert load_annotation_json('{"a": [1, 2]}', where="w") == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[" * 5000 + "]" * 5000,
            "pod a/b: annotation k: expected JSON nested at most 32 deep (limits.maxJSONDepth), "
            "found 5000",
        ),
        (
            "[" * 33 + "]" * 33,
            "pod a/b: annotation k: expected JSON nested at most 32 deep (limits.maxJSONDepth), "
            "found 33",
        ),
        (
            '"' + "x" * (256 * 1024) + '"',
            "pod a/b: annotation k: expected at most 262144 bytes (limits.maxAnnotationBytes), "
            "found 262146",
        ),
        ("{not json", "pod a/b: annotation k: expected JSON; found '{not json'"),
        ("1" * 5000, "pod a/b: annotation k: expected JSON; found '1111"),  # int digit limit
    ],
    ids=["deep", "just-too-deep", "too-big", "not-json", "huge-int"],
)
def test_load_annotation_json_refuses(text: str, message: str) -> None:
    with pytest.raises(AnnotationError) as info:
        load_annotation_json(text, where="pod a/b: annotation k")
    assert str(info.value).startswith(message)


def test_depth_32_is_accepted() -> None:
    value = load_annotation_json("[" * 32 + "]" * 32, where="w")
    for _ in range(31):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []


def test_koordinator_resctrl_annotation_nested_deep_is_an_annotation_error() -> None:
    # was RecursionError at RunPodSandbox and at Synchronize with RDT on
    with pytest.raises(AnnotationError, match=r"^ann: expected JSON nested at most 32 deep"):
        parse_pod_resctrl('{"llc": ' + "[" * 5000 + "]" * 5000 + "}", subject="ann")


def test_limits_in_the_config() -> None:
    assert Config().limits == DEFAULT_LIMITS
    config = config_from_mapping(
        {
            "limits": {
                "maxCPUID": 255,
                "maxJSONDepth": 8,
                "maxSyncChunks": 4,
                "maxRequestsInFlight": 16,
                "maxRejectedPending": 8,
                "maxAnnotationBytes": 4096,
                "maxCPUSetLength": 512,
                "maxSyncBytes": 1 << 20,
            }
        },
        source="c.yaml",
    )
    assert config.limits == Limits(
        max_cpu_id=255,
        max_json_depth=8,
        max_sync_chunks=4,
        max_in_flight=16,
        max_rejected_pending=8,
        max_annotation_bytes=4096,
        max_cpuset_length=512,
        max_sync_bytes=1 << 20,
    )


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"maxJSONDepth": 0}, "c.yaml: limits.maxJSONDepth: expected greater than or equal to 1"),
        ({"maxSyncChunk": 4}, "c.yaml: limits: unknown key maxSyncChunk; expected one of"),
        ({"maxCPUID": -1}, "c.yaml: limits.maxCPUID: expected greater than or equal to 0"),
    ],
    ids=["zero-depth", "typo", "negative"],
)
def test_bad_limits_are_config_errors(limits: dict[str, int], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"limits": limits}, source="c.yaml")
    assert str(info.value).startswith(fragment)


def test_protocol_defaults_match_the_library() -> None:
    # nri_api's own defaults apply to any plugin; the daemon's must not drift from them
    from nri_api import stub, transport

    assert DEFAULT_LIMITS.max_in_flight == transport.MAX_IN_FLIGHT
    assert DEFAULT_LIMITS.max_rejected_pending == transport.MAX_REJECTED_PENDING
    assert DEFAULT_LIMITS.max_sync_chunks == stub.MAX_SYNC_CHUNKS
    assert DEFAULT_LIMITS.max_sync_bytes == stub.MAX_SYNC_BYTES
