"""The day-2 load client's reading of the API server's webhook counters (tests/e2e/day2load.py)."""
from __future__ import annotations

from tests.e2e.day2load import FAIL_OPEN, REJECTED, parse_counters

#: As kube-apiserver 1.36 exposes them (its /metrics), with another webhook's samples beside ours.
EXPOSITION = """\
# HELP apiserver_admission_webhook_fail_open_count [ALPHA] Admission webhook fail open count.
# TYPE apiserver_admission_webhook_fail_open_count counter
apiserver_admission_webhook_fail_open_count{name="deployments.policylib.io",type="admit"} 3
apiserver_admission_webhook_fail_open_count{name="other.example.com",type="admit"} 7
# HELP apiserver_admission_webhook_rejection_count [ALPHA] Admission webhook rejection count.
# TYPE apiserver_admission_webhook_rejection_count counter
apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",name="gang-pods.policylib.io",\
operation="CREATE",rejection_code="500",type="admit"} 2
apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",name="gang-pods.policylib.io",\
operation="UPDATE",rejection_code="500",type="admit"} 1
"""


def test_counters_are_summed_for_the_named_webhooks_only():
    assert parse_counters(EXPOSITION, ("deployments.policylib.io", "gang-pods.policylib.io")) == {
        FAIL_OPEN: 3.0, REJECTED: 3.0}
    assert parse_counters(EXPOSITION, ("deployments.policylib.io",)) == {FAIL_OPEN: 3.0, REJECTED: 0.0}
