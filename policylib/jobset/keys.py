"""What a JobSet is, and the JobSet keys policylib reads or writes (sigs.k8s.io/jobset v0.12.0,
api/jobset/v1alpha2/jobset_types.go)."""
from __future__ import annotations

from typing import Any

from ..constants import JOBSET_API_VERSION, TRAINER_GROUP

KIND = "JobSet"
#: JobSet's exclusive placement (rule J5): read from the JobSet's (or a ReplicatedJob's Job template's)
#: annotations, copied to each Job and pod; JobSet's pod webhooks then put each Job alone in one domain of the
#: node label it names (the index-0 pod gets affinity and anti-affinity, the others wait for it to bind).
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
#: The Volcano queue of a JobSet's PodGroup (gang scheduler volcano, rule J3), from the JobSet's annotation: the key
#: Volcano reads on pods and Trainer on a JobSet template (Trainer v2.3.0 pkg/runtime/framework/plugins/volcano).
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
#: ``spec.startupPolicy.startupPolicyOrder``'s value that starts each ReplicatedJob after the previous is ready.
IN_ORDER = "InOrder"


def is_jobset(obj: object) -> bool:
    """A ``jobset.x-k8s.io/v1alpha2`` JobSet."""
    return isinstance(obj, dict) and obj.get("apiVersion") == JOBSET_API_VERSION and obj.get("kind") == KIND


def trainjob_owner(obj: dict[str, Any]) -> str | None:
    """Rule J6: the name of the Kubeflow Trainer TrainJob that controls this JobSet (Trainer makes one JobSet per
    TrainJob, named after it and owned by it), or None."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "TrainJob" \
                and str(ref.get("apiVersion", "")).startswith(f"{TRAINER_GROUP}/"):
            return str(ref.get("name"))
    return None
