"""Online learners PDGD, DBGD and MGD (baselines.md §3.1–3.4, §3.6; sanity tests §6 items 4–6)."""

import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.online import multileaving as ml
from ltrjax.online import plackett_luce as pl
from ltrjax.runner import make_policy
from ltrjax.online.policies.base import QueryView, SessionLog, update_one
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.policies.dbgd import DBGD, MGD, key_words, session_keys, unit_directions
from ltrjax.online.policies.pdgd import PDGD
from ltrjax.online.schedule import update_points
from ltrjax.online.simulator import SimConfig, Simulator, policy_key, resolve_hyper, trial_keys
from ltrjax.online.state import DocCounters
from tests.online_toy import KEY, toy_data, toy_sim
from tests.reference.online_loop import reference_warmup, run_sessions
from ltrjax.data.toy import toy_queryset

CONF = Path(__file__).resolve().parent.parent / "conf" / "algorithm"
N_FEATURES = 5
team_draft = jax.jit(ml.team_draft)  # eager dispatch of the unrolled loops is slow; jit every helper used often
pair_weights = jax.jit(pl.pdgd_pair_weights)
coefficients = jax.jit(pl.pdgd_coefficients)
pm_assignment = jax.jit(ml.probabilistic_assignment, static_argnums=(4,))
pm_exact = jax.jit(ml.probabilistic_preferences_exact)
pm_sampled = jax.jit(ml.probabilistic_preferences, static_argnums=(3,))
CONFIG = SimConfig(sessions=500, warmup_sessions_per_query=3, n_updates=3, entry_prob=0.5, min_lanes=4,
                   lanes_per_query=0.3)


@pytest.fixture(scope="module")
def toy():
    data = pad_and_bucket(toy_queryset(n_queries=30, n_features=N_FEATURES, docs=(6, 14), y_max=2, seed=5,
                                       recipe="latent"), n_buckets=1)
    sim = Simulator(data, clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5), CONFIG,
                    warmup_policy=BM25(data))
    return data, sim


@pytest.fixture(scope="module")
def shared_toy():
    """The shared toy protocol (tests/online_toy.py): the trials' programs are those of test_policies' configs."""
    data = toy_data()
    return data, toy_sim(data, clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5))


# --------------------------------------------------------------------------- NumPy PL oracles
def np_log_prob(s, ranking):
    """log P(ranking prefix) under PL over all candidates ``s`` (brute force, float64)."""
    s = np.asarray(s, np.float64)
    left, total = list(range(len(s))), 0.0
    for d in ranking:
        total += s[d] - np.log(np.sum(np.exp(s[left])))
        left.remove(d)
    return total


def np_pdgd(s, ranking, clicked):
    """coef per displayed position by the definition (§3.4 steps 3–5): brute-force PL probabilities."""
    s = np.asarray(s, np.float64)
    k = len(ranking)
    clicked = np.asarray(clicked, bool)
    coef = np.zeros(k)
    if not clicked.any():
        return coef
    last = np.flatnonzero(clicked).max()
    for a in np.flatnonzero(clicked):
        for b in range(min(last + 2, k)):
            if clicked[b]:
                continue
            swapped = list(ranking)
            swapped[a], swapped[b] = swapped[b], swapped[a]
            p, p_star = np.exp(np_log_prob(s, ranking)), np.exp(np_log_prob(s, swapped))
            sa, sb = s[ranking[a]], s[ranking[b]]
            w = p_star / (p + p_star) * np.exp(sa) * np.exp(sb) / (np.exp(sa) + np.exp(sb)) ** 2
            coef[a] += w
            coef[b] -= w
    return coef


