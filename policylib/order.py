"""Apply order (rule S21): what a Deployment or StatefulSet applied before its HorizontalPodAutoscaler goes through.

``kubectl apply -f`` creates objects in file order and Helm installs Deployments before
HorizontalPodAutoscalers. The webhook reads an HPA's minReplicas from the cluster (rule S2), so a
Deployment created before its HPA is stored with the count its own ``spec.replicas`` gives; when the
HPA arrives the controller follows rule S11 (``OnCountChange``: one rewrite, a rollout if the
constraints change) or rule S19 (``OnNextRollout``: the change waits for the next rollout). ``preview``
states this for the objects it reads, in their order, so preview and the cluster agree. Pure.
"""
from __future__ import annotations

from typing import Any, Sequence

from .config import ON_NEXT_ROLLOUT, Config
from .facts import ClusterFacts, hpa_target, is_hpa, namespace_of
from .patch import diff_owned
from .result import Result
from .spread import AUTOSCALING_MIN_ANNOTATION, OWNED_PATHS, effective_replicas, mutate_workload, pod_template_kind

#: Helm's install order for the kinds that matter here (helm/pkg/releaseutil/kind_sorter.go InstallOrder).
HELM_INSTALL_ORDER = ("Namespace", "ServiceAccount", "Secret", "ConfigMap", "Service", "DaemonSet", "Pod",
                      "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet",
                      "Job", "CronJob")


def helm_sorted(objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``objects`` in Helm's install order (stable within a kind; unknown kinds last, as Helm does)."""
    rank = {k: i for i, k in enumerate(HELM_INSTALL_ORDER)}
    return sorted(objects, key=lambda o: rank.get(str(o.get("kind")), len(rank)))


def _host(obj: dict[str, Any], config: Config) -> dict[str, Any] | None:
    constraints = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("topologySpreadConstraints")
    return next((c for c in constraints or [] if isinstance(c, dict) and c.get("topologyKey") == config.host.topologyKey),
                None)


def _shape(c: dict[str, Any] | None) -> str:
    if c is None:
        return "no host spread"
    return f"host spread {c.get('whenUnsatisfiable')}, maxSkew {c.get('maxSkew')}"


def apply_order_note(objects: Sequence[dict[str, Any]], index: int, config: Config) -> str | None:
    """Rule S21: for the Deployment or StatefulSet at ``index``, when an HPA that targets it comes later in ``objects``
    and changes its effective count, what the API server stores first and what follows; None otherwise
    (the HPA comes first, there is none, or the pod template comes out the same: the controller's
    follow-up is then a metadata-only write)."""
    d = objects[index]
    kind = pod_template_kind(d)
    if kind is None:
        return None
    ns, name = namespace_of(d), str((d.get("metadata") or {}).get("name") or "")
    later = [o for o in objects[index + 1:] if is_hpa(o) and hpa_target(o) == (ns, kind.hpa_index_name(name))]
    if not later or AUTOSCALING_MIN_ANNOTATION in ((d.get("metadata") or {}).get("annotations") or {}):
        return None
    before = ClusterFacts.from_objects(o for o in objects[:index] if is_hpa(o))
    after = ClusterFacts.from_objects(o for o in objects if is_hpa(o))
    first, final = effective_replicas(d, before, ns).replicas, effective_replicas(d, after, ns).replicas
    if first == final:
        return None
    stored = mutate_workload(d, config, facts=before, namespace=ns).object
    wanted = mutate_workload(d, config, facts=after, namespace=ns).object
    hpa = (later[0].get("metadata") or {}).get("name")
    how = "as Helm installs them" if kind.kind == "Deployment" else "as kubectl apply -f creates them in file order"
    head = (f"applied in this order (the {kind.kind} before HorizontalPodAutoscaler {hpa}, {how}), "
            f"it is first stored with effective replicas {first} ({_shape(_host(stored, config))})")
    fix = (f"; to store it right at once, apply the HPA first or annotate the {kind.kind} "
           f"{AUTOSCALING_MIN_ANNOTATION}: \"{final}\"")
    if stored["spec"]["template"] == wanted["spec"]["template"]:
        return None   # the controller's follow-up is a metadata-only write: nothing a user sees
    if kind.settings(config).host.rewrite == ON_NEXT_ROLLOUT:   # rules S19, A9
        return (f"{head}; the controller then records the change to {final} ({_shape(_host(wanted, config))}) as "
                f"pending: it is written on the {kind.kind}'s next rollout (rewrite: OnNextRollout){fix}")
    return (f"{head}; the controller then rewrites it for {final} ({_shape(_host(wanted, config))}): one rollout "
            f"right after the first{fix}")


def stored_in_order(objects: Sequence[dict[str, Any]], index: int, config: Config) -> Result | None:
    """Rule S21 under ``rewrite: OnNextRollout`` (a StatefulSet always, rule A9): the workload at ``index`` as the
    cluster keeps it when its HPA comes later and changes its pod template: first stored without the HPA, then the
    controller's pending record (rule S19). None when :func:`apply_order_note` has nothing to say or the rewrite is
    ``OnCountChange`` (the cluster then ends with what preview shows)."""
    d = objects[index]
    kind = pod_template_kind(d)
    if kind is None or kind.settings(config).host.rewrite != ON_NEXT_ROLLOUT \
            or apply_order_note(objects, index, config) is None:
        return None
    ns = namespace_of(d)
    before = ClusterFacts.from_objects(o for o in objects[:index] if is_hpa(o))
    after = ClusterFacts.from_objects(o for o in objects if is_hpa(o))
    first = mutate_workload(d, config, facts=before, namespace=ns)
    held = mutate_workload(first.object, config, old=first.object, facts=after, namespace=ns)
    patch = diff_owned(d, held.object, OWNED_PATHS)
    return Result(held.object, patch, reasons=list(first.reasons) + list(held.reasons), warnings=list(first.warnings))
