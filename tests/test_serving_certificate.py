"""The serving certificate's reload (webhook/admission/certificate.py): a connection that finds the files changed gets
the new certificate, even when a Secret volume's update swaps them while they load; the previous context may have
expired (a renewed certificate is loaded only when a connection comes, and the API server keeps its connections)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from webhook.admission import certificate
from webhook.admission.certificate import ServingCertificate
from webhook.certs import certificate_not_after


def certs(directory: Path) -> Path:
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--local", "--out", str(directory)], cwd=REPO,
                   capture_output=True, text=True, check=True)
    return directory


def volume(root: Path, n: int) -> Path:
    """A Secret volume as the kubelet writes it: ``data-<n>``, and ``current`` an atomic symlink swap to it."""
    link, tmp = root / "current", root / "current.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(f"data-{n}")
    os.replace(tmp, link)
    return link


@pytest.fixture
def swapping(tmp_path, monkeypatch):
    """Three certificate sets, ``current`` on the first; ``swap_during_loads(k)``: the next k loads each find the
    volume swapped by the time they end: from the first set or the third to the second, from the second to the
    third."""
    first, second = certs(tmp_path / "data-0"), certs(tmp_path / "data-1")
    certs(tmp_path / "data-2")
    link = volume(tmp_path, 0)
    served = ServingCertificate(link)
    real = certificate.make_server_context
    left = {"swaps": 0}

    def loading(*args, **kwargs):
        context = real(*args, **kwargs)
        if left["swaps"]:
            left["swaps"] -= 1
            volume(tmp_path, 2 if os.readlink(link) == "data-1" else 1)
        return context
    monkeypatch.setattr(certificate, "make_server_context", loading)

    def swap_during_loads(k: int) -> None:
        left["swaps"] = k
    return served, link, (first, second), swap_during_loads


def test_a_set_swapped_while_it_loads_is_loaded_again_for_the_same_connection(swapping):
    served, link, (first, second), swap_during_loads = swapping
    assert served.not_after == certificate_not_after(first / "tls.crt")
    volume(link.parent, 2)              # the kubelet's update: the third set
    swap_during_loads(1)                # and, while it loads, the second (the next update)
    assert served.context() is not None
    assert served.not_after == certificate_not_after(second / "tls.crt") and served.error is None
    assert served._signature == served._files_signature()   # what is served is what is on disk now


def test_files_that_keep_changing_leave_the_previous_context_after_a_bounded_number_of_loads(swapping):
    served, link, (first, second), swap_during_loads = swapping
    before = served.context()
    volume(link.parent, 1)
    swap_during_loads(certificate.RELOAD_ATTEMPTS)   # every attempt of this connection sees the files change (1, 2, 1, 2)
    assert served.context() is before
    swap_during_loads(0)
    assert served.context() is not before          # the next connection loads what is there now
    assert served._signature == served._files_signature()
