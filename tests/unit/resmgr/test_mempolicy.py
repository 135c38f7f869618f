"""Memory policy: their configuration and annotations, node forms, kernel rules (pure).

The machine is their memory-policy e2e topology (n6-hbm-cxl): two packages with one CPU
node each, an HBM node near each (distance 15) and a CXL node near each (distance 60).
Their test01-policies expectations (the ``numa_maps`` lines in their code.var.sh) are
the first table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nri_resmgr.config import config_from_mapping
from nri_resmgr.control.memory_config import (
    MemoryPolicyConfig,
    MpolFlag,
    MpolMode,
    NodesForm,
    parse_nodes,
)
from nri_resmgr.control.mempolicy import MemoryPolicy, check_classes, policy_for
from nri_resmgr.model import AnnotationError, ConfigError, ContainerInfo, QoSClass, ResmgrError
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, hbm_cxl

#: their dram-hbm-cxl.helm-config.yaml.in classes
THEIR_CLASSES: dict[str, Any] = {
    "classes": [
        {
            "name": "prefer-one-cxl",
            "policy": {"mode": "MPOL_PREFERRED", "nodes": 4, "flags": ["MPOL_F_RELATIVE_NODES"]},
        },
        {"name": "prefer-all-cxls", "policy": {"mode": "MPOL_PREFERRED_MANY", "nodes": "4,5"}},
        {
            "name": "interleave-max-bandwidth",
            "policy": {
                "mode": "MPOL_INTERLEAVE",
                "nodes": "max-dist:19",
                "flags": ["MPOL_F_STATIC_NODES"],
            },
        },
        {"name": "bind-hbm", "policy": {"mode": "MPOL_BIND", "nodes": "2,3"}},
        {"name": "packages", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "cpu-packages"}},
        {"name": "cpu-nodes", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "cpu-nodes"}},
        {"name": "mems", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "allowed-mems"}},
        {"name": "all", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "all"}},
        {"name": "local", "policy": {"mode": "MPOL_LOCAL"}},
    ]
}

#: their test01 pod: ANN0..ANN6, container pod0cN
POD_ANNOTATIONS = {
    "class.memory-policy.nri.io": "prefer-one-cxl",
    "class.memory-policy.nri.io/container.pod0c1": "prefer-all-cxls",
    "class.memory-policy.nri.io/container.pod0c2": "interleave-max-bandwidth",
    "class.memory-policy.nri.io/container.pod0c3": "bind-hbm",
    "policy.memory-policy.nri.io/container.pod0c4": (
        "mode: MPOL_BIND\nnodes: 4,5\nflags:\n- MPOL_F_STATIC_NODES\n"
    ),
    "policy.memory-policy.nri.io/container.pod0c5": "",
    "class.memory-policy.nri.io/container.pod0c6": "",
}


def cfg(data: Mapping[str, Any] = THEIR_CLASSES) -> MemoryPolicyConfig:
    return MemoryPolicyConfig.model_validate(dict(data))


def resolve(
    c: ContainerInfo,
    *,
    cpus: str | None = None,
    mems: str | None = None,
    config: MemoryPolicyConfig | None = None,
) -> MemoryPolicy | None:
    t = hbm_cxl()
    return policy_for(
        c,
        config or cfg(),
        topology=t,
        cpus=t.online_cpus() if cpus is None else IDSet.parse(cpus),
        mems=IDSet(t.nodes) if mems is None else IDSet.parse(mems),
    )


def shown(p: MemoryPolicy | None) -> str:
    """numa_maps' way of writing it, close enough to compare with their expectations."""
    if p is None:
        return "default"
    flags = "=" + ",".join(f.removeprefix("MPOL_F_").split("_")[0].lower() for f in p.flags)
    return f"{p.mode}{flags if p.flags else ''}:{p.nodes}"


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        ("pod0c0", "MPOL_PREFERRED=relative:4"),
        ("pod0c1", "MPOL_PREFERRED_MANY:4-5"),
        ("pod0c2", "MPOL_INTERLEAVE=static:0-3"),
        ("pod0c3", "MPOL_BIND:2-3"),
        ("pod0c4", "MPOL_BIND=static:4-5"),
        ("pod0c5", "default"),  # an empty policy unsets the pod's default class
        ("pod0c6", "default"),  # so does an empty class
    ],
)
def test_their_test01_policies(container: str, expected: str) -> None:
    c = ctr(container, pod="pod0", qos=QoSClass.BEST_EFFORT, ann=POD_ANNOTATIONS)
    assert shown(resolve(c)) == expected


@pytest.mark.parametrize(
    ("klass", "cpus", "mems", "nodes"),
    [
        # besteffort on the whole machine
        ("packages", None, None, "0-5"),
        ("cpu-nodes", None, None, "0-1"),
        # pinned to package 1's CPUs 2-3,6-7 (node 1) and its memory (1, its HBM 3, its CXL 5)
        ("packages", "2-3,6-7", "1,3,5", "1,3,5"),
        ("cpu-nodes", "2-3,6-7", "1,3,5", "1"),
        ("mems", "2-3,6-7", "1,3,5", "1,3,5"),
        ("all", "2-3,6-7", "1,3,5", "0-5"),
        ("interleave-max-bandwidth", "2-3,6-7", "1,3,5", "1,3"),
    ],
)
def test_nodes_follow_the_placement(
    klass: str, cpus: str | None, mems: str | None, nodes: str
) -> None:
    c = ctr("app", ann={"class.memory-policy.nri.io": klass})
    got = resolve(c, cpus=cpus, mems=mems)
    assert got is not None and str(got.nodes) == nodes


