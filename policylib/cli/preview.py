"""``policylib preview``: what the webhook would do to objects from files, without a cluster."""
from __future__ import annotations

import argparse
import difflib
import json
from dataclasses import dataclass
from typing import Any, Sequence, TextIO

from ..config import Config
from ..documents import Document, dump_yaml
from ..errors import InputError, PolicyError, object_ref
from ..facts import ClusterFacts, is_fact, is_hypernode, namespace_of
from ..families import is_unhandled_workload
from ..hypernodes import check_hypernodes
from ..mutate import mutate
from ..order import apply_order_note, stored_in_order
from ..result import Result
from ..shell.files import load_config, read_documents
from .common import (
    DIR_HELP,
    EXIT_CHANGED,
    EXIT_DENIED,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_WARNED,
    AddParser,
    add_kube_version,
    add_kustomize,
    add_recursive,
    json_array,
    locate,
    refs,
)

NAME = "preview"
EXIT_STATUS = {EXIT_OK: "success (with --exit-code: no object would change)",
               EXIT_CHANGED: "with --exit-code: some object would change",
               EXIT_ERROR: "bad input or config: one line on stderr naming the file, object and field",
               EXIT_DENIED: "a policy denies an object (gang.onViolation: deny), or, with --exit-code, an "
                            "object it returns would still be denied by Volcano's job admission",
               EXIT_WARNED: "with --exit-code: a warning was printed on stderr (an unknown field, an HPA whose "
                            "target is not in the input, a required anti-affinity softened, ...) and nothing was "
                            "denied; objects may also change"}


def add_parser(add: AddParser) -> argparse.ArgumentParser:
    p = add("preview", help="show what the webhook would do to objects, without a cluster",
            description="Dry-run the policies on objects from files. HorizontalPodAutoscalers "
                        "and Nodes in the input are cluster context: they inform the policies "
                        "and are not printed.")
    p.add_argument("--config", metavar="FILE", help="policy config: a config file, or the chart's values file (its "
                                                    "config: section; see docs/configuration.md)")
    p.add_argument("-f", "--filename", metavar="FILE", action="append",
                   help="YAML or JSON, multi-document, kind: List; '-' for stdin; " + DIR_HELP + ". Repeatable")
    add_kustomize(p)
    add_recursive(p)
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
    add_kube_version(p, cluster=False)
    return p


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
        unchanged = "not handled" if result.unhandled else "unchanged"
        body = _diff_text(doc.obj, result.object, label) if result.changed else f"= {label}: {unchanged}\n"
        body += "".join(_added_text(extra, object_ref(extra)) for extra in result.extra_objects)
        return body + "".join(f"# {r}\n" for r in result.reasons)
    text = dump_yaml(result.object)
    for extra in result.extra_objects:
        text += "---\n" + dump_yaml(extra)
    return text


@dataclass
class _Verdict:
    """What the documents' results add up to, for rule D4's exit status."""

    warned: bool = False
    changed: bool = False
    denied: bool = False
    rejected: bool = False

    def count(self, result: Result) -> None:
        """A document's result as the policies return it (before the apply order replaces what is shown)."""
        self.warned = self.warned or bool(result.warnings)
        self.changed = self.changed or result.changed

    def exit_status(self, exit_code: bool) -> int:
        if self.denied or (exit_code and self.rejected):
            return EXIT_DENIED
        if exit_code and self.warned:
            return EXIT_WARNED
        return EXIT_CHANGED if (exit_code and self.changed) else EXIT_OK


def _report(doc: Document, result: Result, config: Config, verbose: bool, stderr: TextIO, verdict: _Verdict) -> None:
    """One document's warnings, denial and notes on stderr (rules D1, D3); its denials counted into ``verdict``."""
    where = f"{doc.source}: {object_ref(doc.obj)}"
    for problem in scheduler_admission_errors(result.object, config):
        verdict.rejected = True
        stderr.write(f"policylib: warning: {where}: would still be denied by Volcano's job admission "
                     f"({config.volcano.version}): {problem}\n")
    if result.denial:
        verdict.denied = True
        stderr.write(f"policylib: denied: {where}: {result.denial}\n")
    for w in result.warnings:
        stderr.write(f"policylib: warning: {where}: {w}\n")
    noted = bool(result.unhandled) and is_unhandled_workload(doc.obj)
    if noted:
        stderr.write(f"policylib: note: {where}: {result.unhandled}\n")
    gang_note = _gang_note(doc.obj, result, config)
    if gang_note:
        stderr.write(f"policylib: note: {where}: {gang_note}\n")
    if verbose:
        for r in result.reasons:
            if not (noted and r == result.unhandled):
                stderr.write(f"policylib: {where}: {r}\n")


def _facts(docs: Sequence[Document], config: Config, kube_version: int | None) -> ClusterFacts:
    """What the input says about the cluster: its facts, its HyperNodes checked (what the Volcano verdict
    reads, rule V26), and the Workload API ``--kube-version`` serves."""
    try:
        check_hypernodes(d.obj for d in docs if is_hypernode(d.obj))
    except PolicyError as e:
        raise locate(e, docs) from None
    facts = ClusterFacts.from_objects(d.obj for d in docs)
    facts.workload_api = offline_workload_api(config, kube_version)
    return facts


