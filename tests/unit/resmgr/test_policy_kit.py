"""The policy kit: constraints, rebuild plumbing and validation problems, one rule each."""

from __future__ import annotations

import pytest

from nri_resmgr.model import Assignment, ConfigError, CPUKind
from nri_resmgr.policy.kit.constraints import (
    available_cpus,
    check_cpu_class_names,
    cpuset_option,
    dram_near,
    required_cpu,
    reserved_namespaces,
)
from nri_resmgr.policy.kit.rebuild import each_once, holders_per_cpu, moved
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.validation import InvalidConfig, Problem, invalid
from tests.support.builders import ctr, small

ONLINE = IDSet.parse("0-15")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpuset:2-4,20", "2-4"),
        ("exclude-cpuset:0-13", "14-15"),
        ("4-5", None),
    ],
    ids=["cpuset", "exclude", "other"],
)
def test_cpuset_option(text: str, expected: str | None) -> None:
    got = cpuset_option(text, ONLINE, subject="policy x", path="p")
    assert (str(got) if got is not None else None) == expected


def test_a_bad_cpu_list_is_one_problem_per_element_at_its_path() -> None:
    with pytest.raises(InvalidConfig) as exc:
        cpuset_option("cpuset:0-1,x,5-3", ONLINE, subject="policy x", path="a.cpu")
    assert [p.path for p in exc.value.problems] == ["a.cpu", "a.cpu"]
    assert "element 'x'" in exc.value.problems[0].message
    assert "range '5-3' is empty" in exc.value.problems[1].message


def test_available_cpus() -> None:
    assert available_cpus(ONLINE, None, subject="policy x") == ONLINE
    assert str(available_cpus(ONLINE, "exclude-cpuset:0", subject="policy x")) == "1-15"
    with pytest.raises(InvalidConfig) as exc:
        available_cpus(ONLINE, "0-3", subject="policy x")
    assert str(exc.value) == (
        "policy x: availableResources.cpu: expected cpuset:LIST or exclude-cpuset:LIST, found '0-3'"
    )
    with pytest.raises(ConfigError, match="leaves no online CPU; online CPUs are 0-15"):
        available_cpus(ONLINE, "cpuset:99", subject="policy x")


def test_required_cpu_and_namespaces() -> None:
    assert required_cpu("750m", subject="policy x") == "750m"
    with pytest.raises(InvalidConfig) as exc:
        required_cpu(None, subject="policy x")
    assert exc.value.problems[0].path == "reservedResources.cpu"
    assert reserved_namespaces(["infra"]) == ("kube-system", "infra")


def test_cpu_class_names_must_be_defined() -> None:
    uses = [("a.cpuClass", "fast"), ("b.cpuClass", ""), ("idleCPUClass", "idle")]
    check_cpu_class_names({"fast", "idle"}, uses, subject="policy x")
    with pytest.raises(InvalidConfig) as exc:
        check_cpu_class_names({"fast"}, uses, subject="policy x")
    assert str(exc.value) == (
        "policy x: idleCPUClass: CPU class 'idle' is not in cpuClasses; expected one of fast"
    )


def test_dram_near_the_cpus() -> None:
    topo = small()
    node = topo.node_ids(with_cpus=True)[1]
    assert dram_near(topo, topo.node_cpus(node)) == IDSet([node])


def test_each_container_once_as_first_listed() -> None:
    first, again, other = ctr("a", cur="0"), ctr("a", cur="1"), ctr("b")
    assert each_once([first, other, again]) == [first, other]


def test_holders_per_cpu() -> None:
    held = holders_per_cpu([IDSet.parse("0-1"), None, IDSet.parse("1-2"), IDSet()])
    assert dict(held) == {0: 1, 1: 2, 2: 1}


def test_moved_are_the_renderings_that_differ_from_the_reports() -> None:
    here, there, gone = ctr("a", cur="0", cur_mems="0"), ctr("b", cur="0"), ctr("c", cur="1")
    rendered = {
        here.id: Assignment(here.id, IDSet([0]), IDSet([0]), CPUKind.SHARED),
        there.id: Assignment(there.id, IDSet([1]), IDSet(), CPUKind.SHARED),
    }
    assert moved([gone, there, here], rendered) == (rendered[there.id],)


def test_problems_name_their_key_and_render_under_a_prefix() -> None:
    unknown = Problem("balloonTypes[0]", "unknown key x", at="balloonTypes[0].x")
    assert unknown.key == "balloonTypes"
    assert unknown.under("policyConfig") == "policyConfig.balloonTypes[0]: unknown key x"
    whole = Problem("", "both a and b are set")
    assert (whole.key, whole.under(""), whole.under("spec")) == (
        "",
        "(document): both a and b are set",
        "spec: both a and b are set",
    )
    assert str(invalid("policy x", "a.b", "expected 1, found 2")) == (
        "policy x: a.b: expected 1, found 2"
    )
