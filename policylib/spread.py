"""Zone and host topology spread for Deployments (rules S1-S22).

Each function decides one rule and cites its number in ``docs/specification.md``. The
entry point :func:`mutate_deployment` edits a copy of the Deployment and
returns a :class:`~policylib.result.Result` whose patch is diffed from the
subtrees this policy owns: the pod template's ``topologySpreadConstraints``
and ``affinity``, and this policy's own annotations on the Deployment.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .config import ON_NEXT_ROLLOUT, Config, HostSpread, ZoneSpread
from .constants import APPS_API_VERSION
from .errors import (
    INT32_MAX,
    FieldError,
    FieldPath,
    PolicyError,
    int32_errors,
    int_field,
    invalid,
    is_int,
    map_errors,
    object_ref,
    raise_if_any,
    required,
)
from .facts import NO_FACTS, ClusterFacts, namespace_of
from .labels import selector_matches, selector_plainly_valid, validate_label_selector, without_keys
from .patch import Draft, diff_owned
from .result import DOMAIN, SKIP_KEY, Admission, Outcome, Result, admission
from .validation import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY, validate_topology_spread_constraints

#: Annotation stating the autoscaling minimum when the HPA is not visible to us.
AUTOSCALING_MIN_ANNOTATION = f"{DOMAIN}/autoscaling-min-replicas"
#: What was applied, recorded on the Deployment (never the pod template).
RECORD_REPLICAS = f"{DOMAIN}/spread-effective-replicas"
RECORD_SETTINGS = f"{DOMAIN}/spread-settings"
RECORD_KEYS = f"{DOMAIN}/spread-topology-keys"
#: Rule S18: the spread replaced a required self anti-affinity (kept after the term itself is gone).
RECORD_REQUIRED = f"{DOMAIN}/spread-replaced-required-anti-affinity"
RECORD_ANNOTATIONS = (RECORD_REPLICAS, RECORD_SETTINGS, RECORD_KEYS, RECORD_REQUIRED)
#: Rule S10's warning starts so (``check`` counts the Deployments that get it).
HOST_WEAKENED_WARNING = "required anti-affinity removed; host spread only preferred"
#: Rule S19: a count change whose constraints wait for the next rollout (``rewrite: OnNextRollout``).
PENDING = f"{DOMAIN}/spread-pending"

POD_SPEC = ("spec", "template", "spec")
CONSTRAINTS = POD_SPEC + ("topologySpreadConstraints",)
CONSTRAINTS_PATH = "spec.template.spec.topologySpreadConstraints"
AFFINITY = POD_SPEC + ("affinity",)
ANNOTATIONS = ("metadata", "annotations")
OWNED_PATHS = (ANNOTATIONS, CONSTRAINTS, AFFINITY)
REQUIRED_ANTI_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"
ANTI_AFFINITY_TERMS = (REQUIRED_ANTI_AFFINITY, "preferredDuringSchedulingIgnoredDuringExecution")


def is_deployment(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Deployment" and obj.get("apiVersion") == APPS_API_VERSION


# --- effective replica count (rule S2) ----------------------------------------

@dataclass(frozen=True)
class Effective:
    """The effective replica count and where it came from."""

    replicas: int
    source: str
    warnings: tuple[str, ...] = ()


def hpa_min_replicas(hpa: dict[str, Any]) -> int:
    """``spec.minReplicas`` of an autoscaling/v1 or v2 HPA; the API defaults it to 1."""
    spec = hpa.get("spec") or {}
    value = spec.get("minReplicas")
    if value is None:
        return 1
    return int_field(value, object_ref(hpa), "spec.minReplicas", 0)


def effective_replicas(deployment: dict[str, Any], facts: ClusterFacts = NO_FACTS,
                       namespace: str | None = None) -> Effective:
    """Rule S2: the autoscaling minimum, else the replicas.

    An HPA in the same namespace that targets the Deployment wins; without one,
    the annotation ``policylib.io/autoscaling-min-replicas`` states the minimum
    for clusters whose HPAs we cannot see; otherwise ``spec.replicas``, which
    the API defaults to 1.
    """
    ns = namespace or namespace_of(deployment)
    replicas = (deployment.get("spec") or {}).get("replicas")
    if replicas is not None and not (is_int(replicas) and 0 <= replicas <= INT32_MAX):
        int_field(replicas, object_ref(deployment, ns), "spec.replicas", 0)
    name = (deployment.get("metadata") or {}).get("name")
    hpas = facts.hpas_for(ns, name) if isinstance(name, str) and name else []
    if hpas:
        mins = sorted((hpa_min_replicas(h), h["metadata"].get("name", "")) for h in hpas)
        count, hpa_name = mins[-1]
        warnings: tuple[str, ...] = ()
        if len(hpas) > 1:
            names = ", ".join(n for _, n in mins)
            warnings = (f"{len(hpas)} HorizontalPodAutoscalers target this Deployment ({names}); "
                        f"using the highest minReplicas, {count}",)
        return Effective(count, f"HorizontalPodAutoscaler {hpa_name} minReplicas {count}", warnings)
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    if AUTOSCALING_MIN_ANNOTATION in annotations:
        raw = annotations[AUTOSCALING_MIN_ANNOTATION]
        path = FieldPath("metadata", "annotations").key(AUTOSCALING_MIN_ANNOTATION)
        try:
            count = int(str(raw).strip(), 10)
        except ValueError:
            raise PolicyError.from_errors(object_ref(deployment, ns),
                                          [invalid(path, raw, "must be a whole number as a string")]) from None
        if count <= INT32_MAX:
            int_field(count, object_ref(deployment, ns), path, 0)
            return Effective(count, f"annotation {AUTOSCALING_MIN_ANNOTATION}={count}")
        shown = str(raw).strip()
        shown = shown if len(shown) <= 20 else shown[:20] + "..."
        ignored = (f"{AUTOSCALING_MIN_ANNOTATION} {shown!r} is over int32 ({INT32_MAX}): ignored, spec.replicas "
                   "counts",)
        base = effective_replicas({**deployment, "metadata": {k: v for k, v in (deployment.get("metadata") or {}).items()
                                                              if k != "annotations"}}, facts, ns)
        return Effective(base.replicas, base.source, base.warnings + ignored)
    if replicas is None:
        return Effective(1, "spec.replicas absent (defaults to 1)")
    return Effective(replicas, f"spec.replicas {replicas}")


# --- the two constraints (rules S3-S7) ---------------------------------------

def spread_label_selector(deployment_selector: dict[str, Any], match_label_keys: tuple[str, ...]) -> dict[str, Any]:
    """Rule S7: the Deployment's own ``spec.selector`` without any key in matchLabelKeys.

    The API server rejects a key in both labelSelector and matchLabelKeys
    (validateMatchLabelKeysInTopologySpread).
    """
    labels = deployment_selector.get("matchLabels")
    if not deployment_selector.get("matchExpressions") and isinstance(labels, dict):
        # the common case: matchLabels only, copied without the keys of matchLabelKeys
        kept = {k: v for k, v in labels.items() if k not in match_label_keys} if match_label_keys else dict(labels)
        return {"matchLabels": kept} if kept else {}
    return without_keys(deployment_selector, match_label_keys)


def _constraint(max_skew: int, topology_key: str, when: str, selector: dict[str, Any],
                match_label_keys: tuple[str, ...], min_domains: int | None = None) -> dict[str, Any]:
    """A TopologySpreadConstraint with fields in the API's order; both spreads honor taints."""
    c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": topology_key, "whenUnsatisfiable": when,
               "labelSelector": spread_label_selector(selector, match_label_keys)}
    if min_domains is not None:
        c["minDomains"] = min_domains
    c["nodeTaintsPolicy"] = "Honor"
    if match_label_keys:
        c["matchLabelKeys"] = list(match_label_keys)
    return c


