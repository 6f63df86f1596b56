"""MkDocs hooks (mkdocs.yml ``hooks:``): a nav that follows the pages on disk.

The nav in mkdocs.yml lists pages in reading order, including pages that other work adds later.
``on_config`` drops an entry whose file does not exist yet (so the strict build does not fail for
a page that is planned but not written), and appends every page on disk that the nav does not
list under "More", so no page is ever unreachable. Only the nav changes; links are still checked
strictly.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def _prune(items: list[Any], docs: Path, listed: set[str]) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict):
            ((title, value),) = item.items()
            if isinstance(value, list):
                children = _prune(value, docs, listed)
                if children:
                    kept.append({title: children})
            elif isinstance(value, str):
                listed.add(value)
                if (docs / value).is_file():
                    kept.append(item)
        elif isinstance(item, str):
            listed.add(item)
            if (docs / item).is_file():
                kept.append(item)
    return kept


def nav_for(nav: list[Any], docs: Path) -> list[Any]:
    """The nav with missing pages dropped and unlisted pages appended under "More"."""
    listed: set[str] = set()
    kept = _prune(nav, docs, listed)
    extra = sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.md"))
    extra = [p for p in extra if p not in listed]
    if extra:
        kept.append({"More": extra})
    return kept


def on_config(config: Any, **kwargs: Any) -> Any:
    if config.get("nav"):
        config["nav"] = nav_for(config["nav"], Path(config["docs_dir"]))
    return config
