"""Line plots for bench/scale: matplotlib when it is installed, else a plain SVG of our own
(axes, ticks, one polyline per series, a legend) so that the bench needs nothing extra."""
from __future__ import annotations

import math

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


def line_plot(path: str, title: str, xlabel: str, ylabel: str, series: dict,
              logx: bool = False, logy: bool = False, marks: dict | None = None) -> str:
    """Write `series` {label: (xs, ys)} as lines, and `marks` {label: (x, y)} as single
    points (a paper's figure), to `path` (.svg). Returns the backend used."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _svg(path, title, xlabel, ylabel, series, logx, logy, marks or {})
        return "svg"
    plt.rcParams["svg.fonttype"] = "none"  # text as text: small files, diffable
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, (xs, ys)), color in zip(series.items(), COLORS * 3):
        ax.plot(xs, ys, marker="o", markersize=3, label=label, color=color)
    for label, (x, y) in (marks or {}).items():
        ax.plot([x], [y], marker="*", markersize=12, linestyle="none", color="black",
                label=label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return "matplotlib"


def _svg(path, title, xlabel, ylabel, series, logx, logy, marks) -> None:
    w, h, left, right, top, bottom = 700, 450, 70, 180, 40, 50
    fx = math.log10 if logx else float
    fy = math.log10 if logy else float
    points = [(x, y) for xs, ys in series.values() for x, y in zip(xs, ys)] + \
        list(marks.values())
    xs = [fx(x) for x, _ in points]
    ys = [fy(y) for _, y in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    x1, y1 = x1 + (x1 == x0), y1 + (y1 == y0)

    def px(x):
        return left + (fx(x) - x0) / (x1 - x0) * (w - left - right)

    def py(y):
        return h - bottom - (fy(y) - y0) / (y1 - y0) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="13">{title}</text>',
           f'<text x="{(left + w - right) / 2}" y="{h - 10}" text-anchor="middle">{xlabel}'
           '</text>',
           f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" '
           f'text-anchor="middle">{ylabel}</text>',
           f'<rect x="{left}" y="{top}" width="{w - left - right}" '
           f'height="{h - top - bottom}" fill="none" stroke="black"/>']
    for i in range(5):  # ticks at fifths of each axis, labelled with the data value
        tx, ty = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        vx, vy = (10 ** tx if logx else tx), (10 ** ty if logy else ty)
        out.append(f'<text x="{px(vx)}" y="{h - bottom + 15}" text-anchor="middle">'
                   f'{vx:.3g}</text>')
        out.append(f'<text x="{left - 5}" y="{py(vy) + 4}" text-anchor="end">{vy:.3g}</text>')
    for k, ((label, (sx, sy)), color) in enumerate(zip(series.items(), COLORS * 3)):
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy))
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" '
                   'stroke-width="1.5"/>')
        out.append(f'<text x="{w - right + 10}" y="{top + 15 * k + 10}" fill="{color}">'
                   f'{label}</text>')
    for k, (label, (x, y)) in enumerate(marks.items(), start=len(series)):
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="black"/>')
        out.append(f'<text x="{w - right + 10}" y="{top + 15 * k + 10}">* {label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))