def test_local_takes_no_nodes() -> None:
    got = resolve(ctr("app", ann={"class.memory-policy.nri.io": "local"}))
    assert got is not None and got.mode is MpolMode.LOCAL and not got.nodes


def test_container_level_hides_pod_level_and_policy_wins_over_class() -> None:
    ann = {
        "policy.memory-policy.nri.io": "{mode: MPOL_BIND, nodes: '0'}",
        "class.memory-policy.nri.io": "all",
        "class.memory-policy.nri.io/container.b": "cpu-nodes",
    }
    a = resolve(ctr("a", ann=ann))
    b = resolve(ctr("b", ann=ann))
    assert a is not None and (a.mode, str(a.nodes)) == (MpolMode.BIND, "0")
    assert b is not None and b.source == "class cpu-nodes"


def test_an_empty_pod_level_policy_leaves_the_class() -> None:
    ann = {"policy.memory-policy.nri.io": "", "class.memory-policy.nri.io": "bind-hbm"}
    got = resolve(ctr("a", ann=ann))
    assert got is not None and got.source == "class bind-hbm"


def test_no_annotation_no_policy() -> None:
    assert resolve(ctr("a", ann={"other.example.com": "x"})) is None


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("all", NodesForm.ALL),
        ("allowed-mems", NodesForm.ALLOWED_MEMS),
        ("cpu-nodes", NodesForm.CPU_NODES),
        ("cpu-packages", NodesForm.CPU_PACKAGES),
        ("max-dist:19", NodesForm.MAX_DIST),
        ("0-3,8", NodesForm.LIST),
        ("", NodesForm.NONE),
    ],
)
def test_node_forms(text: str, form: NodesForm) -> None:
    assert parse_nodes(text).form is form
    assert str(parse_nodes(text)) == text


# -- hostile input: configuration --------------------------------------------------------

BAD_CLASSES = [
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_SOMETIMES", "nodes": "0"}},
        "classes[0].policy.mode: expected 'MPOL_DEFAULT'",
        id="unknown-mode",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_BIND", "nodes": "0", "flags": ["MPOL_F_X"]}},
        "classes[0].policy.flags[0]: expected 'MPOL_F_STATIC_NODES'",
        id="unknown-flag",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_BIND", "nodes": "near"}},
        "expected one of all, allowed-mems, cpu-nodes, cpu-packages, max-dist:N",
        id="unknown-nodes",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_BIND", "nodes": "0-"}},
        "expected a node list like 0-3,8",
        id="malformed-list",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_BIND", "nodes": "max-dist:-1"}},
        "expected max-dist:N with N a distance 10..255",
        id="negative-distance",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_BIND", "nodes": "max-dist:9"}},
        "expected max-dist:N with N a distance 10..255",
        id="distance-below-local",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_BIND"}},
        "nodes: expected some with MPOL_BIND, found none",
        id="bind-without-nodes",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_LOCAL", "nodes": "0"}},
        "nodes: expected none with MPOL_LOCAL (it takes no nodes), found 0",
        id="local-with-nodes",
    ),
    pytest.param(
        {
            "name": "x",
            "policy": {
                "mode": "MPOL_BIND",
                "nodes": "0",
                "flags": ["MPOL_F_STATIC_NODES", "MPOL_F_RELATIVE_NODES"],
            },
        },
        "expected at most one of MPOL_F_STATIC_NODES and MPOL_F_RELATIVE_NODES",
        id="static-and-relative",
    ),
    pytest.param(
        {
            "name": "x",
            "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "0", "flags": ["MPOL_F_NUMA_BALANCING"]},
        },
        "expected MPOL_F_NUMA_BALANCING only with MPOL_BIND or MPOL_PREFERRED_MANY, found it "
        "with MPOL_INTERLEAVE",
        id="numa-balancing-interleave",
    ),
    pytest.param(
        {"name": "x", "policy": {"mode": "", "nodes": "0"}},
        "mode: expected one of MPOL_DEFAULT",
        id="class-without-mode",
    ),
    pytest.param({"name": "", "policy": {"mode": "MPOL_LOCAL"}}, "classes[0].name", id="no-name"),
    pytest.param({"name": "x"}, "classes[0].policy", id="no-policy"),
    pytest.param("x", "classes[0]", id="not-a-mapping"),
    pytest.param(
        {"name": "x", "policy": {"mode": "MPOL_LOCAL", "node": "0"}},
        "node",
        id="misspelt-key",
    ),
]


