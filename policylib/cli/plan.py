"""``policylib plan``: the writes the controller would make, for a snapshot or the live cluster."""
from __future__ import annotations

import argparse
from typing import TextIO

from ..facts import ClusterFacts
from ..plan import PLANNERS, Write, plan, summarize
from ..shell.files import read_documents
from .cluster import cluster_scope, deployment_pods_and_nodes, planned_objects, resolve_config, workload_api
from .common import (
    CONFIG_HELP,
    DIR_HELP,
    EXIT_OK,
    EXIT_UNPLANNED,
    AddParser,
    add_installed,
    add_kube_version,
    add_recursive,
    cluster_source_exit_status,
    progress,
    write_json_array,
)

NAME = "plan"
EXIT_STATUS = cluster_source_exit_status("success (the planned writes are printed, none is made)")


def add_parser(add: AddParser) -> argparse.ArgumentParser:
    pl = add("plan", help="the writes the controller would make to existing objects",
             description="Plan the controller's writes for a snapshot (kubectl get deploy,hpa -A -o yaml "
                         "works as is) or the live cluster: which Deployments would roll, and why.")
    pl.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("-f", "--filename", metavar="SNAPSHOT", action="append",
                     help="YAML or JSON, multi-document, kind: List; '-' for stdin; " + DIR_HELP + ". Repeatable")
    src.add_argument("--cluster", action="store_true", help="read the live cluster through kubeconfig")
    src.add_argument("-k", "--kustomize", metavar="DIR", action="append",
                     help="the objects kubectl kustomize DIR builds (kubectl or kustomize on PATH); repeatable")
    add_recursive(pl)
    pl.add_argument("--context", help="kubeconfig context (with --cluster)")
    pl.add_argument("-n", "--namespace", help="only this namespace (with --cluster)")
    pl.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (with --cluster; default $KUBECONFIG, "
                                                         "~/.kube/config, or in-cluster)")
    add_installed(pl)
    pl.add_argument("-o", "--output", choices=("table", "json"), default="table",
                    help="table: readable, with counts; json: an array of writes")
    add_kube_version(pl)
    return pl


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """What the controller would write: for a snapshot, or the live cluster (only the objects the
    installed webhook configuration sends to the webhook, as the controller; rules W5, W6)."""
    config = resolve_config(args, stderr)
    only = None
    if args.cluster:
        only = cluster_scope(args, stderr)
        objects = planned_objects(args, config, stderr, progress(stderr))
    else:
        objects = [d.obj for d in read_documents(args.filename, stdin, args.recursive, require_objects=True)]
    facts = ClusterFacts.from_objects(objects)
    facts.workload_api = workload_api(args, config)
    writes = plan(objects, config, planners=PLANNERS, facts=facts, only=only)
    if args.cluster:   # rules S25, S28: spread broken now, costs another manager owns
        from ..scaledown import cluster_report
        pods, nodes = deployment_pods_and_nodes(args)
        violations, notes = cluster_report([o for o in objects if only is None or only(o)] + pods, nodes)
        stderr.writelines([f"policylib: warning: {v.message()}\n" for v in violations] +
                          [f"policylib: note: {n}\n" for n in notes])
    del objects   # the plan is made: what it read can go before the output is written
    if args.output == "json":
        write_json_array(stdout, (w.as_dict() for w in writes))
    else:
        stdout.write(table(writes, getattr(args, "_scope_stopped", "")))
    return EXIT_UNPLANNED if any(w.error for w in writes) else EXIT_OK


def table(writes: list[Write], stopped: str = "") -> str:
    """``-o table``: one row per write, then the counts; ``stopped``: why nothing is in scope (rule W5)."""
    if not writes and stopped:
        return f"no writes: nothing is in the webhook's scope ({stopped})\n" + summarize(writes) + "\n"
    if not writes:
        return "no writes: every object is compliant\n" + summarize(writes) + "\n"
    rows = [("KIND", "NAMESPACE", "NAME", "ROLLOUT", "REASONS")]
    for w in writes:
        rows.append((w.kind, w.namespace, w.name, "error" if w.error else ("yes" if w.rollout else
                                                                ("pending" if w.pending else "no")),
                     "; ".join(w.reasons)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:4])) + "  " + r[4] for r in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n" + summarize(writes) + "\n"
