"""Figures of an online run: NDCG over time (EBRank Fig. 3 style)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_ndcg_over_time(results: dict, path: Path) -> None:
    """Left: NDCG@5 of shown lists on test sessions over time; right: Warm/Cold NDCG@5 per evaluation."""
    fig, (ax_online, ax_eval) = plt.subplots(1, 2, figsize=(12, 4.5))
    sessions = results.get("sessions", 1)
    for i, (name, entry) in enumerate(results["algorithms"].items()):
        color = f"C{i % 10}"
        curves = [t["test_session_ndcg_curve"] for t in entry["trials"] if t["test_session_ndcg_curve"]]
        if curves:
            n = min(len(c) for c in curves)
            curve = np.mean([c[:n] for c in curves], axis=0)
            ax_online.plot(np.linspace(0, sessions, n), curve, color=color, label=name)
        points = np.asarray(entry["trials"][0]["eval_points"]) + 1
        warm = np.mean([t["warm_history"] for t in entry["trials"]], axis=0)
        cold = np.mean([t["cold_history"] for t in entry["trials"]], axis=0)
        ax_eval.plot(points, warm, color=color, label=f"{name} warm")
        ax_eval.plot(points, cold, color=color, linestyle="--", alpha=0.7)
    ax_online.set(xlabel="session", ylabel="NDCG@5 of the shown list (test sessions)",
                  title="Online NDCG over time")
    ax_eval.set(xlabel="session", ylabel="NDCG@5 (test queries)", title="Warm (solid) and Cold (dashed) NDCG")
    ax_online.legend(fontsize=8)
    ax_eval.legend(fontsize=7, ncol=2)
    for ax in (ax_online, ax_eval):
        ax.grid(alpha=0.3)
    fig.suptitle(f"{results.get('dataset', '')}: {sessions} sessions, {results.get('trials', '')} trials")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
