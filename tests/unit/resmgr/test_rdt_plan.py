"""resctrl discovery and schemata planning on synthetic Intel and AMD trees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_resmgr.control.resctrl import (
    CacheInfo,
    MBInfo,
    MBUnit,
    MonInfo,
    RdtConfig,
    ResctrlInfo,
    parse_pod_resctrl,
    parse_schemata,
    plan_classes,
    plan_pod_group,
    read_info,
)
from nri_resmgr.control.synthetic import AMD_ROME, INTEL_SKX, make_resctrl_tree, with_
from nri_resmgr.model import AnnotationError, ConfigError, ResmgrError

KOORD = (
    '{"llc":{"schemata":{"range":[20,80]},"schemataPerCache":[{"cacheID":0,"range":[20,50]}]},'
    '"mb":{"schemata":{"percent":20}}}'
)


def info_of(tmp_path: Path, layout: Any = INTEL_SKX, **kw: Any) -> ResctrlInfo:
    root = tmp_path / "resctrl"
    mounts = make_resctrl_tree(root, with_(layout, **kw) if kw else layout)
    return read_info(root, mounts=mounts)


def cfg(partitions: dict[str, Any], **kw: Any) -> RdtConfig:
    return RdtConfig.model_validate({"partitions": partitions, **kw})


# ---------------------------------------------------------------------------- discovery


def test_read_info_intel(tmp_path: Path) -> None:
    info = info_of(tmp_path)
    assert info == ResctrlInfo(
        caches={"L3": CacheInfo(name="L3", cbm_mask=0x7FF, min_cbm_bits=1, num_closids=16,
                                shareable_bits=0x600, sparse_masks=False, cache_ids=(0, 1))},
        mb=MBInfo(bandwidth_gran=10, min_bandwidth=10, num_closids=8, delay_linear=True,
                  unit=MBUnit.PERCENT, max_value=100, cache_ids=(0, 1)),
        mon=MonInfo(num_rmids=176,
                    features=("llc_occupancy", "mbm_total_bytes", "mbm_local_bytes")),
    )
    assert info.num_closids == 8


def test_read_info_intel_cdp_and_mba_mbps_from_mount_options(tmp_path: Path) -> None:
    info = info_of(tmp_path, cdp=True, mba_mbps=True)
    assert sorted(info.caches) == ["L3CODE", "L3DATA"]
    assert info.caches["L3CODE"].num_closids == 8
    assert info.mb is not None
    assert (info.mb.unit, info.mb.max_value) == (MBUnit.MBPS, 4294967295)


def test_mba_mbps_only_when_the_mount_is_this_root(tmp_path: Path) -> None:
    root = tmp_path / "resctrl"
    make_resctrl_tree(root, INTEL_SKX)
    other = tmp_path / "mounts"
    other.write_text("resctrl /elsewhere resctrl rw,mba_MBps 0 0\n")
    info = read_info(root, mounts=other)
    assert info.mb is not None and info.mb.unit is MBUnit.PERCENT
    forced = read_info(root, mounts=other, mba_mbps=True)
    assert forced.mb is not None and forced.mb.unit is MBUnit.MBPS


def test_read_info_amd(tmp_path: Path) -> None:
    info = info_of(tmp_path, AMD_ROME)
    l3 = info.caches["L3"]
    assert (l3.cbm_mask, l3.min_cbm_bits, l3.sparse_masks, l3.cache_ids) == (
        0xFFFF, 0, True, (0, 1, 2, 3))
    assert info.mb == MBInfo(bandwidth_gran=1, min_bandwidth=0, num_closids=16,
                             delay_linear=False, unit=MBUnit.AMD_EIGHTH_GBPS, max_value=2048,
                             cache_ids=(0, 1, 2, 3))


def test_sparse_masks_file_wins(tmp_path: Path) -> None:
    info = info_of(tmp_path, sparse_masks="1")
    assert info.caches["L3"].sparse_masks is True


def test_read_info_refuses_a_tree_without_info(tmp_path: Path) -> None:
    with pytest.raises(ResmgrError, match=r"expected a mounted resctrl .* found no info/"):
        read_info(tmp_path)


def test_parse_schemata_accepts_kernel_alignment() -> None:
    assert parse_schemata("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n") == {
        "L3": {0: "7ff", 1: "7ff"}, "MB": {0: "100", 1: "100"}}


# --------------------------------------------------------------------------------- plan

INTEL_PARTS = {
    "lc": {
        "l3Allocation": "60%",
        "mbAllocation": "80%",
        "classes": {
            "gold": {"l3Allocation": "50-100%", "mbAllocation": "60%"},
            "silver": {"l3Allocation": "0-50%", "mbAllocation": "15%"},
        },
    },
    "be": {
        "l3Allocation": {"all": "0x780", "1": "0x600"},
        "classes": {"BestEffort": {}},
    },
}


def test_plan_intel_partitions_and_classes(tmp_path: Path) -> None:
    plans = plan_classes(info_of(tmp_path), cfg(INTEL_PARTS))
    assert plans == {
        # partition lc: 60% of 11 bits = bits 0-6 (0x7f); gold = upper half of those
        "gold": "L3:0=78;1=78\nMB:0=60;1=60\n",
        # lower half of 7 bits rounds outwards to 4 bits; 15% rounds up to 20 (gran 10)
        "silver": "L3:0=f;1=f\nMB:0=20;1=20\n",
        # per cache id override, MB unrestricted
        "BestEffort": "L3:0=780;1=600\nMB:0=100;1=100\n",
    }


def test_plan_intel_cdp_code_data_split(tmp_path: Path) -> None:
    parts = {"p": {"classes": {"c": {"l3Allocation": {"unified": "50%", "code": "100%"}},
                               "d": {"l3Allocation": "0x1f"}}}}
    plans = plan_classes(info_of(tmp_path, cdp=True), cfg(parts))
    assert plans == {
        "c": "L3CODE:0=7ff;1=7ff\nL3DATA:0=3f;1=3f\nMB:0=100;1=100\n",
        "d": "L3CODE:0=1f;1=1f\nL3DATA:0=1f;1=1f\nMB:0=100;1=100\n",
    }


def test_plan_mba_mbps_picks_the_mbps_alternative(tmp_path: Path) -> None:
    parts = {"p": {"classes": {"c": {"mbAllocation": ["50%", "2000MBps"]}}}}
    plans = plan_classes(info_of(tmp_path, mba_mbps=True), cfg(parts))
    assert plans == {"c": "L3:0=7ff;1=7ff\nMB:0=2000;1=2000\n"}


def test_plan_with_l2(tmp_path: Path) -> None:
    parts = {"p": {"classes": {"c": {"l2Allocation": {"all": "50%", "3": "0xf0"}}}}}
    plans = plan_classes(info_of(tmp_path, l2_cache_ids=(0, 1, 2, 3)), cfg(parts))
    assert plans == {"c": "L3:0=7ff;1=7ff\nL2:0=f;1=f;2=f;3=f0\nMB:0=100;1=100\n"}


def test_plan_amd_sparse_mask_and_bandwidth_units(tmp_path: Path) -> None:
    parts = {"p": {"classes": {
        "a": {"l3Allocation": "0xf00f", "mbAllocation": ["50%", "2000MBps"]},
        "b": {"l3Allocation": "25%", "mbAllocation": "50%"},
    }}}
    plans = plan_classes(info_of(tmp_path, AMD_ROME), cfg(parts))
    assert plans == {
        "a": "L3:0=f00f;1=f00f;2=f00f;3=f00f\nMB:0=16;1=16;2=16;3=16\n",
        "b": "L3:0=f;1=f;2=f;3=f\nMB:0=1024;1=1024;2=1024;3=1024\n",
    }


def test_optional_resource_is_skipped(tmp_path: Path) -> None:
    parts = {"p": {"classes": {"c": {"l2Allocation": "50%"}}}}
    plans = plan_classes(info_of(tmp_path), cfg(parts, options={"l2": {"optional": True}}))
    assert plans == {"c": "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"}


REFUSALS = [
    pytest.param(
        {}, {"p": {"classes": {f"c{i}": {} for i in range(8)}}},
        "control.rdt.partitions: expected at most 7 classes (num_closids=8, CLOSID 0 is the "
        "root group); found 8: c0, c1, c2, c3, c4, c5, c6, c7",
        id="too-many-classes"),
    pytest.param(
        {}, {"p": {"classes": {"c": {"l3Allocation": "0x707"}}}},
        "control.rdt.partitions.p.classes.c.l3Allocation '0x707' on cache id 0: expected a "
        "contiguous mask (L3 has no sparse_masks); found 0x707",
        id="non-contiguous-on-intel"),
    pytest.param(
        {"min_cbm_bits": 2}, {"p": {"classes": {"c": {"l3Allocation": "0x1"}}}},
        "control.rdt.partitions.p.classes.c.l3Allocation '0x1' on cache id 0: expected at "
        "least min_cbm_bits=2 bits set in L3; found 0x1 with 1",
        id="below-min-cbm-bits"),
    pytest.param(
        {"min_cbm_bits": 2}, {"p": {"classes": {"c": {"l3Allocation": "0-5%"}}}},
        "control.rdt.partitions.p.classes.c.l3Allocation '0-5%' on cache id 0: expected at "
        "least min_cbm_bits=2 bits set in L3; found 0x1 with 1",
        id="percent-too-small-for-min-cbm-bits"),
    pytest.param(
        {}, {"p": {"classes": {"c": {"l3Allocation": "0x1000"}}}},
        "control.rdt.partitions.p.classes.c.l3Allocation '0x1000' on cache id 0: expected a "
        "mask within 0x7ff; found 0x1000",
        id="mask-outside-cbm"),
    pytest.param(
        {}, {"p": {"l3Allocation": "0x0f", "classes": {"c": {"l3Allocation": "0x30"}}}},
        "control.rdt.partitions.p.classes.c.l3Allocation '0x30' on cache id 0: expected a "
        "mask within 0xf; found 0x30",
        id="class-mask-outside-partition"),
    pytest.param(
        {}, {"p": {"classes": {"c": {"mbAllocation": "2000MBps"}}}},
        "control.rdt.partitions.p.classes.c.mbAllocation on cache id 0: expected a "
        "percentage; MBps values need resctrl mounted with mba_MBps; found 2000MBps",
        id="mbps-without-mba-mbps"),
    pytest.param(
        {"mba_mbps": True}, {"p": {"classes": {"c": {"mbAllocation": "50%"}}}},
        "control.rdt.partitions.p.classes.c.mbAllocation on cache id 0: expected an MBps "
        "value, resctrl is mounted with mba_MBps; found 50%",
        id="percent-only-with-mba-mbps"),
    pytest.param(
        {}, {"p": {"classes": {"c": {"mbAllocation": "5%"}}}},
        "control.rdt.partitions.p.classes.c.mbAllocation on cache id 0: expected at least "
        "min_bandwidth=10%; found 5%",
        id="below-min-bandwidth"),
    pytest.param(
        {}, {"p": {"mbAllocation": "50%", "classes": {"c": {"mbAllocation": "70%"}}}},
        "control.rdt.partitions.p.classes.c.mbAllocation on cache id 0: expected at most "
        "the partition's 50; found 70",
        id="class-bandwidth-above-partition"),
    pytest.param(
        {}, {"p": {"classes": {"c": {"l3Allocation": {"all": "50%", "7": "10%"}}}}},
        "control.rdt.partitions.p.classes.c.l3Allocation.7: expected a cache id of L3 "
        "(0, 1); found 7",
        id="unknown-cache-id"),
    pytest.param(
        {}, {"p": {"classes": {"c": {"l2Allocation": "50%"}}}},
        "control.rdt.partitions.p.classes.c.l2Allocation: expected L2 cache allocation "
        "support in resctrl (or options.l2.optional); found none",
        id="no-l2"),
    pytest.param(
        {}, {"p": {"classes": {"c": {"l3Allocation": {"code": "50%"}}}}},
        "control.rdt.partitions.p.classes.c.l3Allocation: expected a unified allocation, "
        "code/data split needs CDP (mount resctrl with -o cdp); found only code/data",
        id="code-data-without-cdp"),
    pytest.param(
        {}, {"a": {"l3Allocation": "0-50%", "classes": {"x": {}}},
             "b": {"l3Allocation": "40-100%", "classes": {"y": {}}}},
        "control.rdt.partitions.b: expected partitions not to overlap; found L3 cache id 0 "
        "mask 0x7f0 overlapping partition a (0x3f)",
        id="overlapping-partitions"),
]


@pytest.mark.parametrize(("layout", "parts", "message"), REFUSALS)
def test_impossible_configs_are_refused(
    tmp_path: Path, layout: dict[str, Any], parts: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        plan_classes(info_of(tmp_path, **layout), cfg(parts))
    assert str(info.value) == message


def test_amd_bandwidth_above_maximum_is_refused(tmp_path: Path) -> None:
    parts = {"p": {"classes": {"c": {"mbAllocation": "300000MBps"}}}}
    with pytest.raises(ConfigError, match=r"expected at most 2048 units of 1/8 GB/s "
                       r"\(256000MBps\); found 2400"):
        plan_classes(info_of(tmp_path, AMD_ROME), cfg(parts))


@pytest.mark.parametrize(
    ("parts", "fragment"),
    [
        ({"p": {"classes": {"c": {"l3Allocation": "80-20%"}}}}, "expected 0 <= start < end"),
        ({"p": {"classes": {"c": {"l3Allocation": "lots"}}}}, "expected a percentage"),
        ({"p": {"classes": {"c": {"l3Allocation": "0x0"}}}}, "expected a non-zero bitmask"),
        ({"p": {"classes": {"c": {"mbAllocation": "2GBps"}}}}, 'expected a positive "N%"'),
        ({"p": {"classes": {"c": {"mbAllocation": "120%"}}}}, "expected at most 100%"),
        ({"p": {"classes": {"c": {"l3Allocation": {"x": "50%"}}}}}, "expected \"all\""),
        ({"p": {"classes": {"../x": {}}}}, "classes.../x: expected 1-64 characters"),
        ({"p": {"classes": {"info": {}}}}, "found the reserved entry 'info'"),
        ({"p": {"classes": {"nri-resmgr-pod-x": {}}}}, "reserved for pod groups"),
        ({"p": {"classes": {"c": {}}}, "q": {"classes": {"c": {}}}},
         "found it also in partition p"),
    ],
    ids=["reversed-range", "garbage", "zero-mask", "unit", "over-100", "bad-id-key",
         "path-name", "reserved-name", "pod-prefix", "duplicate"],
)
def test_config_syntax_errors(parts: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        cfg(parts)
    assert fragment in str(info.value)


# ------------------------------------------------------------------ pod annotation plan


def test_koordinator_annotation_plan_intel(tmp_path: Path) -> None:
    spec = parse_pod_resctrl(KOORD, subject="s")
    # 11 bits: 20-80% -> bits 2..8 (0x1fc); cache 0 20-50% -> bits 2..5 (0x3c)
    assert plan_pod_group(info_of(tmp_path), spec, subject="s") == (
        "L3:0=3c;1=1fc\nMB:0=20;1=20\n")


def test_koordinator_annotation_plan_cdp_writes_code_and_data(tmp_path: Path) -> None:
    spec = parse_pod_resctrl('{"llc":{"schemata":{"range":[0,50]}}}', subject="s")
    assert plan_pod_group(info_of(tmp_path, cdp=True), spec, subject="s") == (
        "L3CODE:0=3f;1=3f\nL3DATA:0=3f;1=3f\nMB:0=100;1=100\n")


def test_koordinator_annotation_plan_amd_mb_per_cache(tmp_path: Path) -> None:
    spec = parse_pod_resctrl(
        '{"mb":{"schemata":{"percent":50},"schemataPerCache":[{"cacheID":2,"percent":25}]}}',
        subject="s")
    assert plan_pod_group(info_of(tmp_path, AMD_ROME), spec, subject="s") == (
        "L3:0=ffff;1=ffff;2=ffff;3=ffff\nMB:0=1024;1=1024;2=512;3=1024\n")


def test_koordinator_percent_with_mba_mbps_is_refused(tmp_path: Path) -> None:
    spec = parse_pod_resctrl('{"mb":{"schemata":{"percent":50}}}', subject="ann")
    with pytest.raises(AnnotationError, match=r"^ann.mbAllocation on cache id 0: expected an "
                       r"MBps value"):
        plan_pod_group(info_of(tmp_path, mba_mbps=True), spec, subject="ann")


def test_koordinator_unknown_cache_id_is_refused(tmp_path: Path) -> None:
    spec = parse_pod_resctrl(
        '{"llc":{"schemataPerCache":[{"cacheID":9,"range":[0,50]}]}}', subject="ann")
    with pytest.raises(AnnotationError, match=r"^ann.l3Allocation.9: expected a cache id of "
                       r"L3 \(0, 1\); found 9$"):
        plan_pod_group(info_of(tmp_path), spec, subject="ann")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("{not json", "ann: expected JSON; found '{not json'"),
        ("[]", "ann: expected an object with llc and/or mb; found []"),
        ('{"llc":{"schemata":{"range":[80,20]}}}',
         "ann llc.schemata.range: expected 0 <= start < end <= 100; found [80, 20]"),
        ('{"llc":{"schemata":{"range":[0,"50"]}}}',
         "ann llc.schemata.range: expected [start, end] integer percentages"),
        ('{"mb":{"schemata":{"percent":0}}}',
         "ann mb.schemata.percent: expected an integer percentage 1-100; found 0"),
        ('{"mb":{"schemata":{"percent":true}}}',
         "ann mb.schemata.percent: expected an integer percentage 1-100; found True"),
        ('{"llc":{"schemataPerCache":[{"cacheID":-1,"range":[0,5]}]}}',
         "ann llc.schemataPerCache[0].cacheID: expected a cache id; found -1"),
        ('{"llc":{"schemataPerCache":[{"cacheID":0,"range":[0,5]},'
         '{"cacheID":0,"range":[0,9]}]}}',
         "ann llc.schemataPerCache[1].cacheID: expected each cache id once; found 0"),
        ('{"gpu":{}}', "ann: expected an object with llc and/or mb"),
    ],
    ids=["bad-json", "array", "reversed", "string-bound", "zero", "bool", "negative-id",
         "duplicate-id", "unknown-key"],
)
def test_koordinator_annotation_malformed(value: str, fragment: str) -> None:
    with pytest.raises(AnnotationError) as info:
        parse_pod_resctrl(value, subject="ann")
    assert str(info.value).startswith(fragment)


# ------------------------------------------------------------------------------ property


@given(
    width=st.integers(min_value=4, max_value=20),
    bounds=st.tuples(st.integers(0, 100), st.integers(0, 100)).filter(lambda b: b[0] != b[1]),
)
def test_percentage_ranges_give_contiguous_masks_of_the_right_size(
    width: int, bounds: tuple[int, int]
) -> None:
    lo, hi = sorted(bounds)
    cbm = (1 << width) - 1
    info = ResctrlInfo(caches={"L3": CacheInfo(name="L3", cbm_mask=cbm, min_cbm_bits=1,
                                               num_closids=16, cache_ids=(0,))})
    plans = plan_classes(info, cfg({"p": {"classes": {"c": {"l3Allocation": f"{lo}-{hi}%"}}}}))
    mask = int(plans["c"].removeprefix("L3:0=").strip(), 16)
    assert mask and mask & ~cbm == 0
    assert (mask + (mask & -mask)) & mask == 0, f"0x{mask:x} is not contiguous"
    exact = width * (hi - lo) / 100
    assert exact - 1 < mask.bit_count() <= max(exact + 2, 1)
    # the range starts where its lower bound says
    assert (mask & -mask).bit_length() - 1 == width * lo // 100