# --------------------------------------------------------------------------- PDGD pieces
def test_pdgd_worked_example_and_equal_scores():
    s, mask, ranking, valid = jnp.array([2.0, 1.0, 0.0]), jnp.ones(3, bool), jnp.arange(3), jnp.ones(3, bool)
    rho, w = pair_weights(s, mask, ranking, valid, jnp.array([False, False, True]))
    np.testing.assert_allclose(rho[2, :2], [0.0474259, 0.2689414], rtol=1e-5)  # (C>A), (C>B)
    np.testing.assert_allclose(w[2, :2], [0.00497941, 0.0528771], rtol=1e-5)
    assert np.count_nonzero(np.asarray(w)) == 2
    coef = coefficients(s, mask, ranking, valid, jnp.array([False, False, True]))
    np.testing.assert_allclose(coef, [-0.00497941, -0.0528771, 0.00497941 + 0.0528771], rtol=1e-5)
    # equal scores: rho = 0.5, weight 0.125 per pair, whatever the extra candidates
    s_eq, mask6, shown = jnp.zeros(6), jnp.arange(6) < 5, jnp.array([3, 0, 4])
    rho, w = pair_weights(s_eq, mask6, shown, jnp.ones(3, bool), jnp.array([False, True, False]))
    np.testing.assert_allclose(rho[1, [0, 2]], [0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(w[1, [0, 2]], [0.125, 0.125], rtol=1e-6)
    # no click: no pairs, zero gradient
    assert not np.any(np.asarray(coefficients(s, mask, ranking, valid, jnp.zeros(3, bool))))
    # huge score gaps stay finite (log space)
    coef = coefficients(jnp.array([800.0, 0.0, -800.0]), mask, ranking, valid, jnp.array([False, False, True]))
    assert np.all(np.isfinite(coef))


def test_pdgd_pair_inference_rule():
    valid = jnp.array([True] * 6 + [False])
    # clicks at positions 1 and 2: negatives = unclicked at positions <= 3 -> {0, 3}; positions 4, 5 excluded
    pairs = np.asarray(pl.pdgd_pairs(jnp.array([0, 1, 1, 0, 0, 0, 0], bool), valid))
    assert sorted(zip(*np.nonzero(pairs))) == [(1, 0), (1, 3), (2, 0), (2, 3)]
    # a click at the last valid position: every unclicked displayed document is a negative; never the empty slot
    pairs = np.asarray(pl.pdgd_pairs(jnp.array([0, 0, 0, 0, 0, 1, 1], bool), valid))
    assert sorted(zip(*np.nonzero(pairs))) == [(5, b) for b in range(5)]
    assert not np.any(np.asarray(pl.pdgd_pairs(jnp.zeros(7, bool), valid)))


def test_pl_log_prob_and_pdgd_use_the_full_candidate_set():
    """Brute force with non-displayed candidates (and a masked padding slot) in the denominators."""
    rng = np.random.default_rng(0)
    for trial in range(5):
        s = rng.normal(size=8) * 2
        mask = np.arange(8) < 7  # slot 7 is padding
        ranking = rng.permutation(7)[:4]
        clicked = rng.random(4) < 0.4
        clicked[rng.integers(4)] = True
        cand = np.flatnonzero(mask)
        s_cand = s[cand]  # candidate index = slot here (mask is a prefix)
        args = (jnp.asarray(s, jnp.float32), jnp.asarray(mask), jnp.asarray(ranking), jnp.ones(4, bool))
        np.testing.assert_allclose(pl.log_prob(*args), np_log_prob(s_cand, ranking), rtol=1e-5, atol=1e-5)
        coef = coefficients(*args, jnp.asarray(clicked))
        np.testing.assert_allclose(coef, np_pdgd(s_cand, ranking, clicked), rtol=2e-4, atol=1e-6)
    # the displayed-only denominators (ULTRA) would give a different answer: the test above is sensitive to them
    s = np.array([0.0, 1.0, 2.0, 3.0])
    assert not np.allclose(np_pdgd(s, [0, 1], [False, True]), np_pdgd(s[:2], [0, 1], [False, True]))


def test_gumbel_top_k_matches_plackett_luce():
    """Frequencies of the 6 orderings of 3 documents (and of top-2 of 4) vs the PL probabilities (chi-square)."""
    n = 20000
    keys = jax.random.split(jax.random.PRNGKey(1), n)
    for scores, k in ((jnp.array([1.0, 0.2, -0.7]), 3), (jnp.array([0.5, -1.0, 1.5, 0.0]), 2)):
        mask = jnp.ones(scores.shape, bool)
        rankings, valid = jax.jit(jax.vmap(lambda kk: pl.sample_ranking(kk, scores, mask, k)))(keys)
        assert bool(jnp.all(valid))
        perms = list(itertools.permutations(range(scores.shape[0]), k))
        expected = np.array([np.exp(np_log_prob(scores, p)) for p in perms]) * n
        codes = np.asarray(rankings) @ (10 ** np.arange(k))
        observed = np.array([np.sum(codes == np.dot(p, 10 ** np.arange(k))) for p in perms])
        chi2 = np.sum((observed - expected) ** 2 / expected)
        assert observed.sum() == n and chi2 < 32.0  # df <= 11; P(chi2_11 > 32) ~ 0.001
    # a padded / non-entered slot is never sampled; empty positions are flagged
    ranking, valid = pl.sample_ranking(jax.random.PRNGKey(0), jnp.array([0.0, 9.0, 1.0]), jnp.array([1, 0, 1], bool), 3)
    assert 1 not in np.asarray(ranking)[np.asarray(valid)] and np.asarray(valid).tolist() == [True, True, False]


def test_pdgd_gradient_is_zero_in_expectation_under_position_only_clicks():
    """Clicks from the position alone (theta_k): E[coef of each document] = 0 (§6.5 unbiasedness)."""
    n, k = 40000, 4
    s = jnp.array([1.2, 0.3, -0.4, 0.8, -1.0, 0.0])
    mask = jnp.arange(6) < 6
    theta = jnp.array([0.9, 0.6, 0.45, 0.3])

    def one(key):
        k1, k2 = jax.random.split(key)
        ranking, valid = pl.sample_ranking(k1, s, mask, k)
        clicked = jax.random.uniform(k2, (k,)) < theta
        coef = coefficients(s, mask, ranking, valid, clicked)
        return jnp.zeros(6).at[ranking].add(coef)  # per-document coefficient

    per_doc = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(2), n)), np.float64)
    mean, se = per_doc.mean(0), per_doc.std(0) / np.sqrt(n)
    assert np.all(np.abs(mean) < 4 * se + 1e-7), (mean, se)
    assert np.abs(mean).max() < 0.01 * np.abs(per_doc).mean(0).max() + 4 * se.max()


