"""Ported upstream validation rules; every finding carries its field path.

``validate_topology_spread_constraints`` follows kubernetes
``pkg/apis/core/validation/validation.go``, ``validateTopologySpreadConstraints``
and the helpers it calls (ValidateMaxSkew, ValidateTopologyKey,
ValidateWhenUnsatisfiable, ValidateSpreadConstraintNotRepeat,
validateMinDomains, validateNodeInclusionPolicy,
validateMatchLabelKeysInTopologySpread, ValidateLabelSelector). Errors are
collected, not raised one at a time.
"""
from __future__ import annotations

from typing import Any

from .errors import FieldError
from .labels import qualified_name_errors, selector_keys, validate_label_selector

TEMPLATE_CONSTRAINTS_PATH = "spec.template.spec.topologySpreadConstraints"
NODE_INCLUSION_POLICIES = ("Honor", "Ignore")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_INT32_MAX = 2**31 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_max_skew(value: Any, path: str) -> list[FieldError]:
    """ValidateMaxSkew: must be greater than zero."""
    if not _is_int(value) or value > _INT32_MAX:
        return [FieldError(path, f"Invalid value: {value!r}: must be a 32-bit integer")]
    if value <= 0:
        return [FieldError(path, f"Invalid value: {value}: must be greater than zero")]
    return []


def validate_topology_key(value: Any, path: str) -> list[FieldError]:
    """ValidateTopologyKey: must not be empty (syntax is checked by label rules)."""
    if not isinstance(value, str) or not value:
        return [FieldError(path, "Required value: can not be empty")]
    return []


def validate_when_unsatisfiable(value: Any, path: str) -> list[FieldError]:
    """ValidateWhenUnsatisfiable: DoNotSchedule or ScheduleAnyway."""
    if value not in WHEN_UNSATISFIABLE:
        return [FieldError(path, f'Unsupported value: {value!r}: supported values: "DoNotSchedule", "ScheduleAnyway"')]
    return []


def validate_not_repeated(constraint: dict, rest: list, path: str) -> list[FieldError]:
    """ValidateSpreadConstraintNotRepeat: one entry per (topologyKey, whenUnsatisfiable)."""
    pair = (constraint.get("topologyKey"), constraint.get("whenUnsatisfiable"))
    for other in rest:
        if isinstance(other, dict) and (other.get("topologyKey"), other.get("whenUnsatisfiable")) == pair:
            return [FieldError(path, f"Duplicate value: \"{{{pair[0]}, {pair[1]}}}\"")]
    return []


def validate_min_domains(value: Any, when: Any, path: str) -> list[FieldError]:
    """validateMinDomains: positive, and only with whenUnsatisfiable=DoNotSchedule."""
    if value is None:
        return []
    errs = []
    if not _is_int(value) or value <= 0:
        errs.append(FieldError(path, f"Invalid value: {value!r}: must be greater than zero"))
    if when != "DoNotSchedule":
        errs.append(FieldError(path, f"Invalid value: {value!r}: can only use minDomains if "
                                     f"whenUnsatisfiable=DoNotSchedule, not {when}"))
    return errs


def validate_node_inclusion_policy(value: Any, path: str) -> list[FieldError]:
    """validateNodeInclusionPolicy: Honor or Ignore when set."""
    if value is None or value in NODE_INCLUSION_POLICIES:
        return []
    return [FieldError(path, f'Unsupported value: {value!r}: supported values: "Honor", "Ignore"')]


def validate_match_label_keys(keys: Any, selector: Any, path: str) -> list[FieldError]:
    """validateMatchLabelKeysInTopologySpread: needs a labelSelector, valid keys, no overlap."""
    if not keys:
        return []
    if not isinstance(keys, list):
        return [FieldError(path, "must be a list of label keys")]
    errs = []
    if selector is None:
        errs.append(FieldError(path, "Forbidden: must not be specified when labelSelector is not set"))
    in_selector = selector_keys(selector) if isinstance(selector, dict) else set()
    for i, key in enumerate(keys):
        errs += [FieldError(f"{path}[{i}]", f"Invalid value: {key!r}: {m}") for m in qualified_name_errors(key)]
        if key in in_selector:
            errs.append(FieldError(f"{path}[{i}]", f"Invalid value: {key!r}: exists in both matchLabelKeys and labelSelector"))
    return errs


def validate_topology_spread_constraints(constraints: Any,
                                         path: str = TEMPLATE_CONSTRAINTS_PATH) -> list[FieldError]:
    """Every rule the API server applies to ``topologySpreadConstraints``.

    Returns a list of :class:`FieldError` (empty when valid), each with a path
    like ``spec.template.spec.topologySpreadConstraints[1].minDomains``.
    """
    if constraints is None:
        return []
    if not isinstance(constraints, list):
        return [FieldError(path, "must be a list")]
    errs: list[FieldError] = []
    for i, c in enumerate(constraints):
        p = f"{path}[{i}]"
        if not isinstance(c, dict):
            errs.append(FieldError(p, "must be an object"))
            continue
        errs += validate_max_skew(c.get("maxSkew"), f"{p}.maxSkew")
        errs += validate_topology_key(c.get("topologyKey"), f"{p}.topologyKey")
        errs += validate_when_unsatisfiable(c.get("whenUnsatisfiable"), f"{p}.whenUnsatisfiable")
        errs += validate_not_repeated(c, constraints[i + 1:], f"{p}.{{topologyKey, whenUnsatisfiable}}")
        errs += validate_min_domains(c.get("minDomains"), c.get("whenUnsatisfiable"), f"{p}.minDomains")
        errs += validate_node_inclusion_policy(c.get("nodeAffinityPolicy"), f"{p}.nodeAffinityPolicy")
        errs += validate_node_inclusion_policy(c.get("nodeTaintsPolicy"), f"{p}.nodeTaintsPolicy")
        errs += validate_match_label_keys(c.get("matchLabelKeys"), c.get("labelSelector"), f"{p}.matchLabelKeys")
        errs += validate_label_selector(c.get("labelSelector"), f"{p}.labelSelector")
    return errs
