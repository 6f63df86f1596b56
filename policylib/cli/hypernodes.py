"""``policylib hypernodes``: the HyperNodes Volcano's label discovery would build from Nodes."""
from __future__ import annotations

import argparse
from typing import Any, Sequence, TextIO

from ..constants import HYPERNODE_API_VERSION
from ..documents import dump_yaml
from ..errors import InputError
from ..hypernodes import discover_hypernodes, render_tree
from ..shell.files import load_config, read_documents
from .common import DIR_HELP, EXIT_ERROR, EXIT_OK, AddParser, add_recursive

NAME = "hypernodes"
EXIT_STATUS = {EXIT_OK: "success",
               EXIT_ERROR: "bad input or config, or no Node carries the configured tier labels"}


def add_parser(add: AddParser) -> argparse.ArgumentParser:
    h = add("hypernodes", help="build the HyperNodes Volcano's label discovery makes from Nodes",
            usage="policylib hypernodes [-h] -f NODES [-f NODES ...] [-R] --config FILE [-o {yaml,tree}]",
            description=f"Build the {HYPERNODE_API_VERSION} HyperNodes that Volcano's label "
                        "discovery would build from these Nodes, with stable names. --config is "
                        "required: there is no default discovery (the topology labels are the "
                        "cluster's own). Exit 2 when no Node carries the configured labels.")
    h.add_argument("-f", "--filename", metavar="NODES", action="append", required=True,
                   help="Nodes as YAML or JSON (kubectl get nodes -o yaml works); '-' for stdin; " + DIR_HELP +
                        ". Repeatable")
    add_recursive(h)
    h.add_argument("--config", metavar="FILE", help="required: a config with volcano.networkTopologyDiscovery "
                                                    "(an enabled 'label' source)")
    h.add_argument("-o", "--output", choices=("yaml", "tree"), default="yaml",
                   help="yaml: HyperNode objects; tree: the hierarchy for people")
    return h


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """The HyperNodes Volcano's label discovery would build from the Nodes given."""
    if args.config is None:
        raise InputError("hypernodes needs --config FILE: without it there is no enabled 'label' source in "
                         "volcano.networkTopologyDiscovery (Volcano's default_controller_conf list; "
                         "docs/specification.md rule H1)")
    config = load_config(args.config)
    sources = [s for s in config.volcano.networkTopologyDiscovery if s.source == "label" and s.enabled]
    if not sources:
        raise InputError("no enabled 'label' source in volcano.networkTopologyDiscovery; set it in --config "
                         "(Volcano's default_controller_conf list; docs/specification.md rule H1)")
    nodes = []
    for d in read_documents(args.filename, stdin, args.recursive, require_objects=True):
        if d.obj.get("kind") == "Node" and d.obj.get("apiVersion") == "v1":
            meta = d.obj.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or \
                    not isinstance(meta.get("labels") or {}, dict):
                raise InputError(f"{d.source}: document {d.index}: a Node needs metadata.name and a labels map")
            nodes.append(d.obj)
    if not nodes:
        raise InputError(f"{', '.join(args.filename)}: no v1 Node objects found")
    built = discover_hypernodes(nodes, sources)
    if not built:
        raise InputError(f"{', '.join(args.filename)}: {_no_topology_labels(sources)}")
    if args.output == "tree":
        stdout.write(render_tree(built))
    else:
        stdout.write("---\n".join(dump_yaml(h) for h in built))
    return EXIT_OK


def _no_topology_labels(sources: Sequence[Any]) -> str:
    """Why label discovery built nothing: no Node has the tier-1 label of any topology."""
    looked = []
    for source in sources:
        for topology, keys in source.topologies:
            tiers = keys[:-1]
            looked.append(f"{topology}: {', '.join(tiers)} (discovery starts at {tiers[-1]})" if tiers
                          else f"{topology}: only the node level {', '.join(keys)}")
    return ("no HyperNodes: no Node carries the topology labels of volcano.networkTopologyDiscovery; looked for "
            + "; ".join(looked))