# --------------------------------------------------------------------------- multileaving
def np_team_draft(rankings, order, k):
    """HarrieO-style TDM on full rankings with a given picking order after the shared prefix."""
    rankings = np.asarray(rankings)
    out, teams, i = [], [], 0
    while i < k and np.all(rankings[:, i] == rankings[0, i]):
        out.append(rankings[0, i])
        teams.append(-1)
        i += 1
    for j in order[: k - i]:
        out.append(next(d for d in rankings[j] if d not in out))
        teams.append(j)
    return np.array(out), np.array(teams)


def td_order(key, n_rankers, k):
    """The picking order ``team_draft`` draws from ``key`` (shared draws for the NumPy reference)."""
    n_rounds = -(-k // n_rankers)
    return np.concatenate([np.asarray(jax.random.permutation(kk, n_rankers))
                           for kk in jax.random.split(key, n_rounds)])


def test_team_draft_hand_made_and_identical_rankers():
    a, b = [0, 1, 2, 3, 4], [4, 3, 2, 1, 0]
    tops = jnp.array([a, b])
    found = False
    for seed in range(64):
        ranking, teams, valid = team_draft(jax.random.PRNGKey(seed), tops, jnp.int32(5))
        if np.asarray(teams).tolist() == [0, 1, 1, 0, 0]:  # A, B | B, A | A
            np.testing.assert_array_equal(ranking, [0, 4, 3, 1, 2])
            np.testing.assert_array_equal(ml.team_credit(teams, jnp.array([1, 0, 1, 0, 1], bool), 2), [2, 1])
            found = True
        rounds = np.asarray(teams)[:4].reshape(2, 2)
        assert all(sorted(r) == [0, 1] for r in rounds)  # each round is a permutation of the rankers
    assert found
    # identical rankers: everything is shared prefix, no team, no credit
    same = jnp.array([a, a, a])
    ranking, teams, _ = team_draft(jax.random.PRNGKey(0), same, jnp.int32(5))
    np.testing.assert_array_equal(ranking, a)
    assert np.all(np.asarray(teams) == -1)
    assert not np.any(np.asarray(ml.team_credit(teams, jnp.ones(5, bool), 3)))
    # shared prefix of two documents, then drafting; fewer candidates than positions
    tops = jnp.array([[7, 3, 1, 5, 0], [7, 3, 5, 0, 1], [7, 3, 0, 1, 5]])
    for seed in range(8):
        key = jax.random.PRNGKey(seed)
        ranking, teams, valid = team_draft(key, tops, jnp.int32(5))
        ref, ref_teams = np_team_draft(np.asarray(tops), td_order(key, 3, 5), 5)
        np.testing.assert_array_equal(ranking, ref)
        np.testing.assert_array_equal(teams, ref_teams)
    # display scores: their top 5 is the list, and their fractions give the teams back
    scores = jax.jit(ml.display_scores, static_argnums=(2, 4))(ranking, valid, 10, teams, 3)
    np.testing.assert_array_equal(jax.lax.top_k(scores, 5)[1], ranking)
    np.testing.assert_array_equal(ml.teams_of_scores(scores[ranking], 3), teams)
    ranking, teams, valid = team_draft(key, jnp.array([[2, 0, 1, 9, 9], [1, 2, 0, 9, 9]]), jnp.int32(3))
    assert sorted(np.asarray(ranking)[:3].tolist()) == [0, 1, 2] and np.asarray(valid).tolist() == [1, 1, 1, 0, 0]
    assert np.all(np.asarray(teams)[3:] == -1)


def test_team_draft_interleaving_is_balanced():
    """R = 2, no shared prefix: each team gets about half of the picks; R = 3: each ranker picks first 1/3."""
    many = jax.jit(jax.vmap(team_draft, in_axes=(0, None, None)))  # one compilation per number of rankers
    keys = jax.random.split(jax.random.PRNGKey(3), 4000)
    tops = jnp.array([[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]])
    teams = np.asarray(many(keys, tops, jnp.int32(6))[1])
    assert np.all(np.sum(teams == 1, axis=1) == 3)  # 6 positions: exactly 3 picks each, every time
    teams = np.asarray(many(keys, tops, jnp.int32(5))[1])[:, :5]  # 5 of the 6 positions filled
    assert abs(np.mean(teams == 1) - 0.5) < 4 * np.sqrt(0.25 / teams.size)
    tops3 = jnp.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0], [2, 3, 4, 0, 1]])
    first = np.asarray(many(keys, tops3, jnp.int32(5))[1])[:, 0]
    np.testing.assert_allclose(np.bincount(first, minlength=3) / len(keys), [1 / 3] * 3,
                               atol=4 * np.sqrt(2 / 9 / len(keys)))


