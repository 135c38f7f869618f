#!/usr/bin/env python3
"""Regenerate the Python protobuf modules and type stubs of nri_api and nri_resmgr.kube.

Usage: python tools/genproto.py [--check]

The .proto sources live in nri_api/_pb/ (NRI, ttrpc) and nri_resmgr/kube/_pb/ (the
kubelet's PodResources API) next to their generated *_pb2.py and *_pb2.pyi
files, which are committed so that a plain `pip install` needs no code generator.
With --check, generate into a temporary tree and fail if anything differs from what is
committed (CI runs this through tests/unit/nri_api/test_codegen.py).
"""

from __future__ import annotations

import argparse
import filecmp
import keyword
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PB_DIRS = (Path("nri_api") / "_pb", Path("nri_resmgr") / "kube" / "_pb")


def generate(out_root: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) over every .proto, writing under out_root."""
    try:
        from grpc_tools import protoc  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(
            "genproto: grpcio-tools is not installed; pip install '.[codegen]'"
        ) from exc
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(
        str(p.relative_to(ROOT)) for d in PB_DIRS for p in (ROOT / d).glob("*.proto")
    )
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        *protos,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"genproto: protoc failed with exit code {rc}")
    for d in PB_DIRS:
        for stub in (out_root / d).glob("*_pb2.pyi"):
            stub.write_text(_drop_keyword_names(stub.read_text()))
    return sorted(p for d in PB_DIRS for p in (out_root / d).glob("*_pb2.py*"))


_STUB_NAME = re.compile(r"^\s*(\w+):")


def _drop_keyword_names(stub: str) -> str:
    """Remove stub declarations whose name is a Python keyword.

    NRI's `enum Field` has a value called `None`; protoc's --pyi_out writes it as
    `None: Field`, which is a syntax error that stops mypy. The value stays reachable
    at run time through `Field.Value("None")`.
    """
    kept = []
    for line in stub.splitlines(keepends=True):
        m = _STUB_NAME.match(line)
        if m and keyword.iskeyword(m.group(1)):
            continue
        kept.append(line)
    return "".join(kept)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if the committed files are stale"
    )
    ns = parser.parse_args()
    if not ns.check:
        generate(ROOT)
        print(f"genproto: regenerated {', '.join(map(str, PB_DIRS))}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        stale = []
        for path in generated:
            committed = ROOT / path.relative_to(tmp)
            if not committed.exists() or not filecmp.cmp(path, committed, shallow=False):
                stale.append(str(committed.relative_to(ROOT)))
        extra = {
            p.relative_to(ROOT) for d in PB_DIRS for p in (ROOT / d).glob("*_pb2.py*")
        } - {p.relative_to(tmp) for p in generated}
        stale += sorted(str(p) for p in extra)
    if stale:
        print("genproto: generated code differs from the committed files:", *stale, sep="\n  ")
        print("run: python tools/genproto.py")
        return 1
    print("genproto: committed code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
