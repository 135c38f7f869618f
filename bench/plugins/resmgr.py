"""Launcher of the real daemon for the benchmarks: `nri-resmgr run` behind the plugin flags.

The harness starts external plugins as ``python FILE --socket S --idx NN --name N ARGS``;
this turns that into ``nri-resmgr run --socket S --plugin-index NN --plugin-name N ARGS``.
Pre-registered (no flags) the daemon takes its identity and fd 3 from the environment.
"""

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from nri_resmgr.cli import main as cli_main

    parser = argparse.ArgumentParser()
    parser.add_argument("--socket")
    parser.add_argument("--idx")
    parser.add_argument("--name")
    known, rest = parser.parse_known_args()
    argv = ["run", *rest]
    for flag, value in (
        ("--socket", known.socket),
        ("--plugin-index", known.idx),
        ("--plugin-name", known.name),
    ):
        if value:
            argv += [flag, value]
    sys.exit(cli_main(argv))
