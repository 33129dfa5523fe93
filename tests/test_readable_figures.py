"""Figures stay readable at 16 rows (issue 43; EBRank Table 3's 16-row table): every label inside the figure, no
clipped title, Cold in a panel of its own (not hidden under Warm), and every row a distinct line. Checked on a
fabricated 16-row results object, drawn as a run draws it; the same checks fail on the former layout's legend."""

from __future__ import annotations

import numpy as np
import pytest

from ltrjax.report import plots

ROWS = ["bm25", "dbgd@wo_behav", "mgd@wo_behav", "pdgd@wo_behav", "cftopk@wo_behav", "cfrandomk@wo_behav",
        "cfepsilon@wo_behav", "dbgd@concat", "mgd@concat", "pdgd@concat", "cftopk@concat", "cfrandomk@concat",
        "cfepsilon@concat", "prior@concat", "ucbrank@ie", "ebrank"]


def fabricated_table(rows=ROWS, trials: int = 5, points: int = 20) -> dict:
    """A results.json-shaped object of ``rows`` (Warm = Cold for the rows without behaviour features)."""
    rng = np.random.default_rng(0)
    algorithms = {}
    for r, name in enumerate(rows):
        top = 0.45 + 0.4 * r / len(rows)
        x = np.linspace(0.05, 1, points)
        made = []
        for _ in range(trials):
            warm = 0.4 + (top - 0.4) * (1 - np.exp(-4 * x)) + rng.normal(0, 0.005, points)
            behaviour = "concat" in name or name in ("ebrank", "ucbrank@ie")
            made.append({"test_session_ndcg_curve": (warm + rng.normal(0, 0.01, points)).tolist(),
                         "eval_points": (x * 3_600_000).astype(int).tolist(), "warm_history": warm.tolist(),
                         "cold_history": (warm - 0.15 * behaviour).tolist()})
        algorithms[name] = {"trials": made}
    return {"dataset": "synthetic_mslr30k", "sessions": 3_612_945, "sim": {"top_k": 5}, "algorithms": algorithms}


def drawn(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def inside(fig, artist, renderer) -> bool:
    box, page = artist.get_window_extent(renderer), fig.bbox
    return box.x0 >= page.x0 - 1 and box.y0 >= page.y0 - 1 and box.x1 <= page.x1 + 1 and box.y1 <= page.y1 + 1


def test_the_16_row_figure_shows_every_label_and_every_title(tmp_path):
    fig = plots.ndcg_over_time_figure(fabricated_table())
    renderer = drawn(fig)
    legend, = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ROWS
    assert inside(fig, legend, renderer)
    titles = [ax.title for ax in fig.axes] + [fig._suptitle]
    assert all(t.get_text() and inside(fig, t, renderer) for t in titles)
    plots.plot_ndcg_over_time(fabricated_table(), tmp_path / "ndcg_over_time.png")
    assert (tmp_path / "ndcg_over_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cold_has_its_own_panel_and_every_row_its_own_line():
    fig = plots.ndcg_over_time_figure(fabricated_table())
    online, warm, cold = fig.axes
    assert "Warm" in warm.get_title() and "Cold" in cold.get_title()
    assert [line.get_label() for line in warm.get_lines()] == ROWS == [line.get_label() for line in cold.get_lines()]
    styles = {(str(line.get_color()), line.get_linestyle()) for line in warm.get_lines()}
    assert len(styles) == len(ROWS)
    bm25_warm, bm25_cold = warm.get_lines()[0].get_ydata(), cold.get_lines()[0].get_ydata()
    np.testing.assert_array_equal(bm25_warm, bm25_cold)  # equal curves, each visible in its own panel
    assert warm.get_ylim() == cold.get_ylim()  # one scale: the drop from Warm to Cold reads across the panels


@pytest.mark.parametrize("n", [5, 16, 30])
def test_series_styles_are_distinct(n):
    assert len({tuple(sorted(plots.series_style(i, n).items())) for i in range(n)}) == n


def test_the_check_fails_on_the_former_layout():
    """The former right panel: 32 Warm/Cold entries in one legend to the right of the axes ran off the figure."""
    fig, ax = plots.subplots(1, 2, figsize=(14, 4.8))
    for name in ROWS:
        for kind in ("warm", "cold"):
            ax[1].plot([0, 1], [0, 1], label=f"{name} {kind}")
    plots.legend_outside(fig, ax[1], fontsize=7)
    fig.tight_layout()
    renderer = drawn(fig)
    assert not inside(fig, ax[1].get_legend(), renderer)
