"""``policylib check``: the specification's rules for choosing settings, checked against Nodes and workloads."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TextIO

from ..documents import Document
from ..errors import PolicyError
from ..families import HANDLED_SUMMARY, is_not_admitted, is_unhandled_workload
from .cluster import (
    cluster_scope,
    resolve_config,
    served_apis,
    stored_native,
    topology_kept,
    unhandled_workloads,
    workload_api,
)
from .common import EXIT_OK, EXIT_PENDING, AddParser, add_cluster_source, cluster_source_exit_status, json_array, locate
from .inputs import nodes_and_objects

if TYPE_CHECKING:
    from ..check import Finding

NAME = "check"
EXIT_STATUS = cluster_source_exit_status("no finding is an error", pending="a finding is an error")


def add_parser(add: AddParser) -> argparse.ArgumentParser:
    ck = add("check", help="settings advice for these Nodes (and workloads)",
             description="The specification's rules for choosing settings, checked against the Nodes and "
                         "workloads. Exit 3 when a finding is an error, 2 on bad input, 0 otherwise.")
    add_cluster_source(ck, files_required=False, scoped=True)
    ck.add_argument("--node-group-label", metavar="LABEL",
                    help="the Node label naming node groups (default: the first of the common cloud labels present)")
    ck.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return ck


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """The settings advice: findings for this config on these Nodes and workloads."""
    from ..check import Finding, check
    from ..render import table
    config = resolve_config(args, stderr)
    docs: list[Document] = []
    nodes, objects, version = nodes_and_objects(args, stdin, stderr, workloads_from_cluster=True, docs=docs)
    if args.cluster:   # rules W5, W6: the workloads the webhook is sent, as the controller
        admitted = cluster_scope(args, stderr)
        objects = [o for o in objects if admitted(o)]
    api = workload_api(args, config)
    live = bool(args.cluster)
    try:
        findings = check(config, nodes, objects, node_group_label=args.node_group_label, server_version=version,
                         workload_api=api, served_apis=served_apis(args) if live else None,
                         workload_stored=stored_native(args, api) if live else None,
                         topology_kept=topology_kept(args, config, api) if live else None)
    except PolicyError as e:
        raise locate(e, docs) from None
    if args.cluster:   # rule S28: managed Deployments whose pods break their own spread now
        from ..scaledown import cluster_report
        findings += [Finding("warning", "spread-violated", v.message()) for v in cluster_report(objects, nodes)[0]]
    if args.cluster and args.namespace:   # Pods Pending now: only this namespace's workloads
        findings = [f for f in findings if f.key != "pending" or f" {args.namespace}/" in f.message.split(":")[0]]
    unhandled = [o for o in objects if is_unhandled_workload(o)]
    not_admitted: list[dict[str, Any]] = []
    if args.cluster:   # rules P9, P10: in the namespaces and with the labels the webhook configuration selects
        for o in unhandled_workloads(args, stderr):
            if args._scope_selects(o):
                (not_admitted if is_not_admitted(o) else unhandled).append(o)
    findings += unhandled_finding(unhandled) + not_admitted_finding(not_admitted)
    if args.output == "json":
        stdout.write(json_array([f.as_dict() for f in findings]))
    elif findings:
        stdout.write(table([("SEVERITY", "KEY", "MESSAGE")] + [(f.severity, f.key, f.message) for f in findings]))
    else:
        stdout.write("no findings: these settings suit these Nodes\n")
    return EXIT_PENDING if any(f.severity == "error" for f in findings) else EXIT_OK


def unhandled_finding(objects: list[dict[str, Any]]) -> list[Finding]:
    """Rule P9: one ``info`` finding counting the workloads of kinds no family handles, by kind, each named (up to
    five per kind): nothing is checked or written for them, which must not read as nothing to do."""
    from ..check import Finding
    by_kind: dict[str, list[str]] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        by_kind.setdefault(str(obj.get("kind")), []).append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    if not by_kind:
        return []
    kinds = "; ".join(f"{kind} {len(names)} ({_listed(sorted(names))})" for kind, names in sorted(by_kind.items()))
    return [Finding("info", "unhandled", f"{len(objects)} workload(s) of kinds policylib does not handle, left as they "
                                         f"are: {kinds}: policylib has no policy for them ({HANDLED_SUMMARY})")]


def not_admitted_finding(objects: list[dict[str, Any]]) -> list[Finding]:
    """Rule P10: one ``info`` finding counting the cluster's workloads of kinds policylib has a policy for that no
    webhook entry sends, by kind, each named."""
    from ..check import Finding
    if not objects:
        return []
    return [Finding("info", "not-admitted", f"{len(objects)} workload(s) the webhook does not receive, left as they "
                                            f"are: {_by_kind(objects)}: policylib has a policy for them, but no entry of "
                                            "the webhook configuration sends them (preview, simulate and check show what "
                                            "it would write)")]


def _by_kind(objects: list[dict[str, Any]]) -> str:
    by_kind: dict[str, list[str]] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        by_kind.setdefault(str(obj.get("kind")), []).append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    return "; ".join(f"{kind} {len(names)} ({_listed(sorted(names))})" for kind, names in sorted(by_kind.items()))


def _listed(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
