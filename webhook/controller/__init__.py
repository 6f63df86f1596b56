"""The controller (``python -m webhook controller``) in client-go's and controller-runtime's parts; :mod:`.core`
wires them."""
from .core import (
    DEPLOYMENT,
    Controller,
    Options,
    controller_owners,
    event_keys,
    is_gang_kind,
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
from .overlay import Overlay
from .reconciler import Reconciler
from .rollouts import ObjectKey, RolloutGate, Rollouts, rollout_complete, undone_by_admission
from .runtime import DONE, MAX_RETRIES, KeyReconciler, Manager, Result, Runnable, Task, Worker

__all__ = [
    "DEPLOYMENT", "DONE", "EVENT_ACTION", "FIELD_LIMIT", "MAX_RETRIES", "NOTE_LIMIT", "REPORTING_CONTROLLER",
    "Controller", "ControllerMetrics", "EventRecorder", "ObjectKey", "KeyReconciler", "LeaderElector", "Manager", "Options",
    "Overlay", "Reconciler", "Result", "RolloutGate", "Rollouts", "Runnable", "Task", "Worker", "controller_owners",
    "event_for", "event_keys", "event_note", "event_reason", "is_gang_kind", "lease_decision", "lease_record",
    "lease_spec", "memory_limit_bytes", "micro_time", "new_store", "reconciled_resources", "released_spec",
    "resident_bytes", "rollout_complete", "run_controller", "serve_health", "undone_by_admission", "watched_resources",
]
