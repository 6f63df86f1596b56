"""The controller (``python -m webhook controller``) in client-go's parts; :mod:`.core` wires them."""
from .core import (
    DEPLOYMENT,
    Component,
    Controller,
    Options,
    controller_owners,
    event_keys,
    is_kubeflow_kind,
    new_store,
    reconciled_resources,
    run_controller,
    watched_resources,
)
from .events import (
    EVENT_ACTION,
    FIELD_LIMIT,
    NOTE_LIMIT,
    REPORTING_CONTROLLER,
    EventRecorder,
    event_for,
    event_note,
    event_reason,
)
from .health import serve_health
from .leaderelection import LeaderElector, lease_decision, lease_record, lease_spec, micro_time, released_spec
from .metrics import ControllerMetrics, memory_limit_bytes, resident_bytes
from .reconciler import MAX_RETRIES, Overlay, Reconciler
from .rollouts import Key, RolloutGate, Rollouts, rollout_complete, undone_by_admission

__all__ = [
    "DEPLOYMENT", "EVENT_ACTION", "FIELD_LIMIT", "MAX_RETRIES", "NOTE_LIMIT", "REPORTING_CONTROLLER", "Component",
    "Controller", "ControllerMetrics", "EventRecorder", "Key", "LeaderElector", "Options", "Overlay", "Reconciler",
    "RolloutGate", "Rollouts", "controller_owners", "event_for", "event_keys", "event_note", "event_reason",
    "is_kubeflow_kind", "lease_decision", "lease_record", "lease_spec", "memory_limit_bytes", "micro_time",
    "new_store", "reconciled_resources", "released_spec", "resident_bytes", "rollout_complete", "run_controller",
    "serve_health", "undone_by_admission", "watched_resources",
]
