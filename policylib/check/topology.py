"""The readers of the topology words on a live cluster (rule N10, extending rule D5): which of the schedulers and
controllers that read the words policylib writes for the one topology declaration the cluster runs, and a warning
for each word the configuration asks for that nobody there reads."""
from __future__ import annotations

from typing import Any, Sequence

from ..config import Config
from ..constants import HYPERNODE_API_VERSION, JOBSET_API_VERSION, NATIVE_GANG_API_VERSIONS, TRAINER_API_VERSION
from ..topology import Placement, placement
from ..topology.kueue import managed_by_kueue
from .finding import Finding, names

#: Each reader: (name, Pod name prefixes, image fragments, served ``group/version``s that show it), as upstream
#: installs it: Trainer v2.3.0 (manifests/base/manager/manager.yaml: kubeflow-trainer-controller-manager), JobSet
#: v0.12.0 (config/default: jobset-controller-manager), Kueue v0.19.2 (kueue-controller-manager), Volcano's
#: HyperNodes (topology.volcano.sh), Kubernetes' PodGroup (scheduling.k8s.io v1alpha2 on 1.36, v1beta1 on 1.37).
READERS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    ("Trainer", ("kubeflow-trainer-controller-manager",), ("kubeflow/trainer/trainer-controller-manager",),
     (TRAINER_API_VERSION,)),
    ("JobSet", ("jobset-controller-manager",), ("jobset/jobset",), (JOBSET_API_VERSION,)),
    ("Kueue", ("kueue-controller-manager",), ("kueue/kueue",), ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")),
    ("Volcano network topology", (), (), (HYPERNODE_API_VERSION,)),
    ("kube-scheduler topology", (), (), NATIVE_GANG_API_VERSIONS),
)


def topology_readers(objects: Sequence[dict[str, Any]], served: Sequence[str]) -> dict[str, list[str]]:
    """Rule N10: each reader of topology words the cluster runs, with what shows it (a running Pod, a served API;
    for Volcano, the HyperNodes it holds)."""
    found: dict[str, list[str]] = {}
    for pod in objects:
        if pod.get("kind") != "Pod" or (pod.get("status") or {}).get("phase") != "Running":
            continue
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        images = [str(c.get("image") or "") for c in (pod.get("spec") or {}).get("containers") or []
                  if isinstance(c, dict)]
        for reader, prefixes, fragments, _ in READERS:
            if (prefixes and name.startswith(prefixes)) or any(f in i for f in fragments for i in images):
                found.setdefault(reader, []).append(f"Pod {meta.get('namespace') or 'default'}/{name} running")
    for reader, _, _, apis in READERS:
        for api in apis:
            if api in served:
                found.setdefault(reader, []).append(f"API {api} served")
    hypernodes = [o for o in objects if o.get("kind") == "HyperNode"]
    if hypernodes and "Volcano network topology" in found:
        found["Volcano network topology"].append(f"{len(hypernodes)} HyperNode(s)")
    return {r: found[r] for r, *_ in READERS if r in found}


def check_topology(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]],
                   served_apis: Sequence[str] | None) -> list[Finding]:
    """Rule N10, on a live cluster only (``served_apis`` given) with a declared ``topology``: an ``info`` naming
    the readers of topology words it runs; a ``warning`` for a level whose node label no Node carries, for Kueue
    words on queue-labelled jobs without Kueue, for ``jobPerDomain`` without JobSet's controller (its pod webhooks
    enforce it), for Volcano words whose tier no HyperNode has, and for levels Kueue's Topologies disagree with
    (:func:`kueue_topology_findings`)."""
    p = placement(config)
    if served_apis is None or not p.declared:
        return []
    readers = topology_readers(objects, served_apis)
    shown = "; ".join(f"{r} ({', '.join(why)})" for r, why in readers.items()) or "none"
    out = [Finding("info", "topology", f"readers of topology words this cluster runs: {shown}")]
    for level in p.levels:
        if not any(level.node_label in ((n.get("metadata") or {}).get("labels") or {}) for n in nodes):
            out.append(Finding("warning", level.source,
                               f"level {level.name}: no Node carries the label {level.node_label}: no scheduler can "
                               f"place anything within one {level.name}"))
    queued = [o for o in objects if o.get("kind") != "Pod" and managed_by_kueue(o)]
    if p.within is not None and queued and "Kueue" not in readers:
        out.append(Finding("warning", p.within_setting,
                           f"Kueue's podset topology annotations are written on {len(queued)} queue-labelled "
                           f"job(s) ({names(_ref(o) for o in queued)}), but this cluster runs no Kueue: nobody "
                           "reads them"))
    if p.job_per_domain is not None and "JobSet" not in readers:
        out.append(Finding("warning", p.job_setting,
                           "JobSet's exclusive-topology annotation is enforced by JobSet's pod webhooks, but this "
                           "cluster runs no JobSet controller: nobody reads it"))
    out += kueue_topology_findings(p, objects)
    if p.within is not None and config.gang.method == "podgroup" and config.gang.scheduler == "volcano" \
            and p.within.tier is not None:
        tiers = sorted({int(t) for o in objects if o.get("kind") == "HyperNode"
                        for t in [(o.get("spec") or {}).get("tier")] if isinstance(t, int)})
        if "Volcano network topology" not in readers:
            out.append(Finding("warning", p.within_setting,
                               "Volcano's PodGroup networkTopology is written, but this cluster serves no "
                               "topology.volcano.sh: nobody reads it"))
        elif p.within.tier not in tiers:
            out.append(Finding("warning", p.within_setting,
                               f"{p.within.name} is Volcano tier {p.within.tier} in topology.levels, but no HyperNode "
                               f"has tier {p.within.tier} (their tiers: {', '.join(map(str, tiers)) or 'none'}): "
                               "the declared levels disagree with the HyperNodes"))
    return out


def kueue_topology_findings(p: Placement, objects: list[dict[str, Any]]) -> list[Finding]:
    """Rule N10: the declared levels against Kueue's Topologies (``kueue.x-k8s.io`` Topology objects; a level is
    its node label there): a warning for a Topology whose levels run in another order than the declared ones, and
    for a gang placement whose node label no Topology has (Kueue keeps such a workload inadmissible: "no
    requested topology level")."""
    topologies = [o for o in objects if o.get("kind") == "Topology"
                  and str(o.get("apiVersion", "")).startswith("kueue.x-k8s.io/")]
    if not topologies:
        return []
    out = []
    order = {lv.node_label: i for i, lv in enumerate(p.levels)}
    found: set[str] = set()
    for topology in topologies:
        name = (topology.get("metadata") or {}).get("name")
        levels = [str(lv.get("nodeLabel")) for lv in (topology.get("spec") or {}).get("levels") or []
                  if isinstance(lv, dict)]
        found.update(levels)
        shared = [label for label in levels if label in order]
        if shared != sorted(shared, key=order.__getitem__):
            out.append(Finding("warning", "topology.levels",
                               f"Kueue Topology {name} orders its levels {', '.join(levels)}; topology.levels "
                               f"orders them {', '.join(lv.node_label for lv in p.levels if lv.node_label in shared)}"))
    if p.within is not None and p.within.node_label not in found:
        out.append(Finding("warning", p.within_setting,
                           f"{p.within.node_label} is a level of no Kueue Topology "
                           f"({', '.join(str((t.get('metadata') or {}).get('name')) for t in topologies)}): Kueue "
                           "keeps the workloads that ask for it inadmissible (no requested topology level)"))
    return out


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace') or 'default'}/{meta.get('name')}"
