"""The spread policy's vocabulary: its record annotations, the paths it owns, and small readers of a
Deployment (what the record says, which constraint keys are managed: rule S8)."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..constants import APPS_API_VERSION
from ..result import DOMAIN

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


def recorded_keys(obj: dict[str, Any] | None) -> set[str]:
    """Topology keys this policy wrote earlier, from the Deployment's record annotation."""
    if not obj:
        return set()
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECORD_KEYS) or ""
    return {k for k in str(raw).split(",") if k}


def recorded_replicas(obj: dict[str, Any] | None) -> int | None:
    raw = ((obj or {}).get("metadata") or {}).get("annotations", {}) or {}
    try:
        return int(raw.get(RECORD_REPLICAS))  # type: ignore[arg-type]  # None and junk raise, as intended
    except (TypeError, ValueError):
        return None


def replaced_required_before(*objs: dict[str, Any] | None) -> bool:
    """Rule S18: whether a record says the spread replaced a required anti-affinity earlier."""
    for o in objs:
        annotations = ((o or {}).get("metadata") or {}).get("annotations")
        if annotations and annotations.get(RECORD_REQUIRED) == "true":
            return True
    return False


def managed_keys(config: Config, *objs: dict[str, Any] | None) -> set[str]:
    """Rule S8: keys whose constraints this policy owns: enabled spreads' keys and keys it wrote before.

    A user's own constraint on the key of a disabled spread stays unless we
    wrote it (``enabled: false`` means the constraint is not written).
    """
    keys = {s.topologyKey for s in (config.zone, config.host) if s.enabled}
    for obj in objs:
        keys |= recorded_keys(obj)
    return keys


def constraints_of(obj: dict[str, Any]) -> list[Any]:
    """The pod template's topologySpreadConstraints (an empty list when absent or not a list)."""
    value = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("topologySpreadConstraints")
    return value if isinstance(value, list) else []


def affinity_of(obj: dict[str, Any]) -> Any:
    """The pod template's affinity, as it is."""
    return (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("affinity")


def template_of(obj: dict[str, Any]) -> Any:
    """The Deployment's pod template, as it is."""
    return (obj.get("spec") or {}).get("template")


def split_managed(constraints: list[Any], keys: set[str]) -> tuple[list[Any], list[Any]]:
    """Rule S8: the constraints on other keys (kept in order) and those on the managed ``keys``."""
    def managed(c: object) -> bool:
        return isinstance(c, dict) and isinstance(c.get("topologyKey"), str) and c["topologyKey"] in keys
    return [c for c in constraints if not managed(c)], [c for c in constraints if managed(c)]


def describe_constraint(c: dict[str, Any]) -> str:
    """A constraint in words for reasons and notes: ``DoNotSchedule, maxSkew 2, minDomains 3``."""
    parts = [f"{c.get('whenUnsatisfiable')}", f"maxSkew {c.get('maxSkew')}"]
    if "minDomains" in c:
        parts.append(f"minDomains {c['minDomains']}")
    return ", ".join(parts)
