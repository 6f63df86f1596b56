"""``policylib`` command line: dry-run previews of what the webhook would do.

``policylib --version``

``policylib preview [--config FILE] -f FILE [-f FILE ...] [-R] [--old FILE]
[-o yaml|patch|patch-list|diff] [--exit-code]``

``policylib hypernodes -f NODES.yaml [-R] --config FILE [-o yaml|tree]``

``policylib plan [--config FILE] (-f SNAPSHOT ... [-R] | --cluster [--context C]
[--namespace NS]) [-o table|json]``

``-f`` takes a file, ``-`` (stdin) or a directory: every ``*.yaml``, ``*.yml``
and ``*.json`` file in it, sorted by name; ``-R`` also walks its
subdirectories, as kubectl does.

This module is the imperative shell: it reads files, calls the pure policy
functions and prints. User errors print one line on stderr and exit 2 (input
with no Kubernetes objects is one); with ``--exit-code`` the exit status is 1
when any object would change (like ``kubectl diff``), 4 when a warning was printed
(an unknown field, an HPA whose target is not in the input, a softened required
anti-affinity...), and 3 when an object it returns would still be denied by
Volcano's job admission.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any, Callable, Iterable, Sequence, TextIO, cast

from . import __version__
from .config import Config
from .documents import Document, dump_yaml
from .errors import InputError, PolicyError, PolicylibError, object_ref
from .facts import ClusterFacts, is_fact, namespace_of
from .hypernodes import discover_hypernodes, render_tree
from .mutate import mutate
from .nodes import check_nodes
from .order import apply_order_note, stored_in_order
from .plan import PLANNERS, Write, plan, summarize
from .projection import project, strip
from .result import Result
from .shell.files import (  # noqa: F401 -- CLI names
    MANIFEST_EXTENSIONS,
    load_config,
    load_config_file,
    load_config_text,
    read_documents,
    source_files,
)

EXIT_OK, EXIT_CHANGED, EXIT_ERROR, EXIT_DENIED = 0, 1, 2, 3
#: ``preview --exit-code``: a warning was printed (rule D4), and nothing was denied.
EXIT_WARNED = 4


def _refs(obj: dict[str, Any]) -> set[str]:
    """The ways errors name ``obj``: with its namespace as written, and defaulted."""
    return {object_ref(obj), object_ref(obj, namespace_of(obj))}


def locate(error: PolicyError, docs: Sequence[Document], default: str | None = None) -> PolicylibError:
    """``error`` prefixed with the file of the object it names (an HPA in another
    file than the Deployment it targets), else with ``default``."""
    sources = list(dict.fromkeys(d.source for d in docs if error.obj_ref in _refs(d.obj)))
    where = ", ".join(sources) or default
    return InputError(f"{where}: {error}") if where else error


def identity(obj: dict[str, Any]) -> tuple[Any, ...]:
    """Identity of an object for matching ``--old``: kind, namespace, name."""
    meta = obj.get("metadata") or {}
    return obj.get("kind"), namespace_of(obj), meta.get("name")


def _diff_text(before: dict[str, Any], after: dict[str, Any], label: str) -> str:
    lines = difflib.unified_diff(dump_yaml(before).splitlines(keepends=True),
                                 dump_yaml(after).splitlines(keepends=True),
                                 fromfile=f"a/{label}", tofile=f"b/{label}")
    return "".join(lines)


def _added_text(obj: dict[str, Any], label: str) -> str:
    """A new object as a unified diff from nothing, as git shows an added file."""
    lines = difflib.unified_diff([], dump_yaml(obj).splitlines(keepends=True), fromfile="/dev/null",
                                 tofile=f"b/{label}")
    return "".join(lines)


def patch_list_entries(doc: Document, result: Result) -> list[dict[str, Any]]:
    """``-o patch-list``: the object's entry, then one per extra object the policy creates,
    whose patch adds the whole object (``path: ""``) to nothing."""
    entries = [{"object": object_ref(doc.obj), "patch": result.patch}]
    for extra in result.extra_objects:
        entries.append({"object": object_ref(extra), "patch": [{"op": "add", "path": "", "value": extra}]})
    return entries


def _format(doc: Document, result: Result, output: str) -> str:
    if output == "patch":
        return json.dumps(result.patch, separators=(",", ":")) + "\n"
    if output == "diff":
        label = object_ref(doc.obj)
        body = _diff_text(doc.obj, result.object, label) if result.changed else f"= {label}: unchanged\n"
        body += "".join(_added_text(extra, object_ref(extra)) for extra in result.extra_objects)
        return body + "".join(f"# {r}\n" for r in result.reasons)
    text = dump_yaml(result.object)
    for extra in result.extra_objects:
        text += "---\n" + dump_yaml(extra)
    return text


def preview(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """What the webhook would do to the input: the objects on stdout; warnings about the input (rules D1, D2)
    and the policies', notes (D3) on stderr; the exit status of rule D4."""
    config = load_config(args.config)
    docs = read_documents(args.filename, stdin, args.recursive, require_objects=True)
    facts = ClusterFacts.from_objects(d.obj for d in docs)
    olds = {}
    if args.old:
        olds = {identity(d.obj): d.obj for d in read_documents([args.old], stdin, args.recursive)}
    fact_docs = [d for d in docs if is_fact(d.obj)]
    outputs, entries, changed, denied, rejected = [], [], False, False, False
    ordered = [d.obj for d in docs]
    input_warnings = _input_warnings(docs)
    warned = bool(input_warnings)
    for position, doc in enumerate(docs):
        for w in input_warnings.get(id(doc), []):
            stderr.write(f"policylib: warning: {doc.source}: {object_ref(doc.obj)}: {w}\n")
        if is_fact(doc.obj):
            continue
        result = _mutate_document(doc, config, facts, olds.get(identity(doc.obj)), fact_docs)
        warned = warned or bool(result.warnings)
        changed = changed or result.changed
        note = None if args.old else apply_order_note(ordered, position, config)
        if note:
            result = stored_in_order(ordered, position, config) or result   # OnNextRollout: what is stored
            stderr.write(f"policylib: note: {doc.source}: {object_ref(doc.obj)}: {note}\n")
        for problem in scheduler_admission_errors(result.object, config):
            rejected = True
            stderr.write(f"policylib: warning: {doc.source}: {object_ref(doc.obj)}: would still be denied by Volcano's "
                         f"job admission ({config.volcano.version}): {problem}\n")
        if result.denial:
            denied = True
            stderr.write(f"policylib: denied: {doc.source}: {object_ref(doc.obj)}: {result.denial}\n")
        for w in result.warnings:
            stderr.write(f"policylib: warning: {doc.source}: {object_ref(doc.obj)}: {w}\n")
        gang_note = _gang_note(doc.obj, result, config)
        if gang_note:
            stderr.write(f"policylib: note: {doc.source}: {object_ref(doc.obj)}: {gang_note}\n")
        if args.verbose:
            for r in result.reasons:
                stderr.write(f"policylib: {doc.source}: {object_ref(doc.obj)}: {r}\n")
        if args.output == "patch-list":
            entries += patch_list_entries(doc, result)
        elif args.output == "json":
            entries += [result.object, *result.extra_objects]
        else:
            outputs.append(_format(doc, result, args.output))
    if args.output in ("patch-list", "json"):
        stdout.write(json_array(entries))
    else:
        separator = "---\n" if args.output == "yaml" else ""
        stdout.write(separator.join(outputs))
    if denied or (args.exit_code and rejected):
        return EXIT_DENIED
    if args.exit_code and warned:
        return EXIT_WARNED
    return EXIT_CHANGED if (args.exit_code and changed) else EXIT_OK