def zone_constraint(selector: dict[str, Any], zone: ZoneSpread) -> dict[str, Any]:
    """Rule S3: always a preference (ScheduleAnyway)."""
    return _constraint(zone.maxSkew, zone.topologyKey, SCHEDULE_ANYWAY, selector, zone.matchLabelKeys)


def host_spread_enforced(effective: int, host: HostSpread, replaced_required: bool = False) -> bool:
    """Rule S4: DoNotSchedule only for >= hardMinReplicas effective replicas; rule S18: at any count
    when the spread replaced a required anti-affinity and ``enforceForRequiredAntiAffinity`` is on."""
    if replaced_required and host.enforceForRequiredAntiAffinity:
        return True
    return host.whenUnsatisfiable == DO_NOT_SCHEDULE and effective >= host.hardMinReplicas


def derived_max_skew(effective: int, host: HostSpread) -> int:
    """Rule S5: max(maxSkew, ceil(effective / minDomains)) when enabled."""
    if not host.enableReplicaDerivedMaxSkewRule:
        return host.maxSkew
    return max(host.maxSkew, math.ceil(effective / host.minDomains))


def host_constraint(selector: dict[str, Any], effective: int, host: HostSpread,
                    replaced_required: bool = False) -> tuple[dict[str, Any], str]:
    """Rule S6: the host constraint and the reason for its shape.

    minDomains goes only on a DoNotSchedule constraint (the API server rejects
    it otherwise); the replica-derived maxSkew applies only when enforced.
    """
    if not host_spread_enforced(effective, host, replaced_required):
        if host.whenUnsatisfiable == DO_NOT_SCHEDULE:
            why = (f"host spread is a preference: {effective} effective replicas < "
                   f"hardMinReplicas {host.hardMinReplicas}")
        else:
            why = "host spread is a preference: whenUnsatisfiable ScheduleAnyway"
        return _constraint(host.maxSkew, host.topologyKey, SCHEDULE_ANYWAY, selector, host.matchLabelKeys), why
    skew = derived_max_skew(effective, host)
    why = f"host spread enforced: {effective} effective replicas >= hardMinReplicas {host.hardMinReplicas}"
    if not host_spread_enforced(effective, host):
        why = ("host spread enforced: it replaces a required anti-affinity "
               "(hostTopologySpread.enforceForRequiredAntiAffinity)")
    if host.enableReplicaDerivedMaxSkewRule and skew > host.maxSkew:
        why += f"; maxSkew {skew} = ceil({effective}/{host.minDomains})"
    else:
        why += f"; maxSkew {skew}"
    return _constraint(skew, host.topologyKey, DO_NOT_SCHEDULE, selector, host.matchLabelKeys,
                       min_domains=host.minDomains), why