def _write(output: str, outputs: list[str], entries: list[Any], stdout: TextIO) -> None:
    if output in ("patch-list", "json"):
        stdout.write(json_array(entries))
    else:
        stdout.write(("---\n" if output == "yaml" else "").join(outputs))


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """What the webhook would do to the input: the objects on stdout; warnings about the input (rules D1, D2)
    and the policies', notes (D3) on stderr; the exit status of rule D4."""
    config = load_config(args.config)
    docs = read_documents(args.filename, stdin, args.recursive, require_objects=True)
    facts = _facts(docs, config, args.kube_version)
    olds = {}
    if args.old:
        olds = {identity(d.obj): d.obj for d in read_documents([args.old], stdin, args.recursive)}
    fact_docs = [d for d in docs if is_fact(d.obj)]
    ordered = [d.obj for d in docs]
    input_warnings = _input_warnings(docs, args.kube_version)
    verdict = _Verdict(warned=bool(input_warnings))
    outputs: list[str] = []
    entries: list[Any] = []
    for position, doc in enumerate(docs):
        for w in input_warnings.get(id(doc), []):
            stderr.write(f"policylib: warning: {doc.source}: {object_ref(doc.obj)}: {w}\n")
        if is_fact(doc.obj):
            continue
        result = _mutate_document(doc, config, facts, olds.get(identity(doc.obj)), fact_docs)
        verdict.count(result)
        note = None if args.old else apply_order_note(ordered, position, config)
        if note:
            result = stored_in_order(ordered, position, config) or result   # OnNextRollout: what is stored
            stderr.write(f"policylib: note: {doc.source}: {object_ref(doc.obj)}: {note}\n")
        _report(doc, result, config, args.verbose, stderr, verdict)
        if args.output == "patch-list":
            entries += patch_list_entries(doc, result)
        elif args.output == "json":
            entries += [result.object, *result.extra_objects]
        else:
            outputs.append(_format(doc, result, args.output))
    _write(args.output, outputs, entries, stdout)
    return verdict.exit_status(args.exit_code)


def offline_workload_api(config: Config, kube_version: int | None) -> Any:
    """Rule G22: what ``--kube-version`` says the cluster serves of the Workload API (None without it: the
    policies assume Kubernetes 1.37)."""
    from ..workload_api import resolve
    return resolve(config.gang.workloadAPIVersion, minor=kube_version) if kube_version is not None else None


def _input_warnings(docs: Sequence[Document], kube_version: int | None = None) -> dict[int, list[str]]:
    """Rules D1 and D2: per document (by ``id``), the warnings about the input itself: an HPA whose target
    is not in the input, fields the Kubernetes API does not declare (in ``--kube-version``'s schemas when
    installed, else the newest)."""
    from ..notices import hpa_target_warnings, schema_key, unknown_field_warning, unknown_fields
    from ..shell import schemas
    version = schemas.schema_version(kube_version)
    out: dict[int, list[str]] = {}
    by_obj = {id(d.obj): d for d in docs}
    for doc in docs:
        key = schema_key(doc.obj)
        schema = schemas.kind_schema(*key, version=version) if key else None
        if schema is None:
            continue
        paths = unknown_fields(doc.obj, schema, schemas.definitions(version))
        if paths:
            out.setdefault(id(doc), []).append(unknown_field_warning(paths, version, schema,
                                                                     schemas.definitions(version)))
    for hpa, message in hpa_target_warnings([d.obj for d in docs]):
        out.setdefault(id(by_obj[id(hpa)]), []).append(message)
    return out


def _gang_note(obj: dict[str, Any], result: Result, config: Config) -> str | None:
    """Rule D3: a Kubeflow job that got gang metadata for a scheduler its templates do not name."""
    from ..gang.keys import is_kubeflow_job
    from ..notices import gang_scheduler_note
    if not is_kubeflow_job(obj) or not (result.changed or result.extra_objects) or result.denial:
        return None
    try:
        return gang_scheduler_note(obj, config.gang.scheduler)
    except PolicyError:
        return None   # the policy reported what it could not read


def scheduler_admission_errors(obj: dict[str, Any], config: Config) -> list[str]:
    """What the scheduler's own admission would still deny in an object policylib returns (Volcano Jobs:
    the ported job admission rules, for ``volcano.version``)."""
    from ..volcano import is_volcano_job
    from ..volcano_api.admission import validate_volcano_job
    if not isinstance(obj, dict) or not is_volcano_job(obj):
        return []
    return [str(e) for e in validate_volcano_job(obj, config.volcano.version)]


def _mutate_document(doc: Document, config: Config, facts: ClusterFacts, old: dict[str, Any] | None,
                     fact_docs: Sequence[Document] = ()) -> Result:
    try:
        return mutate(doc.obj, config, old=old, facts=facts)
    except PolicyError as e:
        # The error names the object at fault: this one, or a fact it read (an HPA), whose file it was.
        if e.obj_ref in refs(doc.obj):
            raise InputError(f"{doc.source}: {e}") from None
        raise locate(e, fact_docs, default=doc.source) from None
