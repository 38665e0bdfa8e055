"""The look every figure shares: sizes for a paper's columns, a palette and line styles readable in
black and white, units and short legend labels, and the legend's layout and saving."""
from __future__ import annotations

import functools
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

from emulator.analysis.runs import Run

WIDTHS = {"one-column": 3.3, "two-column": 7.0}  # inches: a column of a two-column paper, and the full page
# Okabe & Ito (2008), "Color universal design": blue, vermillion, bluish green, reddish purple, orange,
# sky blue, black (their yellow is left out: it is hard to see on white).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
FONT_PT = 8  # axis labels; ticks and legend one point smaller
STYLE = {
    "font.size": FONT_PT, "axes.labelsize": FONT_PT, "axes.titlesize": FONT_PT, "legend.fontsize": FONT_PT - 1,
    "xtick.labelsize": FONT_PT - 1, "ytick.labelsize": FONT_PT - 1, "axes.linewidth": 0.6, "grid.linewidth": 0.4,
    "grid.alpha": 0.35, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "xtick.major.size": 2.5,
    "ytick.major.size": 2.5, "lines.markersize": 3.5, "legend.handlelength": 2.6, "legend.columnspacing": 1.4,
    "pdf.fonttype": 42, "ps.fonttype": 42,  # TrueType, not Type 3: some publishers reject Type 3 fonts
    "svg.hashsalt": "emulator-report",  # the same SVG for the same data
}
PNG_DPI = 300  # print quality; EMULATOR_FIGURE_DPI sets another (see png_dpi)
PT = 1 / 72  # inches


# ---- units and labels -----------------------------------------------------------------------------------------

def time_unit(span_s: float) -> tuple[str, float]:
    """The unit to show a time span of `span_s` seconds in, and its length in seconds."""
    for limit, unit, seconds in ((120, "seconds", 1.0), (2 * 3600, "minutes", 60.0), (3 * 86400, "hours", 3600.0)):
        if span_s < limit:
            return unit, seconds
    return "days", 86400.0


def bytes_unit(span: float) -> tuple[str, float]:
    """The unit (decimal, as the run summary prints) to show an amount of `span` bytes in, and its size."""
    for limit, unit, size in ((2e6, "kB", 1e3), (2e9, "MB", 1e6), (2e12, "GB", 1e9)):
        if span < limit:
            return unit, size
    return "TB", 1e12


_WITH_SETTINGS = re.compile(r"^(?P<base>.*?) \((?P<settings>.+)\)$")
_SETTING_SPLIT = re.compile(r", (?=[A-Za-z_][\w.]*=)")


def _parse(label: str) -> tuple[str, list[tuple[str, str]]]:
    """'name (a.b=1, c=2)', as `group_runs` labels namesakes, -> ('name', [('a.b', '1'), ('c', '2')])."""
    match = _WITH_SETTINGS.match(label)
    if match:
        parts = _SETTING_SPLIT.split(match["settings"])
        if all("=" in part for part in parts):
            return match["base"], [tuple(part.split("=", 1)) for part in parts]
    return label, []


def _short_keys(keys: set[str]) -> dict[str, str]:
    """Each dotted key -> its shortest dotted suffix that no other key ends with: algorithm.client_lr -> client_lr."""
    short = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            suffix = ".".join(parts[-n:])
            if not any(other != key and (other == suffix or other.endswith("." + suffix)) for other in keys):
                break
        short[key] = suffix
    return short


def _strip_common_tokens(bases: list[str]) -> list[str]:
    """Drop the words (split at - and _) every base starts or ends with, if each keeps a letter:
    fast-fmnist, fedavg-fmnist -> fast, fedavg; but deadline_60, deadline_120 stay (60 alone says nothing)."""
    tokens = [re.split(r"([-_])", base) for base in bases]  # words at even, separators at odd positions
    words = [t[::2] for t in tokens]
    lead = 0
    while all(len(w) > lead + 1 for w in words) and len({w[lead] for w in words}) == 1:
        lead += 1
    trail = 0
    while all(len(w) > lead + trail + 1 for w in words) and len({w[-1 - trail] for w in words}) == 1:
        trail += 1
    stripped = ["".join(t[2 * lead: len(t) - 2 * trail]) for t in tokens]
    if all(re.search(r"[A-Za-z]", s) for s in stripped):
        return stripped
    return _sweep_tags(bases) or bases


