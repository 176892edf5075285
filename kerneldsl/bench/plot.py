"""Drawing a benchmark report (``kerneldsl bench NAME --plot FILE``): side-by-side figures are
compared at a glance as bars, not as columns of digits.

One horizontal bar chart per section, every bar labelled with its value; the unit is the
section's parenthesised suffix ("launch (µs per launch)") or, where a section mixes units,
in the row names. matplotlib is the optional ``kerneldsl[plot]`` extra.
"""

from __future__ import annotations

import re
from typing import Any

from .report import Report

INSTALL_HINT = "pip install 'kerneldsl[plot]'"
_UNIT = re.compile(r"\(([^()]*)\)\s*$")
_ROW_INCHES, _SECTION_INCHES, _WIDTH_INCHES = 0.35, 0.9, 10.0


def unavailable() -> str | None:
    """Why a plot cannot be drawn here, or None: checked before a benchmark spends minutes."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"--plot needs matplotlib: {INSTALL_HINT}"
    return None


def save(report: Report, path: str, title: str) -> None:
    """Write ``report`` as a figure to ``path``; the format follows the suffix (.svg, .png, .pdf)."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend

    sections = [(name, rows) for name, rows in report.items() if rows]
    heights = [len(rows) * _ROW_INCHES + _SECTION_INCHES for _, rows in sections]
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: searchable, small
        figure = Figure(figsize=(_WIDTH_INCHES, sum(heights) + 0.5), layout="constrained")
        figure.suptitle(title)
        axes = figure.subplots(len(sections), 1, squeeze=False, height_ratios=heights)[:, 0]
        for ax, (section, rows) in zip(axes, sections):
            _draw_section(ax, section, rows)
        figure.savefig(path)


def _draw_section(ax: Any, section: str, rows: dict[str, float]) -> None:
    values = [float(v) for v in rows.values()]
    bars = ax.barh(list(rows), values)
    ax.invert_yaxis()  # first row on top, as printed
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], padding=3)
    ax.margins(x=0.15)  # room for the labels
    ax.set_title(section, loc="left")
    unit = _UNIT.search(section)
    if unit:
        ax.set_xlabel(unit.group(1))
