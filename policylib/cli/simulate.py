"""``policylib simulate``: where every replica would land, and which stay Pending."""
from __future__ import annotations

import argparse
from typing import Any, Sequence, TextIO

from ..documents import Document
from ..errors import InputError, PolicyError, object_ref
from ..facts import is_fact
from .cluster import resolve_config, workload_api
from .common import EXIT_OK, EXIT_PENDING, AddParser, add_cluster_source, cluster_source_exit_status, json_array, locate
from .inputs import nodes_and_objects

NAME = "simulate"
EXIT_STATUS = cluster_source_exit_status("every replica is placed", pending="some replica would stay Pending")


def add_parser(add: AddParser) -> argparse.ArgumentParser:
    sm = add("simulate", help="where every replica would land, and which stay Pending",
             description="Place each workload's effective replica count on the Nodes as kube-scheduler's "
                         "filters would, after policylib's mutation. Exit 0 when every replica is placed, "
                         "3 when some would stay Pending, 2 on bad input.")
    add_cluster_source(sm, files_required=True)
    sm.add_argument("-o", "--output", choices=("table", "json", "svg"), default="table",
                    help="table (default), json, or svg: a bar chart per workload")
    sm.add_argument("--scale", metavar="NAME=N", action="append",
                    help="scale Deployment NAME (or NAMESPACE/NAME) to N: which of its bound pods the ReplicaSet "
                         "controller removes, without and with policylib's pod deletion costs; or StatefulSet NAME: "
                         "the pods of its highest ordinals; or LeaderWorkerSet NAME to N groups: its highest groups, "
                         "leaders and workers (repeatable)")
    return sm


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """Where every replica would land, and which stay Pending."""
    from ..render import placements_svg, placements_table
    from ..simulate import simulate
    config = resolve_config(args, stderr)
    docs: list[Document] = []
    nodes, objects, _ = nodes_and_objects(args, stdin, stderr, docs=docs)
    if args.scale:   # rule S26: the ReplicaSet or StatefulSet controller's victims
        from ..scaledown import scale_report
        stdout.write(scale_report(args.scale, objects, nodes, config.zoneTopologySpread.topologyKey, args.output))
        return EXIT_OK
    try:
        placements = simulate(objects, nodes, config, workload_api=workload_api(args, config))
    except PolicyError as e:
        raise locate(e, docs) from None
    for obj in not_simulated(objects):
        stderr.write(f"policylib: not simulated: {object_ref(obj)}: kind {obj.get('kind')} (simulate places "
                     "Deployments, StatefulSets, LeaderWorkerSets, Volcano Jobs, Kubeflow jobs, JobSets and TrainJobs)\n")
    if not placements:
        raise InputError(f"no Deployment, StatefulSet, LeaderWorkerSet, Volcano Job, Kubeflow job, JobSet or TrainJob in "
                         f"{', '.join(args.filename)}")
    if args.output == "json":
        stdout.write(json_array([p.as_dict() for p in placements]))
    elif args.output == "svg":
        stdout.write(placements_svg(placements))
    else:
        stdout.write(placements_table(placements))
    return EXIT_PENDING if any(p.pending_max for p in placements) else EXIT_OK


def not_simulated(objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workloads ``simulate`` does not place: anything but Deployments, StatefulSets, LeaderWorkerSets, the gang
    kinds of :data:`~policylib.simulate.gangs.GANG_MODELS` (Volcano Jobs, Kubeflow jobs, JobSets, TrainJobs) and the
    context it reads (Pods as load, HPAs, PodGroups, runtimes, PersistentVolumeClaims and PersistentVolumes: rule A8)."""
    from ..lws.model import is_leaderworkerset
    from ..simulate.gangs import gang_model
    from ..spread import is_spread_workload
    from ..statefulset import is_claim, is_volume
    return [o for o in objects if isinstance(o, dict) and not (is_spread_workload(o) or gang_model(o) is not None
                                                                or is_leaderworkerset(o)
                                                                or is_fact(o) or is_claim(o) or is_volume(o)
                                                                or o.get("kind") in ("Pod", "Node"))]
