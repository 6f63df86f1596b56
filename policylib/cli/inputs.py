"""Where the commands' objects come from besides the cluster: ``-f`` files and directories, ``-k``
overlays, ``--nodes``."""
from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..documents import Document
from ..errors import InputError, PolicyError
from ..facts import is_hypernode
from ..hypernodes import check_hypernodes
from ..nodes import check_nodes
from ..shell.files import read_documents
from .cluster import live
from .common import locate, progress

#: The commands that need objects from -f or -k (or, where they take it, --cluster).
NEED_OBJECTS = ("preview", "plan", "simulate")


def kustomize_sources(args: argparse.Namespace, stderr: TextIO) -> None:
    """``-k DIR``: build the overlay and read its output as one more ``-f`` file; ``-R`` over a tree
    holding a kustomization says it reads the raw files."""
    from ..shell.kustomize import build, kustomize_trees
    if getattr(args, "recursive", False) and getattr(args, "filename", None):
        for tree in kustomize_trees(args.filename):
            stderr.write(f"policylib: note: -R reads the raw files under {tree}, not the overlay its kustomization "
                         f"builds; use -k {tree} for what kubectl apply -k sends\n")
    for directory in getattr(args, "kustomize", None) or []:
        args.filename = (args.filename or []) + [build(directory)]
    if hasattr(args, "kustomize") and args.command in NEED_OBJECTS and not args.filename \
            and not getattr(args, "cluster", False):
        raise InputError("give -f FILE or -k DIR")


def is_node(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Node" and obj.get("apiVersion") == "v1"


def nodes_and_objects(args: argparse.Namespace, stdin: TextIO, stderr: TextIO, workloads_from_cluster: bool = False,
                      docs: list[Document] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """Nodes and other objects from ``-f``, ``--nodes`` and the cluster; the documents read
    are appended to ``docs`` (to name the file of an object an error is about)."""
    files = read_documents(args.filename or [], stdin, args.recursive)
    node_files = read_documents(args.nodes or [], stdin, args.recursive)
    if docs is not None:
        docs += files + node_files
    objects = [d.obj for d in files]
    nodes = [o for o in objects if is_node(o)] + [d.obj for d in node_files if is_node(d.obj)]
    from ..simulate import is_bound_pod
    objects += [d.obj for d in node_files if is_bound_pod(d.obj)]   # pods bound to those Nodes count as load
    version = None
    if args.cluster:
        live_nodes, live_objects, version = live(args, stderr, workloads_from_cluster, progress(stderr))
        nodes += live_nodes
        objects += live_objects
    if not nodes:
        raise InputError("no Nodes: give --nodes FILE (kubectl get nodes -o yaml), Nodes among -f, or --cluster")
    try:
        check_nodes(nodes)   # a Node is validated like any object, naming its file
        check_hypernodes(o for o in objects if is_hypernode(o))   # so is a HyperNode (rule V26)
    except PolicyError as e:
        raise locate(e, files + node_files) from None
    return nodes, [o for o in objects if not is_node(o)], version
