"""What every report figure shares: the captioned figure, the series colours, the helpers.

A figure function returns a :class:`FigureWithCaption`: the figure, with a title and axis
units, and a one-line caption that says what is drawn and how to read it. Figures are built
on :class:`matplotlib.figure.Figure` and rendered with Agg; pyplot's global state is never
touched (no ``plt.show``, no backend switch, no figure leak), so the figure functions are
safe in notebooks, tests and worker processes alike. Colours come from seaborn's
colour-blind-safe palette through :func:`series_palette`, which gives the control the
neutral grey and every other series a fixed colour, so a series looks the same in every
figure when the palette is computed once and passed to each function; prompt categories
take darker colours (:func:`category_palette`). Every caption opens with the one question
its figure answers, and a legend lists only the series drawn.

The per-request DataFrame the figures take has the columns listed in
:data:`RECORD_COLUMNS`; each function checks only the ones it needs
(:func:`require_columns`) and names any that are missing.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = [
    "ERROR_COLOR",
    "METRIC_UNITS",
    "RECORD_COLUMNS",
    "UNCATEGORISED",
    "FigureWithCaption",
    "category_palette",
    "finite",
    "measured",
    "new_figure",
    "no_data",
    "require_columns",
    "resolve_palette",
    "series_order",
    "series_palette",
]

RECORD_COLUMNS = (
    "series",
    "replicate",
    "launch_id",
    "prompt_id",
    "repeat",
    "category",
    "phase",
    "ok",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "output_tokens",
    "t_start",
    "chunk_tokens",
    "spec_rate",
    "spec_mean_len",
)
"""Columns of the per-request DataFrame (one row per request record)."""

_COLORBLIND = sns.color_palette("colorblind").as_hex()
_NEUTRAL = _COLORBLIND[7]  # grey: reserved for the control
_OTHERS = [c for i, c in enumerate(_COLORBLIND) if i != 7]
ERROR_COLOR = _COLORBLIND[3]  # vermilion
"""Colour of failed requests (vermilion), never given to a series."""

_HTML_DPI = 150  # PNG resolution in HTML (displayed at 100 px per figure inch)

METRIC_UNITS = {
    "ttft_s": ("TTFT", "ms", 1e3),
    "tpot_s": ("TPOT", "ms", 1e3),
    "e2e_s": ("End-to-end latency", "s", 1.0),
}
"""Per latency column: its label, the unit it is drawn in, and the factor from seconds."""


@dataclass(frozen=True)
class FigureWithCaption:
    """A figure and its one-line caption; unpacks as ``fig, caption = ...``."""

    figure: Figure
    caption: str
    anchor: str = ""  # the HTML id of the <figure> (for a figure the page links to)

    def __iter__(self) -> Iterator[Any]:
        yield self.figure
        yield self.caption

    def to_png(self, *, dpi: int = 100) -> bytes:
        """The figure as PNG bytes (rendered in memory with Agg)."""
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()

    @property
    def title(self) -> str:
        """The figure's title (its suptitle, else the first axes title)."""
        sup = self.figure.get_suptitle()
        if sup:
            return sup
        titles = [
            t for ax in self.figure.get_axes() for t in (ax.get_title(), ax.get_title("left"))
        ]
        return next((t for t in titles if t), "")

    def to_html(self, *, dpi: int = _HTML_DPI) -> str:
        """``<figure>`` with the PNG embedded and the caption below it.

        The PNG is rendered at ``dpi`` but displayed at 100 px per figure inch (never wider
        than its container), so it stays sharp on high-density screens and in print.
        """
        data = base64.b64encode(self.to_png(dpi=dpi)).decode("ascii")
        width = round(self.figure.get_figwidth() * 100)
        alt = html.escape(f"{self.title}. {self.caption}", quote=True)
        anchor = f' id="{html.escape(self.anchor, quote=True)}"' if self.anchor else ""
        return (
            f'<figure{anchor}><img src="data:image/png;base64,{data}" '
            f'alt="{alt}" width="{width}" style="max-width:100%;height:auto"/>'
            f"<figcaption>{html.escape(self.caption)}</figcaption></figure>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()


# --------------------------------------------------------------------------- helpers


def series_palette(names: Sequence[str], *, control: str = "control") -> dict[str, str]:
    """Colour per series: the control grey, the others colour-blind-safe colours in order.

    Compute it once from *all* series names of a report and pass it to every figure, so a
    series keeps its colour even in figures that show only some series. Colours repeat
    after nine non-control series.
    """
    out: dict[str, str] = {}
    i = 0
    for name in dict.fromkeys(names):
        if name == control:
            out[name] = _NEUTRAL
        else:
            out[name] = _OTHERS[i % len(_OTHERS)]
            i += 1
    out.setdefault(control, _NEUTRAL)
    return out


UNCATEGORISED = "uncategorised"
"""Legend label of prompts without a category."""

_CATEGORY_COLORS = sns.color_palette("dark", 10).as_hex()


def category_palette(categories: Sequence[str]) -> dict[str, str]:
    """Colour per prompt category, in order: seaborn's ``dark`` palette, which stays apart
    from the series colours (categories and series can appear in one figure)."""
    names = list(dict.fromkeys(categories))
    return {c: _CATEGORY_COLORS[i % len(_CATEGORY_COLORS)] for i, c in enumerate(names)}


def require_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise ``ValueError`` naming ``what`` and the missing columns, if any."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: DataFrame lacks column(s) {missing} (has {list(df.columns)})")


def series_order(names: Sequence[str], control: str) -> list[str]:
    """Distinct series names in order of appearance, the control first when present."""
    uniq = list(dict.fromkeys(str(n) for n in names))
    return ([control] if control in uniq else []) + [n for n in uniq if n != control]


def resolve_palette(
    palette: Mapping[str, str] | None, names: Sequence[str], control: str
) -> dict[str, str]:
    """The caller's ``palette`` over a default one, so every name in ``names`` has a colour."""
    base = series_palette(series_order(names, control), control=control)
    if palette:
        base.update(palette)
    return base


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """Successful requests of the measured phase (warm-up and failures excluded)."""
    keep = pd.Series(True, index=df.index)
    if "phase" in df.columns:
        keep &= df["phase"].astype(str) == "measure"
    if "ok" in df.columns:
        keep &= df["ok"].fillna(False).astype(bool)
    return df.loc[keep]


def new_figure(ncols: int = 1, nrows: int = 1, *, width: float = 6.4, height: float = 4.0):
    """A constrained-layout figure in seaborn's white-grid style and its 2-D array of axes."""
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def no_data(ax: Axes, message: str = "no data") -> None:
    """Write ``message`` in the middle of an empty panel and hide its ticks."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def finite(values: pd.Series) -> pd.Series:
    """The finite numeric values of a column, as floats."""
    out = pd.to_numeric(values, errors="coerce").astype(float)
    return out[np.isfinite(out)]
