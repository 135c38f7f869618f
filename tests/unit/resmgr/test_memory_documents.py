"""Their memory-policy and memory-qos plugin files load as this daemon's configuration.

Issue 28 acceptance: their sample configurations load with ``validate-config``.  The
files are copies of nri-plugins v0.14.0's (tests/unit/resmgr/data/nri-plugins-memory/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.config import load_config
from nri_resmgr.control.memory_documents import plugin_section
from tests.support.requirements import REPO

#: their memory plugins' files, apart from the policy samples (test_policy_documents reads
#: every file of data/nri-plugins as a policy configuration)
DATA = REPO / "tests/unit/resmgr/data/nri-plugins-memory"


@pytest.mark.parametrize("name", ["nri-memory-policy.yaml", "nri-memory-qos.yaml"])
def test_their_sample_config_loads_with_validate_config(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = DATA / name
    assert main(["validate-config", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"{path}: valid" in captured.out
    assert captured.err == ""


def test_their_files_become_the_control_sections() -> None:
    policy = load_config(DATA / "nri-memory-policy.yaml").control
    assert [c.name for c in policy.memory_policy.classes] == [  # type: ignore[union-attr]
        "interleave-all",
        "interleave-cpu-packages",
        "interleave-cpu-nodes",
        "interleave-local-nodes",
    ]
    assert policy.memory_qos is None
    qos = load_config(DATA / "nri-memory-qos.yaml").control
    assert qos.memory_qos is not None and qos.memory_policy is None
    assert qos.memory_qos.unified_annotations == ("memory.swap.max", "memory.high")


def test_their_helm_values_inject_mpolset_is_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Their chart's default (injectMpolset: true) asks for their mpolset helper."""
    path = DATA / "helm-memory-policy-config.yaml"
    assert main(["validate-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: injectMpolset: expected false or absent" in err
    assert "1 error(s)" in err


def test_an_error_names_the_path_as_written_in_their_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "qos.yaml"
    f.write_text("classes:\n- name: gold\n  swaplimitratio: 2\nunifiedannotations: []\n")
    assert main(["validate-config", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}: classes[0].swaplimitratio: expected less than or equal to 1, found 2" in err


@pytest.mark.parametrize(
    ("doc", "section"),
    [
        ({"classes": [{"name": "a", "policy": {"mode": "MPOL_LOCAL"}}]}, "memoryPolicy"),
        ({"injectMpolset": False}, "memoryPolicy"),
        ({"classes": [{"name": "a", "swaplimitratio": 0.1}]}, "memoryQos"),
        ({"UnifiedAnnotations": ["memory.high"]}, "memoryQos"),
        ({"policy": "none"}, None),
        ({"classes": [], "reservedResources": {}}, None),
    ],
)
def test_recognised_by_their_keys(doc: dict[str, object], section: str | None) -> None:
    assert plugin_section(doc) == section


def test_a_file_of_both_or_neither_is_refused() -> None:
    with pytest.raises(ValueError, match="found both"):
        plugin_section({"injectMpolset": False, "unifiedannotations": []})
    with pytest.raises(ValueError, match="found neither"):
        plugin_section({"classes": [{"name": "x"}]})
