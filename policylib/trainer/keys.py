"""What a TrainJob is, and the Kubeflow Trainer keys policylib reads or writes (github.com/kubeflow/trainer/v2
v2.3.0, pkg/apis/trainer/v1alpha1)."""
from __future__ import annotations

from ..constants import TRAINER_API_VERSION
from ..result import DOMAIN

KIND = "TrainJob"
#: The ``manager`` of policylib's ``spec.runtimePatches`` entry (rule T3): Trainer's validation wants a
#: domain-prefixed path (``IsDomainPrefixedPath``), and each manager owns one entry.
MANAGER = f"{DOMAIN}/gang"
#: The label on a runtime's replicated job saying which TrainJob step it runs (trainer, dataset-initializer,
#: model-initializer); the ``trainer`` one gets the TrainJob's node count.
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
#: Trainer's own limit on ``spec.runtimePatches`` (``MaxItems=16``).
MAX_RUNTIME_PATCHES = 16


def is_trainjob(obj: object) -> bool:
    """A ``trainer.kubeflow.org/v1alpha1`` TrainJob."""
    return isinstance(obj, dict) and obj.get("apiVersion") == TRAINER_API_VERSION and obj.get("kind") == KIND
