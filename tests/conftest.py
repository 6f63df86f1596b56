"""How ``make test`` spreads the suite over its workers (pytest-xdist, ``--dist loadgroup``).

Each test file is one unit of work, so a file's module and session fixtures (a control plane, a webhook) start once
per worker that runs it, never once per test. The files that run real containers (``test_real_node*``) are one
unit together, run one after the other by a single worker: each of them checks that its harness left nothing on the
machine, which another real node starting at the same moment would break. That unit is the longest, so it is
handed out first. Without xdist (a plain ``pytest``) nothing changes but the order.
"""
from __future__ import annotations

import pytest

#: The files whose harness runs a real node (docs/e2e.md, "A real node").
REAL_NODE_PREFIX = "test_real_node"


def work_unit(item: pytest.Item) -> str:
    """The group a test is handed out with: its file, or the one group of every real-node file."""
    name = item.path.name
    return "real-node" if name.startswith(REAL_NODE_PREFIX) else str(item.path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(work_unit(item)))
    # the longest unit first (a stable sort keeps every file's own order)
    items.sort(key=lambda item: work_unit(item) != "real-node")