def desired_constraints(selector: dict[str, Any], effective: int, config: Config,
                        replaced_required: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The constraints the current settings write, zone first; ``enabled: false`` writes none."""
    out, reasons = [], []
    if config.zone.enabled:
        out.append(zone_constraint(selector, config.zone))
        reasons.append(f"zone spread on {config.zone.topologyKey}: maxSkew {config.zone.maxSkew}, ScheduleAnyway")
    if config.host.enabled:
        c, why = host_constraint(selector, effective, config.host, replaced_required)
        out.append(c)
        reasons.append(why)
    return out, reasons


# --- ownership of constraint keys --------------------------------------------

def recorded_keys(obj: dict[str, Any] | None) -> set[str]:
    """Topology keys this policy wrote earlier, from the Deployment's record annotation."""
    if not obj:
        return set()
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECORD_KEYS) or ""
    return {k for k in str(raw).split(",") if k}


def managed_keys(config: Config, *objs: dict[str, Any] | None) -> set[str]:
    """Rule S8: keys whose constraints this policy owns: enabled spreads' keys and keys it wrote before.

    A user's own constraint on the key of a disabled spread stays unless we
    wrote it (``enabled: false`` means the constraint is not written).
    """
    keys = {s.topologyKey for s in (config.zone, config.host) if s.enabled}
    for obj in objs:
        keys |= recorded_keys(obj)
    return keys


def _constraints_of(obj: dict[str, Any]) -> list[Any]:
    value = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("topologySpreadConstraints")
    return value if isinstance(value, list) else []


def _split(constraints: list[Any], keys: set[str]) -> tuple[list[Any], list[Any]]:
    def managed(c: object) -> bool:
        return isinstance(c, dict) and isinstance(c.get("topologyKey"), str) and c["topologyKey"] in keys
    return [c for c in constraints if not managed(c)], [c for c in constraints if managed(c)]


# --- legacy anti-affinity (rules S9, S10) -------------------------------------

def term_selects_own_pods(term: Any, pod_labels: dict[str, Any], namespace: str) -> bool:
    """Whether a PodAffinityTerm selects the Deployment's own pods.

    Namespaces follow the API: ``namespaces`` and ``namespaceSelector`` are a
    union; both unset means the pod's own namespace; ``{}`` selects all. A
    non-empty namespaceSelector cannot be evaluated without Namespace objects
    and counts only through ``namespaces``. A term with mismatchLabelKeys is
    never counted as selecting its own revision.
    """
    if not isinstance(term, dict) or term.get("mismatchLabelKeys"):
        return False
    namespaces = term.get("namespaces") or []
    ns_selector = term.get("namespaceSelector")
    if not isinstance(namespaces, list) or not (ns_selector is None or isinstance(ns_selector, dict)):
        return False  # malformed (the API server rejects it): never removed by us
    in_scope = (not namespaces or namespace in namespaces) if ns_selector is None else \
        (ns_selector == {} or namespace in namespaces)
    return in_scope and selector_matches(term.get("labelSelector"), pod_labels)


def remove_pod_anti_affinity(affinity: Any, pod_labels: dict[str, Any], namespace: str, mode: str) -> tuple[Any, int]:
    """Rule S9: the spread replaces ``ha_topology_key`` anti-affinity.

    Returns the new affinity (None when emptied) and how many terms went. Mode
    ``own`` removes required and preferred terms that select the Deployment's
    own pods; ``all`` removes every pod anti-affinity term, as the literal
    "removes any pod anti-affinity" says literally. Emptied maps are removed.
    """
    if not isinstance(affinity, dict) or not isinstance(affinity.get("podAntiAffinity"), dict):
        return affinity, 0
    anti = affinity["podAntiAffinity"]
    new_anti, removed = {}, 0
    for key, value in anti.items():
        if key not in ANTI_AFFINITY_TERMS or not isinstance(value, list):
            new_anti[key] = value
            continue
        keep = []
        for term in value:
            inner = term.get("podAffinityTerm") if key.startswith("preferred") and isinstance(term, dict) else term
            if mode == "all" or term_selects_own_pods(inner, pod_labels, namespace):
                removed += 1
            else:
                keep.append(term)
        if keep:
            new_anti[key] = keep
    if not removed:
        return affinity, 0
    new_affinity = {k: v for k, v in affinity.items() if k != "podAntiAffinity"}
    if new_anti:
        new_affinity["podAntiAffinity"] = new_anti
    return (new_affinity or None), removed


def managed_anti_affinity(affinity: Any, pod_labels: dict[str, Any], namespace: str, mode: str) -> dict[str, list[Any]]:
    """The pod anti-affinity terms the spread replaces, by field (required/preferred)."""
    if not isinstance(affinity, dict) or not isinstance(affinity.get("podAntiAffinity"), dict):
        return {}
    out: dict[str, list[Any]] = {}
    for key, value in affinity["podAntiAffinity"].items():
        if key not in ANTI_AFFINITY_TERMS or not isinstance(value, list):
            continue
        for term in value:
            inner = term.get("podAffinityTerm") if key.startswith("preferred") and isinstance(term, dict) else term
            if mode == "all" or term_selects_own_pods(inner, pod_labels, namespace):
                out.setdefault(key, []).append(term)
    return out


