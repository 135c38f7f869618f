"""The committed generated protobuf code is what tools/genproto.py produces, and the check
that says so can fail; nri_api.api exposes every schema type."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nri_api import api
from nri_api._pb import api_pb2
from tests.support.requirements import REPO

GENPROTO = REPO / "tools" / "genproto.py"


def run_genproto(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "tools" / "genproto.py"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_committed_code_is_up_to_date() -> None:
    done = run_genproto(REPO, "--check")
    assert done.returncode == 0, f"genproto --check failed:\n{done.stdout}\n{done.stderr}"
    assert "up to date" in done.stdout


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The generator and the schema directory, copied to a scratch tree."""
    (tmp_path / "tools").mkdir()
    shutil.copy2(GENPROTO, tmp_path / "tools" / "genproto.py")
    shutil.copytree(
        REPO / "nri_api" / "_pb",
        tmp_path / "nri_api" / "_pb",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return tmp_path


def test_copy_is_consistent_before_tampering(repo_copy: Path) -> None:
    done = run_genproto(repo_copy, "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_fails_when_proto_changed_but_code_not(repo_copy: Path) -> None:
    proto = repo_copy / "nri_api" / "_pb" / "api.proto"
    text = proto.read_text()
    marker = "message CDIDevice {\n  string name = 1;\n"
    assert marker in text
    proto.write_text(text.replace(marker, marker + "  string vendor = 2;\n"))

    done = run_genproto(repo_copy, "--check")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nri_api/_pb/api_pb2.py" in done.stdout
    assert "nri_api/_pb/api_pb2.pyi" in done.stdout

    # Regenerating makes the tree consistent again, and the new field appears.
    assert run_genproto(repo_copy).returncode == 0
    assert run_genproto(repo_copy, "--check").returncode == 0
    assert "vendor" in (repo_copy / "nri_api" / "_pb" / "api_pb2.pyi").read_text()


def test_check_fails_when_generated_file_edited(repo_copy: Path) -> None:
    stub = repo_copy / "nri_api" / "_pb" / "api_pb2.pyi"
    stub.write_text(stub.read_text() + "\n# hand edit\n")
    done = run_genproto(repo_copy, "--check")
    assert done.returncode == 1
    stale = {line.strip() for line in done.stdout.splitlines()}
    assert "nri_api/_pb/api_pb2.pyi" in stale
    assert "nri_api/_pb/api_pb2.py" not in stale


def test_check_fails_on_orphan_generated_file(repo_copy: Path) -> None:
    (repo_copy / "nri_api" / "_pb" / "gone_pb2.py").write_text("# no .proto for this\n")
    done = run_genproto(repo_copy, "--check")
    assert done.returncode == 1
    assert "gone_pb2.py" in done.stdout


def test_stub_is_valid_python_despite_keyword_enum_value() -> None:
    stub = (REPO / "nri_api" / "_pb" / "api_pb2.pyi").read_text()
    ast.parse(stub)  # `None: Field` would be a SyntaxError
    # The value itself still exists at run time.
    assert api.Field.Value("None") == 0
    assert api.Field.Name(40) == "MemoryPolicy"


def test_api_reexports_every_schema_type() -> None:
    schema = set(api_pb2.DESCRIPTOR.message_types_by_name) | set(
        api_pb2.DESCRIPTOR.enum_types_by_name
    )
    exported = set(api.__all__)
    assert schema - exported == set(), "schema types missing from nri_api.api.__all__"
    for name in schema:
        assert getattr(api, name) is getattr(api_pb2, name)
    extra = exported - schema
    assert extra == {
        "PACKAGE",
        "PLUGIN_SERVICE",
        "RUNTIME_SERVICE",
        "HOST_FUNCTIONS_SERVICE",
        "LIVE_STATES",
        "PluginMethod",
        "RuntimeMethod",
    }


def test_service_and_method_names_match_the_schema() -> None:
    services = api_pb2.DESCRIPTOR.services_by_name
    assert services["Plugin"].full_name == api.PLUGIN_SERVICE
    assert services["Runtime"].full_name == api.RUNTIME_SERVICE
    assert services["HostFunctions"].full_name == api.HOST_FUNCTIONS_SERVICE
    assert api_pb2.DESCRIPTOR.package == api.PACKAGE
    assert [m.name for m in services["Plugin"].methods] == [m.value for m in api.PluginMethod]
    assert [m.name for m in services["Runtime"].methods] == [m.value for m in api.RuntimeMethod]


def test_wire_shape_spot_checks() -> None:
    # The facts that cost the most when wrong (NRI-FACTS §9).
    assert api.ConfigureResponse(events=0x8).SerializeToString() == b"\x10\x08"
    assert api.OptionalInt.DESCRIPTOR.fields_by_name["value"].type == 3  # TYPE_INT64
    assert 1 not in api.ContainerAdjustment.DESCRIPTOR.fields_by_number
    wrapped = api.LinuxContainerAdjustment()
    wrapped.oom_score_adj.SetInParent()
    assert wrapped.HasField("oom_score_adj")
    assert wrapped.SerializeToString() == b"\x22\x00"
