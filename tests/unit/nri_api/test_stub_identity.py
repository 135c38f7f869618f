"""Plugin name and index: arguments, then environment, then the executable's name."""

from __future__ import annotations

import pytest

from nri_api.stub import Identity, resolve_identity


@pytest.mark.parametrize(
    ("name", "idx", "environ", "argv0", "expected"),
    [
        pytest.param("logger", "10", {}, "/x/whatever", Identity("logger", "10"), id="args"),
        pytest.param(
            None,
            None,
            {"NRI_PLUGIN_NAME": "env", "NRI_PLUGIN_IDX": "20"},
            "/x/30-argv",
            Identity("env", "20"),
            id="env-over-argv0",
        ),
        pytest.param(
            "arg",
            None,
            {"NRI_PLUGIN_NAME": "env", "NRI_PLUGIN_IDX": "20"},
            "/x/y",
            Identity("arg", "20"),
            id="arg-name-env-idx",
        ),
        pytest.param(None, None, {}, "/opt/nri/plugins/05-pin", Identity("pin", "05"), id="argv0"),
        pytest.param(
            None,
            None,
            {},
            "examples/90-my-plugin.py",
            Identity("my-plugin", "90"),
            id="argv0-py-suffix",
        ),
        pytest.param(
            None,
            "11",
            {},
            "/usr/bin/logger.py",
            Identity("logger", "11"),
            id="idx-only-name-from-argv0",
        ),
        pytest.param(
            None,
            None,
            {"NRI_PLUGIN_NAME": "10-old", "NRI_PLUGIN_IDX": "10"},
            "/x/y",
            Identity("old", "10"),
            id="v0.3-full-name-in-env",
        ),
        pytest.param("a_b.c+d-e", "99", {}, "/x", Identity("a_b.c+d-e", "99"), id="charset"),
        pytest.param(
            None,
            None,
            {"NRI_PLUGIN_NAME": "", "NRI_PLUGIN_IDX": ""},
            "/x/42-empty-env",
            Identity("empty-env", "42"),
            id="empty-env-ignored",
        ),
    ],
)
def test_resolve_identity(
    name: str | None, idx: str | None, environ: dict[str, str], argv0: str, expected: Identity
) -> None:
    assert resolve_identity(name=name, idx=idx, environ=environ, argv0=argv0) == expected


@pytest.mark.parametrize(
    ("name", "idx", "argv0", "message"),
    [
        pytest.param(None, None, "/usr/bin/python3", "not of the form NN-name", id="no-idx"),
        pytest.param("x", "1", "/x", "two digits", id="one-digit"),
        pytest.param("x", "100", "/x", "two digits", id="three-digits"),
        pytest.param("x", "ab", "/x", "two digits", id="letters"),
        pytest.param("bad name", "10", "/x", "plugin name", id="space"),
        pytest.param("bad/name", "10", "/x", "plugin name", id="slash"),
        pytest.param(None, None, "/x/1-short", "not of the form NN-name", id="argv0-one-digit"),
    ],
)
def test_resolve_identity_rejects(
    name: str | None, idx: str | None, argv0: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_identity(name=name, idx=idx, environ={}, argv0=argv0)


def test_full_name() -> None:
    assert Identity("logger", "10").full_name == "10-logger"