def test_probabilistic_multileaving_sampling_and_credit():
    tau, n = 3.0, 20000
    scores = jnp.array([[3.0, 2.0, 1.0, 0.0, -1.0], [0.0, 1.0, -1.0, 3.0, 2.0]])  # rankers 0 and 1
    mask = jnp.ones(5, bool)
    sample_many = jax.jit(jax.vmap(lambda kk, sc, m: ml.probabilistic_multileave(kk, sc, m, 2, tau),
                                   in_axes=(0, None, None)))
    keys = jax.random.split(jax.random.PRNGKey(6), n)
    rankings, valid = sample_many(keys, scores, mask)
    assert bool(jnp.all(valid))
    # analytic first-two-positions distribution of the uniform mixture of rank^-tau distributions
    ranks = np.argsort(np.argsort(-np.asarray(scores), axis=1), axis=1)  # 0-based rank of each doc per ranker
    sig = (ranks + 1.0) ** -tau

    def mixture(placed):
        free = np.ones(5, bool)
        free[list(placed)] = False
        return np.mean(sig * free / np.sum(sig * free, axis=1, keepdims=True), axis=0)

    codes = np.asarray(rankings) @ np.array([1, 10])
    chi2, cells = 0.0, 0
    for d1, d2 in itertools.permutations(range(5), 2):
        expected = n * mixture([])[d1] * mixture([d1])[d2]
        if expected > 5:
            observed = np.sum(codes == d1 + 10 * d2)
            chi2 += (observed - expected) ** 2 / expected
            cells += 1
    assert chi2 < cells + 5 * np.sqrt(2 * cells)
    # credit: the list [3, 0, 4, 1, 2]; ranker 1 puts docs 3 and 4 first, ranker 0 last -> clicks on them: 1 wins
    ranking = jnp.array([3, 0, 4, 1, 2])
    p = pm_assignment(scores, mask, ranking, jnp.ones(5, bool), tau)
    np.testing.assert_allclose(np.asarray(p).sum(1), 1.0, rtol=1e-6)
    # position 0 (doc 3: rank 3 for ranker 0, rank 0 for ranker 1), brute force
    s0, s1 = 4.0 ** -tau / np.sum(np.arange(1, 6) ** -tau), 1.0 / np.sum(np.arange(1, 6) ** -tau)
    np.testing.assert_allclose(p[0], [s0 / (s0 + s1), s1 / (s0 + s1)], rtol=1e-5)
    # position 2 (doc 4) renormalises over the documents left after 3 and 0
    left0 = np.sum(np.arange(1, 6) ** -tau) - 4.0 ** -tau - 1.0
    left1 = np.sum(np.arange(1, 6) ** -tau) - 1.0 - 4.0 ** -tau
    q0, q1 = 5.0 ** -tau / left0, 2.0 ** -tau / left1
    np.testing.assert_allclose(p[2], [q0 / (q0 + q1), q1 / (q0 + q1)], rtol=1e-5)
    clicked = jnp.array([True, False, True, False, False])
    exact = pm_exact(p, clicked)
    sampled = pm_sampled(jax.random.PRNGKey(7), p, clicked, 4000)
    assert float(exact[1]) > 0.5 and float(exact[0]) == 0.0
    np.testing.assert_allclose(sampled, exact, atol=4 / np.sqrt(4000))
    # brute-force expectation over the joint assignments of the two clicks
    pn = np.asarray(p, np.float64)
    brute = sum(pn[0, a] * pn[2, b] * np.sign((a == 1) + (b == 1) - (a == 0) - (b == 0))
                for a in (0, 1) for b in (0, 1))
    np.testing.assert_allclose(exact[1], brute, rtol=1e-5)
    assert bool(ml.winners(exact)[0])
    # identical rankers: both equally likely to have placed anything -> no preference; no click -> none
    same = jnp.stack([scores[0], scores[0]])
    p_same = pm_assignment(same, mask, ranking, jnp.ones(5, bool), tau)
    np.testing.assert_allclose(p_same, 1 / 2, rtol=1e-6)
    np.testing.assert_allclose(pm_exact(p_same, clicked), 0.0, atol=1e-6)
    assert not np.any(np.asarray(pm_sampled(jax.random.PRNGKey(0), p, jnp.zeros(5, bool), 4000)))
    # fewer candidates than positions: a valid prefix of distinct entered documents
    rankings, valid = sample_many(keys, scores, jnp.arange(5) < 1)
    assert np.all(np.asarray(valid) == [True, False]) and np.all(np.asarray(rankings)[:, 0] == 0)