def _sweep_tags(bases: list[str]) -> list[str] | None:
    """Sweep runs are named NAME-KEY_VALUE (quickstart-over_selection_1.3): with the shared NAME dropped,
    each reads KEY=VALUE (over_selection=1.3). None when the names are not of that form."""
    parts = [re.fullmatch(r"(.+?)-([A-Za-z][\w.]*?)_([^A-Za-z_][^_]*)", base) for base in bases]
    if not all(parts) or len({m.group(1) for m in parts}) != 1:
        return None
    return [f"{m.group(2)}={m.group(3)}" for m in parts]


def short_labels(labels: list[str]) -> dict[str, str]:
    """Experiment label -> a compact legend label that keeps only what tells the experiments apart.

    Labels come from `group_runs`: a scenario name, and for namesakes the settings where they differ, as in
    'quickstart (algorithm.client_lr=0.1, system.over_selection=1.3)'. A name shared by every experiment is
    dropped, words all names share are dropped, settings shared by all are dropped, and a setting's key keeps
    only as much of its path as is needed to stay unambiguous: 'client_lr=0.1, over_selection=1.3'. If two
    experiments would end up with one label, every label stays as it was.
    """
    parsed = {label: _parse(label) for label in labels}
    with_settings = [settings for _, settings in parsed.values() if settings]
    common = set.intersection(*(set(s) for s in with_settings)) if len(with_settings) == len(labels) > 1 else set()
    keys = _short_keys({key for settings in with_settings for key, _ in settings})
    bases = list(dict.fromkeys(base for base, _ in parsed.values()))
    shown_base = dict(zip(bases, _strip_common_tokens(bases))) if len(bases) > 1 else {bases[0]: ""} if bases else {}
    short = {}
    for label, (base, settings) in parsed.items():
        kept = ", ".join(f"{keys[key]}={value}" for key, value in settings if (key, value) not in common)
        name = shown_base[base]
        short[label] = (f"{name} ({kept})" if name and kept else name or kept or label)
    if len(set(short.values())) < len(short):
        return {label: label for label in labels}
    return short


def legend_key(groups: dict[str, list[Run]]) -> list[str]:
    """Markdown lines that say which experiment each shortened legend label stands for (none if none is)."""
    short = short_labels(list(groups))
    shortened = [label for label in groups if short[label] != label]
    if not shortened:
        return []
    return ["Legend labels in the figures:", ""] + [f"- `{short[label]}`: {label}" for label in shortened] + [""]


# ---- figure, legend, saving -------------------------------------------------------------------------------------

def _inches(width: str | float) -> float:
    """A figure width in inches: "one-column" / "one", "two-column" / "two", or a number of inches."""
    if isinstance(width, (int, float)):
        return float(width)
    named = {"one": "one-column", "two": "two-column"}.get(width, width)
    if named not in WIDTHS:
        raise ValueError(f"figure width {width!r}: use 'one-column' ({WIDTHS['one-column']} in) or "
                         f"'two-column' ({WIDTHS['two-column']} in)")
    return WIDTHS[named]


def _figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    fig.get_layout_engine().set(w_pad=2 * PT, h_pad=2 * PT, wspace=0.04, hspace=0.04)
    return fig


def _text_width(fig: Figure, text: str, size: float) -> float:
    """Width in inches of `text` (its longest line) at `size` points."""
    renderer = fig.canvas.get_renderer()
    font = FontProperties(size=size)
    return max(renderer.get_text_width_height_descent(line, font, ismath=False)[0]
               for line in text.split("\n")) / fig.dpi


