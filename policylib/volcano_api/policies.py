"""Volcano's lifecycle policies, ported: the events and actions a Job's or a task's ``policies`` may name and
RestartPartition's rules (volcano-sh/volcano ``pkg/webhooks/admission/jobs/validate`` util.go validatePolicies;
RestartPartition at job level is what Volcano's optional ValidatingAdmissionPolicy denies; rules V2, V3, V12)."""
from __future__ import annotations

from typing import Any

from ..errors import FieldError, Path, as_path, cut, duplicate, forbidden, invalid, is_int, not_supported, object_items, required

#: The events a Volcano lifecycle policy may name (util.go policyEventMap).
VOLCANO_POLICY_EVENTS = ("*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed",
                         "JobUpdated")


VOLCANO_POLICY_ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition",
                          "TerminateJob", "CompleteJob", "ResumeJob")


RESTART_PARTITION = "RestartPartition"


def policy_events(policy: dict[str, Any]) -> list[str]:
    """``event`` and ``events`` merged, duplicates removed (util.go getEventList)."""
    events = policy.get("events") or []
    events = list(events) if isinstance(events, list) else [events]
    if policy.get("event"):
        events.append(policy["event"])
    return list(dict.fromkeys(e if isinstance(e, str) else repr(e) for e in events))


def validate_policy_shape(policies: Any, path: Path) -> list[FieldError]:
    """Rule V1: lifecycle policies are a list of objects whose ``event`` is a string, ``events`` a
    list of strings and ``exitCode`` an integer (the CRD's types)."""
    if policies is None:
        return []
    if not isinstance(policies, list):
        return [invalid(path, policies, "must be a list")]
    errs: list[FieldError] = []
    for _, p, policy in object_items(policies, as_path(path), errs):
        if policy.get("event") is not None and not isinstance(policy["event"], str):
            errs.append(invalid(p.child("event"), policy["event"], "must be a string"))
        events = policy.get("events")
        if events is not None and not (isinstance(events, list) and all(isinstance(e, str) for e in events)):
            errs.append(invalid(p.child("events"), events, "must be a list of strings"))
        code = policy.get("exitCode")
        if code is not None and not is_int(code):
            errs.append(invalid(p.child("exitCode"), code, "must be an integer"))
    return errs


def validate_volcano_policies(policies: Any, path: Path) -> list[FieldError]:
    """Rule V2 (validatePolicies): event xor exitCode, known events and actions, each event once,
    ``*`` alone."""
    if policies is None:
        return []
    if not isinstance(policies, list):
        return [invalid(path, policies, "must be a list")]
    path = as_path(path)
    errs: list[FieldError] = []
    seen_events: dict[str, int] = {}
    seen_codes: set[Any] = set()
    for i, p, policy in object_items(policies, path, errs):
        events = policy_events(policy)
        has_code = policy.get("exitCode") is not None
        if events and has_code:
            errs.append(forbidden(p, "must not specify event and exitCode simultaneously"))
            continue
        if not events and not has_code:
            errs.append(required(p, "either event or exitCode should be specified"))
            continue
        # Volcano checks the action of event policies only (util.go validatePolicies): an exitCode
        # policy with any action is admitted.
        if events and policy.get("action") not in VOLCANO_POLICY_ACTIONS:
            errs.append(not_supported(p.child("action"), policy.get("action"), VOLCANO_POLICY_ACTIONS))
        for event in events:
            if event not in VOLCANO_POLICY_EVENTS:
                errs.append(not_supported(p.child("event"), event, VOLCANO_POLICY_EVENTS))
            elif event in seen_events:
                errs.append(invalid(p, event, f"duplicate event {cut(event)} across different policy "
                                              f"(also in {path.index(seen_events[event])})"))
            else:
                seen_events[event] = i
        if has_code:
            code = policy["exitCode"]
            if not is_int(code):
                errs.append(invalid(p.child("exitCode"), code, "must be an integer"))
            elif code == 0:
                errs.append(invalid(p.child("exitCode"), code, "0 is not a valid error code"))
            elif code in seen_codes:
                errs.append(duplicate(p.child("exitCode"), code))
            else:
                seen_codes.add(code)
    if "*" in seen_events and len(seen_events) > 1:
        errs.append(forbidden(path, "if there's * here, no other policy should be here"))
    return errs


def validate_restart_partition_events(events: Any, path: Path) -> list[FieldError]:
    """Rule V3: the events of a RestartPartition policy are known Volcano events, each once, and
    ``*`` stands alone (validatePolicies)."""
    if events is None:
        return []
    if not isinstance(events, list):
        return [invalid(path, events, "must be a list of Volcano events")]
    path = as_path(path)
    errs = [not_supported(path.index(i), e, VOLCANO_POLICY_EVENTS)
            for i, e in enumerate(events) if e not in VOLCANO_POLICY_EVENTS]
    if errs:
        return errs
    if len(set(events)) != len(events):
        errs.append(invalid(path, events, "lists an event twice"))
    if "*" in events and len(events) > 1:
        errs.append(invalid(path, events, "'*' covers every event and must stand alone"))
    return errs


def validate_job_restart_partition(policies: Any, path: Path = "spec.policies") -> list[FieldError]:
    """Rule V12: RestartPartition is denied at job level (Volcano's ValidatingAdmissionPolicy)."""
    path = as_path(path)
    return [forbidden(path.index(i).child("action"), "RestartPartition is denied at job level (Volcano's "
                                                     "ValidatingAdmissionPolicy); use task policies")
            for i, policy in enumerate(policies if isinstance(policies, list) else [])
            if isinstance(policy, dict) and policy.get("action") == RESTART_PARTITION]
