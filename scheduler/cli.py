"""Command line: `troupe run`, `troupe simulate` and `troupe --version` (also `python -m scheduler ...`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import textwrap
from typing import TYPE_CHECKING

from . import version
from .api.config import ConfigError, SchedulerConfiguration, load_config
from .api.constants import DEFAULT_SCHEDULER_NAME, POD_GROUP_LABEL
from .api.jobs import JOB_POLICY_ANNOTATION
from .api.sources import all_sources, api_versions

if TYPE_CHECKING:
    from .framework.registry import Registry

DESCRIPTION = f"""\
troupe: a gang-aware secondary scheduler for Kubernetes.

Pods opt in with `spec.schedulerName: {DEFAULT_SCHEDULER_NAME}` and join a
PodGroup with the label `{POD_GROUP_LABEL}: <name>`. troupe places a
PodGroup as a whole: a gang binds at least `minCount` pods or none at all, so
two jobs competing for the same room cannot deadlock each other.

A batch/v1 Job needs no PodGroup of its own: with the annotation
`{JOB_POLICY_ANNOTATION}: gang` (or `basic`) in its pod template, troupe
makes its Workload and PodGroup (a gang of the pods it runs at once), owned
by the Job, and the Job's pods join it.

The PodGroups other projects write are read too, where the cluster serves
them. A pod belongs to the group of the first of these group sources that
names one (`groupSources` in --config turns the optional ones off):
"""

DESCRIPTION_END = """
For operators that hard-code a scheduler name (KubeRay): --config
examples/config-ecosystem.yaml adds profiles named after them
(docs/operators.md).
"""


def sources_help(indent: int = 2, width: int = 79) -> str:
    """One entry per group source, in rule order, from the registry."""
    out = []
    for source in all_sources():
        name = f"{source.name}{'' if source.optional else ' (always)'}"
        first = " " * indent + f"{name:<{_NAME_COLUMN}}"
        out.append(
            textwrap.fill(
                source.help,
                width=width,
                initial_indent=first,
                subsequent_indent=" " * (indent + _NAME_COLUMN),
                break_on_hyphens=False,
            )
        )
    return "\n".join(out) + "\n"


_NAME_COLUMN = 20


def _description() -> str:
    return DESCRIPTION + sources_help() + DESCRIPTION_END


RUN_EPILOG = """\
credentials: --kubeconfig FILE if given; else the pod's ServiceAccount when
running in a cluster; else $KUBECONFIG or ~/.kube/config.

Install the CRDs and RBAC first:  kubectl apply -f crds/ -f manifests/
Then watch a group:               kubectl get podgroups.scheduling.troupe.dev
                                  kubectl get podgroups.scheduling.troupe.dev NAME -o jsonpath='{.status.conditions}'
"""

SIMULATE_DESCRIPTION = """\
Place the pods of a YAML file on its nodes with the same scheduler core as
`troupe run`, and print what the cluster would show. No cluster is contacted.

FILE is a multi-document YAML ("-" reads standard input) of ordinary
Kubernetes objects, as you would `kubectl apply` them:
  Node           status.allocatable is its room (cpu, memory, pods, ...)
  Pod            spec.nodeName set: already running, its requests use room;
                 unset: pending, placed if its schedulerName is a profile's
  PodGroup       of any group source troupe reads (`troupe --help` lists
                 them and how pods join), in these apiVersions:
{podgroups};
                 PodGroups of any other API group are skipped with a warning
  DeviceClass, ResourceSlice, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate
                 resource.k8s.io/v1 (DRA): devices are allocated as the
                 scheduler would, and a DEVICES column shows them
  Job            batch/v1, opted in with scheduling.troupe.dev/job-policy:
                 its Workload, PodGroup and the pods it runs at once
  Workload, PriorityClass, Namespace, and `kind: List` wrappers
                 (so `kubectl get ... -o yaml` output works)