def _wrap(fig: Figure, text: str, width_in: float, size: float) -> str:
    """`text` broken into lines no wider than `width_in`: at spaces; a word wider than a line after its
    hyphens or underscores, and where even that does not do, anywhere."""
    def fits(line: str) -> bool:
        return _text_width(fig, line, size) <= width_in

    def fill(pieces: list[str], level: int) -> list[str]:
        lines, line = [], ""
        for piece in pieces:
            if line and not fits((line + piece).rstrip()):
                lines.append(line.rstrip())
                line = ""
            if not line and not fits(piece.rstrip()) and level < 2:
                broken = fill(re.split(r"(?<=[_-])", piece) if level == 0 else list(piece), level + 1)
                lines += broken[:-1]
                line = broken[-1]
            else:
                line += piece
        return lines + [line.rstrip()]

    if fits(text):
        return text
    return "\n".join(fill(re.split(r"(?<= )", text), 0))


def _legend_columns(count: int, columns: int) -> list[range]:
    """Which entries each legend column holds, as matplotlib fills them: in order, the first columns one
    longer where the entries do not divide evenly."""
    rows, longer = divmod(count, columns)
    sizes = [rows + 1] * longer + [rows] * (columns - longer)
    starts = [sum(sizes[:c]) for c in range(columns)]
    return [range(start, start + size) for start, size in zip(starts, sizes) if size]


def _legend_plan(fig: Figure, texts: list[str]) -> tuple[list[str], int, float]:
    """For a legend below the axes, spanning the figure: the labels (wrapped where too long), the number of
    columns, and the height in inches it needs."""
    size = STYLE["legend.fontsize"]
    handle = (STYLE["legend.handlelength"] + 0.8) * size * PT  # handle and the pad after it
    spacing = STYLE["legend.columnspacing"] * size * PT
    room = fig.get_figwidth() - 0.15
    wrapped = [_wrap(fig, t, room - handle, size) for t in texts]
    widths = [_text_width(fig, t, size) + handle for t in wrapped]
    columns = next(n for n in range(len(texts), 0, -1)
                   if n == 1 or sum(max(widths[i] for i in column) for column in _legend_columns(len(texts), n))
                   + spacing * (n - 1) <= room)
    lines = max(sum(wrapped[i].count("\n") + 1 for i in column) for column in _legend_columns(len(texts), columns))
    entries = max(len(column) for column in _legend_columns(len(texts), columns))
    height = (lines * 1.25 + entries * 0.5 + 1.0) * size * PT
    return wrapped, columns, height


def _legend(fig: Figure, handles: list, texts: list[str]) -> None:
    """A legend below the axes, across the figure, in as many columns as fit; the figure grows to hold it,
    so the axes keep their height and no label is cut (long ones are wrapped)."""
    if not handles:
        return
    wrapped, columns, height = _legend_plan(fig, texts)
    fig.set_figheight(fig.get_figheight() + height)
    fig.legend(handles, wrapped, loc="outside lower center", ncols=columns, frameon=False)


# Every figure is PNG (report.md shows it) and, for papers, PDF and SVG. Writing all three is two thirds of
# a report's time; `emulator report --formats png` (or EMULATOR_FIGURE_FORMATS=png, which sweeps' reports
# follow too) writes PNG only.
FIGURE_FORMATS = ("png", "pdf", "svg")
FORMATS_VARIABLE = "EMULATOR_FIGURE_FORMATS"
_chosen: ContextVar[tuple[str, ...] | None] = ContextVar("figure_formats", default=None)