# --------------------------------------------------------------------------- DBGD / MGD policies
def one_query_view(policy, params, data, q=0, n_entered=6):
    """A ``QueryView`` of query ``q`` (dataset order = entry order here) with zero counters."""
    bucket = data.buckets[0]
    row = int(data.row_of_query[q])
    aux = jax.tree_util.tree_map(lambda a: a[row], policy.prepare(params, bucket, None))
    counters = DocCounters.zeros((bucket.width,))
    return QueryView(aux=aux, hyper=policy.default_hyper(), params=params, counters=counters,
                     n_entered=jnp.int32(n_entered), issue_count=jnp.int32(1), features=bucket.features[row])


def session(policy, view, key, clicked_fn):
    """Run one session through the policy hooks: shown list, clicks from ``clicked_fn(shown, teams)``, record."""
    scores = jitted(policy, "session_scores")(view, key)
    order = np.argsort(-np.where(np.arange(scores.shape[0]) < int(view.n_entered), np.asarray(scores), -np.inf),
                       kind="stable")[: policy.top_k]
    shown = jnp.asarray(order, jnp.int32)
    teams = multileave_teams(policy, view, key)
    clicked = jnp.asarray(clicked_fn(np.asarray(shown), np.asarray(teams)), bool)
    record = jitted(policy, "session_record")(view, key, scores, shown, jnp.ones(len(order), bool), clicked)
    return shown, clicked, record


_JITTED = {}


def jitted(policy, name):
    """``policy.name`` (a hook, or "teams" of the multileaved list) jitted once per policy object."""
    if (id(policy), name) not in _JITTED:
        fn = (lambda v, k: policy._multileave(v, k)[1]) if name == "teams" else getattr(policy, name)
        _JITTED[id(policy), name] = (policy, jax.jit(fn))  # keeps the policy alive: ids stay unique
    return _JITTED[id(policy), name][1]


def multileave_teams(policy, view, key):
    return np.asarray(jitted(policy, "teams")(view, key))


def key_with_pick(policy, view, team):
    """A session key whose multileaved list gives ranker ``team`` at least one pick."""
    for seed in range(100):
        key = jax.random.PRNGKey(seed)
        if team in multileave_teams(policy, view, key):
            return key
    raise AssertionError("no key found")


def single_log(q, shown, clicked, record):
    stack = lambda a: np.asarray(a)[None]  # noqa: E731
    return SessionLog(query=np.array([q]), shown=stack(shown), clicks=stack(clicked), session=np.array([0]),
                      record=jax.tree_util.tree_map(stack, record))