@pytest.mark.parametrize(("klass", "message"), BAD_CLASSES)
def test_bad_class_is_a_config_error_naming_it(klass: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"control": {"memoryPolicy": {"classes": [klass]}}})
    assert "control.memoryPolicy." in str(err.value)
    assert message in str(err.value)


def test_duplicate_class_names_refused() -> None:
    two = {"name": "x", "policy": {"mode": "MPOL_LOCAL"}}
    with pytest.raises(ConfigError, match="expected unique class names, found 'x' twice"):
        config_from_mapping({"control": {"memoryPolicy": {"classes": [two, two]}}})


def test_inject_mpolset_is_accepted_as_their_chart_sets_it() -> None:
    """Their v0.14.0 applies a policy only through mpolset, so their chart sets it true."""
    got = config_from_mapping({"control": {"memoryPolicy": {"injectMpolset": True}}})
    assert got.control.memory_policy is not None and got.control.memory_policy.inject_mpolset


def test_keys_match_in_any_case_as_their_go_reads_them() -> None:
    got = cfg({"Classes": [{"NAME": "x", "Policy": {"MODE": "MPOL_BIND", "Nodes": "0"}}]})
    assert got.classes[0].policy.mode is MpolMode.BIND
    with pytest.raises(ValueError, match="expected one 'classes' key"):
        cfg({"classes": [], "CLASSES": []})


def test_node_list_outside_the_machine_is_refused() -> None:
    far = cfg({"classes": [{"name": "far", "policy": {"mode": "MPOL_BIND", "nodes": "4-9"}}]})
    with pytest.raises(ConfigError) as err:
        check_classes(far, hbm_cxl())
    assert str(err.value) == (
        "control.memoryPolicy.classes[0] (far): policy.nodes: expected nodes of this machine "
        "(0-5), found 4-9 (no node 6-9)"
    )
    check_classes(cfg(), hbm_cxl())  # their classes fit


# -- hostile input: annotations ----------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {"class.memory-policy.nri.io": "gold"},
            "annotation class.memory-policy.nri.io names memory policy class 'gold'; expected "
            "one of control.memoryPolicy.classes (all, bind-hbm,",
            id="unknown-class",
        ),
        pytest.param(
            {"policy.memory-policy.nri.io": "mode: MPOL_NOPE\nnodes: 0"},
            "annotation policy.memory-policy.nri.io: mode: expected 'MPOL_DEFAULT'",
            id="unknown-mode",
        ),
        pytest.param(
            {"policy.memory-policy.nri.io": "[1, 2]"},
            "expected a mapping {mode, nodes, flags}, found list",
            id="not-a-mapping",
        ),
        pytest.param(
            {"policy.memory-policy.nri.io": "{mode: MPOL_BIND, nodes: 0-63}"},
            "nodes: expected nodes of this machine (0-5), found 0-63 (no node 6-63)",
            id="nodes-outside-the-machine",
        ),
        pytest.param(
            {"policy.memory-policy.nri.io": "{mode: MPOL_BIND, nodes: '0-4294967295'}"},
            "expected a node list like 0-3,8",
            id="huge-range",
        ),
        pytest.param(
            {"policy.memory-policy.nri.io": "mode: [unclosed"},
            "annotation policy.memory-policy.nri.io",
            id="broken-yaml",
        ),
        pytest.param(
            {"policy.memory-policy.nri.io": "a: &a [*a]"},
            "annotation policy.memory-policy.nri.io",
            id="alias",
        ),
        pytest.param(
            {"mode.memory-policy.nri.io": "MPOL_BIND"},
            "annotation mode.memory-policy.nri.io: expected class.memory-policy.nri.io or "
            "policy.memory-policy.nri.io",
            id="unknown-key",
        ),
    ],
)
def test_bad_annotation_fails_the_container_naming_it(
    annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(AnnotationError) as err:
        resolve(ctr("app", pod="web", ann=annotations))
    assert str(err.value).startswith("pod default/web container app: ")
    assert message in str(err.value)


def test_another_containers_annotations_are_not_read() -> None:
    ann = {"class.memory-policy.nri.io/container.other": "gold"}
    assert resolve(ctr("app", ann=ann)) is None


def test_nodes_outside_the_containers_memory_fail_it_unless_relative() -> None:
    c = ctr("app", ann={"class.memory-policy.nri.io": "bind-hbm"})
    with pytest.raises(ResmgrError) as err:
        resolve(c, cpus="2-3,6-7", mems="1")
    assert "expected nodes among the container's memory nodes 1" in str(err.value)
    assert "found 2-3" in str(err.value)
    # a relative node mask is folded onto the allowed nodes by the kernel: no error
    rel = ctr("app", ann={"class.memory-policy.nri.io": "prefer-one-cxl"})
    got = resolve(rel, cpus="2-3,6-7", mems="1")
    assert got is not None and MpolFlag.RELATIVE_NODES in got.flags


def test_a_partial_overlap_is_taken_as_the_kernel_takes_it() -> None:
    c = ctr("app", ann={"class.memory-policy.nri.io": "bind-hbm"})
    got = resolve(c, cpus="0-3", mems="0,2")
    assert got is not None and str(got.nodes) == "2-3"