def _input_warnings(docs: Sequence[Document]) -> dict[int, list[str]]:
    """Rules D1 and D2: per document (by ``id``), the warnings about the input itself: an HPA whose target
    is not in the input, fields the Kubernetes API does not declare."""
    from .notices import hpa_target_warnings, schema_key, unknown_field_warning, unknown_fields
    from .shell import schemas
    out: dict[int, list[str]] = {}
    by_obj = {id(d.obj): d for d in docs}
    for doc in docs:
        key = schema_key(doc.obj)
        schema = schemas.kind_schema(*key) if key else None
        if schema is None:
            continue
        paths = unknown_fields(doc.obj, schema, schemas.definitions())
        if paths:
            out.setdefault(id(doc), []).append(unknown_field_warning(paths, schemas.kubernetes_version(), schema,
                                                                     schemas.definitions()))
    for hpa, message in hpa_target_warnings([d.obj for d in docs]):
        out.setdefault(id(by_obj[id(hpa)]), []).append(message)
    return out


def _gang_note(obj: dict[str, Any], result: Result, config: Config) -> str | None:
    """Rule D3: a Kubeflow job that got gang metadata for a scheduler its templates do not name."""
    from .gang.keys import is_kubeflow_job
    from .notices import gang_scheduler_note
    if not is_kubeflow_job(obj) or not (result.changed or result.extra_objects) or result.denial:
        return None
    try:
        return gang_scheduler_note(obj, config.gang.scheduler)
    except PolicyError:
        return None   # the policy reported what it could not read


def scheduler_admission_errors(obj: dict[str, Any], config: Config) -> list[str]:
    """What the scheduler's own admission would still deny in an object policylib returns (Volcano Jobs:
    the ported job admission rules, for ``volcano.version``)."""
    from .validation import validate_volcano_job
    from .volcano import is_volcano_job
    if not isinstance(obj, dict) or not is_volcano_job(obj):
        return []
    return [str(e) for e in validate_volcano_job(obj, config.volcano.version)]


