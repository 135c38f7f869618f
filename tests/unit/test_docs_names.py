"""The names the architecture and the policy guide cite exist.

docs/architecture.md and docs/policies.md's "Writing a policy" name the code they
describe: files and folders (``policy/kit/rebuild.py``, ``tests/support/``) and dotted
names (``policy.kit``, ``ops.logs.log_config_warnings``, ``nri_api.stub.Plugin``).  A
move or a rename that the text does not follow fails here: every backticked path must
exist (from the repository, or as the tail of a path under `ROOTS`), and every
backticked dotted name whose first part is a package or module of ``nri_api`` or
``nri_resmgr`` must import and resolve, attribute by attribute (a trailing ``()``
aside; `NOT_CODE` lists the dotted tokens that are configuration keys).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.requirements import REPO

PACKAGES = ("nri_api", "nri_resmgr")
_CODE = re.compile(r"`([^`\s]+)`")
_PATH = re.compile(r"^[\w./-]+(\.py|/)$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(\(\))?$")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    rest = text[start + len(heading) :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.M)]
    return rest[: ends[0]] if ends else rest


def cited_text() -> dict[str, str]:
    policies = (REPO / "docs" / "policies.md").read_text()
    return {
        "docs/architecture.md": (REPO / "docs" / "architecture.md").read_text(),
        "docs/policies.md, Writing a policy": _section(policies, "### Writing a policy"),
    }


def _top_names() -> set[str]:
    out = set(PACKAGES)
    for pkg in PACKAGES:
        for p in (REPO / pkg).iterdir():
            if p.suffix == ".py" or (p / "__init__.py").exists():
                out.add(p.stem)
    return out


def resolves(name: str) -> bool:
    """Whether dotted `name` (absolute, or relative to a package of `PACKAGES`) names a
    module or an attribute of one."""
    parts = name.removesuffix("()").split(".")
    bases = [[]] if parts[0] in PACKAGES else [[pkg] for pkg in PACKAGES]
    for base in bases:
        for cut in range(len(parts), 0, -1):
            module = ".".join(base + parts[:cut])
            try:
                obj: object = importlib.import_module(module)
            except ImportError:
                continue
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    break
                obj = getattr(obj, attr)
            else:
                return True
            break
    return False


#: where a cited path is looked for: from the repository, or as the tail of a path in one
#: of these folders (``cpuclass/`` is ``nri_resmgr/control/cpuclass/``)
ROOTS = ("nri_api", "nri_resmgr", "tests", "bench", "examples", "plugins.d", "tools", "charts")
#: dotted tokens that are not code: configuration keys and the entry-point group
NOT_CODE = {
    "control.cpu": "the control section's CPU class key",
    "control.rdt": "the control section's RDT key",
    "nri_resmgr.policies": "the entry-point group a policy registers in",
}


def _path_exists(token: str) -> bool:
    if (REPO / token).exists():
        return True
    tail = token.rstrip("/")
    name = Path(tail).name
    return any(
        str(found).endswith("/" + tail)
        for root in ROOTS
        for found in (REPO / root).rglob(name)
        if found.is_dir() or not token.endswith("/")
    )


def _is_path(token: str) -> bool:
    return bool(_PATH.match(token)) and ("/" in token or token.endswith(".py"))


def _is_code_name(token: str, tops: set[str]) -> bool:
    return bool(_DOTTED.match(token)) and token.split(".", 1)[0] in tops and token not in NOT_CODE


def citations() -> Iterator[tuple[str, str]]:
    tops = _top_names()
    for where, text in cited_text().items():
        for token in sorted(set(_CODE.findall(text))):
            if _is_path(token) or _is_code_name(token, tops):
                yield where, token


def test_the_docs_cite_names_at_all() -> None:
    cited = {token for _, token in citations()}
    assert {"policy/kit/rebuild.py", "nri_api.stub.Plugin", "policy.kit"} <= cited


@pytest.mark.parametrize(("where", "token"), sorted(set(citations())))
def test_a_cited_name_exists(where: str, token: str) -> None:
    if _is_path(token):
        assert _path_exists(token), f"{where}: `{token}`: expected a file or folder; found none"
    else:
        assert resolves(token), f"{where}: `{token}`: expected a module or attribute; found none"


def test_a_renamed_name_would_fail() -> None:
    assert resolves("ops.logs") and resolves("nri_api.stub.Plugin")
    assert not resolves("ops.logs.no_such_function")
    assert not _path_exists("policy/kit/no_such_module.py")
    assert isinstance(REPO, Path)
