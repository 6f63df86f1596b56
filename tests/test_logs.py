"""webhook/logs.py: one JSON object per line, the values of ``extra`` as its fields."""
from __future__ import annotations

import io
import json
import logging

import pytest

from webhook.logs import FIELDS, JsonHandler, configure


@pytest.fixture
def captured():
    root = logging.getLogger()
    level, kept = root.level, list(root.handlers)
    stream = io.StringIO()
    configure("info", stream)
    yield stream
    for handler in list(root.handlers):
        if isinstance(handler, JsonHandler):
            root.removeHandler(handler)
    root.handlers[:] = kept
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_record_is_one_json_line_with_its_extra_fields(captured):
    logging.getLogger("webhook.controller.certrotator").warning("certificate round failed",
                                                      extra={"error": "conflict", "attempt": 2})
    logging.getLogger("webhook.cache").debug("below the level")
    [line] = lines(captured)
    assert list(line)[:len(FIELDS)] == list(FIELDS)
    assert {k: line[k] for k in ("level", "logger", "msg", "error", "attempt")} == {
        "level": "warning", "logger": "webhook.controller.certrotator", "msg": "certificate round failed", "error": "conflict",
        "attempt": 2}
    assert line["time"].endswith("Z") and len(line["time"]) == len("2026-12-02T04:10:00.123Z")


def test_an_exception_gives_error_and_traceback_and_odd_values_their_text(captured):
    try:
        raise KeyError("spec")
    except KeyError:
        logging.getLogger("webhook.controller").exception("reconcile failed", extra={"key": ("Deployment", "ml", "web"),
                                                                                     "obj": object()})
    [line] = lines(captured)
    assert line["error"] == "KeyError: 'spec'" and line["traceback"].startswith("Traceback (most recent call last)")
    assert line["key"] == ["Deployment", "ml", "web"] and line["obj"].startswith("<object object at")


def test_configure_again_replaces_its_handler(captured):
    again = io.StringIO()
    configure("warning", again)
    assert [h for h in logging.getLogger().handlers if isinstance(h, JsonHandler)] == [logging.getLogger().handlers[-1]]
    logging.getLogger("webhook.cache").info("not at warning")
    logging.getLogger("webhook.cache").warning("HPA read failed, using the watch cache", extra={"namespace": "ml"})
    assert captured.getvalue() == ""
    assert [(line["msg"], line["namespace"]) for line in lines(again)] == [("HPA read failed, using the watch cache", "ml")]


def test_a_failed_certificate_round_is_one_line_with_the_error_as_a_field(captured):
    """A module on the contract, through its own code: the rotator's round fails on the API's error."""
    from policylib.shell import kube
    from webhook.controller.certplan import Settings
    from webhook.controller.certrotator import CERTIFICATES, RETRY_SECONDS, Rotator

    class Refusing:
        def get(self, res, namespace, name):
            raise kube.error_for(500, {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd away"})

    assert Rotator(Refusing(), Settings()).reconcile(CERTIFICATES).requeue_after == RETRY_SECONDS   # one round
    [line] = lines(captured)
    assert (line["logger"], line["level"], line["msg"]) == \
        ("webhook.controller.certrotator", "warning", "certificate round failed")
    assert "etcd away" in line["error"]