def restore_anti_affinity(affinity: Any, terms: dict[str, list[Any]]) -> dict[str, Any]:
    """``affinity`` with ``terms`` put back into its podAntiAffinity."""
    new = dict(affinity) if isinstance(affinity, dict) else {}
    anti = dict(new.get("podAntiAffinity") or {}) if isinstance(new.get("podAntiAffinity"), dict) else {}
    for key, value in terms.items():
        present = anti.get(key)
        anti[key] = (list(present) if isinstance(present, list) else []) + list(value)
    new["podAntiAffinity"] = anti
    return new


# --- when to write (rules S11-S14) -------------------------------------------

def recorded_replicas(obj: dict[str, Any] | None) -> int | None:
    raw = ((obj or {}).get("metadata") or {}).get("annotations", {}) or {}
    try:
        return int(raw.get(RECORD_REPLICAS))  # type: ignore[arg-type]  # None and junk raise, as intended
    except (TypeError, ValueError):
        return None


def update_trigger(new: Effective, old: Effective | None, recorded: int | None) -> str | None:
    """Rule S11: on UPDATE, write only when the effective count changed.

    Changed from the old object, or from the count recorded when the spread was
    last written (an HPA's minReplicas can change without a write to the
    Deployment). Returns the reason, or None to keep the old placement.
    """
    if old is None:
        return "old object unreadable: writing the spread"
    if new.replicas != old.replicas:
        return f"effective replicas changed {old.replicas} -> {new.replicas}"
    if recorded is not None and recorded != new.replicas:
        return f"effective replicas {new.replicas} differ from the {recorded} recorded when the spread was written"
    return None


# --- the mutation -------------------------------------------------------------

@dataclass(frozen=True)
class SpreadInputs:
    """What the spread of one Deployment is computed from."""

    config: Config
    namespace: str
    selector: dict[str, Any]
    pod_labels: dict[str, Any]
    effective: Effective


def deployment_shape_errors(obj: dict[str, Any]) -> list[FieldError]:
    """Rule S1: the fields the spread policy reads have the API's types: a non-empty valid selector,
    metadata and pod template maps, a constraint list and an affinity object. All errors at once."""
    if _plainly_valid_shape(obj):
        return []
    meta = obj.get("metadata")
    meta_errs = [] if isinstance(meta, dict) else [invalid("metadata", meta, "must be an object")]
    for key in ("labels", "annotations"):
        meta_errs += map_errors((meta if isinstance(meta, dict) else {}).get(key), f"metadata.{key}")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec", "a Deployment needs a spec")] + meta_errs
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errs = [required("spec.selector", f"{APPS_API_VERSION} Deployments need a non-empty selector")]
    else:
        errs = validate_label_selector(selector, "spec.selector")
    errs += meta_errs
    if spec.get("replicas") is not None:
        errs += int32_errors(spec["replicas"], "spec.replicas", 0)
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return errs + [required("spec.template.spec", "a Deployment needs a pod template")]
    constraints = template["spec"].get("topologySpreadConstraints")
    if constraints is not None and not isinstance(constraints, list):
        errs.append(invalid(CONSTRAINTS_PATH, constraints, "must be a list"))
    template_meta = template.get("metadata")
    errs += map_errors(template_meta, "spec.template.metadata")
    errs += map_errors((template_meta if isinstance(template_meta, dict) else {}).get("labels"),
                       "spec.template.metadata.labels")
    affinity = template["spec"].get("affinity")
    if affinity is not None and not isinstance(affinity, dict):
        errs.append(invalid("spec.template.spec.affinity", affinity, "must be an object"))
    return errs


def _plainly_valid_shape(obj: dict[str, Any]) -> bool:
    """Every check of :func:`deployment_shape_errors` passes, told by type tests alone (the common case, with no
    error to name); any doubt goes to the full check, which names each error."""
    meta, spec = obj.get("metadata"), obj.get("spec")
    if not (isinstance(meta, dict) and isinstance(spec, dict)):
        return False
    labels, annotations = meta.get("labels"), meta.get("annotations")
    if not ((labels is None or isinstance(labels, dict)) and (annotations is None or isinstance(annotations, dict))):
        return False
    selector, replicas, template = spec.get("selector"), spec.get("replicas"), spec.get("template")
    if not (isinstance(selector, dict) and selector.get("matchLabels") and selector_plainly_valid(selector)):
        return False
    if replicas is not None and not (is_int(replicas) and 0 <= replicas <= INT32_MAX):
        return False
    if not isinstance(template, dict):
        return False
    pod, template_meta = template.get("spec"), template.get("metadata")
    if not isinstance(pod, dict) or not (template_meta is None or isinstance(template_meta, dict)):
        return False
    template_labels = template_meta.get("labels") if template_meta is not None else None
    constraints, affinity = pod.get("topologySpreadConstraints"), pod.get("affinity")
    return ((template_labels is None or isinstance(template_labels, dict))
            and (constraints is None or isinstance(constraints, list)) and (affinity is None or isinstance(affinity, dict)))


