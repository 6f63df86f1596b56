"""One simulation for every verdict of ``check`` that asks where the workloads land: what ``policylib simulate``
reports for the same inputs (:class:`Simulation`), the Nodes as that run leaves them (a gang's capacity beside
the other workloads, rule G14), and what the cluster's Pending Pods say."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..constants import POD_TEMPLATE_HASH
from ..errors import PolicyError
from ..facts import namespace_of
from ..kubescheduler.model import NodeState
from ..kubescheduler.snapshot import node_states
from ..simulate import Placement, is_bound_pod, simulate_with_load
from ..workload_api import WorkloadApi
from .finding import Finding


@dataclass
class Simulation:
    """One run of ``policylib simulate``: its placements and the Nodes as it leaves them, or the error that
    stopped it (an unreadable object: preview and simulate name it)."""

    placements: list[Placement]
    error: PolicyError | None = None
    load: list[NodeState] | None = None


class Simulations:
    """The simulations ``check``'s verdicts read, each input simulated once: the enforced Deployments' Pending
    counts read the whole input (:meth:`of`), the simulated outcomes its manifests (:meth:`manifests`); where
    the two are the same objects with the same Workload API, they read one run."""

    def __init__(self, config: Config, nodes: list[dict[str, Any]], workload_api: WorkloadApi | None = None):
        self.config, self.nodes, self.workload_api = config, nodes, workload_api
        self._runs: dict[tuple[tuple[int, ...], int], Simulation] = {}

    def of(self, objects: list[dict[str, Any]], workload_api: WorkloadApi | None = None) -> Simulation:
        key = (tuple(id(o) for o in objects), id(workload_api))
        if key not in self._runs:
            try:
                placements, load = simulate_with_load(objects, self.nodes, self.config, workload_api=workload_api)
                self._runs[key] = Simulation(placements, load=load)
            except PolicyError as e:
                self._runs[key] = Simulation([], e)
        return self._runs[key]

    def manifests(self, objects: list[dict[str, Any]]) -> Simulation | None:
        """The input's manifests simulated (stored objects, with a uid, are the cluster's: their Pods say what is
        Pending, :func:`check_pending_pods`; bound Pods count as load), with the cluster's Workload API; None
        where there is nothing to simulate (no Node, no manifest)."""
        manifests = [o for o in objects if not (o.get("metadata") or {}).get("uid") or is_bound_pod(o)]
        if not self.nodes or not any(not is_bound_pod(o) for o in manifests):
            return None
        return self.of(manifests, self.workload_api)

    def load(self, objects: list[dict[str, Any]]) -> list[NodeState]:
        """The Nodes as the one simulation of the input's manifests (:meth:`manifests`) leaves them: what every
        workload it places and the bound Pods take. Shared by every caller: copy before binding. Where nothing
        is simulated, or an unreadable object stopped the run (preview names it), the bound Pods alone."""
        run = self.manifests(objects)
        if run is not None and run.load is not None:
            return run.load
        return node_states(self.nodes, [o for o in objects if is_bound_pod(o)])


def check_simulated(objects: list[dict[str, Any]], simulations: Simulations, found: list[Finding]) -> list[Finding]:
    """Every outcome ``policylib simulate`` reports for the input's manifests: an error for each workload with
    replicas that would stay Pending, unless another error names it already; a warning for each it did not place
    at all (another scheduler's pods, a TrainJob's unknown runtime): no verdict, so no error."""
    run = simulations.manifests(objects)
    if run is None or run.error is not None:
        return []
    placements = run.placements
    named = " ".join(f.message for f in found if f.severity == "error")
    out = []
    for p in placements:
        if p.unsimulated is not None:   # not a verdict: nothing is known of where its replicas would go
            out.append(Finding("warning", "simulate", f"{p.kind} {p.namespace}/{p.name}: not simulated: {p.unsimulated}; "
                                                      "check cannot tell whether its replicas fit"))
            continue
        if not p.pending_max or f"{p.namespace}/{p.name} " in named or f"{p.namespace}/{p.name}:" in named:
            continue
        why = f": {p.reasons[-1]}" if p.reasons else ""
        out.append(Finding("error", "simulate", f"{p.kind} {p.namespace}/{p.name}: {p.pending_range} of its "
                                                f"{p.replicas} replicas would stay Pending{why}"))
    return out


#: The scheduler's words (its plugins' messages) and the rule that holds a Pod for each.
HOLDING_RULES = (("pod topology spread constraints", "a DoNotSchedule topology spread (hostTopologySpread)"),
                 ("didn't match Pod's node affinity", "the pod's node affinity/selector"),
                 ("untolerated taint", "a taint the pod does not tolerate"),
                 ("Insufficient", "resources (requests exceed what the nodes have free)"),
                 ("anti-affinity", "a pod anti-affinity"),
                 ("network topology", "Volcano network topology (volcano.networkTopology)"),
                 ("gang", "the gang minimum"))


def _controller_name(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of what runs the Pod: a ReplicaSet's Deployment, else its controller owner."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and isinstance(ref.get("name"), str):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            suffix = labels.get(POD_TEMPLATE_HASH)
            if ref.get("kind") == "ReplicaSet" and suffix and ref["name"].endswith("-" + str(suffix)):
                return "Deployment", ref["name"][: -len(str(suffix)) - 1]
            return str(ref.get("kind")), ref["name"]
    return None


def check_pending_pods(objects: list[dict[str, Any]]) -> list[Finding]:
    """``check --cluster``: the Pods Pending now because the scheduler found no node, by the workload
    that owns them, with the scheduler's message and the rule that holds them."""
    held: dict[tuple[str, str, str], list[str]] = {}
    for pod in objects:
        if pod.get("kind") != "Pod" or (pod.get("status") or {}).get("phase") != "Pending":
            continue
        cond = next((c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict)
                     and c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        owner = _controller_name(pod)
        if cond is None or owner is None or cond.get("reason") != "Unschedulable":
            continue
        held.setdefault((owner[0], namespace_of(pod), owner[1]), []).append(str(cond.get("message") or ""))
    out = []
    for (kind, ns, name), messages in sorted(held.items()):
        message = messages[0]
        rules = [rule for words, rule in HOLDING_RULES if words in message] or ["the scheduler's filters"]
        out.append(Finding("error", "pending", f"{kind} {ns}/{name}: {len(messages)} Pod(s) Pending now, held by "
                                               f"{', '.join(rules)}: {message}"))
    return out
