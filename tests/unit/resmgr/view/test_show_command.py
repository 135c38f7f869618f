"""`nri-resmgr show` from a scenario step, and its errors."""

from __future__ import annotations

import json
import socket

import pytest

from nri_resmgr.cli import main
from nri_resmgr.view.model import Holder, view_from_dict
from tests.support.requirements import REPO

BASIC = str(REPO / "examples" / "scenarios" / "basic-qos.yaml")


def test_show_a_step_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--scenario", BASIC, "--step", "0"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out  # not a terminal: plain text
    assert "policy topology-aware  step 0: create db" in out
    # db/postgres holds 2,10 exclusively (basic-qos.yaml's first expectation)
    assert "L3 0: 2:c1,10:c1 |" in out
    assert "default/db/postgres" in out


def test_show_json_is_a_view(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--scenario", BASIC, "--step", "-1", "--output", "json"]) == 0
    view = view_from_dict(json.loads(capsys.readouterr().out))
    assert view.title == "step 3: delete db"
    assert (
        view.cpus_of(Holder.EXCLUSIVE) == view.cpus_of(Holder.IDLE) == view.cpus_of(Holder.BALLOON)
    )  # all empty: after the delete nothing is exclusive, topology-aware leaves nothing idle
    assert [c.key for c in view.containers] == ["default/web/nginx", "default/batch/worker"]


def test_colour_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--scenario", BASIC, "--color", "always"]) == 0
    assert "\x1b[" in capsys.readouterr().out


@pytest.mark.parametrize("step", ["4", "-5"])
def test_a_step_out_of_range_is_refused(step: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--scenario", BASIC, "--step", step]) == 2
    err = capsys.readouterr().err
    assert f"--step: expected a step 0-3 (or -1 to -4), found {step}" in err


def test_no_daemon_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["show", "--url", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"http://127.0.0.1:{port}/view.json: expected the daemon's node view, found" in err


def test_show_a_balloons_step_marks_each_balloons_cpus(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(REPO / "examples" / "scenarios" / "balloons-inference.yaml")
    assert main(["show", "--scenario", scenario, "--step", "2"]) == 0
    out = capsys.readouterr().out
    assert "policy balloons  step 2: create llm-1" in out
    # CPU 0 reserved (balloon 1), the inference balloon (2) on 1-2,9-10, batch (3) on 8
    assert "L3 0: 0:b1,8:b3 | 1:b2,9:b2 | 2:b2,10:b2 | 3:idl,11:idl" in out
    lines = out.splitlines()
    balloons = lines[lines.index("balloons") + 1 :]
    assert balloons[2].split() == ["2", "inference[0]", "inference", "1-2,9-10", "-", "0", "3,4"]
    assert balloons[3].split() == ["3", "batch[0]", "batch", "8", "-", "0", "1,2"]


def test_show_a_static_step_marks_reserved_and_shared(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(REPO / "examples" / "scenarios" / "static-policy.yaml")
    assert main(["show", "--scenario", scenario, "--step", "0", "--output", "json"]) == 0
    view = view_from_dict(json.loads(capsys.readouterr().out))
    assert view.policy == "static"
    assert str(view.cpus_of(Holder.RESERVED)) == "0,8"
    assert str(view.cpus_of(Holder.SHARED)) == "1-7,9-15"