def test_dbgd_mgd_updates(toy):
    data, _ = toy
    q = int(np.flatnonzero(data.split_of_query == 0)[0])  # a training query
    dbgd, mgd1 = DBGD(data, learning_rate=0.1), MGD(data, n_candidates=1, learning_rate=0.1)
    params = dbgd.init(jax.random.PRNGKey(0), data)
    hyper = dbgd.default_hyper()
    assert set(params) == {"w"} and hyper.learning_rate == np.float32(0.1)
    view = one_query_view(dbgd, params, data, q)
    key = key_with_pick(dbgd, view, 1)
    # MGD with one candidate is DBGD: same list, same record, same update
    np.testing.assert_array_equal(jitted(dbgd, "session_scores")(view, key),
                                  jitted(mgd1, "session_scores")(view, key))
    cand_clicks = lambda shown, teams: teams[: len(shown)] == 1  # noqa: E731
    rec_d = session(dbgd, view, key, cand_clicks)
    rec_m = session(mgd1, view, key, cand_clicks)
    for a, b in zip(jax.tree_util.tree_leaves(rec_d), jax.tree_util.tree_leaves(rec_m)):
        np.testing.assert_array_equal(a, b)
    assert bool(rec_d[2]["win"][0]), "the candidate got every click"
    new_d, info = dbgd.update(None, params, hyper, data, None, None, single_log(q, *rec_d))
    new_m, _ = mgd1.update(None, params, mgd1.default_hyper(), data, None, None, single_log(q, *rec_m))
    np.testing.assert_array_equal(new_d["w"], new_m["w"])
    # a population of one retrains the same (the default ``update_population`` calls ``update`` per member)
    new_p, info_p = update_one(dbgd, jax.random.PRNGKey(0), params, hyper, data, None, None, single_log(q, *rec_d))
    np.testing.assert_array_equal(new_p["w"], new_d["w"])
    assert info_p == info
    # candidate gets all clicks: Delta w = eta delta u, |Delta w| = eta delta
    u = unit_directions(session_keys(key_words(key))[0], 1, dbgd.n_in)[0]
    np.testing.assert_allclose(new_d["w"] - params["w"], 0.1 * u, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(new_d["w"] - params["w"]), 0.1, rtol=1e-5)
    assert info["updates"] == 1
    # no clicks: w unchanged; current ranker gets the clicks: w unchanged
    for fn in (lambda shown, teams: np.zeros(len(shown), bool), lambda shown, teams: teams[: len(shown)] == 0):
        new, info = dbgd.update(None, params, hyper, data, None, None, single_log(q, *session(dbgd, view, key, fn)))
        np.testing.assert_array_equal(new["w"], params["w"])
        assert info["updates"] == 0
    # a validation/test query does not train unless all_splits
    q_test = int(np.flatnonzero(data.split_of_query == 2)[0])
    view_t = one_query_view(dbgd, params, data, q_test)
    log_t = single_log(q_test, *session(dbgd, view_t, key_with_pick(dbgd, view_t, 1), cand_clicks))
    assert bool(log_t.record["win"][0, 0])
    np.testing.assert_array_equal(dbgd.update(None, params, hyper, data, None, None, log_t)[0]["w"], params["w"])
    every_split = DBGD(data, all_splits=True)
    assert not np.array_equal(every_split.update(None, params, hyper, data, None, None, log_t)[0]["w"], params["w"])
    # MGD: the mean of the winners' directions
    mgd = MGD(data, n_candidates=4)  # the learning rate comes from the hyper-parameters, not the constructor's 0.1
    params = mgd.init(jax.random.PRNGKey(1), data)
    hyper = mgd.make_hyper(learning_rate=0.5)
    view = one_query_view(mgd, params, data, q)
    winners_clicks = lambda shown, teams: np.isin(teams[: len(shown)], [1, 3])  # noqa: E731
    for seed in range(20):
        key = jax.random.PRNGKey(100 + seed)
        rec = session(mgd, view, key, winners_clicks)
        if not np.any(winners_clicks(np.asarray(rec[0]), multileave_teams(mgd, view, key))):
            continue
        win = np.asarray(rec[2]["win"])
        u = np.asarray(unit_directions(session_keys(key_words(key))[0], 4, mgd.n_in))
        new, _ = mgd.update(None, params, hyper, data, None, None, single_log(q, *rec))
        np.testing.assert_allclose(new["w"] - params["w"], 0.5 * u[win].mean(0), rtol=1e-5, atol=1e-7)
        assert set(np.flatnonzero(win)) <= {0, 2}
        break
    else:
        pytest.fail("no session where candidates 1 or 3 got a pick")


