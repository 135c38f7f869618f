"""Builders: readable chains that produce the right protobuf, wrappers present even at 0."""

from __future__ import annotations

import pytest

from nri_api import Adjustment, Update, api


class CpuSetLike:
    """Anything whose str() is the kernel list form is accepted."""

    def __str__(self) -> str:
        return "0-3,8"


def test_cpuset_and_mems() -> None:
    adj = Adjustment().set_cpuset("0-3", "0").build()
    assert adj.linux.resources.cpu.cpus == "0-3"
    assert adj.linux.resources.cpu.mems == "0"


def test_cpuset_from_object_str() -> None:
    assert Update("c").set_cpuset(CpuSetLike()).build().linux.resources.cpu.cpus == "0-3,8"


@pytest.mark.parametrize("bad", ["", "a", "0-", "1,,2", "0-3;4", "-1"])
def test_cpuset_rejects_non_list_form(bad: str) -> None:
    with pytest.raises(ValueError, match="kernel list"):
        Adjustment().set_cpuset(bad)


@pytest.mark.parametrize(
    ("setter", "path"),
    [
        pytest.param("set_cpu_shares", ("cpu", "shares"), id="shares"),
        pytest.param("set_cpu_quota", ("cpu", "quota"), id="quota"),
        pytest.param("set_cpu_period", ("cpu", "period"), id="period"),
        pytest.param("set_memory_limit", ("memory", "limit"), id="mem-limit"),
        pytest.param("set_memory_reservation", ("memory", "reservation"), id="mem-reservation"),
        pytest.param("set_memory_swap", ("memory", "swap"), id="mem-swap"),
    ],
)
@pytest.mark.parametrize("builder", [Adjustment, lambda: Update("c")], ids=["adjust", "update"])
def test_zero_valued_wrapper_is_present(
    builder: type[Adjustment], setter: str, path: tuple[str, str]
) -> None:
    built = getattr(builder(), setter)(0).build()
    group = getattr(built.linux.resources, path[0])
    assert group.HasField(path[1]), f"{setter}(0) must emit the wrapper"
    assert getattr(group, path[1]).value == 0
    # and it survives the wire
    again = type(built).FromString(built.SerializeToString())
    assert getattr(again.linux.resources, path[0]).HasField(path[1])


def test_unset_wrappers_are_absent() -> None:
    res = Adjustment().set_cpuset("1").build().linux.resources
    assert not res.cpu.HasField("shares")
    assert not res.cpu.HasField("quota")
    assert not res.HasField("memory")
    assert not res.HasField("rdt_class")


def test_empty_string_classes_are_present() -> None:
    res = Adjustment().set_rdt_class("").set_blockio_class("").build().linux.resources
    assert res.HasField("rdt_class") and res.rdt_class.value == ""
    assert res.HasField("blockio_class") and res.blockio_class.value == ""


def test_values() -> None:
    res = (
        Update("ctr")
        .set_cpu_shares(1024)
        .set_cpu_quota(-1)
        .set_cpu_period(100000)
        .set_memory_limit(1 << 30)
        .set_rdt_class("gold")
        .set_blockio_class("slow")
        .set_pids_limit(100)
        .add_hugepage_limit("2MB", 4096)
        .set_unified("memory.high", "1000")
        .build()
        .linux.resources
    )
    assert (res.cpu.shares.value, res.cpu.quota.value, res.cpu.period.value) == (1024, -1, 100000)
    assert res.memory.limit.value == 1 << 30
    assert (res.rdt_class.value, res.blockio_class.value) == ("gold", "slow")
    assert res.pids.limit == 100
    assert [(h.page_size, h.limit) for h in res.hugepage_limits] == [("2MB", 4096)]
    assert dict(res.unified) == {"memory.high": "1000"}


@pytest.mark.parametrize(
    ("setter", "value", "error"),
    [
        pytest.param("set_cpu_shares", -1, ValueError, id="negative-shares"),
        pytest.param("set_cpu_period", 1 << 64, ValueError, id="period-overflow"),
        pytest.param("set_memory_limit", 1 << 63, ValueError, id="limit-overflow"),
        pytest.param("set_memory_limit", "1G", TypeError, id="limit-str"),
        pytest.param("set_cpu_quota", True, TypeError, id="quota-bool"),
    ],
)
def test_range_checks(setter: str, value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=setter.removeprefix("set_").replace("_", " ")):
        getattr(Adjustment(), setter)(value)


def test_env_one_entry_per_key() -> None:
    adj = Adjustment().add_env("A", "1").add_env("B", "2").add_env("A", "3").build()
    assert [(e.key, e.value) for e in adj.env] == [("A", "3"), ("B", "2")]


def test_env_removal_replaces_addition() -> None:
    adj = Adjustment().add_env("A", "1").remove_env("A").build()
    assert [(e.key, e.value) for e in adj.env] == [("-A", "")]
    adj = Adjustment().remove_env("A").add_env("A", "2").build()
    assert [(e.key, e.value) for e in adj.env] == [("A", "2")]


def test_annotations() -> None:
    adj = Adjustment().add_annotation("a", "1").remove_annotation("b").add_annotation("a", "2")
    assert dict(adj.build().annotations) == {"a": "2", "-b": ""}
    assert dict(
        Adjustment().add_annotation("a", "1").remove_annotation("a").build().annotations
    ) == {"-a": ""}


def test_removal_prefix_in_key_is_refused() -> None:
    with pytest.raises(ValueError, match="removal marker"):
        Adjustment().add_env("-A", "1")


def test_mounts() -> None:
    adj = (
        Adjustment()
        .add_mount("/data", "/host/data")
        .add_mount("/tmp/x", "tmpfs", type="tmpfs", options=["size=1m"])
        .remove_mount("/old")
        .add_mount("/data", "/host/other")
        .build()
    )
    assert [(m.destination, m.source, m.type, list(m.options)) for m in adj.mounts] == [
        ("/tmp/x", "tmpfs", "tmpfs", ["size=1m"]),
        ("-/old", "", "", []),
        ("/data", "/host/other", "bind", ["bind", "ro"]),
    ]


def test_other_adjustments() -> None:
    adj = (
        Adjustment()
        .add_rlimit("RLIMIT_NOFILE", hard=1024, soft=512)
        .add_cdi_device("vendor.com/gpu=0")
        .add_cdi_device("vendor.com/gpu=0")
        .set_args(["sleep", "inf"])
        .set_oom_score_adj(0)
        .set_cgroups_path("/kubepods/x")
        .build()
    )
    assert [(r.type, r.hard, r.soft) for r in adj.rlimits] == [("RLIMIT_NOFILE", 1024, 512)]
    assert [d.name for d in adj.CDI_devices] == ["vendor.com/gpu=0"]
    assert list(adj.args) == ["sleep", "inf"]
    assert adj.linux.HasField("oom_score_adj") and adj.linux.oom_score_adj.value == 0
    assert adj.linux.cgroups_path == "/kubepods/x"


def test_update_ignore_failure_and_id() -> None:
    upd = Update("ctr1").set_cpuset("2").ignore_failure().build()
    assert upd.container_id == "ctr1"
    assert upd.ignore_failure
    assert not Update("ctr1").build().ignore_failure
    with pytest.raises(ValueError, match="container id"):
        Update("")


def test_build_returns_independent_copies() -> None:
    builder = Adjustment().set_cpuset("1")
    first = builder.build()
    builder.set_cpuset("2")
    assert first.linux.resources.cpu.cpus == "1"
    assert builder.build().linux.resources.cpu.cpus == "2"
    assert isinstance(first, api.ContainerAdjustment)