def _mutate_document(doc: Document, config: Config, facts: ClusterFacts, old: dict[str, Any] | None,
                     fact_docs: Sequence[Document] = ()) -> Result:
    try:
        return mutate(doc.obj, config, old=old, facts=facts)
    except PolicyError as e:
        # The error names the object at fault: this one, or a fact it read (an HPA), whose file it was.
        if e.obj_ref in _refs(doc.obj):
            raise InputError(f"{doc.source}: {e}") from None
        raise locate(e, fact_docs, default=doc.source) from None


def hypernodes(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
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


def json_array(items: list[dict[str, Any]]) -> str:
    """A JSON array with one compact object per line: valid JSON, greppable, and fast
    (the C encoder; ``indent`` falls back to the slow pure-Python one)."""
    if not items:
        return "[]\n"
    return "[\n" + ",\n".join(json.dumps(i, separators=(",", ":")) for i in items) + "\n]\n"


def write_json_array(out: TextIO, items: Iterable[dict[str, Any]]) -> None:
    """:func:`json_array`'s output, written item by item: a plan of a big cluster never holds its whole
    output as one string."""
    first = True
    for item in items:
        out.write(("[\n" if first else ",\n") + json.dumps(item, separators=(",", ":")))
        first = False
    out.write("[]\n" if first else "\n]\n")


def _progress(stderr: TextIO) -> Callable[[str, int], None]:
    """A one-line progress indicator on stderr (redrawn in place on a terminal)."""
    tty = stderr.isatty()

    def show(what: str, count: int) -> None:
        stderr.write(f"\rlisting {what}: {count}" + ("" if tty else "\n"))
        stderr.flush()
    return show


def _table(writes: list[Write]) -> str:
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


def resolve_config(args: argparse.Namespace, stderr: TextIO) -> Config:
    """Rule C10: the config a command uses. ``--config`` (a configuration or the chart's values file, rule
    C9); else, with ``--cluster``, the installed one the controller reads (its ConfigMap, found by the
    chart's labels, or of ``--release``); else the defaults. With ``--cluster`` one stderr line says which."""
    cached = getattr(args, "_config", None)
    if cached is not None:
        return cast(Config, cached)
    cluster = getattr(args, "cluster", False)
    release_namespace = None
    if args.config is not None:
        config, what = load_config_file(args.config)
    elif cluster:
        from .shell import kube
        try:
            api = kube.Api(kube.api_client(args.context, args.kubeconfig))
            found, where = kube.installed_config(api, getattr(args, "release", None), args.namespace)
        except ValueError as e:
            raise InputError(str(e)) from None
        except Exception as e:  # config, network or API errors: one clear line
            raise InputError(f"cannot read the cluster: {e}") from None
        if found is None:
            if getattr(args, "release", None):
                raise InputError(f"{where}: check the name (helm list -A), or give --config FILE")
            config, what = load_config(None), f"the defaults ({where}; give --config FILE to use another)"
        else:
            text = (found.get("data") or {}).get(kube.CONFIG_KEY)
            if text is None:
                raise InputError(f"ConfigMap {where}: no {kube.CONFIG_KEY} key: give --config FILE")
            config, _ = load_config_text(text, f"ConfigMap {where}")
            release_namespace = where.split("/")[0]
            what = f"ConfigMap {where} (the installed controller's)"
    else:
        config, what = load_config(None), "the defaults"
    if cluster:
        stderr.write(f"policylib: config: {what}\n")
    args._config, args._release_namespace = config, release_namespace
    return config


def cluster_scope(args: argparse.Namespace, stderr: TextIO) -> Callable[[dict[str, Any]], bool]:
    """Rules W5, W6 for ``--cluster``: whether the installed webhook configuration sends an object to the
    webhook (never in the release's namespace); one stderr line says which configuration was read."""
    from .scope import RESOURCES
    from .shell import kube
    try:
        api = kube.Api(kube.api_client(args.context, args.kubeconfig))
        scope, labels = kube.installed_scope(api, args.webhook_configuration, getattr(args, "_release_namespace", None))
    except PolicylibError:
        raise
    except Exception as e:  # config, network or API errors: one clear line
        raise InputError(f"cannot read the cluster: {e}") from None
    stderr.write(f"policylib: scope: {scope.source}; never namespace(s) {', '.join(sorted(scope.excluded_namespaces))}\n")

    def admitted(obj: dict[str, Any]) -> bool:
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        if (group, obj.get("kind")) not in RESOURCES or obj.get("kind") == "Pod":
            return True   # context (HPAs, PodGroups, Pods as load): read whatever the scope
        return bool(scope.admits(obj, labels))
    return admitted


def plan_command(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """What the controller would write: for a snapshot, or the live cluster (only the objects the
    installed webhook configuration sends to the webhook, as the controller; rules W5, W6)."""
    config = resolve_config(args, stderr)
    only = None
    if args.cluster:
        only = cluster_scope(args, stderr)
        # The one network edge of the CLI, in the webhook package: policylib itself does no I/O.
        from .shell import kube
        try:
            api = kube.Api(kube.api_client(args.context, args.kubeconfig))
            objects = kube.snapshot(api, args.namespace, resources=kube.snapshot_resources(config),
                                    progress=_progress(stderr), project=project, limit=kube.PROJECTED_PAGE)
        except Exception as e:  # config, network or API errors: one clear line
            raise InputError(f"cannot read the cluster: {e}") from None
        if stderr.isatty():
            stderr.write("\n")
    else:
        objects = [d.obj for d in read_documents(args.filename, stdin, args.recursive, require_objects=True)]
    writes = plan(objects, config, planners=PLANNERS, only=only)
    if args.cluster:   # rules S25, S28: spread broken now, costs another manager owns
        from .scaledown import cluster_report, project_pod
        try:
            pods = kube.snapshot(api, args.namespace, resources=(kube.DEPLOYMENT_PODS,), project=project_pod)
            nodes = kube.snapshot(api, resources=(kube.NODES,), project=strip)
        except Exception as e:  # network or API errors: one clear line
            raise InputError(f"cannot read the cluster: {e}") from None
        violations, notes = cluster_report([o for o in objects if only is None or only(o)] + pods, nodes)
        stderr.writelines([f"policylib: warning: {v.message()}\n" for v in violations] +
                          [f"policylib: note: {n}\n" for n in notes])
    del objects   # the plan is made: what it read can go before the output is written
    if args.output == "json":
        write_json_array(stdout, (w.as_dict() for w in writes))
    else:
        stdout.write(_table(writes))
    return EXIT_UNPLANNED if any(w.error for w in writes) else EXIT_OK


#: ``plan``: an object could not be planned (its entry says why); the other writes are printed.
EXIT_UNPLANNED = 1


EXIT_PENDING = 3


def _live(args: argparse.Namespace, stderr: TextIO, workloads: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Nodes, bound Pods (and, for ``workloads``, what ``plan`` reads) and the version of the live cluster."""
    from .shell import kube  # the CLI's network edge, in the shell: policylib itself does no I/O
    resources = kube.snapshot_resources(resolve_config(args, stderr))
    try:
        api = kube.Api(kube.api_client(args.context, args.kubeconfig))
        page = kube.PROJECTED_PAGE
        nodes = kube.snapshot(api, resources=(kube.NODES,), project=strip, limit=page)
        pods = kube.snapshot(api, resources=(kube.PODS,), project=strip, limit=page)   # every Pod loads the Nodes
        objects = kube.snapshot(api, args.namespace, resources=resources,
                                progress=_progress(stderr), project=strip, limit=page) if workloads else []
        version = kube.server_version(api)
    except Exception as e:  # config, network or API errors: one clear line
        raise InputError(f"cannot read the cluster: {e}") from None
    return nodes, pods + objects, version


def _workload_api_served(args: argparse.Namespace) -> bool:
    """Whether the live cluster serves scheduling.k8s.io/v1alpha2 (its discovery document answers; rule G20)."""
    from .shell import kube
    try:
        api = kube.Api(kube.api_client(args.context, args.kubeconfig))
        found = api.request("GET", f"/apis/{kube.WORKLOADS.group}/{kube.WORKLOADS.version}")
    except kube.NotFound:
        return False
    except Exception as e:  # config, network or API errors: one clear line
        raise InputError(f"cannot read the cluster: {e}") from None
    return any(isinstance(r, dict) and r.get("name") == kube.WORKLOADS.plural for r in (found or {}).get("resources") or [])


def _served_apis(args: argparse.Namespace) -> list[str]:
    """``group/version`` of every API group the live cluster serves (its ``/apis`` discovery document)."""
    from .shell import kube
    try:
        return kube.served_api_groups(kube.Api(kube.api_client(args.context, args.kubeconfig)))
    except Exception as e:  # config, network or API errors: one clear line
        raise InputError(f"cannot read the cluster: {e}") from None


def _nodes_and_objects(args: argparse.Namespace, stdin: TextIO, stderr: TextIO, workloads_from_cluster: bool = False,
                       docs: list[Document] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """Nodes and other objects from ``-f``, ``--nodes`` and the cluster; the documents read
    are appended to ``docs`` (to name the file of an object an error is about)."""
    files = read_documents(args.filename or [], stdin, args.recursive)
    node_files = read_documents(args.nodes or [], stdin, args.recursive)
    if docs is not None:
        docs += files + node_files
    objects = [d.obj for d in files]
    nodes = [o for o in objects if _is_node(o)] + [d.obj for d in node_files if _is_node(d.obj)]
    from .simulate import is_bound_pod
    objects += [d.obj for d in node_files if is_bound_pod(d.obj)]   # pods bound to those Nodes count as load
    version = None
    if args.cluster:
        live_nodes, live_objects, version = _live(args, stderr, workloads_from_cluster)
        nodes += live_nodes
        objects += live_objects
    if not nodes:
        raise InputError("no Nodes: give --nodes FILE (kubectl get nodes -o yaml), Nodes among -f, or --cluster")
    try:
        check_nodes(nodes)   # issue 20: a Node is validated like any object, naming its file
    except PolicyError as e:
        raise locate(e, files + node_files) from None
    return nodes, [o for o in objects if not _is_node(o)], version


def _is_node(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Node" and obj.get("apiVersion") == "v1"


def simulate_command(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """Where every replica would land, and which stay Pending."""
    from .render import placements_svg, placements_table
    from .simulate import simulate
    config = resolve_config(args, stderr)
    docs: list[Document] = []
    nodes, objects, _ = _nodes_and_objects(args, stdin, stderr, docs=docs)
    if args.scale:   # rule S26: the ReplicaSet controller's victims, without and with the deletion costs
        from .scaledown import scale_report
        stdout.write(scale_report(args.scale, objects, nodes, config.zoneTopologySpread.topologyKey, args.output))
        return EXIT_OK
    try:
        placements = simulate(objects, nodes, config)
    except PolicyError as e:
        raise locate(e, docs) from None
    for obj in not_simulated(objects):
        stderr.write(f"policylib: not simulated: {object_ref(obj)}: kind {obj.get('kind')} (simulate places "
                     "Deployments and Volcano Jobs; check counts Kubeflow gangs)\n")
    if not placements:
        raise InputError(f"no Deployment or Volcano Job in {', '.join(args.filename)}")
    if args.output == "json":
        stdout.write(json_array([p.as_dict() for p in placements]))
    elif args.output == "svg":
        stdout.write(placements_svg(placements))
    else:
        stdout.write(placements_table(placements))
    return EXIT_PENDING if any(p.pending_max for p in placements) else EXIT_OK


def not_simulated(objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workloads ``simulate`` does not place: anything but Deployments, Volcano Jobs and the
    context it reads (Pods as load, HPAs, PodGroups)."""
    from .simulate import is_volcano_job
    from .spread import is_deployment
    return [o for o in objects if isinstance(o, dict) and not (is_deployment(o) or is_volcano_job(o) or is_fact(o)
                                                                or o.get("kind") in ("Pod", "Node"))]


def check_command(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """The settings advice: findings for this config on these Nodes and workloads."""
    from .check import Finding, check
    from .render import table
    config = resolve_config(args, stderr)
    docs: list[Document] = []
    nodes, objects, version = _nodes_and_objects(args, stdin, stderr, workloads_from_cluster=True, docs=docs)
    if args.cluster:   # rules W5, W6: the workloads the webhook is sent, as the controller
        admitted = cluster_scope(args, stderr)
        objects = [o for o in objects if admitted(o)]
    try:
        findings = check(config, nodes, objects, node_group_label=args.node_group_label, server_version=version,
                         workload_api_served=_workload_api_served(args) if args.cluster and config.gang.enabled
                         and config.gang.method == "workload" else None,
                         served_apis=_served_apis(args) if args.cluster else None)
    except PolicyError as e:
        raise locate(e, docs) from None
    if args.cluster:   # rule S28: managed Deployments whose pods break their own spread now
        from .scaledown import cluster_report
        findings += [Finding("warning", "spread-violated", v.message()) for v in cluster_report(objects, nodes)[0]]
    if args.cluster and args.namespace:   # Pods Pending now: only this namespace's workloads
        findings = [f for f in findings if f.key != "pending" or f" {args.namespace}/" in f.message.split(":")[0]]
    if args.output == "json":
        stdout.write(json_array([f.as_dict() for f in findings]))
    elif findings:
        stdout.write(table([("SEVERITY", "KEY", "MESSAGE")] + [(f.severity, f.key, f.message) for f in findings]))
    else:
        stdout.write("no findings: these settings suit these Nodes\n")
    return EXIT_PENDING if any(f.severity == "error" for f in findings) else EXIT_OK


def _add_cluster_source(p: argparse.ArgumentParser, files_required: bool, scoped: bool = False) -> None:
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument("-f", "--filename", metavar="FILE", action="append",
                   help="workloads (Deployments with their HPAs, Volcano Jobs; Pods in a snapshot count as load); "
                        "repeatable; - reads stdin; " + DIR_HELP + (" (-f or -k required)" if files_required else ""))
    _add_kustomize(p)
    _add_recursive(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--nodes", metavar="FILE", action="append",
                     help="Nodes: Node documents or a List (kubectl get nodes -o yaml), or a directory; repeatable")
    src.add_argument("--cluster", action="store_true", help="read the live cluster's Nodes and Pods through kubeconfig")
    p.add_argument("--context", help="kubeconfig context (with --cluster)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (with --cluster; default $KUBECONFIG, "
                                                        "~/.kube/config, or in-cluster)")
    p.add_argument("-n", "--namespace", help="only this namespace's workloads (with --cluster; Nodes and the Pods "
                                             "that load them are always read whole)")
    _add_installed(p, scoped)


CONFIG_HELP = ("policy config: a config file, or the chart's values file (its config: section); default with "
               "--cluster: the installed controller's ConfigMap (see docs/configuration.md)")


def _add_installed(p: argparse.ArgumentParser, scoped: bool = True) -> None:
    p.add_argument("--release", metavar="NAME", help="with --cluster and no --config: the config of this Helm release "
                                                     "(app.kubernetes.io/instance), in -n NAMESPACE when several")
    if not scoped:
        return
    p.add_argument("--webhook-configuration", metavar="NAME", default="policylib-webhook",
                   help="with --cluster: the MutatingWebhookConfiguration whose selectors say which objects are in "
                        "scope (default policylib-webhook)")


def _add_kustomize(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", "--kustomize", metavar="DIR", action="append",
                   help="also the objects kubectl kustomize DIR builds (kubectl or kustomize on PATH); repeatable")


DIR_HELP = "a directory: its *.yaml, *.yml and *.json files, sorted"


def _add_recursive(p: argparse.ArgumentParser) -> None:
    p.add_argument("-R", "--recursive", action="store_true",
                   help="with -f DIR, also read the manifests in its subdirectories (as kubectl -R)")


class _ShowVersion(Exception):
    """Raised by ``--version`` while parsing; :func:`main` prints the version to its stdout."""


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, default: Any = argparse.SUPPRESS,
                 help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        raise _ShowVersion()


#: What each command's exit status means (docs/reference/cli.md is generated from it).
EXIT_STATUS: dict[str, dict[int, str]] = {
    "preview": {EXIT_OK: "success (with --exit-code: no object would change)",
                EXIT_CHANGED: "with --exit-code: some object would change",
                EXIT_ERROR: "bad input or config: one line on stderr naming the file, object and field",
                EXIT_DENIED: "a policy denies an object (gang.onViolation: deny), or, with --exit-code, an "
                             "object it returns would still be denied by Volcano's job admission",
                EXIT_WARNED: "with --exit-code: a warning was printed on stderr (an unknown field, an HPA whose "
                             "target is not in the input, a required anti-affinity softened, ...) and nothing was "
                             "denied; objects may also change"},
    "hypernodes": {EXIT_OK: "success",
                   EXIT_ERROR: "bad input or config, or no Node carries the configured tier labels"},
    "plan": {EXIT_OK: "success (the planned writes are printed, none is made)",
             EXIT_ERROR: "bad input or config, or (--cluster) the cluster cannot be read"},
    "simulate": {EXIT_OK: "every replica is placed", EXIT_PENDING: "some replica would stay Pending",
                 EXIT_ERROR: "bad input or config, or (--cluster) the cluster cannot be read"},
    "check": {EXIT_OK: "no finding is an error", EXIT_PENDING: "a finding is an error",
              EXIT_ERROR: "bad input or config, or (--cluster) the cluster cannot be read"},
    "completion": {EXIT_OK: "the script is printed"},
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="policylib", description="Dry-run previews of what policylib's webhook "
                                     "and controller would do, without a cluster.")
    parser.add_argument("--version", action=_VersionAction, help="print 'policylib VERSION' and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("preview", help="show what the webhook would do to objects, without a cluster",
                       description="Dry-run the policies on objects from files. HorizontalPodAutoscalers "
                                   "and Nodes in the input are cluster context: they inform the policies "
                                   "and are not printed.")
    p.add_argument("--config", metavar="FILE", help="policy config: a config file, or the chart's values file (its "
                                                    "config: section; see docs/configuration.md)")
    p.add_argument("-f", "--filename", metavar="FILE", action="append",
                   help="YAML or JSON, multi-document, kind: List; '-' for stdin; " + DIR_HELP + ". Repeatable")
    _add_kustomize(p)
    _add_recursive(p)
    p.add_argument("--old", metavar="FILE", help="old objects: preview an UPDATE from them (matched by "
                                                 "kind, namespace and name)")
    p.add_argument("-o", "--output", choices=("yaml", "json", "patch", "patch-list", "diff"), default="yaml",
                   help="yaml: mutated objects and the objects the policies create; json: the same as one JSON "
                        "array; patch: one RFC 6902 patch "
                        "per line, per object; patch-list: one JSON list of {object: 'Kind namespace/name', "
                        "patch}, created objects as an add of the whole object; diff: unified diff per object "
                        "(created objects from /dev/null) with reasons")
    p.add_argument("--exit-code", action="store_true",
                   help="exit 1 when any object would change, 4 when a warning was printed (an unknown field, an "
                        "HPA whose target is not in the input, a softened required anti-affinity), 3 when an object "
                        "it returns would still be denied by Volcano's job admission (for CI gates)")
    p.add_argument("-v", "--verbose", action="store_true", help="print each object's reasons on stderr")
    p.set_defaults(func=preview)
    h = sub.add_parser("hypernodes", help="build the HyperNodes Volcano's label discovery makes from Nodes",
                       usage="policylib hypernodes [-h] -f NODES [-f NODES ...] [-R] --config FILE [-o {yaml,tree}]",
                       description="Build the topology.volcano.sh/v1alpha1 HyperNodes that Volcano's label "
                                   "discovery would build from these Nodes, with stable names. --config is "
                                   "required: there is no default discovery (the topology labels are the "
                                   "cluster's own). Exit 2 when no Node carries the configured labels.")
    h.add_argument("-f", "--filename", metavar="NODES", action="append", required=True,
                   help="Nodes as YAML or JSON (kubectl get nodes -o yaml works); '-' for stdin; " + DIR_HELP +
                        ". Repeatable")
    _add_recursive(h)
    h.add_argument("--config", metavar="FILE", help="required: a config with volcano.networkTopologyDiscovery "
                                                    "(an enabled 'label' source)")
    h.add_argument("-o", "--output", choices=("yaml", "tree"), default="yaml",
                   help="yaml: HyperNode objects; tree: the hierarchy for people")
    h.set_defaults(func=hypernodes)
    pl = sub.add_parser("plan", help="the writes the controller would make to existing objects",
                        description="Plan the controller's writes for a snapshot (kubectl get deploy,hpa -A -o yaml "
                                    "works as is) or the live cluster: which Deployments would roll, and why.")
    pl.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("-f", "--filename", metavar="SNAPSHOT", action="append",
                     help="YAML or JSON, multi-document, kind: List; '-' for stdin; " + DIR_HELP + ". Repeatable")
    src.add_argument("--cluster", action="store_true", help="read the live cluster through kubeconfig")
    src.add_argument("-k", "--kustomize", metavar="DIR", action="append",
                     help="the objects kubectl kustomize DIR builds (kubectl or kustomize on PATH); repeatable")
    _add_recursive(pl)
    pl.add_argument("--context", help="kubeconfig context (with --cluster)")
    pl.add_argument("-n", "--namespace", help="only this namespace (with --cluster)")
    pl.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (with --cluster; default $KUBECONFIG, "
                                                         "~/.kube/config, or in-cluster)")
    _add_installed(pl)
    pl.add_argument("-o", "--output", choices=("table", "json"), default="table",
                    help="table: readable, with counts; json: an array of writes")
    pl.set_defaults(func=plan_command)
    sm = sub.add_parser("simulate", help="where every replica would land, and which stay Pending",
                        description="Place each workload's effective replica count on the Nodes as kube-scheduler's "
                                    "filters would, after policylib's mutation. Exit 0 when every replica is placed, "
                                    "3 when some would stay Pending, 2 on bad input.")
    _add_cluster_source(sm, files_required=True)
    sm.add_argument("-o", "--output", choices=("table", "json", "svg"), default="table",
                    help="table (default), json, or svg: a bar chart per workload")
    sm.add_argument("--scale", metavar="NAME=N", action="append",
                    help="scale Deployment NAME (or NAMESPACE/NAME) to N: which of its bound pods the ReplicaSet "
                         "controller removes, without and with policylib's pod deletion costs (repeatable)")
    sm.set_defaults(func=simulate_command)
    ck = sub.add_parser("check", help="settings advice for these Nodes (and workloads)",
                        description="The specification's rules for choosing settings, checked against the Nodes and "
                                    "workloads. Exit 3 when a finding is an error, 2 on bad input, 0 otherwise.")
    _add_cluster_source(ck, files_required=False, scoped=True)
    ck.add_argument("--node-group-label", metavar="LABEL",
                    help="the Node label naming node groups (default: the first of the common cloud labels present)")
    ck.add_argument("-o", "--output", choices=("table", "json"), default="table")
    ck.set_defaults(func=check_command)
    co = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                        description="Print the completion script for policylib and kubectl-policylib, generated from "
                                    "this command line. bash: source <(policylib completion bash); zsh: save it as "
                                    "_policylib in a directory of $fpath.")
    co.add_argument("shell", choices=("bash", "zsh"))
    co.set_defaults(func=completion_command)
    return parser


def completion_script(shell: str) -> str:
    """The completion script for ``shell``, generated by shtab from :func:`build_parser` for both the console
    script and the kubectl plugin; options without choices complete file names (rule L3)."""
    import shtab
    script: str = shtab.complete(build_parser(), shell=shell)
    if shell == "bash":
        return script.replace("complete -o bashdefault -F _shtab_policylib policylib",
                              "complete -o bashdefault -o default -F _shtab_policylib policylib kubectl-policylib")
    return script.replace("#compdef policylib", "#compdef policylib kubectl-policylib", 1)


def completion_command(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    stdout.write(completion_script(args.shell))
    return EXIT_OK


def require_cluster_client(args: argparse.Namespace) -> None:
    """``--cluster`` reads the cluster through the Kubernetes client, which only ``pip install
    'policylib[webhook]'`` installs: without it, one line naming the extra, exit 2 (rule L1)."""
    import importlib.util
    if getattr(args, "cluster", False) and importlib.util.find_spec("kubernetes") is None:
        raise InputError("--cluster needs the Kubernetes client, which this install of policylib leaves out: "
                         "pip install 'policylib[webhook]'")


#: kubectl's global flags that ``kubectl policylib`` passes on to the commands that read the cluster.
KUBECTL_FLAGS = ("--kubeconfig", "--context", "-n", "--namespace")


def kubectl_argv(argv: Sequence[str]) -> list[str]:
    """``kubectl policylib [FLAGS] COMMAND ...``: kubectl's global flags (``--kubeconfig``, ``--context``,
    ``-n``/``--namespace``, as ``--flag VALUE`` or ``--flag=VALUE``) given before the command move after it,
    where the commands that read the cluster take them; flags after the command stay where they are (rule L4)."""
    moved: list[str] = []
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        flag, eq, _ = rest[0].partition("=")
        if flag not in KUBECTL_FLAGS:
            break
        if eq:
            moved.append(rest.pop(0))
        elif len(rest) > 1:
            moved += [rest.pop(0), rest.pop(0)]
        else:
            break
    if not rest or rest[0].startswith("-"):
        return list(argv)
    return [rest[0], *moved, *rest[1:]]


def _kustomize_sources(args: argparse.Namespace, stderr: TextIO) -> None:
    """``-k DIR``: build the overlay and read its output as one more ``-f`` file; ``-R`` over a tree
    holding a kustomization says it reads the raw files."""
    from .shell.kustomize import build, kustomize_trees
    if getattr(args, "recursive", False) and getattr(args, "filename", None):
        for tree in kustomize_trees(args.filename):
            stderr.write(f"policylib: note: -R reads the raw files under {tree}, not the overlay its kustomization "
                         f"builds; use -k {tree} for what kubectl apply -k sends\n")
    for directory in getattr(args, "kustomize", None) or []:
        args.filename = (args.filename or []) + [build(directory)]
    if hasattr(args, "kustomize") and args.func in (preview, plan_command, simulate_command) and not args.filename \
            and not getattr(args, "cluster", False):
        raise InputError("give -f FILE or -k DIR")


def main(argv: Sequence[str] | None = None, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout,
         stderr: TextIO = sys.stderr) -> int:
    try:
        args = build_parser().parse_args(argv)
    except _ShowVersion:
        stdout.write(f"policylib {__version__}\n")
        return EXIT_OK
    try:
        require_cluster_client(args)
        _kustomize_sources(args, stderr)
        code: int = args.func(args, stdin, stdout, stderr)
        return code
    except PolicylibError as e:
        stderr.write(f"policylib: error: {e}\n")
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK


def kubectl_plugin() -> None:
    """The ``kubectl-policylib`` console script: ``kubectl policylib ...`` (see kubectl_argv)."""
    sys.exit(main(kubectl_argv(sys.argv[1:])))


def pre_commit_argv(argv: Sequence[str]) -> list[str]:
    """The pre-commit hook ``policylib-preview`` (.pre-commit-hooks.yaml): pre-commit runs the entry with the
    hook's ``args`` (``--config FILE``) and then the staged files; each file becomes a ``-f`` of ``policylib
    preview --exit-code -o diff``, so a manifest the webhook would change fails the commit with its diff
    (rule L5)."""
    hook = argparse.ArgumentParser(prog="policylib-pre-commit", description="policylib preview --exit-code -o diff "
                                   "on each file: the pre-commit hook policylib-preview")
    hook.add_argument("--config", metavar="FILE", help="policy config (YAML or Helm values)")
    hook.add_argument("files", nargs="*", metavar="FILE")
    args = hook.parse_args(argv)
    out = ["preview", "--exit-code", "-o", "diff"] + (["--config", args.config] if args.config else [])
    return out + [arg for f in args.files for arg in ("-f", f)]


def pre_commit() -> None:
    """The ``policylib-pre-commit`` console script: the entry of the pre-commit hook (see pre_commit_argv)."""
    argv = pre_commit_argv(sys.argv[1:])
    sys.exit(main(argv) if "-f" in argv else EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
