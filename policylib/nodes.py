"""Nodes read from files, validated like objects: the fields ``simulate`` and ``check``
read, with the API server's field errors, all at once, naming the Node.

A quantity that does not parse, a taint with an unknown effect, a label value that is not a string
are errors here, never silently zero CPU, an ignored taint or a TypeError blamed on a workload.
"""
from __future__ import annotations

from typing import Any

from .errors import FieldError, FieldPath, PolicyError, invalid, map_errors, not_supported, object_ref, required
from .labels import label_value_errors, qualified_name_errors
from .quantity import parse_quantity

#: core/v1 TaintEffect values.
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _resource_errors(resources: Any, path: FieldPath) -> list[FieldError]:
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [invalid(path, resources, "must be a map of resource names to quantities")]
    errs = []
    for name, value in resources.items():
        try:
            parse_quantity(value)
        except ValueError:
            errs.append(invalid(path.key(str(name)), value, "must be a quantity like 8, 500m or 64Gi"))
    return errs


def node_errors(node: dict[str, Any]) -> list[FieldError]:
    """The field errors of one Node: name, labels (keys and string values), taints (key and effect),
    allocatable and capacity quantities."""
    meta = node.get("metadata")
    if not isinstance(meta, dict):
        return [invalid("metadata", meta, "must be an object")]
    errs: list[FieldError] = []
    if not isinstance(meta.get("name"), str) or not meta.get("name"):
        errs.append(required("metadata.name", "a Node needs a name"))
    errs += map_errors(meta.get("labels"), FieldPath("metadata", "labels"))
    for key, value in (meta.get("labels") or {}).items() if isinstance(meta.get("labels"), dict) else ():
        path = FieldPath("metadata", "labels").key(str(key))
        for problem in qualified_name_errors(key):
            errs.append(invalid(path, key, problem))
        if not isinstance(value, str):
            errs.append(invalid(path, value, "a label value must be a string (quote it in YAML)"))
        else:
            errs += [invalid(path, value, problem) for problem in label_value_errors(value)]
    spec = node.get("spec") or {}
    taints = spec.get("taints") if isinstance(spec, dict) else None
    if taints is not None and not isinstance(taints, list):
        errs.append(invalid("spec.taints", taints, "must be a list"))
    for i, taint in enumerate(taints if isinstance(taints, list) else []):
        path = FieldPath("spec", "taints").index(i)
        if not isinstance(taint, dict):
            errs.append(invalid(path, taint, "must be an object"))
            continue
        if not isinstance(taint.get("key"), str) or not taint.get("key"):
            errs.append(required(path.child("key")))
        if taint.get("effect") not in TAINT_EFFECTS:
            errs.append(not_supported(path.child("effect"), taint.get("effect"), TAINT_EFFECTS))
    status = node.get("status") or {}
    if isinstance(status, dict):
        for field in ("allocatable", "capacity"):
            errs += _resource_errors(status.get(field), FieldPath("status", field))
    return errs


def check_nodes(nodes: list[dict[str, Any]]) -> None:
    """Raise one PolicyError per bad Node (the first found), listing every field error of it."""
    for node in nodes:
        errs = node_errors(node)
        if errs:
            raise PolicyError.from_errors(object_ref(node), errs)
