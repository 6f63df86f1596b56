"""LeaderWorkerSets on the harness (``testcluster --lws``: the real LWS v0.9.0 manager and webhooks, built by ``make
testcluster-lws``): the object, and what to read back of what LWS and the StatefulSet controller make of it.

An LWS ``<name>`` of ``replicas`` groups of ``size`` pods becomes the leader StatefulSet ``<name>`` (one leader pod
``<name>-<group>`` per group, owned by the LWS) and, per leader pod, the worker StatefulSet ``<name>-<group>``
(owned by that leader pod) of ``size - 1`` worker pods ``<name>-<group>-<1..size-1>``. Every pod carries
``leaderworkerset.sigs.k8s.io/name``, ``group-index`` and ``worker-index`` (0 on leaders), written by LWS's
webhooks. With ``--lws-gang volcano`` LWS also makes one Volcano PodGroup per group (``minMember = size``, owned by the
leader pod) and names it on every pod (``scheduling.k8s.io/group-name``); the pods must name ``schedulerName:
volcano`` themselves (``lws(..., scheduler="volcano")``).

To send an LWS through policylib's webhook too, start the cluster with ``Cluster(..., lws=True)``, register the
webhook as any other test does (``Webhook``, ``gang_webhook_and_controller``) and create ``lws(...)`` with
``create_lws``: the API server calls LWS's own mutating webhooks (``lws-mutating-webhook-configuration``) and
policylib's in the order of their configurations' names."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from .harness import NODE_GROUP_LABEL, Cluster, wait_for

LWS_RESOURCE = "leaderworkersets.leaderworkerset.x-k8s.io"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
VC_PODGROUP = "podgroups.scheduling.volcano.sh"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
ZONE, RACK, HOST = "topology.kubernetes.io/zone", "example.com/rack", "kubernetes.io/hostname"
#: Racks of two Nodes of 2 CPUs (``write_rack_nodes``): two in zone a, one in b, one in c. A group of 3 pods of 1 CPU
#: fits in one rack, and no rack holds two such groups.
RACKS = {"a1": "a", "a2": "a", "b1": "b", "c1": "c"}
#: policylib's settings that pack each group within one rack (rules E5, E6), on zone, rack and host.
PACKED_CONFIG = {"topology": {"levels": [{"name": "zone", "nodeLabel": ZONE}, {"name": "rack", "nodeLabel": RACK},
                                         {"name": "host", "nodeLabel": HOST}],
                              "gangs": {"within": "rack", "mode": "required"}}}


def write_rack_nodes(tmp: Path) -> Path:
    """The Nodes of ``RACKS`` (``<rack>-0``, ``<rack>-1``, labelled with their zone, rack and node group ``lws``) as a
    List file for ``Cluster(nodes=...)``."""
    items = [{"kind": "Node", "metadata": {"name": f"{rack}-{i}", "labels": {
        NODE_GROUP_LABEL: "lws", ZONE: zone, RACK: rack}},
        "status": {"allocatable": {"cpu": "2", "memory": "64Gi", "pods": "110"}}}
        for rack, zone in RACKS.items() for i in range(2)]
    path = tmp / "nodes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def lws(name: str, namespace: str, *, size: int, replicas: int, cpu: str = "100m", scheduler: str | None = None,
        node_selector: dict | None = None, labels: dict | None = None, annotations: dict | None = None,
        leader_template: dict | None = None) -> dict:
    """A ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet: ``replicas`` groups of ``size`` pods, each pod one container
    asking for ``cpu`` (request and limit), on ``scheduler`` and ``node_selector`` when given. No
    ``rolloutStrategy``: LWS's defaulting webhook writes it. ``leader_template`` (a pod template) sets
    ``leaderTemplate``; without it leaders use the worker template, as upstream documents."""
    spec: dict = {"containers": [{"name": "server", "image": "registry.example/serve:1",
                                  "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    template: dict = {"size": size, "workerTemplate": {"spec": spec}}
    if leader_template is not None:
        template["leaderTemplate"] = leader_template
    meta: dict = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"replicas": replicas, "leaderWorkerTemplate": template}}


def create_lws(c: Cluster, obj: dict) -> dict:
    """Create through the API server (every mutating webhook registered); returns the stored LWS."""
    c.kubectl("create", "-f", "-", input=json.dumps(obj))
    return c.get(LWS_RESOURCE, obj["metadata"]["name"], obj["metadata"]["namespace"])


def lws_pods(c: Cluster, ns: str, name: str) -> list[dict]:
    """The LWS's pods, leaders and workers."""
    return c.list("pods", ns, selector=f"{NAME_LABEL}={name}")


def running(pods: list[dict]) -> list[str]:
    """The names of the pods bound and Running (what the harness's fake kubelet reports for a bound pod), sorted."""
    return sorted(p["metadata"]["name"] for p in pods
                  if p["spec"].get("nodeName") and p.get("status", {}).get("phase") == "Running"
                  and not p["metadata"].get("deletionTimestamp"))


def groups(pods: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """The pods by their ``group-index`` label: ``(worker-index, name)``, sorted."""
    out: dict[str, list[tuple[str, str]]] = {}
    for p in pods:
        labels = p["metadata"].get("labels") or {}
        out.setdefault(labels.get(GROUP_INDEX, ""), []).append((labels.get(WORKER_INDEX, ""), p["metadata"]["name"]))
    return {g: sorted(members) for g, members in sorted(out.items())}


def expected_names(name: str, size: int, replicas: int) -> list[str]:
    """The pod names LWS gives ``replicas`` groups of ``size``: leaders ``<name>-<g>``, workers ``<name>-<g>-<w>``."""
    return sorted([f"{name}-{g}" for g in range(replicas)] +
                  [f"{name}-{g}-{w}" for g in range(replicas) for w in range(1, size)])


def statefulsets(c: Cluster, ns: str, name: str) -> dict[str, dict]:
    """The LWS's StatefulSets by name: the leader StatefulSet and one worker StatefulSet per group."""
    return {s["metadata"]["name"]: s for s in c.list("statefulsets", ns, selector=f"{NAME_LABEL}={name}")}


def controller_of(obj: dict) -> tuple[str, str] | None:
    """``(kind, name)`` of the object's controller owner reference."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref["kind"], ref["name"]
    return None


def wait_running(c: Cluster, ns: str, name: str, size: int, replicas: int, timeout: float = 240) -> list[dict]:
    """Waits until exactly the ``replicas`` groups' pods exist and each is bound and Running; returns them."""
    want = expected_names(name, size, replicas)

    def settled():
        pods = lws_pods(c, ns, name)
        names = sorted(p["metadata"]["name"] for p in pods)
        return pods if names == want and running(pods) == want else None
    return wait_for(f"LWS {ns}/{name}: exactly {replicas} groups of {size} pods Running ({', '.join(want)})",
                    settled, timeout=timeout, interval=1)


def racks_per_group(c: Cluster, pods: list[dict]) -> dict[str, list[str]]:
    """The racks (``RACK`` of their Nodes) each group's bound pods are in, by group index, sorted."""
    node_rack = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(RACK, "") for n in c.list("nodes")}
    return {g: sorted({node_rack[p["spec"]["nodeName"]] for p in pods
                       if p["metadata"]["labels"][GROUP_INDEX] == g and p["spec"].get("nodeName")})
            for g in groups(pods)}
