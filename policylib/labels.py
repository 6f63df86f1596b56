"""Kubernetes label syntax and label selector semantics.

Ports of ``k8s.io/apimachinery/pkg/util/validation/validation.go``
(IsQualifiedName, IsValidLabelValue, IsDNS1123Subdomain) and of
``k8s.io/apimachinery/pkg/apis/meta/v1/validation`` (ValidateLabelSelector),
plus selector matching as in ``metav1.LabelSelectorAsSelector``.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping

from .errors import FieldError, FieldPath, Path, forbidden, invalid, required

_QUALIFIED_NAME_MAX = 63
_NAME_FMT = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_SUBDOMAIN_MAX = 253
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dns1123_subdomain_errors(value: str) -> list[str]:
    """IsDNS1123Subdomain: lowercase RFC 1123 subdomain, at most 253 characters."""
    errs = []
    if len(value) > _DNS1123_SUBDOMAIN_MAX:
        errs.append(f"must be no more than {_DNS1123_SUBDOMAIN_MAX} characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric character")
    return errs


def dns1123_label_errors(value: str) -> list[str]:
    """IsDNS1123Label: lowercase RFC 1123 label, at most 63 characters."""
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(value):
        errs.append("a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character")
    return errs


#: Distinct strings whose syntax check is remembered (label keys and values repeat across objects).
_CHECKED_STRINGS = 4096


def _string_errors(value: object, check: Callable[[str], tuple[str, ...]]) -> list[str]:
    """A syntax check's messages for ``value``; a value that is not a string has only the one."""
    if not isinstance(value, str):
        return [f"must be a string, got {type(value).__name__}"]
    return list(check(value))


def qualified_name_errors(value: object) -> list[str]:
    """IsQualifiedName: ``[prefix/]name``, the syntax of label and annotation keys."""
    return _string_errors(value, _qualified_name_errors)


@lru_cache(maxsize=_CHECKED_STRINGS)
def _qualified_name_errors(value: str) -> tuple[str, ...]:
    return tuple(_qualified_name_check(value))


def _qualified_name_check(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        errs = [f"prefix part {m}" for m in dns1123_subdomain_errors(prefix)]
        if errs:
            return errs
    else:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        return ["name part must be non-empty"]
    if len(name) > _QUALIFIED_NAME_MAX:
        return [f"name part must be no more than {_QUALIFIED_NAME_MAX} characters"]
    if not _NAME_FMT.match(name):
        return ["name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character"]
    return []


def label_value_errors(value: object) -> list[str]:
    """IsValidLabelValue: empty, or at most 63 characters of the qualified-name alphabet."""
    return _string_errors(value, _label_value_errors)


@lru_cache(maxsize=_CHECKED_STRINGS)
def _label_value_errors(value: str) -> tuple[str, ...]:
    if value == "":
        return ()
    if len(value) > 63:
        return ("must be no more than 63 characters",)
    if not _NAME_FMT.match(value):
        return ("a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",)
    return ()


def validate_label_selector(selector: object, path: Path) -> list[FieldError]:
    """Rule K8 (ValidateLabelSelector, apimachinery meta/v1/validation): keys, values, operators."""
    if selector is None:
        return []
    if not isinstance(selector, dict):
        return [invalid(path, selector, "must be an object")]
    if selector_plainly_valid(selector):
        return []
    path = path if isinstance(path, FieldPath) else FieldPath(path)
    errs: list[FieldError] = []
    match_labels = selector.get("matchLabels") or {}
    labels_path = path.child("matchLabels")
    if not isinstance(match_labels, dict):
        errs.append(invalid(labels_path, match_labels, "must be a map of strings"))
        match_labels = {}
    for key, value in match_labels.items():
        errs += [invalid(labels_path, key, m) for m in qualified_name_errors(key)]
        errs += [invalid(labels_path, value, m) for m in label_value_errors(value)]
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list):
        return errs + [invalid(path.child("matchExpressions"), exprs, "must be a list")]
    for i, expr in enumerate(exprs):
        p = path.child("matchExpressions").index(i)
        if not isinstance(expr, dict):
            errs.append(invalid(p, expr, "must be an object"))
            continue
        op, values = expr.get("operator"), expr.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                errs.append(required(p.child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(forbidden(p.child("values"),
                                      "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            errs.append(invalid(p.child("operator"), op, "not a valid selector operator"))
        errs += [invalid(p.child("key"), expr.get("key"), m) for m in qualified_name_errors(expr.get("key"))]
        for j, v in enumerate(values if isinstance(values, list) else []):
            errs += [invalid(p.child("values").index(j), v, m) for m in label_value_errors(v)]
    return errs


def selector_plainly_valid(selector: dict[str, Any]) -> bool:
    """A selector of ``matchLabels`` only whose every key and value is a string with a clean (remembered) check:
    one the full check of :func:`validate_label_selector` finds nothing in, told without building a path."""
    match_labels = selector.get("matchLabels") or {}
    if selector.get("matchExpressions") or not isinstance(match_labels, dict):
        return False
    for key, value in match_labels.items():
        if not (isinstance(key, str) and isinstance(value, str)) or _qualified_name_errors(key) or \
                _label_value_errors(value):
            return False
    return True


def selector_keys(selector: Mapping[str, Any] | None) -> set[str]:
    """Every key a selector mentions, in matchLabels or matchExpressions."""
    if not selector:
        return set()
    keys = set((selector.get("matchLabels") or {}).keys())
    keys.update(e.get("key") for e in selector.get("matchExpressions") or () if isinstance(e, dict))
    return keys


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector``, as LabelSelectorAsSelector reads it.

    A null selector matches nothing (affinity terms); an empty one matches
    everything. An unknown operator matches nothing, the safe answer for callers
    that remove what matches.
    """
    if not isinstance(selector, dict):
        return False
    match_labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not isinstance(match_labels, dict) or not isinstance(exprs, list):
        return False  # malformed selectors match nothing
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    for expr in exprs:
        if not isinstance(expr, dict) or not isinstance(expr.get("values") or [], list):
            return False
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or ()
        if not isinstance(key, str):
            return False
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True


def without_keys(selector: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """A copy of a label selector with every requirement on ``keys`` dropped."""
    drop = set(keys)
    out: dict[str, Any] = {}
    match_labels = {k: v for k, v in (selector.get("matchLabels") or {}).items() if k not in drop}
    if match_labels:
        out["matchLabels"] = match_labels
    exprs = [dict(e, values=list(e["values"])) if "values" in e else dict(e)
             for e in selector.get("matchExpressions") or () if e.get("key") not in drop]
    if exprs:
        out["matchExpressions"] = exprs
    return out


def tier_labels(topology_labels: tuple[str, ...]) -> list[str]:
    """The node labels of a label discovery source's HyperNode tiers, tier 1 first: its ``topologyLabels`` (top
    level first, the node-level label last) reversed, without the node-level one (rule H1)."""
    return list(reversed(topology_labels[:-1]))
