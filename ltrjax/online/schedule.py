"""Session schedules: which query each session issues, and how sessions are packed into lanes.

Between two model updates queries share nothing but the frozen model, so a segment's sessions
can run query by query (SPEC §2.1). Each query's sessions are kept in time order and whole
queries are packed into ``n_lanes`` lanes, balanced by session count, so every scan step
advances one session in each lane with almost no padding; a query never appears in two lanes,
so lanes never write the same row in the same step.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ltrjax.online import host_random


@dataclasses.dataclass(frozen=True)
class SessionDraws:
    """The global sequence of sessions of a run, drawn up front (host arrays)."""

    query: np.ndarray  # i32 [n] global query index of each session
    enter: np.ndarray  # bool [n] whether a new document of that query enters first
    session: np.ndarray  # i32 [n] global session index (keys the per-session randomness)

    def __len__(self) -> int:
        return int(self.query.shape[0])

    def slice(self, start: int, stop: int) -> "SessionDraws":
        return SessionDraws(self.query[start:stop], self.enter[start:stop], self.session[start:stop])


def draw_sessions(key, n_sessions: int, n_queries: int, entry_prob: float, first_session: int = 0) -> SessionDraws:
    """Queries uniform over all queries of all splits; entry coins with probability ``entry_prob``: the numbers
    ``jax.random.randint``/``uniform`` draw from the two halves of ``key``, computed on the host (``host_random``:
    no program to compile per session count)."""
    k_query, k_enter = host_random.split(key)
    query = host_random.randint(k_query, (n_sessions,), 0, n_queries)
    enter = host_random.uniform(k_enter, (n_sessions,)) < np.float32(entry_prob)
    session = np.arange(first_session, first_session + n_sessions, dtype=np.int32)
    return SessionDraws(query, enter, session)


def update_points(n_sessions: int, n_updates: int) -> np.ndarray:
    """Last session index of each segment: ``linspace(0, N-1, n_updates+1)[1:]`` (EBRank main.py)."""
    return np.linspace(0, n_sessions - 1, n_updates + 1)[1:].astype(np.int64)


def padded_steps(steps: int, growth: float = 1.1) -> int:
    """Round a step count up to the next value of a geometric ladder, so few shapes get compiled."""
    if steps <= 8:
        return max(steps, 1)
    return int(math.ceil(8 * growth ** math.ceil(math.log(steps / 8, growth))))


def equal_count_groups(counts: np.ndarray):
    """Queries in decreasing ``counts`` (stable order), their sorted counts, and the ``(start, stop)`` bounds of each
    run of equal counts in that order (the groups ``balance_lanes`` and ``level_lanes`` place together)."""
    order = np.argsort(-counts, kind="stable")
    sorted_counts = counts[order]
    starts = np.flatnonzero(np.r_[True, np.diff(sorted_counts) != 0])
    return order, sorted_counts, list(zip(starts, np.r_[starts[1:], len(order)]))


def balance_lanes(counts: np.ndarray, n_lanes: int) -> np.ndarray:
    """Longest-processing-time-first assignment of queries (with ``counts`` sessions) to lanes.

    Queries are taken in decreasing count; each group of equal counts goes, ``n_lanes`` at a time,
    to the currently least-loaded lanes — LPT up to ties, with one NumPy call per group.
    """
    lane_of_query = np.empty(counts.shape[0], np.int64)
    loads = np.zeros(n_lanes, np.int64)
    order, sorted_counts, groups = equal_count_groups(counts)
    for start, stop in groups:
        for chunk_start in range(start, stop, n_lanes):
            chunk = order[chunk_start:min(stop, chunk_start + n_lanes)]
            lanes = np.argsort(loads, kind="stable")[: len(chunk)]
            lane_of_query[chunk] = lanes
            loads[lanes] += sorted_counts[start]
    return lane_of_query


def level_lanes(counts: np.ndarray, n_lanes: int) -> np.ndarray:
    """``balance_lanes`` that levels the lanes (``sim.segment_widths=classes``).

    Queries are taken in decreasing count; each group of equal counts is water-filled into the lanes: every lane
    gets as many of the group as keep it at or below a common level, the rest go one each to the least-loaded lanes
    (what LPT does for equal items, with a few NumPy calls per group). Lanes end within one query of each other
    wherever the counts allow, so a segment needs about sessions / lanes steps.
    """
    lane_of_query = np.empty(counts.shape[0], np.int64)
    loads = np.zeros(n_lanes, np.int64)
    order, sorted_counts, groups = equal_count_groups(counts)
    for start, stop in groups:
        size, m = int(sorted_counts[start]), int(stop - start)
        # the highest level L with sum((L - load) // size, over lanes below L) <= m items
        low, high = int(loads.min()), int(loads.max()) + size * (m // n_lanes + 2)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if (np.maximum(mid - loads, 0) // size).sum() <= m else (low, mid)
        take = np.maximum(low - loads, 0) // size
        rest = m - int(take.sum())
        if rest:  # one more each for the least-loaded lanes after filling (stable: lower lane first)
            take[np.argsort(loads + take * size, kind="stable")[:rest]] += 1
        lane_of_query[order[start:stop]] = np.repeat(np.arange(n_lanes), take)
        loads += take * size
    return lane_of_query


def lane_schedule(rows: np.ndarray, n_lanes: int, level: bool = False) -> np.ndarray:
    """Pack sessions (given by their query row, in time order) into lanes.

    Returns ``schedule`` of shape ``[steps, n_lanes]``: the index into ``rows`` of the session a
    lane runs at each step, or -1 when the lane is idle. ``steps`` is the busiest lane's load, unpadded:
    the simulator pads every bucket and segment to one step count of the ``padded_steps`` ladder, once.
    ``level``: pack with ``level_lanes`` (lanes within one query of each other) instead of ``balance_lanes``.
    """
    n = rows.shape[0]
    if n == 0:
        return np.full((1, n_lanes), -1, np.int64)
    per_row = np.bincount(rows)  # np.unique(rows, return_inverse=True, return_counts=True) without sorting
    present = np.flatnonzero(per_row)
    index = np.zeros(per_row.size, np.int64)
    index[present] = np.arange(present.size)
    inverse, counts = index[rows], per_row[present]
    lane = (level_lanes if level else balance_lanes)(counts, n_lanes)[inverse]
    by_lane = np.argsort(lane * present.size + inverse, kind="stable")  # lane, then query, then time
    lane_sorted = lane[by_lane]
    start = np.searchsorted(lane_sorted, np.arange(n_lanes))
    step = np.arange(n) - start[lane_sorted]
    schedule = np.full((int(step.max()) + 1, n_lanes), -1, np.int64)
    schedule[step, lane_sorted] = by_lane
    return schedule


def entered_counts(draws: SessionDraws, initial: np.ndarray, n_docs: np.ndarray) -> np.ndarray:
    """The entered documents each session ranks over (after its own entry), ``[n]``: for a session of query q,
    min(initial[q] + q's entering sessions up to and including it, n_docs[q]) (``initial``/``n_docs`` per global
    query; a query's count grows by one per entry and stops at its document count)."""
    n = len(draws)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((np.arange(n), draws.query))  # by query, then time
    enter = draws.enter[order].astype(np.int64)
    cumulative = np.cumsum(enter)
    query_sorted = draws.query[order]
    first = np.r_[True, query_sorted[1:] != query_sorted[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    before_group = np.where(group_start > 0, cumulative[group_start - 1], 0)
    out = np.empty(n, np.int64)
    out[order] = np.minimum(initial[query_sorted] + cumulative - before_group, n_docs[query_sorted])
    return out


def width_ladder(need: int, cap: int) -> int:
    """The smallest rung of 8, 12, 16, 24, 32, 48, ... (2^k and 1.5 * 2^k, k >= 3) that holds ``need`` entry slots,
    at most ``cap``: scanned widths within 1.5x of what is needed, with few distinct shapes to compile."""
    rung = 8
    while rung < need:
        rung = rung * 3 // 2 if rung & (rung - 1) == 0 else rung * 4 // 3
    return int(min(rung, cap))


def doc_slot_occupancy(plans: list[list[np.ndarray]], entered: list[np.ndarray], widths: list[tuple[int, ...]]
                       ) -> float:
    """Entered-document evaluations / scanned document slots of a phase (issue 22): ``plans[s][b]`` is segment s's
    lane schedule of bucket b ``[steps, lanes]`` (segment-local session index, -1 idle), ``entered[s]`` the entered
    count each of the segment's sessions ranks over (``entered_counts``), ``widths[s][b]`` the entry slots the
    segment scans in bucket b: one number, or one per step (width classes; 0 for a step that is not run). Every
    lane of every step scans its width, busy or idle."""
    useful = scanned = 0
    for plan, counts, width in zip(plans, entered, widths):
        for schedule, w in zip(plan, width):
            useful += int(counts[schedule[schedule >= 0]].sum())
            per_step = np.broadcast_to(np.asarray(w, np.int64), schedule.shape[:1])
            scanned += schedule.shape[1] * int(per_step.sum())
    return useful / scanned if scanned else float("nan")
