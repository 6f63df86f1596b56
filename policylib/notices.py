"""What in an input a user must hear about before applying it, though no policy fails on it.

``policylib preview`` prints these as ``policylib: warning:`` lines (exit 4 with ``--exit-code``):
an HPA whose target is not in the input (rule D1), a field the API server does not know (rule D2).
Pure: the Kubernetes OpenAPI schema of a kind comes in as data (``policylib.shell.schemas`` reads it).
"""
from __future__ import annotations

import difflib
from typing import Any, Iterable, Iterator, Sequence

from .facts import is_hpa, namespace_of

#: Where a local ``$ref`` of the kubernetes-json-schema files points: ``.../_definitions.json#/$defs/NAME``.
_DEFS = "$defs"


def hpa_target_warnings(objects: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Rule D1: each HorizontalPodAutoscaler whose ``spec.scaleTargetRef`` names an object that is not
    in ``objects`` (same kind, namespace and name), with the warning: its minReplicas sets the
    effective replicas of nothing here, so the Deployment it was meant for is spread for its own
    ``spec.replicas``. A near name of the same kind in the namespace is suggested."""
    present: dict[tuple[str, str], set[str]] = {}
    for obj in objects:
        if isinstance(obj, dict) and isinstance(obj.get("kind"), str):
            name = (obj.get("metadata") or {}).get("name")
            if isinstance(name, str):
                present.setdefault((obj["kind"], namespace_of(obj)), set()).add(name)
    out = []
    for hpa in objects:
        if not is_hpa(hpa):
            continue
        spec = hpa.get("spec")
        ref = spec.get("scaleTargetRef") if isinstance(spec, dict) else None
        if not isinstance(ref, dict) or not isinstance(ref.get("kind"), str) or not isinstance(ref.get("name"), str):
            continue
        names = present.get((ref["kind"], namespace_of(hpa)), set())
        if ref["name"] in names:
            continue
        near = difflib.get_close_matches(ref["name"], sorted(names), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        out.append((hpa, f"spec.scaleTargetRef: {ref['kind']} {namespace_of(hpa)}/{ref['name']} is not in the "
                         f"input{hint}: its minReplicas sets the replica count of no object here"))
    return out


def unknown_fields(obj: dict[str, Any], schema: dict[str, Any], definitions: dict[str, Any]) -> list[str]:
    """Rule D2: the path of every field of ``obj`` that ``schema`` (a kind's strict Kubernetes OpenAPI
    schema, ``definitions`` the ``_definitions.json`` its ``$ref``s point into) does not declare, as
    the API server's strict field validation names them (``spec.replica``,
    ``spec.template.spec.containers[0].imagePullPolicyy``). Map-valued fields (labels) take any key."""
    return list(_unknown(obj, schema, definitions.get(_DEFS) or {}, ""))


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 32:
        target = defs.get(schema["$ref"].rsplit("/", 1)[-1])
        if not isinstance(target, dict):
            return {}
        schema, seen = target, seen + 1
    return schema if isinstance(schema, dict) else {}


def _unknown(value: Any, schema: dict[str, Any], defs: dict[str, Any], path: str) -> Iterator[str]:
    schema = _resolve(schema, defs)
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(props, dict) and key in props:
                yield from _unknown(item, props[key], defs, here)
            elif isinstance(extra, dict):
                yield from _unknown(item, extra, defs, here)
            elif extra is False:
                yield here
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _unknown(item, schema["items"], defs, f"{path}[{i}]")


def unknown_field_warning(paths: Iterable[str], version: str, schema: dict[str, Any],
                          definitions: dict[str, Any]) -> str:
    """Rule D2's warning: every unknown field named, each with the declared field it is closest to."""
    shown = []
    for path in paths:
        parent, _, leaf = path.rpartition(".")
        siblings = _declared_at(parent, schema, definitions.get(_DEFS) or {})
        near = difflib.get_close_matches(leaf.split("[")[0], siblings, n=1)
        hint = f' (did you mean "{(parent + ".") if parent else ""}{near[0]}"?)' if near else ""
        shown.append(f'unknown field "{path}"{hint}')
    minor = ".".join(version.split(".")[:2])
    return (f"{'; '.join(shown)}: not in the Kubernetes {minor} API, so the API server refuses the object under "
            "kubectl's default strict field validation; policylib reads the object without it")


def _declared_at(path: str, schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """The property names the schema declares at ``path`` (``spec.template.spec.containers[0]``)."""
    node = _resolve(schema, defs)
    for step in [s for s in path.replace("[", ".[").split(".") if s]:
        if step.startswith("["):
            node = _resolve(node.get("items") or {}, defs)
        else:
            props = node.get("properties") or {}
            node = _resolve(props.get(step) or node.get("additionalProperties") or {}, defs)
    props = node.get("properties")
    return sorted(props) if isinstance(props, dict) else []


def schema_key(obj: dict[str, Any]) -> tuple[str, str] | None:
    """``(kind, apiVersion)`` of an object a schema could describe, or None (no kind or apiVersion)."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if isinstance(kind, str) and kind and isinstance(api_version, str) and api_version:
        return kind, api_version
    return None


#: The gang schedulers ``gang.scheduler`` names: what each is, and the ``schedulerName`` its pods set
#: (the name upstream's install gives the scheduler profile; the empty string is the default scheduler).
GANG_SCHEDULERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ack": ("ACK's scheduler", ()),
    "koordinator": ("Koordinator's koord-scheduler", ("koord-scheduler",)),
    "scheduler-plugins": ("scheduler-plugins' Coscheduling scheduler", ("scheduler-plugins-scheduler",)),
    "kube-scheduler": ("kube-scheduler with Kubernetes' own gang scheduling", ("default-scheduler",)),
    "volcano": ("Volcano's scheduler", ("volcano",)),
}


def gang_scheduler_note(job: dict[str, Any], scheduler: str) -> str | None:
    """Rule D3: the gang metadata written for ``scheduler`` is read by that scheduler alone; the note
    when no template of ``job`` names it in ``spec.schedulerName`` (ACK's scheduler is never named: it
    is the default scheduler of ACK clusters only, so its metadata always gets the note). Volcano's own
    warning covers ``volcano`` (rule G21)."""
    from .gang.job import read_job
    if scheduler == "volcano" or scheduler not in GANG_SCHEDULERS:
        return None
    what, names = GANG_SCHEDULERS[scheduler]
    used = sorted({t.scheduler_name or "default-scheduler" for t in read_job(job).types if t.replicas > 0})
    if scheduler != "ack" and used and all(u in names for u in used):
        return None
    if scheduler == "ack":
        return ("gang.scheduler ack: the gang metadata written is read only by ACK's scheduler, the default scheduler "
                "of an Alibaba Cloud ACK cluster, which no input names: on any other cluster no scheduler reads it "
                "and the job's pods start one by one (`policylib check --cluster` names the gang schedulers a "
                "cluster runs)")
    return (f"gang.scheduler {scheduler}: the gang metadata written is read only by {what}, and the replica "
            f"templates name {', '.join(used)}, not {names[0]}: the job's pods start one by one (set "
            f"spec.schedulerName: {names[0]} in the templates, or the gang settings for the scheduler they name)")