@pytest.mark.parametrize("samples", [0, 300])
def test_probabilistic_mgd_session_hooks(toy, samples):
    """PM through the policy hooks: a valid list of distinct entered documents; the recorded winners are
    those of the credit inference recomputed from the same key (exact or sampled)."""
    data, _ = toy
    policy = MGD(data, n_candidates=2, multileave="probabilistic", pm_samples=samples)
    params = policy.init(jax.random.PRNGKey(0), data)
    view = one_query_view(policy, params, data, n_entered=7)
    for seed in range(3):
        key = jax.random.PRNGKey(20 + seed)
        k_dir, _, k_credit = session_keys(key_words(key))
        rankers = jax.jit(policy.ranker_scores)(view, k_dir)
        mask = jnp.arange(rankers.shape[1]) < 7
        ranks = np.argsort(np.argsort(-np.where(mask, np.asarray(rankers), -np.inf), axis=1, kind="stable"), axis=1)
        better = lambda shown, teams: ranks[1, shown] < ranks[0, shown]  # noqa: E731  clicks favour candidate 1
        shown, clicked, record = session(policy, view, key, better)
        assert len(set(np.asarray(shown).tolist())) == 5 and np.all(np.asarray(shown) < 7)
        p = pm_assignment(rankers, mask, shown, jnp.ones(5, bool), 3.0)
        pref = pm_exact(p, clicked) if samples == 0 else pm_sampled(k_credit, p, clicked, samples)
        np.testing.assert_array_equal(record["win"], np.asarray(pref)[1:] > (1e-6 if samples == 0 else 0.0))
        assert np.asarray(key_words(key)).tolist() == np.asarray(record["key"]).tolist()


def test_configs_load_and_ie_is_rejected(toy):
    data, _ = toy

    def load(name):
        cfg = OmegaConf.load(CONF / f"{name}.yaml")
        parents = [d for d in cfg.pop("defaults", []) if d != "_self_"]
        return OmegaConf.merge(*[load(p) for p in parents], cfg) if parents else cfg

    expected = {"pdgd": (PDGD, "wo_behav"), "pdgd_concat": (PDGD, "concat"), "dbgd": (DBGD, "wo_behav"),
                "dbgd_concat": (DBGD, "concat"), "mgd": (MGD, "wo_behav"), "mgd_concat": (MGD, "concat")}
    for name, (cls, setting) in expected.items():
        policy, _ = make_policy(name, load(name), data)
        assert type(policy) is cls and policy.setting == setting and policy.name == name and policy.trains
        assert policy.n_in == N_FEATURES + (setting == "concat")
    assert make_policy("mgd", load("mgd"), data)[0].n_candidates == 9
    assert make_policy("pdgd", load("pdgd"), data)[0].decay == 0.9999
    assert make_policy("dbgd", load("dbgd"), data)[0].decay == 0.99999
    for cls in (PDGD, DBGD, MGD):
        with pytest.raises(ValueError, match="ie"):
            cls(data, setting="ie")


# --------------------------------------------------------------------------- vectorized == NumPy reference
class Keeper:
    """Wraps a policy's ``update`` to keep the logging weights of every retrain (test only)."""

    def __init__(self, policy):
        self.weights = []
        update = policy.update

        def keep(*args):
            params, info = update(*args)
            self.weights.append(np.asarray(params["w"]))
            return params, info

        policy.update = keep


def np_features(inputs, q, docs, counters, policy):
    x = inputs["features"][q][docs].astype(np.float64)
    if policy.concat:
        exposure = counters["exposure"]
        x_b = np.where(exposure > 0, counters["clicks"] / np.where(exposure > 0, exposure, 1), 0.0)
        x = np.concatenate([x, x_b[:, None]], axis=1)
    return x


def pdgd_draws(policy, keys, width):
    """The Gumbel noise ``[n, width]`` of each session key (the simulator's draws, shared)."""
    return {"noise": np.asarray(jax.jit(jax.vmap(lambda k: jax.random.gumbel(k, (width,))))(keys))}


def pdgd_scorer(policy, w, seg, inputs, draws, out):
    def score(i, q, docs, counters):
        x = np_features(inputs, q, docs, counters, policy)
        s = (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float32)
        noisy = s + draws["noise"][seg.session[i]][: len(docs)]
        out.append((x, s, noisy))
        return noisy

    return score


def pdgd_steps(policy, out, shown, clicked):
    """(update happened, Delta_t) per session, recomputed from the sessions' lists and clicks."""
    steps = []
    for (x, s, noisy), c in zip(out, clicked):
        order = np.argsort(-noisy, kind="stable")[:5]
        c = c[: len(order)]
        steps.append((bool(c.any()), np_pdgd(s, order, c) @ x[order]))
    return steps


