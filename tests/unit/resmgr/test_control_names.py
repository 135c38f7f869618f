"""Class/group name validation and root-confined path joining."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nri_resmgr.control.names import (
    MAX_NAME_LENGTH,
    InvalidNameError,
    PathEscapeError,
    safe_join,
    validate_name,
)
from nri_resmgr.model import AnnotationError

HOSTILE = [
    pytest.param("", "empty name", id="empty"),
    pytest.param("../x", "'../x' with '/'", id="dotdot-slash"),
    pytest.param("..", "starting with a dot", id="dotdot"),
    pytest.param(".", "starting with a dot", id="dot"),
    pytest.param("/abs", "'/abs' with '/'", id="absolute"),
    pytest.param(".hidden", "starting with a dot", id="hidden"),
    pytest.param("info", "reserved entry 'info'", id="info"),
    pytest.param("mon_groups", "reserved entry 'mon_groups'", id="mon_groups"),
    pytest.param("schemata", "reserved entry 'schemata'", id="schemata"),
    pytest.param("tasks", "reserved entry 'tasks'", id="tasks"),
    pytest.param("a/b", "'a/b' with '/'", id="slash"),
    pytest.param("a\x00b", "with '\\x00'", id="nul"),
    pytest.param("a\nb", "with '\\n'", id="newline"),
    pytest.param("a b", "with ' '", id="space"),
    pytest.param("x" * 300, "found 300 characters", id="300-chars"),
    pytest.param("gold\u2215x", "with '\\u2215'", id="division-slash-lookalike"),
    pytest.param("g\u043eld", "with '\\u043e'", id="cyrillic-o-lookalike"),
    pytest.param("\uff0e\uff0e", "with '\\uff0e'", id="fullwidth-dots"),
    pytest.param("a\\b", "with '\\\\'", id="backslash"),
    pytest.param("a;rm", "with ';'", id="semicolon"),
]


@pytest.mark.parametrize(("name", "found"), HOSTILE)
def test_hostile_names_are_rejected_with_subject_expectation_and_finding(
    name: str, found: str
) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_name(name, subject="annotation rdtclass.resource-policy.nri.io/pod")
    msg = str(info.value)
    assert msg.startswith("annotation rdtclass.resource-policy.nri.io/pod: expected 1-64 ")
    assert found in msg


@pytest.mark.parametrize("name", ["gold", "Best-Effort_1.0", "a", "x" * MAX_NAME_LENGTH, "a..b"])
def test_plain_names_pass_unchanged(name: str) -> None:
    assert validate_name(name, subject="s") == name


def test_caller_chooses_the_error_type() -> None:
    with pytest.raises(AnnotationError, match=r"^key: expected"):
        validate_name("../x", subject="key", error=AnnotationError)


def test_non_string_is_rejected() -> None:
    with pytest.raises(InvalidNameError, match="found a int"):
        validate_name(3, subject="cfg")


def test_safe_join_stays_inside(tmp_path: Path) -> None:
    assert safe_join(tmp_path, "a", "b") == tmp_path.resolve() / "a" / "b"
    assert safe_join(tmp_path) == tmp_path.resolve()


@pytest.mark.parametrize(
    "parts",
    [("..",), ("a", "../../x"), ("/etc",), ("a\x00",), ("link",), ("link", "x")],
    ids=["dotdot", "nested-dotdot", "absolute", "nul", "symlink-out", "under-symlink-out"],
)
def test_safe_join_refuses_escapes(tmp_path: Path, parts: tuple[str, ...]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "link")
    with pytest.raises(PathEscapeError, match=r"^path .*expected"):
        safe_join(root, *parts)


def test_safe_join_allows_symlink_within_root(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "alias")
    assert safe_join(tmp_path, "alias", "f") == tmp_path.resolve() / "real" / "f"
