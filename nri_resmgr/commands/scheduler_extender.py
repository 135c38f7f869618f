"""`nri-resmgr scheduler-extender`: a kube-scheduler extender placing pods by NUMA zones.

Theory of operation: reads every node's NodeResourceTopology object (list and watch,
`nri_resmgr.scheduler.server.NrtCache`) and answers kube-scheduler's ``filter`` and
``prioritize`` calls (`nri_resmgr.scheduler.fit`): a Guaranteed pod goes only where a
NUMA zone (or the node's declared alignment scope) holds its exclusive CPUs and pinned
memory; nodes are scored by ``--strategy``.  Credentials: ``--kubeconfig`` (or
$KUBECONFIG), else the in-cluster service account.  Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import sys

NAME = "scheduler-extender"
HELP = "serve a kube-scheduler extender that admits pods by the nodes' NUMA zones"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default=":8888", help="HOST:PORT to serve (default :8888)")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default $KUBECONFIG, else in-cluster)"
    )
    parser.add_argument(
        "--strategy",
        choices=["least-allocated", "most-allocated"],
        default="least-allocated",
        help="prefer the node left emptiest (spread) or fullest (pack)",
    )


def run(args: argparse.Namespace) -> int:
    # imported here: the parser of every command is built for `nri-resmgr --help`
    import asyncio
    import signal
    import threading

    from nri_resmgr.kube.client import KubeClient, in_cluster_credentials, load_kubeconfig
    from nri_resmgr.ops.log_config import LogConfig
    from nri_resmgr.ops.logs import configure_logging, get_logger
    from nri_resmgr.scheduler.fit import Strategy
    from nri_resmgr.scheduler.server import ExtenderMetrics, NrtCache, serve

    # the daemon's log lines: JSON unless stderr is a terminal (a log collector reads them)
    configure_logging(LogConfig())
    log = get_logger("scheduler-extender")
    host, _, port = args.listen.rpartition(":")
    try:
        port_number = int(port)
    except ValueError:
        print(f"nri-resmgr {NAME}: --listen {args.listen!r}: expected HOST:PORT", file=sys.stderr)
        return 2
    path = args.kubeconfig or os.environ.get("KUBECONFIG")
    creds = load_kubeconfig(path) if path else in_cluster_credentials()
    if creds is None:
        print(f"nri-resmgr {NAME}: no credentials (--kubeconfig or in-cluster)", file=sys.stderr)
        return 2
    cache = NrtCache(KubeClient(creds), log=log)
    stop = threading.Event()
    watcher = threading.Thread(target=cache.run_blocking, args=(stop,), daemon=True)
    watcher.start()

    async def main() -> None:
        server = await serve(
            cache.offers,
            host=host or "0.0.0.0",
            port=port_number,
            strategy=Strategy(args.strategy),
            log=log,
            metrics=ExtenderMetrics(),
        )
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, done.set)
        log.info("scheduler extender serving", listen=args.listen, strategy=args.strategy)
        async with server:
            await done.wait()

    try:
        asyncio.run(main())
    finally:
        stop.set()
    return 0
