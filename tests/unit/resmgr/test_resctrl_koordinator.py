"""The koordinator annotation `node.koordinator.sh/resctrl` with keys in any letter case.

Koordinator decodes the annotation with Go's encoding/json, which matches object keys to
struct fields case-insensitively.  Its own structs have spelled the keys two ways: the
koordlet runtime hook (`LLC`, `MB`, `cacheid`) and `apis/extension` (`llc`, `mb`,
`cacheID`); the seed example of issue 10 uses the former.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nri_resmgr.control.resctrl import PodResctrl, parse_pod_resctrl, plan_pod_group, read_info
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.model import AnnotationError

#: the seed's example (koordinator's proposal), as valid JSON: its trailing commas removed
SEED = """{
  "LLC": {
    "schemata": {"range": [20, 80]},
    "schemataPerCache": [{"cacheid": 0, "range": [20, 50]}, {"cacheid": 1, "range": [20, 60]}]
  },
  "MB": {
    "schemata": {"percent": 20},
    "schemataPerCache": [{"cacheid": 0, "percent": 20}, {"cacheid": 1, "percent": 40}]
  }
}"""
SEED_SPEC = PodResctrl(
    llc_range=(20, 80),
    llc_per_cache={0: (20, 50), 1: (20, 60)},
    mb_percent=20,
    mb_per_cache={0: 20, 1: 40},
)
#: koordinator's apis/extension spelling (ResctrlConfig: llc, mb; SchemataPerCache: cacheID)
KOORD_API = (
    '{"llc": {"schemata": {"range": [0, 30]}, "schemataPerCache": '
    '[{"cacheID": 1, "range": [10, 40]}]}, "mb": {"schemata": {"percent": 20}}}'
)


def test_seed_example_is_accepted() -> None:
    assert parse_pod_resctrl(SEED, subject="ann") == SEED_SPEC


def test_seed_example_plans_the_same_group_as_lower_case(tmp_path: Path) -> None:
    mounts = make_resctrl_tree(tmp_path / "r", INTEL_SKX)
    info = read_info(tmp_path / "r", mounts=mounts)
    lower = SEED.replace('"LLC"', '"llc"').replace('"MB"', '"mb"').replace('"cacheid"', '"cacheID"')
    text = plan_pod_group(info, parse_pod_resctrl(SEED, subject="a"), subject="a")
    assert text == plan_pod_group(info, parse_pod_resctrl(lower, subject="a"), subject="a")
    # 11 bits: 20-50% of cache 0 -> bits 2..5, 20-60% of cache 1 -> bits 2..6
    assert text == "L3:0=3c;1=7c\nMB:0=20;1=40\n"


def test_koordinator_api_spelling_is_accepted() -> None:
    assert parse_pod_resctrl(KOORD_API, subject="ann") == PodResctrl(
        llc_range=(0, 30), llc_per_cache={1: (10, 40)}, mb_percent=20
    )


@pytest.mark.parametrize(
    "keys",
    [
        ("LLC", "MB", "Schemata", "Range", "PERCENT", "CacheID", "SchemataPerCache"),
        ("Llc", "mB", "SCHEMATA", "range", "Percent", "CACHEID", "schematapercache"),
        ("llc", "mb", "schemata", "rAnGe", "percent", "cacheId", "SCHEMATAPERCACHE"),
    ],
    ids=["upper", "mixed", "odd"],
)
def test_any_letter_case_is_accepted(keys: tuple[str, ...]) -> None:
    llc, mb, schemata, rng, percent, cid, per = keys
    doc = {
        llc: {schemata: {rng: [20, 80]}, per: [{cid: 1, rng: [0, 10]}]},
        mb: {schemata: {percent: 30}},
    }
    assert parse_pod_resctrl(json.dumps(doc), subject="ann") == PodResctrl(
        llc_range=(20, 80), llc_per_cache={1: (0, 10)}, mb_percent=30
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '{"LLC": {"schemata": {"range": [0, 5]}}, "llc": {"schemata": {"range": [0, 9]}}}',
            "ann: expected one key for llc (keys match case-insensitively); found 'LLC' and 'llc'",
        ),
        (
            '{"mb": {"schemata": {"percent": 5, "Percent": 9}}}',
            "ann mb.schemata: expected one key for percent (keys match case-insensitively); "
            "found 'percent' and 'Percent'",
        ),
        (
            '{"llc": {"schemataPerCache": [{"cacheid": 0, "cacheID": 1, "range": [0, 5]}]}}',
            "ann llc.schemataPerCache[0]: expected one key for cacheID",
        ),
        ('{"LLCX": {}}', "ann: expected an object with llc and/or mb; found key 'LLCX'"),
        (
            '{"MB": {"schemata": {"range": [0, 5]}}}',
            "ann mb.schemata: expected {\"percent\": N}; found key 'range'",
        ),
        (
            '{"llc": {"schemataPerCache": [{"range": [0, 5]}]}}',
            "ann llc.schemataPerCache[0]: expected an object with cacheID and range; found",
        ),
    ],
    ids=["llc-twice", "percent-twice", "cacheid-twice", "unknown", "wrong-key", "no-cacheid"],
)
def test_ambiguous_or_unknown_keys_are_refused(value: str, message: str) -> None:
    with pytest.raises(AnnotationError) as info:
        parse_pod_resctrl(value, subject="ann")
    assert str(info.value).startswith(message)
