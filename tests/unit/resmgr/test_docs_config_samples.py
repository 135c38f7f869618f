"""Every configuration sample in the docs validates as written (validate-config, in process).

A sample is a ```yaml or ```json block of README.md or docs/*.md whose top-level keys are
all keys of the daemon's configuration (`nri_resmgr.config.Config`), or an nri-plugins
configuration custom resource (``apiVersion: config.nri/v1alpha1``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from nri_resmgr.cli import main
from nri_resmgr.config import Config
from tests.support.requirements import REPO

CONFIG_KEYS = {info.alias or name for name, info in Config.model_fields.items()}
BLOCK = re.compile(r"```(?:yaml|json)\n(.*?)```", re.DOTALL)


def config_samples() -> list[tuple[str, str]]:
    """(where, text) of every configuration sample in the docs."""
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            data = yaml.safe_load(m.group(1))
            ours = isinstance(data, dict) and data and set(map(str, data)) <= CONFIG_KEYS
            theirs = isinstance(data, dict) and data.get("apiVersion") == "config.nri/v1alpha1"
            if ours or theirs:
                line = text.count("\n", 0, m.start()) + 1
                found.append((f"{doc.relative_to(REPO)}:{line}", m.group(1)))
    return found


SAMPLES = config_samples()


def test_the_docs_have_configuration_samples() -> None:
    """The finder finds them (operations.md, daemon.md and rdt-blockio.md at least)."""
    assert {where.split(":")[0] for where, _ in SAMPLES} >= {
        "docs/operations.md",
        "docs/daemon.md",
        "docs/rdt-blockio.md",
    }


@pytest.mark.parametrize(("where", "text"), SAMPLES, ids=[w for w, _ in SAMPLES])
def test_sample_validates(
    where: str,
    text: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)  # relative paths in a sample are the repository's
    sample = tmp_path / "sample.yaml"
    sample.write_text(text, encoding="utf-8")
    rc = main(["validate-config", str(sample), "--topology", "two-socket"])
    captured = capsys.readouterr()
    assert rc == 0, f"{where}:\n{captured.err}"
    assert captured.out == f"{sample}: valid\n"
