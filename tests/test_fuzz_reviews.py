"""The reliability script's fuzz, shorter: fuzzed AdmissionReviews of every kind through the Flask app
under four configs, fixed seed, UPDATEs over fuzzed old objects among them. No 500, nothing escaping the app,
no policy failure that is not a PolicylibError (an internal error), every patch applies, and a second review of
a patched object patches nothing.
``bench/bench_reliability.py`` runs the same with 100,000 reviews."""
from __future__ import annotations

import pytest

from bench.bench_reliability import fuzz


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", [14, 15])
def test_fuzzed_reviews_are_answered_200_or_400_and_every_patch_applies(seed):
    report = fuzz(3000, seed)
    assert set(report["statuses"]) <= {200, 400}, report
    assert report["statuses"][200] > 2000 and report["statuses"][400] > 100, report   # both kinds of input ran
    assert report["answers"].get("patched", 0) > 300, report   # the fuzz reaches the policies' patches
    assert (report["exceptions_escaped"], report["non_policy_errors"], report["patches_not_applying"],
            report["not_idempotent"]) == (0, 0, 0, 0), report
    assert report["idempotence_checked"] > 10, report
    assert report["old_objects_fuzzed"] > 150, report   # UPDATEs over malformed old objects ran, 0 internal errors
