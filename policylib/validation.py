"""The API server's topology spread rules, each in one function that returns a list of field errors.

They follow kubernetes ``pkg/apis/core/validation/validation.go``: validateTopologySpreadConstraints
and the helpers it calls (rules K1-K9 of ``docs/specification.md``). Errors are collected, never
raised one at a time; every error carries its field path. Volcano's job admission rules live in
:mod:`policylib.volcano_api.admission`; ``validate_volcano_job``, part of the public API, is also
importable from here.
"""
from __future__ import annotations

from typing import Any

from .constants import DO_NOT_SCHEDULE, WHEN_UNSATISFIABLE
from .errors import (
    INT32_MAX,
    FieldError,
    Path,
    as_path,
    cut,
    duplicate,
    forbidden,
    invalid,
    is_int,
    not_supported,
    object_items,
    required,
)
from .labels import qualified_name_errors, selector_keys, validate_label_selector
from .values import json_key
from .volcano_api.admission import validate_volcano_job

TEMPLATE_CONSTRAINTS_PATH = "spec.template.spec.topologySpreadConstraints"
NODE_INCLUSION_POLICIES = ("Honor", "Ignore")
_NOT_POSITIVE = "must be greater than zero"


def validate_max_skew(value: Any, path: Path) -> list[FieldError]:
    """Rule K1 (ValidateMaxSkew): a 32-bit integer greater than zero."""
    if not is_int(value) or value > INT32_MAX:
        return [invalid(path, value, "must be a 32-bit integer")]
    if value <= 0:
        return [invalid(path, value, _NOT_POSITIVE)]
    return []


def validate_topology_key(value: Any, path: Path) -> list[FieldError]:
    """Rule K2 (ValidateTopologyKey): must not be empty (syntax is checked by label rules)."""
    if not isinstance(value, str) or not value:
        return [required(path, "can not be empty")]
    return []


def validate_when_unsatisfiable(value: Any, path: Path) -> list[FieldError]:
    """Rule K3 (ValidateWhenUnsatisfiable): DoNotSchedule or ScheduleAnyway."""
    if value not in WHEN_UNSATISFIABLE:
        return [not_supported(path, value, WHEN_UNSATISFIABLE)]
    return []


def repeated_pairs(constraints: list[Any]) -> set[int]:
    """Rule K4: the indexes of the constraints whose (topologyKey, whenUnsatisfiable) pair a later constraint
    repeats (every one but the last of each pair), found in one pass from the end."""
    seen: set[tuple[Any, Any]] = set()
    repeated: set[int] = set()
    for i in range(len(constraints) - 1, -1, -1):
        c = constraints[i]
        if not isinstance(c, dict):
            continue
        pair = (json_key(c.get("topologyKey")), json_key(c.get("whenUnsatisfiable")))
        if pair in seen:
            repeated.add(i)
        else:
            seen.add(pair)
    return repeated


def validate_not_repeated(constraint: dict[str, Any], repeated_later: bool, path: Path) -> list[FieldError]:
    """Rule K4 (ValidateSpreadConstraintNotRepeat): one entry per (topologyKey, whenUnsatisfiable); the error is
    on each entry a later one repeats (``repeated_later``, from :func:`repeated_pairs`)."""
    if not repeated_later:
        return []
    return [duplicate(path, f"{{{constraint.get('topologyKey')}, {constraint.get('whenUnsatisfiable')}}}")]


def validate_min_domains(value: Any, when: Any, path: Path) -> list[FieldError]:
    """Rule K5 (validateMinDomains): positive, and only with whenUnsatisfiable=DoNotSchedule."""
    if value is None:
        return []
    errs = []
    if not is_int(value) or value <= 0:
        errs.append(invalid(path, value, _NOT_POSITIVE))
    if when != DO_NOT_SCHEDULE:
        errs.append(invalid(path, value, f"can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {cut(str(when))}"))
    return errs


def validate_node_inclusion_policy(value: Any, path: Path) -> list[FieldError]:
    """Rule K6 (validateNodeInclusionPolicy): Honor or Ignore when set."""
    if value is None or value in NODE_INCLUSION_POLICIES:
        return []
    return [not_supported(path, value, NODE_INCLUSION_POLICIES)]


def validate_match_label_keys(keys: Any, selector: Any, path: Path) -> list[FieldError]:
    """Rule K7 (validateMatchLabelKeysInTopologySpread): needs a labelSelector, valid keys, no overlap."""
    if not keys:
        return []
    if not isinstance(keys, list):
        return [invalid(path, keys, "must be a list of label keys")]
    path = as_path(path)
    errs = []
    if selector is None:
        errs.append(forbidden(path, "must not be specified when labelSelector is not set"))
    in_selector = selector_keys(selector) if isinstance(selector, dict) else set()
    for i, key in enumerate(keys):
        errs += [invalid(path.index(i), key, m) for m in qualified_name_errors(key)]
        if key in in_selector:
            errs.append(invalid(path.index(i), key, "exists in both matchLabelKeys and labelSelector"))
    return errs


def validate_topology_spread_constraints(constraints: Any,
                                         path: Path = TEMPLATE_CONSTRAINTS_PATH) -> list[FieldError]:
    """Rule K9: every rule the API server applies to ``topologySpreadConstraints`` (rules K1-K8).

    Returns a list of :class:`FieldError` (empty when valid), each with a path
    like ``spec.template.spec.topologySpreadConstraints[1].minDomains``.
    """
    if constraints is None:
        return []
    if not isinstance(constraints, list):
        return [invalid(path, constraints, "must be a list")]
    errs: list[FieldError] = []
    repeated = repeated_pairs(constraints)
    for i, p, c in object_items(constraints, as_path(path), errs):
        errs += validate_max_skew(c.get("maxSkew"), p.child("maxSkew"))
        errs += validate_topology_key(c.get("topologyKey"), p.child("topologyKey"))
        errs += validate_when_unsatisfiable(c.get("whenUnsatisfiable"), p.child("whenUnsatisfiable"))
        errs += validate_not_repeated(c, i in repeated, p.child("{topologyKey, whenUnsatisfiable}"))
        errs += validate_min_domains(c.get("minDomains"), c.get("whenUnsatisfiable"), p.child("minDomains"))
        errs += validate_node_inclusion_policy(c.get("nodeAffinityPolicy"), p.child("nodeAffinityPolicy"))
        errs += validate_node_inclusion_policy(c.get("nodeTaintsPolicy"), p.child("nodeTaintsPolicy"))
        errs += validate_match_label_keys(c.get("matchLabelKeys"), c.get("labelSelector"), p.child("matchLabelKeys"))
        errs += validate_label_selector(c.get("labelSelector"), p.child("labelSelector"))
    return errs




#: The public names of this module (docs/library.md).
__all__ = ["validate_volcano_job"]
