"""MkDocs hooks (mkdocs.yml ``hooks:``): a nav that matches the pages on disk.

``on_config`` fails the build when the nav lists a page that does not exist (a renamed or
never-written page is drift, which the strict build is there to catch), and appends every page on
disk that the nav does not list under "More", so no page is ever unreachable. Only the nav changes;
links are still checked strictly.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError


def listed_pages(items: list[Any]) -> list[str]:
    """Every page the nav names, in nav order (external links left out)."""
    pages: list[str] = []
    for item in items:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            pages += listed_pages(value)
        elif isinstance(value, str) and "://" not in value:
            pages.append(value)
    return pages


def missing_pages(nav: list[Any], docs: Path) -> list[str]:
    """The nav's pages that are not files under ``docs``."""
    return [p for p in listed_pages(nav) if not (docs / p).is_file()]


def nav_for(nav: list[Any], docs: Path) -> list[Any]:
    """The nav with unlisted pages appended under "More"; a listed page that is missing is an error."""
    missing = missing_pages(nav, docs)
    if missing:
        raise PluginError(f"mkdocs.yml nav lists {len(missing)} page(s) that do not exist under {docs}: "
                          f"{', '.join(missing)}; write the page (generated ones: `make docs`) or remove the entry")
    listed = set(listed_pages(nav))
    extra = sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.md"))
    extra = [p for p in extra if p not in listed]
    return nav + [{"More": extra}] if extra else list(nav)


def on_config(config: Any, **kwargs: Any) -> Any:
    if config.get("nav"):
        config["nav"] = nav_for(config["nav"], Path(config["docs_dir"]))
    return config
