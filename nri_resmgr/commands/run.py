"""`nri-resmgr run`: the daemon (an NRI plugin) on this node."""

from __future__ import annotations

import argparse
import sys

from nri_resmgr.model import ResmgrError

NAME = "run"
HELP = "run the resource manager as an NRI plugin (external or pre-registered)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", help="policy name (overrides the config's 'policy')")
    parser.add_argument("--config", help="configuration file (YAML or JSON)")
    parser.add_argument(
        "--socket",
        help="NRI socket path (default /var/run/nri/nri.sock; ignored when "
        "started by the runtime with the socket on fd 3)",
    )
    parser.add_argument(
        "--plugin-index", help="two-digit plugin index (default $NRI_PLUGIN_IDX or 90)"
    )
    parser.add_argument("--plugin-name", help="plugin name (default $NRI_PLUGIN_NAME or resmgr)")
    parser.add_argument(
        "--sysfs-root",
        help="root directory holding sys/ and proc/ (interrupt affinities) (default /)",
    )
    parser.add_argument(
        "--topology", help="use this topology instead of discovery (spec, file or archive)"
    )
    parser.add_argument("--resctrl-root", help="resctrl mount point (default /sys/fs/resctrl)")
    parser.add_argument("--cgroup-root", help="cgroup v2 mount point (default /sys/fs/cgroup)")
    parser.add_argument(
        "--state-dir", help="where ownership records live (default /var/lib/nri-resmgr)"
    )
    parser.add_argument(
        "--log-file", help="log to this file (pre-registered plugins have no stdout)"
    )
    kube = parser.add_argument_group(
        "Kubernetes",
        "configuration objects (live reload) and node reports; off without a node name",
    )
    kube.add_argument("--node-name", help="this node's name (default $NODE_NAME)")
    kube.add_argument(
        "--namespace",
        help="namespace of the configuration ConfigMaps (default $POD_NAMESPACE or kube-system)",
    )
    kube.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, else in-cluster)")
    kube.add_argument(
        "--node-resource-topology",
        action="store_true",
        help="write this node's NodeResourceTopology object",
    )
    kube.add_argument(
        "--pod-resources-socket",
        metavar="PATH",
        help="the kubelet's PodResources socket, for the devices it gives containers "
        "(its root dir's pod-resources/kubelet.sock, usually "
        "/var/lib/kubelet/pod-resources/kubelet.sock; default: not asked)",
    )
    kube.add_argument(
        "--report-interval",
        type=float,
        default=30.0,
        help="seconds between node reports (default 30)",
    )


def run(args: argparse.Namespace) -> int:
    import os

    from nri_resmgr.runtime.daemon import DEFAULT_PLUGIN_INDEX, DEFAULT_PLUGIN_NAME
    from nri_resmgr.runtime.process import DaemonOptions, main

    name = args.plugin_name or os.environ.get("NRI_PLUGIN_NAME") or DEFAULT_PLUGIN_NAME
    idx = args.plugin_index or os.environ.get("NRI_PLUGIN_IDX") or DEFAULT_PLUGIN_INDEX
    options = DaemonOptions(
        policy=args.policy,
        config_path=args.config,
        socket_path=args.socket,
        plugin_index=idx,
        plugin_name=name,
        sysfs_root=args.sysfs_root,
        topology=args.topology,
        resctrl_root=args.resctrl_root,
        cgroup_root=args.cgroup_root,
        state_dir=args.state_dir,
        log_file=args.log_file,
        node_name=args.node_name or os.environ.get("NODE_NAME") or None,
        namespace=args.namespace or os.environ.get("POD_NAMESPACE") or "kube-system",
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        node_resource_topology=args.node_resource_topology,
        report_interval=args.report_interval,
        pod_resources_socket=args.pod_resources_socket,
    )
    try:
        return main(options)
    except (ResmgrError, ValueError, TypeError) as exc:
        print(f"nri-resmgr run: {exc}", file=sys.stderr)
        return 2
