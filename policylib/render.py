"""Text and pictures of simulation results and findings (pure: strings in, strings out)."""
from __future__ import annotations

from html import escape
from typing import Sequence

from .simulate import Placement


def _pairs(counts: dict[str, int]) -> str:
    return ",".join(f"{k or '-'}={v}" for k, v in counts.items()) or "-"


def table(rows: Sequence[Sequence[str]]) -> str:
    """kubectl's table: upper-case headers, columns padded to the widest cell, three spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows) + "\n"


def placements_table(placements: Sequence[Placement]) -> str:
    rows = [("KIND", "NAMESPACE", "NAME", "REPLICAS", "PLACED", "PENDING", "NODES", "ZONES")]
    for p in placements:
        rows.append((p.kind, p.namespace, p.name, str(p.replicas), str(sum(p.placed.values())), p.pending_range,
                     _pairs(p.placed), _pairs(p.zones)))
    out = table(rows)
    for p in placements:
        for reason in p.reasons:
            out += f"{p.namespace}/{p.name}: {reason}\n"
    return out


# --- SVG: one small bar chart per workload ----------------------------------------------------------

BAR, GAP, ZONE_GAP, CHART_H, TOP, BOTTOM, LEFT = 26, 6, 18, 110, 34, 46, 16
PLACED_FILL, PENDING_FILL, TEXT = "#3b6fb6", "#d64541", "#222"


def _chart(p: Placement, y0: int) -> tuple[list[str], int, int]:
    """One workload: a bar per node (replicas on it) grouped under its zone, Pending apart in red."""
    by_zone: dict[str, list[tuple[str, int]]] = {zone: [] for zone in sorted(p.zones)}
    for node, count in p.placed.items():
        by_zone.setdefault(p.node_zones.get(node, ""), []).append((node, count))
    tallest = max([*p.placed.values(), p.pending_max, 1])
    scale = CHART_H / tallest
    parts: list[str] = []
    x = LEFT
    base = y0 + TOP + CHART_H
    title = (f"{p.namespace}/{p.name}: {p.replicas} replicas, {sum(p.placed.values())} placed, "
             f"{p.pending_range} Pending")
    parts.append(f'<text x="{LEFT}" y="{y0 + 18}" font-size="13" font-weight="bold" fill="{TEXT}">{escape(title)}</text>')
    for zone, bars in by_zone.items():
        if not bars:
            continue
        start = x
        for node, count in bars:
            h = max(1, round(count * scale))
            parts.append(f'<rect x="{x}" y="{base - h}" width="{BAR}" height="{h}" fill="{PLACED_FILL}">'
                         f'<title>{escape(node)}: {count}</title></rect>')
            parts.append(f'<text x="{x + BAR / 2}" y="{base - h - 3}" font-size="10" text-anchor="middle" '
                         f'fill="{TEXT}">{count}</text>')
            parts.append(f'<text x="{x + BAR / 2}" y="{base + 11}" font-size="8" text-anchor="middle" '
                         f'fill="{TEXT}">{escape(_short(node))}</text>')
            x += BAR + GAP
        parts.append(f'<line x1="{start}" y1="{base + 16}" x2="{x - GAP}" y2="{base + 16}" stroke="#888"/>')
        parts.append(f'<text x="{(start + x - GAP) / 2}" y="{base + 28}" font-size="10" text-anchor="middle" '
                     f'fill="{TEXT}">{escape(zone or "no zone")}</text>')
        x += ZONE_GAP
    if p.pending_max:
        h = max(1, round(p.pending_max * scale))
        parts.append(f'<rect x="{x}" y="{base - h}" width="{BAR}" height="{h}" fill="{PENDING_FILL}">'
                     f'<title>Pending: {p.pending_range}</title></rect>')
        parts.append(f'<text x="{x + BAR / 2}" y="{base - h - 3}" font-size="10" text-anchor="middle" '
                     f'fill="{PENDING_FILL}">{p.pending_range}</text>')
        parts.append(f'<text x="{x + BAR / 2}" y="{base + 28}" font-size="10" text-anchor="middle" '
                     f'fill="{PENDING_FILL}">Pending</text>')
        x += BAR + GAP
    parts.append(f'<line x1="{LEFT - 4}" y1="{base}" x2="{x}" y2="{base}" stroke="#444"/>')
    width = max(x + LEFT, LEFT + 7 * len(title))
    return parts, width, TOP + CHART_H + BOTTOM


def _short(node: str) -> str:
    return node if len(node) <= 8 else node[:3] + "…" + node[-4:]


def placements_svg(placements: Sequence[Placement]) -> str:
    """A chart per workload, one above the other: bars are replicas per node, grouped by zone; Pending
    replicas stand apart in red. Readable without a legend."""
    parts: list[str] = []
    y, width = 0, 320
    for p in placements:
        chart, w, h = _chart(p, y)
        parts += chart
        width, y = max(width, w), y + h
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{max(y, 40)}" '
            f'viewBox="0 0 {width} {max(y, 40)}" font-family="sans-serif">')
    return "\n".join([head, f'<rect width="{width}" height="{max(y, 40)}" fill="white"/>', *parts, "</svg>"]) + "\n"