def parse_formats(text: str, where: str) -> tuple[str, ...]:
    """`png,pdf` -> ('png', 'pdf'); PNG always included (the report shows it); unknown names refused."""
    names = tuple(dict.fromkeys(name.strip().lower() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in FIGURE_FORMATS]
    if unknown or "png" not in names:
        raise ValueError(f"{where}: {text!r}: give a comma-separated list of {', '.join(FIGURE_FORMATS)} that "
                         "includes png (report.md shows the PNG), e.g. png or png,pdf,svg")
    return names


# PNGs at 300 dpi print well; on screen 100 dpi reads as well and draws a report in half the time (the test
# suite uses it). The PDF and SVG are vector drawings whatever this says.
DPI_VARIABLE = "EMULATOR_FIGURE_DPI"


def png_dpi() -> int:
    """The PNGs' resolution: EMULATOR_FIGURE_DPI when set (a whole number from 50 to 1200), else PNG_DPI."""
    text = os.environ.get(DPI_VARIABLE, "").strip()
    if not text:
        return PNG_DPI
    if not text.isdigit() or not 50 <= int(text) <= 1200:
        raise ValueError(f"{DPI_VARIABLE}: {text!r}: give the PNGs' resolution in dots per inch, a whole number "
                         f"from 50 to 1200 (e.g. 100 for the screen), or unset it for {PNG_DPI}")
    return int(text)


def figure_formats() -> tuple[str, ...]:
    chosen = _chosen.get()
    if chosen is not None:
        return chosen
    if os.environ.get(FORMATS_VARIABLE):
        return parse_formats(os.environ[FORMATS_VARIABLE], FORMATS_VARIABLE)
    return FIGURE_FORMATS


@contextmanager
def writing_formats(formats: tuple[str, ...] | None):
    """Figures drawn inside write `formats` (None: as set by the environment, else all three)."""
    token = _chosen.set(formats)
    try:
        yield
    finally:
        _chosen.reset(token)


def _save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG (to `path`) and the other chosen formats beside it; return the PNG's path."""
    path = Path(path).with_suffix(".png")
    formats = figure_formats()
    with rc_context(STYLE):
        fig.savefig(path, dpi=png_dpi(), metadata={"Software": None})
        if "pdf" in formats:
            fig.savefig(path.with_suffix(".pdf"), metadata={"CreationDate": None, "Creator": None, "Producer": None})
        if "svg" in formats:
            fig.savefig(path.with_suffix(".svg"), metadata={"Date": None, "Creator": None})
    return path


def _styled(draw):
    """Run a drawing function under `STYLE`, so its text takes the paper's font sizes."""
    @functools.wraps(draw)
    def styled(*args, **kwargs):
        with rc_context(STYLE):
            return draw(*args, **kwargs)
    return styled


def _looks(groups: dict[str, list[Run]]) -> dict[str, dict]:
    """Experiment label -> its colour, line style and marker, by the experiment's place in `groups`."""
    return {label: {"color": PALETTE[i % len(PALETTE)], "linestyle": LINE_STYLES[i % len(LINE_STYLES)],
                    "marker": MARKERS[i % len(MARKERS)], "index": i} for i, label in enumerate(groups)}


def _line(ax, x, y, look: dict, one_column: bool, **extra):
    """A line in an experiment's look: a marker on every point of a short line, or on a long one markers
    evenly spaced along it (staggered between experiments, so that they do not sit on each other)."""
    spacing = 0.1  # of the axes' diagonal
    every = None if len(x) <= 15 else ((0.02 + 0.023 * look["index"]) % spacing, spacing)
    line, = ax.plot(x, y, color=look["color"], linestyle=look["linestyle"], marker=look["marker"],
                    markevery=every, linewidth=1.0 if one_column else 1.2,
                    markersize=3.2 if one_column else 3.8, markeredgewidth=0.4, markeredgecolor="white",
                    **extra)
    return line


def _mean_line(ax, x, mean, low, high, look: dict, seeds: int, one_column: bool):
    """An experiment's mean line over the band its seeds span (when it has more than one seed)."""
    if seeds > 1:
        ax.fill_between(x, low, high, color=look["color"], alpha=0.15, linewidth=0)
    return _line(ax, x, mean, look, one_column)


def _seeds(runs: list[Run]) -> str:
    return f" ({len(runs)}\u00a0seeds)" if len(runs) > 1 else ""  # a no-break space: wrapped as one word