Other kinds are skipped with a warning. spec.priorityClassName (and a
globalDefault PriorityClass) is resolved from the file's PriorityClasses, as
Priority admission would. An invalid PodGroup is not an input error: it shows
as SchedulerError, as it would in a cluster.
"""


def _simulate_description() -> str:
    indent = " " * 17
    versions = textwrap.fill(
        ", ".join(api_versions("PodGroup")),
        width=79,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
    )
    return SIMULATE_DESCRIPTION.replace("{podgroups}", versions)


SIMULATE_EPILOG = """\
example:
  $ troupe simulate examples/simulate-two-jobs.yaml
  PODGROUP       POLICY   PODS   PLACED/MIN   CONDITION       MESSAGE
  demo/train-a   gang     4      4/4          Scheduled       4 pod(s) placed
  demo/train-b   gang     4      0/4          Unschedulable   needs 4 pods, 0 fit: ...
  ...
  $ kubectl get nodes,priorityclasses,pods,podgroups -A -o yaml | troupe simulate - --output json
  $ troupe simulate examples/simulate-dra.yaml     # GPUs as DRA claims

exit status: 0 when the simulation ran (even if pods stay unplaced),
2 on bad input or configuration (the message names the document and field).
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="troupe", description=_description(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"troupe {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="schedule pods of a cluster (the scheduler itself)",
        description="Watch the cluster and schedule every pending pod whose schedulerName matches a profile.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig to connect with (default: in-cluster, then $KUBECONFIG)"
    )
    run.add_argument(
        "--config",
        metavar="FILE",
        help="SchedulerConfiguration YAML (profiles, plugins, queue backoff, client QPS); default: one profile "
        f"named {DEFAULT_SCHEDULER_NAME} with the default plugins",
    )
    run.add_argument(
        "--health-bind-address",
        metavar="HOST:PORT",
        help="serve /healthz, /readyz and /metrics here (default: the config's healthBindAddress, 0.0.0.0:10251)",
    )
    run.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run as one of several replicas: only the holder of a coordination.k8s.io Lease schedules, the others "
        "keep their cache warm and take over when it goes (default: the config's leaderElection.leaderElect, off)",
    )
    for flag, what in (
        ("lease-duration", "how long a standby waits on a lease that is not renewed (default 15s)"),
        ("renew-deadline", "a leader that cannot renew for this long stops and exits (default 10s)"),
        ("retry-period", "how often leaders renew and standbys try (default 2s)"),
    ):
        run.add_argument(f"--leader-elect-{flag}", metavar="DURATION", help=what)
    run.add_argument("--leader-elect-resource-namespace", metavar="NS", help="the Lease's namespace (troupe-system)")
    run.add_argument("--leader-elect-resource-name", metavar="NAME", help="the Lease's name (troupe-scheduler)")
    run.add_argument(
        "--resync-seconds",
        type=float,
        default=300.0,
        metavar="S",
        help="every S seconds, list Workloads and PodDisruptionBudgets (metadata only) and drop cached ones the "
        "API no longer has, in case a watch gap hid their deletion (pods, nodes and PodGroups need not: their "
        "informers relist); 0 disables (default: 300)",
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default: info")
    simulate = sub.add_parser(
        "simulate",
        help="place the pods of a YAML file on its nodes, without a cluster",
        description=_simulate_description(),
        epilog=SIMULATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simulate.add_argument("file", metavar="FILE", help="YAML of Nodes, Pods, PodGroups, ... (- for standard input)")
    simulate.add_argument(
        "--config",
        metavar="FILE",
        help="SchedulerConfiguration YAML, as for `troupe run` (default: the default profile)",
    )
    simulate.add_argument(
        "--waited",
        metavar="SECONDS",
        type=float,
        default=0.0,
        help="then give what still waits one more cycle, SECONDS later, as a live cluster would: "
        "with reservations on (the Reservation plugin's starvationSeconds, default 60), shows the room "
        "held for each group that starves (default: 0, no such cycle)",
    )
    simulate.add_argument(
        "--output",
        "-o",
        choices=["table", "json"],
        default="table",
        help="table (default): PodGroups and pods, aligned; json: {pods: [...], podGroups: [...]}",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "simulate":
        return _simulate(args)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kopf").setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("kubernetes_asyncio").setLevel(logging.INFO)  # its DEBUG dumps every response body
    # The CEL bindings warn on every failing function call (once per device); the
    # selector error itself reaches the pod's condition and the log once.
    logging.getLogger("cel").setLevel(logging.ERROR)
    if args.command == "run":
        return _run(args)
    parser.error(f"unknown command {args.command}")
    return 2


def check_config(config: SchedulerConfiguration, registry: Registry) -> None:
    """What `troupe run` checks before it connects anywhere, beyond what
    load_config(path, plugin_args=registry.args_models()) checked: every
    profile builds a Framework (its plugins exist and serve their points).
    Raises ProfileError."""
    from .cluster.cache import ClusterCache
    from .framework.framework import Framework
    from .framework.interface import Handle

    for profile in config.profiles:
        Framework(profile, registry, Handle(ClusterCache()))


def _run(args: argparse.Namespace) -> int:
    # The configuration is checked before the runtime (kopf, kubernetes_asyncio:
    # about a second) is even imported: a bad file exits at once.
    loaded = _load(args.config)
    if loaded is None:
        return 2
    config, registry = loaded
    if args.health_bind_address:
        config.health_bind_address = args.health_bind_address
    overrides = {
        "leaderElect": args.leader_elect,
        "leaseDuration": args.leader_elect_lease_duration,
        "renewDeadline": args.leader_elect_renew_deadline,
        "retryPeriod": args.leader_elect_retry_period,
        "resourceNamespace": args.leader_elect_resource_namespace,
        "resourceName": args.leader_elect_resource_name,
    }
    if any(v is not None for v in overrides.values()):
        from pydantic import ValidationError

        from .api.config import LeaderElection

        merged = {**config.leader_election.model_dump(by_alias=True), **{k: v for k, v in overrides.items() if v}}
        if args.leader_elect is False:
            merged["leaderElect"] = False
        try:
            config.leader_election = LeaderElection.model_validate(merged)
        except ValidationError as exc:
            print(f"troupe: --leader-elect-*: {exc.errors()[0]['msg']}", file=sys.stderr)
            return 2

    try:
        from .runtime.app import run
    except ValueError as exc:  # a bad TROUPE_FAILPOINTS (tests only)
        print(f"troupe: {exc}", file=sys.stderr)
        return 2
    from .runtime.kube import ConnectError
    from .runtime.outage import install_kopf_filter

    install_kopf_filter()  # kopf's per-retry errors become one line per outage
    try:
        return asyncio.run(run(config, registry, args.kubeconfig, resync_seconds=args.resync_seconds))
    except ConnectError as exc:
        print(f"troupe: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _load(path: str | None) -> tuple[SchedulerConfiguration, Registry] | None:
    """The configuration and the plugin registry (in-tree plus entry points),
    checked; None after printing why they cannot be used."""
    from .framework.framework import ProfileError
    from .plugins import in_tree_registry

    try:
        registry = in_tree_registry()
        registry.load_entry_points()
        # The registry's args models: pluginConfig problems come with the file's others.
        config = load_config(path, plugin_args=registry.args_models())
        check_config(config, registry)
    except ProfileError as exc:  # one line per problem, each naming the file
        for line in str(exc).splitlines():
            print(f"troupe: {path or 'default configuration'}: {line}", file=sys.stderr)
        return None
    except (ConfigError, ValueError) as exc:
        print(f"troupe: {exc}", file=sys.stderr)
        return None
    return config, registry


def _simulate(args: argparse.Namespace) -> int:
    from .simulate import InputError, read_input, render_json, render_table, simulate

    # The scheduler's own warnings (e.g. an invalid PodGroup) are reported by
    # the simulation in its words; internal errors still show.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    loaded = _load(args.config)  # a bad profile is reported before the input is read
    if loaded is None:
        return 2
    config, registry = loaded
    try:
        inp = read_input(args.file)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    result = simulate(inp, config, registry, waited=args.waited)
    for warning in result.warnings:
        print(warning, file=sys.stderr)
    sys.stdout.write(render_json(result) if args.output == "json" else render_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
