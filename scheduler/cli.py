"""Command line: `troupe run` (also `python -m scheduler run`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from .api.config import ConfigError, load_config
from .api.constants import DEFAULT_SCHEDULER_NAME, POD_GROUP_LABEL

DESCRIPTION = f"""\
troupe: a gang-aware secondary scheduler for Kubernetes.

Pods opt in with `spec.schedulerName: {DEFAULT_SCHEDULER_NAME}` and join a
PodGroup with the label `{POD_GROUP_LABEL}: <name>`. troupe places a
PodGroup as a whole: a gang binds at least `minCount` pods or none at all, so
two jobs competing for the same room cannot deadlock each other.
"""

RUN_EPILOG = """\
credentials: --kubeconfig FILE if given; else the pod's ServiceAccount when
running in a cluster; else $KUBECONFIG or ~/.kube/config.

Install the CRDs and RBAC first:  kubectl apply -f crds/ -f manifests/
Then watch a group:               kubectl get podgroups
                                  kubectl get podgroup NAME -o jsonpath='{.status.conditions}'
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="troupe", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="schedule pods of a cluster (the scheduler itself)",
        description="Watch the cluster and schedule every pending pod whose schedulerName matches a profile.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig to connect with (default: in-cluster, then $KUBECONFIG)")
    run.add_argument(
        "--config", metavar="FILE",
        help="SchedulerConfiguration YAML (profiles, plugins, queue backoff, client QPS); default: one profile "
        f"named {DEFAULT_SCHEDULER_NAME} with the default plugins",
    )
    run.add_argument(
        "--health-bind-address", metavar="HOST:PORT",
        help="serve /healthz, /readyz and /metrics here (default: the config's healthBindAddress, 0.0.0.0:10251)",
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default: info")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kopf").setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("kubernetes_asyncio").setLevel(logging.INFO)  # its DEBUG dumps every response body
    if args.command == "run":
        return _run(args)
    parser.error(f"unknown command {args.command}")
    return 2


def _run(args: argparse.Namespace) -> int:
    from .framework.framework import Framework, ProfileError
    from .framework.interface import Handle
    from .cluster.cache import ClusterCache
    from .plugins import in_tree_registry
    from .runtime.app import run
    from .runtime.kube import ConnectError

    try:
        config = load_config(args.config)
        if args.health_bind_address:
            config.health_bind_address = args.health_bind_address
        registry = in_tree_registry()
        registry.load_entry_points()
        for profile in config.profiles:  # fail on a bad profile before connecting anywhere
            Framework(profile, registry, Handle(ClusterCache()))
    except (ConfigError, ProfileError, ValueError) as exc:
        print(f"troupe: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(config, registry, args.kubeconfig))
    except ConnectError as exc:
        print(f"troupe: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
