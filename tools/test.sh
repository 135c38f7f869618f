#!/usr/bin/env bash
# The whole test suite: install, lint, type-check, layer contracts, tests.
# This is the README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[test]'
bash tools/install-test-deps.sh
python3 -m tests.build_peers
python3 -m ruff check .
python3 -m mypy nri_api nri_resmgr tests bench
python3 -m mypy plugins.d/*.py examples/plugins/*.py
# by module, not by the lint-imports script: a --user install may leave that off PATH
python3 -c "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
python3 -m pytest "$@"