def mgd_draws(policy, keys, width):
    """Each session's candidate directions and team-draft picking order, from the policy's key derivation."""
    n_rankers, k = policy.n_candidates + 1, min(policy.top_k, width)

    def one(key):
        k_dir, k_ml, _ = session_keys(key_words(key))
        perms = [jax.random.permutation(kk, n_rankers) for kk in jax.random.split(k_ml, -(-k // n_rankers))]
        return unit_directions(k_dir, policy.n_candidates, policy.n_in), jnp.concatenate(perms)

    u, order = jax.jit(jax.vmap(one))(keys)
    return {"u": np.asarray(u, np.float64), "order": np.asarray(order)}


def mgd_scorer(policy, w, seg, inputs, draws, out):
    k = policy.top_k

    def score(i, q, docs, counters):
        x = np_features(inputs, q, docs, counters, policy)
        u, order = draws["u"][seg.session[i]], draws["order"][seg.session[i]]
        s0 = x @ w
        rankers = np.concatenate([s0[None], s0[None] + policy.delta * u @ x.T])
        full = np.argsort(-rankers, axis=1, kind="stable")
        m = min(k, len(docs))
        ranking, teams = np_team_draft(full, order, m)
        out.append((u, teams))
        scores = np.full(len(docs), -1.0)
        scores[ranking] = k - np.arange(m)
        return scores

    return score


def mgd_steps(policy, out, shown, clicked):
    steps = []
    for (u, teams), c in zip(out, clicked):
        credit = np.array([np.sum(c[: len(teams)] & (teams == j)) for j in range(policy.n_candidates + 1)])
        win = credit[1:] > credit[0]
        steps.append((bool(win.any()), policy.delta * u[win].mean(0) if win.any() else np.zeros(policy.n_in)))
    return steps


def reference_trial(sim, policy, key, make_draws, make_scorer, steps_of, hyper=None):
    """The trial one session at a time (shared draws), with the §3.6 learner recomputed in NumPy (eta_0 from the
    member's hyper-parameters, resolved as ``Simulator.run`` does)."""
    data, cfg = sim.data, sim.config
    keys, main, inputs, ref, common, uniforms = reference_warmup(sim, key)
    w = np.asarray(policy.init(keys.policy, data)["w"], np.float64)
    (width,) = {b.width for b in data.buckets}
    all_keys = jax.vmap(lambda t: policy_key(keys.run, t))(jnp.arange(main.session.max() + 1))
    draws = make_draws(policy, all_keys, width)  # indexed by global session
    points = update_points(len(main), cfg.n_segments)
    starts = np.concatenate([[0], points[:-1] + 1])
    shown_all, clicked_all, weights, pending = [], [], [], []
    for i, (a, b) in enumerate(zip(starts, points + 1)):
        seg, out = main.slice(int(a), int(b)), []
        _, shown, clicked = run_sessions(ref, seg, make_scorer(policy, w, seg, inputs, draws, out),
                                         uniforms=uniforms(seg), **common)
        shown_all.append(shown)
        clicked_all.append(clicked)
        train = (data.split_of_query[seg.query] == 0) | policy.all_splits
        pending += [(t and upd, step) for t, (upd, step) in zip(train, steps_of(policy, out, shown, clicked))]
        if cfg.retrains_after(i):
            eta, new_w = float(resolve_hyper(policy, hyper).learning_rate), w.copy()
            for upd, step in pending:  # one session after the other, as the classic learner would
                if upd:
                    new_w += eta * step
                    eta *= policy.decay
            w, pending = new_w, []
            weights.append(w)
    return np.concatenate(shown_all), np.concatenate(clicked_all), weights


@pytest.mark.parametrize("make, hyper", [
    (lambda d: PDGD(d, decay=0.99), None),
    (lambda d: PDGD(d, setting="concat", decay=0.99), {"learning_rate": 0.3}),
    (lambda d: MGD(d, setting="concat", decay=0.99, learning_rate=0.5), None),  # conf's 9 candidates
], ids=["pdgd", "pdgd_concat_lr0.3", "mgd_concat"])
def test_vectorized_equals_numpy_learner(shared_toy, make, hyper):
    data, sim = shared_toy
    policy = make(data)
    keeper = Keeper(policy)
    key = KEY
    result = sim.run(policy, key, hyper=hyper, progress=False, keep_logs=True)
    fns = (pdgd_draws, pdgd_scorer, pdgd_steps) if isinstance(policy, PDGD) else (mgd_draws, mgd_scorer, mgd_steps)
    shown, clicked, weights = reference_trial(sim, policy, key, *fns, hyper=hyper)
    np.testing.assert_array_equal(np.concatenate([log.shown for log in result.logs]), shown)
    np.testing.assert_array_equal(np.concatenate([log.clicks for log in result.logs]), clicked)
    assert len(keeper.weights) == len(weights) == 2
    for got, want in zip(keeper.weights, weights):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(result.final_params["w"], weights[-1], rtol=2e-5, atol=2e-6)
    init = np.asarray(policy.init(trial_keys(key).policy, data)["w"])
    assert not np.allclose(weights[-1], init)  # the learners really moved
    assert all(info["updates"] > 0 for info in result.train_info)
    assert np.all(np.isfinite(result.session_ndcg))