def _checked_shape(obj: dict[str, Any], ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The selector and pod labels, after :func:`deployment_shape_errors` found nothing."""
    raise_if_any(ref, deployment_shape_errors(obj))
    template = obj["spec"]["template"]
    return obj["spec"]["selector"], (template.get("metadata") or {}).get("labels") or {}


def write_spread(draft: Draft, ctx: SpreadInputs, out: Outcome, previous: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rule S15: write the current spread: replace managed constraints, drop legacy anti-affinity, record.
    Returns the constraints written.

    ``previous`` is the object whose record says which keys we wrote before
    (the old object on UPDATE).
    """
    config = ctx.config
    required = managed_anti_affinity(draft.get(AFFINITY), ctx.pod_labels, ctx.namespace,
                                     config.removePodAntiAffinity).get(REQUIRED_ANTI_AFFINITY)
    replaced_required = bool(required) or replaced_required_before(draft.original, previous)
    desired, why = desired_constraints(ctx.selector, ctx.effective.replicas, config, replaced_required)
    out.reason(*why)
    current = _constraints_of(draft.root)
    others, _ = _split(current, managed_keys(config, draft.original, previous))
    new = others + desired
    if new != current:
        if new:
            draft.set(CONSTRAINTS, new)
        else:
            draft.delete(CONSTRAINTS)
    annotations = draft.get(ANNOTATIONS) or {}
    if desired:
        affinity, removed = remove_pod_anti_affinity(draft.get(AFFINITY), ctx.pod_labels, ctx.namespace,
                                                     config.removePodAntiAffinity)
        if removed:
            draft.set(AFFINITY, affinity) if affinity is not None else draft.delete(AFFINITY)
            scope = "" if config.removePodAntiAffinity == "all" else " selecting the Deployment's own pods"
            out.reason(f"removed {removed} pod anti-affinity term(s){scope}: the spread replaces them")
            host = next((c for c in desired if c["topologyKey"] == config.host.topologyKey), None)
            if required and (host is None or host["whenUnsatisfiable"] != DO_NOT_SCHEDULE):
                out.warn(weakened_anti_affinity_warning(config, ctx.effective.replicas))
        record = {RECORD_REPLICAS: str(ctx.effective.replicas), RECORD_SETTINGS: config.spread_fingerprint(),
                  RECORD_KEYS: ",".join(c["topologyKey"] for c in desired)}
        if replaced_required:
            record[RECORD_REQUIRED] = "true"
        for k, v in record.items():
            if annotations.get(k) != v:
                draft.dict_at(ANNOTATIONS).update(record)
                break
    elif any(k in annotations for k in RECORD_ANNOTATIONS):
        target = draft.dict_at(ANNOTATIONS)
        for k in RECORD_ANNOTATIONS:
            target.pop(k, None)
        draft.prune_empty(ANNOTATIONS)
    if not desired:
        out.reason("both spreads are disabled: no constraints written")
    return desired


def replaced_required_before(*objs: dict[str, Any] | None) -> bool:
    """Rule S18: whether a record says the spread replaced a required anti-affinity earlier."""
    for o in objs:
        annotations = ((o or {}).get("metadata") or {}).get("annotations")
        if annotations and annotations.get(RECORD_REQUIRED) == "true":
            return True
    return False


def weakened_anti_affinity_warning(config: Config, effective: int) -> str:
    """Rule S10: a required self anti-affinity was removed while the host spread written is only a preference:
    the setting that would keep it enforced (kept short: kubectl prints webhook warnings whole)."""
    host = config.host
    if not host.enabled:
        fix = "enable hostTopologySpread"
    elif host.whenUnsatisfiable == DO_NOT_SCHEDULE:
        fix = f"set hostTopologySpread.hardMinReplicas <= {effective}"
    else:
        fix = "set hostTopologySpread.enforceForRequiredAntiAffinity: true"
    return f"{HOST_WEAKENED_WARNING}: {fix}"


def matches_current_settings(obj: dict[str, Any], ctx: SpreadInputs, old: dict[str, Any]) -> bool:
    """Rule S14: whether ``obj`` already carries exactly what the current settings write (the
    controller's reconcileDrift rewrite, or a user who applied it): such an update is
    accepted, never reverted to the old object's rules."""
    probe = Draft(obj)
    written = write_spread(probe, ctx, Outcome(), previous=old)
    return bool(written) and not diff_owned(obj, probe.root, OWNED_PATHS)


def keep_old_placement(draft: Draft, old: dict[str, Any], ctx: SpreadInputs, out: Outcome) -> None:
    """Rule S12: keep the old object's placement rules.

    Managed constraints and the record come back from the old object when the new one dropped or
    changed them (``kubectl replace`` drops them), so an update never rolls pods through this policy
    unless the count changed. A Deployment policylib never wrote keeps its previous rules too when an
    update drops them: its constraints on the managed keys and its anti-affinity that the spread would
    replace (a constraint on another key that the update drops is the user's own change).
    """
    if not recorded_keys(old):
        keep_unwritten_placement(draft, old, ctx, out)
        return
    remove_restored_anti_affinity(draft, old, ctx, out)
    keys = managed_keys(ctx.config, old, draft.original)
    current = _constraints_of(draft.root)
    others, ours_new = _split(current, keys)
    _, ours_old = _split(_constraints_of(old), keys)
    if ours_new != ours_old:
        new = others + ours_old
        draft.set(CONSTRAINTS, new) if new else draft.delete(CONSTRAINTS)
        changed = sorted(k for k in keys if [c for c in ours_new if c.get("topologyKey") == k] !=
                         [c for c in ours_old if c.get("topologyKey") == k])
        if ours_new:
            out.warn(f"reverted changes to the managed spread on {', '.join(changed)}: set by policylib "
                                f"when the effective replica count changes (opt out: label {SKIP_KEY}=true)")
        else:
            out.reason(f"restored the spread on {', '.join(changed)} from the old object")
    old_annotations = (old.get("metadata") or {}).get("annotations") or {}
    new_annotations = draft.get(ANNOTATIONS) or {}
    if any(old_annotations.get(k) != new_annotations.get(k) for k in RECORD_ANNOTATIONS):
        target = draft.dict_at(ANNOTATIONS)
        for k in RECORD_ANNOTATIONS:
            if k in old_annotations:
                target[k] = old_annotations[k]
            else:
                target.pop(k, None)
        draft.prune_empty(ANNOTATIONS)


def restored_anti_affinity(obj: dict[str, Any], old: dict[str, Any], ctx: SpreadInputs) -> dict[str, list[Any]]:
    """Rule S22: the pod anti-affinity terms the spread replaces that ``obj`` has and the stored
    Deployment ``old``, which policylib wrote (S15's record), does not: terms an UPDATE brings back.
    With both spreads off nothing is replaced, and so nothing is brought back."""
    config = ctx.config
    if not recorded_keys(old) or not (config.zone.enabled or config.host.enabled):
        return {}
    mode = config.removePodAntiAffinity
    new_terms = managed_anti_affinity(_affinity_of(obj), ctx.pod_labels, ctx.namespace, mode)
    old_terms = managed_anti_affinity(_affinity_of(old), ctx.pod_labels, ctx.namespace, mode)
    out: dict[str, list[Any]] = {}
    for key, terms in new_terms.items():
        back = [t for t in terms if t not in old_terms.get(key, [])]
        if back:
            out[key] = back
    return out


def _affinity_of(obj: dict[str, Any]) -> Any:
    return (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("affinity")


def without_terms(affinity: dict[str, Any], terms: dict[str, list[Any]]) -> dict[str, Any] | None:
    """``affinity`` without ``terms`` (by field), emptied maps removed (None when nothing is left)."""
    anti = dict(affinity["podAntiAffinity"])
    for key, gone in terms.items():
        kept = [t for t in anti.get(key) or [] if t not in gone]
        if kept:
            anti[key] = kept
        else:
            anti.pop(key, None)
    new = {k: v for k, v in affinity.items() if k != "podAntiAffinity"}
    if anti:
        new["podAntiAffinity"] = anti
    return new or None


def remove_restored_anti_affinity(draft: Draft, old: dict[str, Any], ctx: SpreadInputs, out: Outcome) -> int:
    """Rule S22: the anti-affinity the spread replaces gets the CREATE treatment on an UPDATE of a
    Deployment policylib wrote (S15's record), so a re-applied manifest changes nothing.

    ``kubectl apply``'s three-way merge puts back a term the webhook removed (the last-applied
    annotation has it, the live object does not); server-side apply and ``kubectl replace`` send the
    manifest, which has it. Removed again, the stored pod template (and its hash) stays the same.
    Terms the stored object still has are its own placement and stay (S12). Returns how many terms
    went; a required one under a host spread that is only a preference warns as on CREATE (S10)."""
    terms = restored_anti_affinity(draft.root, old, ctx)
    if not terms:
        return 0
    affinity = without_terms(draft.get(AFFINITY), terms)
    draft.set(AFFINITY, affinity) if affinity is not None else draft.delete(AFFINITY)
    removed = sum(len(t) for t in terms.values())
    scope = "" if ctx.config.removePodAntiAffinity == "all" else " selecting the Deployment's own pods"
    out.reason(f"removed {removed} pod anti-affinity term(s){scope} that the update brought back: "
               "the spread replaced them when it was written")
    host = next((c for c in _constraints_of(old) if isinstance(c, dict)
                 and c.get("topologyKey") == ctx.config.host.topologyKey), None)
    if terms.get(REQUIRED_ANTI_AFFINITY) and (host is None or host.get("whenUnsatisfiable") != DO_NOT_SCHEDULE):
        out.warn(weakened_anti_affinity_warning(ctx.config, ctx.effective.replicas))
    return removed


def brings_new_required_anti_affinity(obj: dict[str, Any], old: dict[str, Any], ctx: SpreadInputs) -> bool:
    """Rule S22: an UPDATE of a Deployment policylib wrote brings a required self anti-affinity that the
    record does not say the spread replaced (S18): a change of the user's, written as on CREATE."""
    if replaced_required_before(old):
        return False
    return bool(restored_anti_affinity(obj, old, ctx).get(REQUIRED_ANTI_AFFINITY))


def keep_unwritten_placement(draft: Draft, old: dict[str, Any], ctx: SpreadInputs, out: Outcome) -> None:
    """Rule S13: a Deployment policylib never wrote, updated by a manifest that drops its placement (a new
    generator version, ``kubectl replace``) with its count unchanged: put back what was dropped, per
    managed topology key and for the anti-affinity the spread would replace. With both spreads off
    nothing of ours is in play, and the update is the user's."""
    if not (ctx.config.zone.enabled or ctx.config.host.enabled):
        return
    keys = managed_keys(ctx.config, old, draft.original)
    current = _constraints_of(draft.root)
    present = {c.get("topologyKey") for c in current if isinstance(c, dict)}
    _, ours_old = _split(_constraints_of(old), keys)
    dropped = [c for c in ours_old if c.get("topologyKey") not in present]
    kept = []
    if dropped:
        draft.set(CONSTRAINTS, current + dropped)
        kept.append("spread on " + ", ".join(sorted({c.get("topologyKey", "") for c in dropped})))
    old_spec = ((old.get("spec") or {}).get("template") or {}).get("spec") or {}
    old_terms = managed_anti_affinity(old_spec.get("affinity"), ctx.pod_labels, ctx.namespace,
                                      ctx.config.removePodAntiAffinity)
    new_terms = managed_anti_affinity(draft.get(AFFINITY), ctx.pod_labels, ctx.namespace,
                                      ctx.config.removePodAntiAffinity)
    if old_terms and not new_terms:
        draft.set(AFFINITY, restore_anti_affinity(draft.get(AFFINITY), old_terms))
        kept.insert(0, "anti-affinity")
    if kept:
        out.warn(f"kept the dropped placement ({'; '.join(kept)}) until replicas change, or "
                            "reconcileDrift")


def invalid_constraint_warnings(constraints: list[Any], written: list[dict[str, Any]]) -> list[str]:
    """Rule S16: report constraints the API server would reject; ours are valid by construction,
    so the check runs only when the list holds constraints we did not just write."""
    if constraints == written:
        return []
    return [f"{err} (the API server will reject this Deployment)"
            for err in validate_topology_spread_constraints(constraints or None)]


def _checked_old(old: Any, ref: str) -> None:
    """Rule S1 for the old object of an UPDATE (the API server's stored Deployment): the update rules
    read it too; its errors are named under ``oldObject``."""
    if not isinstance(old, dict):
        raise_if_any(ref, [invalid("oldObject", old, "must be an object")])
    raise_if_any(ref, [e.under("oldObject") for e in deployment_shape_errors(old)])


def _old_effective(old: dict[str, Any], facts: ClusterFacts, namespace: str) -> Effective | None:
    try:
        return effective_replicas(old, facts, namespace)
    except PolicyError:
        return None


def mutate_deployment(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                      facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Rules P4, S2-S22: apply the spread rules to an ``apps/v1`` Deployment on CREATE (``old`` None) or UPDATE."""
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    ctx = _spread_of(req)
    out = Outcome([f"effective replicas {ctx.effective.replicas} ({ctx.effective.source})"],
                  list(ctx.effective.warnings))
    draft = Draft(obj)
    written: list[dict[str, Any]] = []
    if old is None:
        written = write_spread(draft, ctx, out)
    else:
        _checked_old(old, req.ref)
        trigger = update_trigger(ctx.effective, _old_effective(old, req.facts, req.namespace), recorded_replicas(old))
        held = hold_for_next_rollout(obj, old, ctx) if trigger else None
        if not trigger and brings_new_required_anti_affinity(obj, old, ctx):
            trigger = "the update adds a required anti-affinity the spread replaces: written as on CREATE"
        if held is not None:
            out.reason(trigger or "", held.reasons[-1])
            draft = held.draft
        elif trigger:
            out.reason(trigger)
            written = write_spread(draft, ctx, out, previous=old)
        else:
            kept = Outcome()
            keep_old_placement(draft, old, ctx, kept)
            # only an update that keeping the old rules would change needs the probe rewrite
            if diff_owned(obj, draft.root, OWNED_PATHS) and matches_current_settings(obj, ctx, old):
                draft = Draft(obj)
                out.reason("placement rules already match the current settings: accepted")
            else:
                out.merge(kept)
                out.reason("effective replica count unchanged: placement rules kept")
    if written and PENDING in (draft.get(ANNOTATIONS) or {}):
        draft.dict_at(ANNOTATIONS).pop(PENDING)   # rule S19: the pending constraints are written now
        draft.prune_empty(ANNOTATIONS)
    patch = diff_owned(obj, draft.root, OWNED_PATHS)
    result_obj = draft.root if patch else obj
    out.warn(*invalid_constraint_warnings(_constraints_of(result_obj), written))
    return out.result(result_obj, patch)


# --- rewrite: OnNextRollout (rule S19) ------------------------------------------------

def _template(obj: dict[str, Any]) -> Any:
    return (obj.get("spec") or {}).get("template")


def pending_note(before: list[Any], after: list[Any], recorded: int | None, effective: int) -> str:
    """What the held rewrite would change, per topology key: ``7 effective replicas (written for 4):
    kubernetes.io/hostname DoNotSchedule, maxSkew 2, minDomains 3 -> DoNotSchedule, maxSkew 3, ...``."""
    old = {c.get("topologyKey"): c for c in before if isinstance(c, dict)}
    new = {c.get("topologyKey"): c for c in after if isinstance(c, dict)}
    changes = []
    for key in sorted(k for k in set(old) | set(new) if isinstance(k, str)):
        o, n = old.get(key), new.get(key)
        if o != n:
            changes.append(f"{key} {_describe(o) if o else 'none'} -> {_describe(n) if n else 'none'}")
    written_for = f" (written for {recorded})" if recorded is not None else ""
    return f"{effective} effective replicas{written_for}: {'; '.join(changes) or 'placement rules differ'}"


@dataclass
class Held:
    """An UPDATE whose new count's constraints wait for the next rollout (rule S19)."""

    draft: Draft
    reasons: list[str]


def hold_for_next_rollout(obj: dict[str, Any], old: dict[str, Any], ctx: SpreadInputs) -> Held | None:
    """Rule S19: under ``hostTopologySpread.rewrite: OnNextRollout``, an UPDATE whose effective count
    changed but whose pod template the user left alone keeps the old placement (no rollout) and records
    the change it holds back in the ``policylib.io/spread-pending`` annotation. None (write as rule S11
    says) under ``OnCountChange``, when the user's update changes the pod template anyway (one rollout
    carries both), or when the new count's constraints equal the old ones (a metadata-only write)."""
    if ctx.config.host.rewrite != ON_NEXT_ROLLOUT or not recorded_keys(old):
        return None
    kept = Draft(obj)
    keep_old_placement(kept, old, ctx, Outcome())
    if _template(kept.root) != _template(old):
        return None   # the user rolls: the new constraints ride along
    probe = Draft(kept.root)
    write_spread(probe, ctx, Outcome(), previous=old)
    if _template(probe.root) == _template(old):
        return None
    note = pending_note(_constraints_of(old), _constraints_of(probe.root), recorded_replicas(old),
                        ctx.effective.replicas)
    if (kept.get(ANNOTATIONS) or {}).get(PENDING) != note:
        kept.dict_at(ANNOTATIONS)[PENDING] = note
    return Held(kept, [f"rewrite OnNextRollout: held until the pod template changes ({note})"])


def pending_rewrite(obj: dict[str, Any]) -> str | None:
    """Rule S19: the change a Deployment's ``policylib.io/spread-pending`` annotation holds, if any."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(PENDING)
    return str(value) if value else None


def _spread_of(req: Admission) -> SpreadInputs:
    """The Deployment read and checked (rule S1), with its effective replica count (rule S2)."""
    selector, pod_labels = _checked_shape(req.obj, req.ref)
    effective = effective_replicas(req.obj, req.facts, req.namespace)
    return SpreadInputs(req.config, req.namespace, selector, pod_labels, effective)


# --- drift (rule S17, reconcileDrift) -----------------------------------------

@dataclass(frozen=True)
class Drift:
    """Whether an existing Deployment needs a rewrite under reconcileDrift, and why."""

    needs_rewrite: bool
    effective: int
    reasons: tuple[str, ...]
    #: The Deployment has pod anti-affinity the spread replaces (the legacy ha_topology_key rule): a
    #: fact for counting and deciding, where ``reasons`` are words for people.
    replaces_anti_affinity: bool = False


def _describe(c: dict[str, Any]) -> str:
    parts = [f"{c.get('whenUnsatisfiable')}", f"maxSkew {c.get('maxSkew')}"]
    if "minDomains" in c:
        parts.append(f"minDomains {c['minDomains']}")
    return ", ".join(parts)


def spread_drift(deployment: dict[str, Any], config: Config | None = None, facts: ClusterFacts | None = None,
                 namespace: str | None = None) -> Drift:
    """Rule S17: rewrite a Deployment that has >= hardMinReplicas
    effective replicas and still has pod anti-affinity, or constraints that differ from
    the current settings.

    "Differ" is measured against what :func:`write_spread` would write, so a
    Deployment this policy would leave unchanged never counts as drift; the
    reasons name each difference.
    """
    req, skipped = admission(deployment, config, None, facts, namespace)
    if not is_deployment(deployment) or skipped:
        return Drift(False, 0, ("not a managed Deployment",))
    ctx = _spread_of(req)
    config, effective = req.config, ctx.effective
    if effective.replicas < config.host.hardMinReplicas:
        return Drift(False, effective.replicas, (f"{effective.replicas} effective replicas < hardMinReplicas "
                                                 f"{config.host.hardMinReplicas}: kept until the count changes",))
    draft = Draft(deployment)
    write_spread(draft, ctx, Outcome())
    reasons = []
    before_aff, after_aff = draft.original["spec"]["template"]["spec"].get("affinity"), draft.get(AFFINITY)
    replaces_anti_affinity = before_aff != after_aff
    if replaces_anti_affinity:
        reasons.append("has pod anti-affinity that the spread replaces")
    before, after = _constraints_of(deployment), _constraints_of(draft.root)
    if before != after:
        keys = managed_keys(config, deployment)
        _, old_ours = _split(before, keys)
        _, new_ours = _split(after, keys)
        old_by_key = {c.get("topologyKey"): c for c in old_ours}
        new_by_key = {c.get("topologyKey"): c for c in new_ours}
        for key in sorted(set(old_by_key) | set(new_by_key)):
            o, n = old_by_key.get(key), new_by_key.get(key)
            if o is None and n is not None:
                reasons.append(f"missing spread on {key} ({_describe(n)})")
            elif n is None:
                reasons.append(f"has a spread on {key} that the current settings do not write")
            elif o is not None and o != n:
                reasons.append(f"spread on {key} differs: {_describe(o)} -> {_describe(n)}"
                               if _describe(o) != _describe(n) else f"spread on {key} differs in selector or policies")
        if not reasons:
            reasons.append("topology spread constraints differ from the current settings")
    return Drift(bool(reasons), effective.replicas, tuple(reasons), replaces_anti_affinity)
