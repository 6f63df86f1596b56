"""Volcano's own job admission test tables, as data (tests/data/volcano_admission_cases.json): the
port agrees with upstream's verdict on every case it can evaluate, and says why the rest are left out."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from policylib.validation import validate_volcano_job

DATA = json.loads((Path(__file__).parent / "data" / "volcano_admission_cases.json").read_text())
CASES = DATA["cases"]


def ids(case):
    return f"{case['suite'].removeprefix('TestValidate')}:{case['name']}"


@pytest.mark.parametrize("case", [c for c in CASES if "leftOut" not in c], ids=ids)
def test_same_verdict_as_volcano(case):
    errors = validate_volcano_job(case["job"])
    assert (not errors) == case["allowed"], (
        f"Volcano {'admits' if case['allowed'] else 'denies'} it ({case['upstreamMessage']!r}); "
        f"the port says {[str(e) for e in errors]}")


def test_every_case_is_evaluated_or_says_why_not():
    evaluated = [c for c in CASES if "leftOut" not in c]
    left_out = {c["name"]: c["leftOut"] for c in CASES if "leftOut" in c}
    assert (len(CASES), len(evaluated)) == (51, 45)
    assert all(reason.startswith("needs ") for reason in left_out.values())
    assert {c["suite"] for c in evaluated} == {"TestValidateJobCreate", "TestValidateJobUpdate",
                                               "TestValidateTaskTopoPolicy"}
