"""A population run (``Simulator.run_population``: members as one vmapped program, retrained in one vmapped
fit) equals running its members one by one with ``Simulator.run``."""

import functools
import json

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.online import step as step_lib
from ltrjax.online.policies.dbgd import MGD
from ltrjax.online.policies.ebrank import EBRank
from ltrjax.online.policies.pdgd import PDGD
from ltrjax.online.policies.ucbrank import UCBRank
from ltrjax.online.simulator import SPLITS, Simulator, compiled
from ltrjax.online.state import STAT_NAMES, documents_in_entry_order, kept_counters, to_entry_order
from tests import toy_sims

CONFIG = toy_sims.SMALL_CONFIG  # 6 refreshes, 3 models (retrains after segments 1 and 3)
KEYS = (jax.random.PRNGKey(1), jax.random.PRNGKey(2))
ATOL = 1e-5  # float metrics; shown lists, clicks and counters must be equal


@pytest.fixture(scope="module")
def sim():
    return toy_sims.small_sim()


def grid(hypers):
    """2 trial keys x the hyper-parameter sets: members (key, hyper), trials outermost."""
    return [k for k in KEYS for _ in hypers], [h for _ in KEYS for h in hypers]


def assert_same_member(got, want):
    """One member of a population run equals the same member run alone."""
    assert len(got.logs) == len(want.logs) == CONFIG.n_segments
    for a, b in zip(got.logs, want.logs):
        for field in ("query", "session", "shown", "clicks"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        assert (a.record is None) == (b.record is None)
        if a.record is not None:
            for x, y in zip(jax.tree_util.tree_leaves(a.record), jax.tree_util.tree_leaves(b.record)):
                np.testing.assert_allclose(x, y, rtol=0, atol=ATOL)
    np.testing.assert_array_equal(got.session_query, want.session_query)
    np.testing.assert_array_equal(got.warmup_query, want.warmup_query)
    np.testing.assert_allclose(got.session_ndcg, want.session_ndcg, rtol=0, atol=ATOL)
    for split in SPLITS:
        assert got.cum_ndcg[split] == pytest.approx(want.cum_ndcg[split], rel=0, abs=ATOL)
    assert len(got.eval_history) == len(want.eval_history) == CONFIG.n_segments
    for a, b in zip(got.eval_history, want.eval_history):
        for split in SPLITS:
            for m in ("warm", "cold"):
                assert a[split][m] == pytest.approx(b[split][m], rel=0, abs=ATOL, nan_ok=True)
    assert got.warm_ndcg == pytest.approx(want.warm_ndcg, rel=0, abs=ATOL)
    assert got.cold_ndcg == pytest.approx(want.cold_ndcg, rel=0, abs=ATOL)
    for m in ("warm", "cold"):
        np.testing.assert_allclose(got.query_ndcg[m], want.query_ndcg[m], rtol=0, atol=ATOL)
    for a, b in zip(got.final_states, want.final_states):  # final counters (and entries, issue counts, orders)
        for field in ("stats", "n_entered", "issue_count", "order", "entry_session"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert len(got.train_info) == len(want.train_info)
    for a, b in zip(got.train_info, want.train_info):
        assert a.get("skipped", False) == b.get("skipped", False)
        for k in ("n_train", "n_val", "epochs", "updates", "sessions", "train_sessions"):
            assert a.get(k) == b.get(k), k
    for x, y in zip(jax.tree_util.tree_leaves(got.final_params), jax.tree_util.tree_leaves(want.final_params)):
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), rtol=0, atol=ATOL)
    for x, y in zip(jax.tree_util.tree_leaves(got.hyper), jax.tree_util.tree_leaves(want.hyper)):
        np.testing.assert_array_equal(x, y)


def solo_runs(sim, policy, hypers):
    """Every member of the 2 x ``hypers`` grid run alone with ``sim.run``; returns (keys, hypers, results)."""
    keys, member_hypers = grid(hypers)
    solo = [sim.run(policy, k, hyper=h, progress=False, keep_logs=True) for k, h in zip(keys, member_hypers)]
    # the members really differ: per trial (draws) and per hyper-parameter set (what is shown)
    shown = [np.concatenate([log.shown for log in r.logs]) for r in solo]
    assert not np.array_equal(solo[0].session_query, solo[len(hypers)].session_query)
    assert any(not np.array_equal(shown[0], shown[j]) for j in range(1, len(hypers)))
    return keys, member_hypers, solo


def check_population(sim, policy, keys, hypers, solo, max_members=None):
    """``run_population`` (chunked by ``max_members``) equals ``solo``, member by member; compiles one segment
    program for its chunk size (a short last chunk is padded to that size, so it adds no shape)."""
    programs = compiled(policy)["segment"]
    before = programs._cache_size()
    population = sim.run_population(policy, keys, hypers, progress=False, keep_logs=True, max_members=max_members)
    assert len(population) == len(keys)
    for i, (got, want) in enumerate(zip(population, solo)):
        try:
            assert_same_member(got, want)
        except AssertionError as err:
            raise AssertionError(f"member {i} (max_members={max_members}) differs from its solo run") from err
    chunk = sim.chunk_size(len(keys), max_members, policy)
    assert chunk <= (max_members or len(keys))
    assert population[0].timings["members"] == chunk
    # at most the chunk's own shape per segment width (step.scan_segment), never the short one
    assert programs._cache_size() - before <= (chunk != 1) * sim.width_shapes()


@pytest.fixture(scope="module")
def ebrank(sim):
    """EBRank, 2 trials x 3 epsilons (None = the configured 20, a dict, a typed ``EBRankHyper``), run alone."""
    policy = toy_sims.small_ebrank(sim.data)
    keys, hypers, solo = solo_runs(sim, policy, [{"epsilon": 0.0}, None, policy.make_hyper(epsilon=200.0)])
    assert all(float(r.hyper.epsilon) == e for r, e in zip(solo, [0.0, 20.0, 200.0] * 2))
    assert all(sum(not i.get("skipped") for i in r.train_info) >= 1 for r in solo)  # the priors retrained
    # the six trials reuse one program per per-segment width tuple (Simulator.segment_widths)
    assert compiled(policy)["segment"]._cache_size() == sim.width_shapes()
    return policy, keys, hypers, solo


def test_ebrank_population_equals_members(sim, ebrank):
    """The six members in one population (one vmapped segment program, one vmapped prior fit)."""
    check_population(sim, *ebrank)


class AllCountersEBRank(EBRank):
    """EBRank whose state keeps all six counters (the control of ``counters_read``)."""

    counters_read = STAT_NAMES


class UnderDeclaredEBRank(EBRank):
    """EBRank that leaves out a counter it reads (``exposure``, its statistic's N and E)."""

    counters_read = ("clicks", "impressions")


def test_states_keep_only_the_counters_the_policy_reads(sim, ebrank):
    """EBRank's states keep its statistic's counters, impressions and clicks (3 of 6: the session step scatters and
    carries 3 arrays, not 6), and a run equals the run that keeps all six, bit for bit, on the kept counters; a policy
    that leaves out a counter it reads fails when its programs are traced, instead of running with other values."""
    policy, keys, hypers, solo = ebrank
    assert kept_counters(policy.counters_read) == ("clicks", "impressions", "exposure")
    for state in solo[0].final_states:
        assert [n for n in STAT_NAMES if getattr(state.counters, n) is not None] == ["clicks", "impressions",
                                                                                     "exposure"]
    control = AllCountersEBRank(sim.data, epsilon=20.0, min_impressions=2, fit={"max_epochs": 5, "batch_size": 32})
    want = sim.run(control, keys[0], hyper=hypers[0], progress=False, keep_logs=True)
    got = solo[0]
    for a, b in zip(got.logs, want.logs):
        np.testing.assert_array_equal(a.shown, b.shown)
        np.testing.assert_array_equal(a.clicks, b.clicks)
    np.testing.assert_array_equal(got.session_ndcg, want.session_ndcg)
    assert got.cum_ndcg == want.cum_ndcg and (got.warm_ndcg, got.cold_ndcg) == (want.warm_ndcg, want.cold_ndcg)
    for a, b in zip(got.final_states, want.final_states):
        assert all(getattr(b.counters, n) is not None for n in STAT_NAMES)
        for n in ("clicks", "impressions", "exposure"):
            np.testing.assert_array_equal(getattr(a.counters, n), getattr(b.counters, n))
    for x, y in zip(jax.tree_util.tree_leaves(got.final_params), jax.tree_util.tree_leaves(want.final_params)):
        np.testing.assert_array_equal(x, y)
    assert sim.member_bytes(policy) < sim.member_bytes(control)
    under = UnderDeclaredEBRank(sim.data, epsilon=20.0, min_impressions=2, fit={"max_epochs": 5, "batch_size": 32})
    with pytest.raises(TypeError):
        sim.run(under, keys[0], progress=False)


def test_ebrank_population_in_chunks_equals_members(sim, ebrank):
    """At most 4 members at once: balanced chunks of 3 and 3 (members of both trials); 5 members at most 3 at
    once: 3 and 2, the short one padded to 3."""
    assert [sim.chunk_size(n, m) for n, m in ((6, 4), (5, 3), (21, 13), (26, 13), (7, None), (7, 1))] == \
        [3, 3, 11, 13, 7, 1]
    check_population(sim, *ebrank, max_members=4)
    policy, keys, hypers, solo = ebrank
    check_population(sim, policy, keys[:5], hypers[:5], solo[:5], max_members=3)


def test_pdgd_population_equals_members(sim):
    """Session records (PDGD coefficients) come out of the vmapped scan per member, and each member's update
    sums its own records with its own learning rate."""
    policy = PDGD(sim.data, decay=0.99)
    keys, hypers, solo = solo_runs(sim, policy, [{"learning_rate": 0.1}, {"learning_rate": 0.5}])
    assert all(info["updates"] > 0 for r in solo for info in r.train_info)
    assert not np.allclose(solo[0].final_params["w"], solo[1].final_params["w"])  # the learning rate matters
    check_population(sim, policy, keys, hypers, solo)


def test_mgd_population_equals_members(sim):
    """A policy that reads its query's features in the scan (``QueryView.features``: one dataset-order copy shared
    by the members, gathered per lane through each member's entry order) equals its members run alone."""
    policy = MGD(sim.data, n_candidates=3, setting="concat", decay=0.99)
    keys, hypers, solo = solo_runs(sim, policy, [{"learning_rate": 0.1}, {"learning_rate": 0.5}])
    assert all(info["updates"] > 0 for r in solo for info in r.train_info)
    check_population(sim, policy, keys, hypers, solo)


def test_lane_features_equal_the_entry_order_copy(sim):
    """``step.lane_features`` (the lanes' feature rows, gathered from the shared per-document features) equals the
    per-member entry-order copy that ``prepare`` used to return (``to_entry_order``), idle lanes (the scratch row)
    included, and the first slots of it when the member's order is narrowed."""
    states = sim.init_states(jax.random.PRNGKey(7))
    # jitted, as inside the segment program: one program per shape instead of one per eager op
    entry_order, lane_features = jax.jit(to_entry_order), jax.jit(step_lib.lane_features)
    for bucket, state in zip(sim.data.buckets, states):
        copy = np.asarray(entry_order(bucket.features, state))  # [Qb+1, Db, F], scratch row zeros
        rows = jnp.asarray(np.random.default_rng(0).integers(0, bucket.n_queries + 1, 64), jnp.int32)
        assert int(rows.max()) == bucket.n_queries  # the draw includes idle lanes
        got = np.asarray(lane_features(bucket, state.order, rows))
        np.testing.assert_array_equal(got, copy[np.asarray(rows)])
        assert not np.array_equal(np.asarray(state.order[:-1]), np.broadcast_to(np.arange(bucket.width),
                                                                               state.order[:-1].shape))
        width = bucket.width // 2
        narrowed = np.asarray(lane_features(bucket, state.order[:, :width], rows))
        np.testing.assert_array_equal(narrowed, copy[np.asarray(rows)][:, :width])


def test_documents_in_entry_order_is_the_slot_by_slot_layout(sim):
    """``state.documents_in_entry_order`` (per-document values laid out in entry order in one gather, how a
    ``prepared_per_document`` policy's ``prepare`` output reaches the session step) equals the obvious loop, slot
    by slot: entry slot j of query q holds the value of document ``doc_row[q, order[q, j]]`` (padded slots the
    zero row's), the scratch row zeros; and it equals ``to_entry_order(on_slots(values))`` bit for bit."""
    states = sim.init_states(jax.random.PRNGKey(3))
    lay_out = jax.jit(documents_in_entry_order)
    for bucket, state in zip(sim.data.buckets, states):
        values = np.random.default_rng(1).normal(size=bucket.doc_features.shape[0]).astype(np.float32)
        got = np.asarray(lay_out(jnp.asarray(values), bucket, state))
        doc_row, order = np.asarray(bucket.doc_row), np.asarray(state.order)
        want = np.zeros((bucket.n_queries + 1, bucket.width), np.float32)
        for q in range(bucket.n_queries):
            for j in range(bucket.width):
                want[q, j] = values[doc_row[q, order[q, j]]]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, np.asarray(jax.jit(lambda v, b, s: to_entry_order(b.on_slots(v), s))(
            jnp.asarray(values), bucket, state)))


class CopyingMGD(MGD):
    """MGD as it was: ``prepare`` returned the bucket's features, which every member then copied (the control)."""

    def prepare(self, params, bucket, behaviour=None):
        return {**super().prepare(params, bucket, behaviour), "features": bucket.features}


def member_feature_copies(sim, policy, n_members: int) -> list:
    """Shapes of the values of ``policy``'s segment program (a population of ``n_members``) that hold a whole
    bucket's features per member: ``[P, Qb(+1), Db', F]``, any sub-program included."""
    captured = {}
    original = step_lib.population_segment

    class Captured(Exception):
        """Stops the run at the trace of ``policy``'s first segment program: only its arguments' shapes are
        needed, so that program is neither compiled nor run."""

    def spy(*args, **kwargs):
        if args[0] is not policy:  # the warm-up policy's segments
            return original(*args, **kwargs)
        captured["args"], captured["kwargs"] = args, kwargs
        raise Captured

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(step_lib, "population_segment", spy)
        with pytest.raises(Captured):
            sim.run_population(policy, [KEYS[0]] * n_members, [None] * n_members, progress=False)
    args = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if hasattr(a, "shape") else a,
                                  captured["args"])
    jaxpr = jax.make_jaxpr(functools.partial(original, **captured["kwargs"]), static_argnums=0)(*args)
    whole = {(n_members, q, d, sim.data.n_features) for b in sim.data.buckets for q in (b.n_queries, b.n_queries + 1)
             for d in range(1, b.width + 1)}
    found = []

    def visit(j):
        for eqn in j.eqns:
            found.extend(tuple(v.aval.shape) for v in eqn.outvars if tuple(getattr(v.aval, "shape", ())) in whole)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                visit(sub)

    visit(jaxpr.jaxpr)
    return found


def test_segment_program_keeps_one_copy_of_the_features(sim):
    """No value of MGD's segment program holds a bucket's features per member (a 5-member DBGD population at
    MSLR-30K shape, ~2.7 GB of features per member copy, was killed for memory at 24 GB); the control, MGD with
    the features in ``prepare``, has such values, so the check can fail."""
    assert member_feature_copies(sim, MGD(sim.data, n_candidates=3), 3) == []
    assert len(member_feature_copies(sim, CopyingMGD(sim.data, n_candidates=3), 3)) > 0


def test_chunks_count_the_policy_values_per_member(sim):
    """``member_bytes(policy)`` adds twice the policy's ``prepare`` output (its exact size, from shapes): MGD keeps
    one score per document, the control a score and the features; a budget of 3 members without the policy's
    values holds fewer members with them."""
    mgd, copying = MGD(sim.data, n_candidates=3), CopyingMGD(sim.data, n_candidates=3)
    slots = sum(b.n_queries * b.width for b in sim.data.buckets)
    assert sim.aux_bytes(mgd) == 4 * slots
    assert sim.aux_bytes(copying) == 4 * slots * (1 + sim.data.n_features)
    assert sim.member_bytes(copying) == sim.member_bytes() + 2 * sim.aux_bytes(copying)
    budget = Simulator(sim.data, sim.click_model, CONFIG, memory_budget=3 * sim.member_bytes())
    assert budget.chunk_size(6) == 3
    assert budget.chunk_size(6, policy=copying) < 3


def test_a_cpu_chunk_holds_at_most_the_state_budget(sim):
    """On a CPU, ``state_budget`` caps a chunk at the members whose ``state_bytes`` (the kept counters and the
    order, rank and entry-session planes, 4 bytes per cell) fit, balanced over the chunks; without it only the
    memory budget counts; on another backend (a GPU) the state budget is ignored. EBRank keeps 3 of the 6 counters,
    so its members' state is 6 of 9 planes."""
    ebrank = EBRank(sim.data)
    cells = sum(b.n_queries * b.width for b in sim.data.buckets)
    assert sim.state_bytes() == 4 * cells * (6 + 3) and sim.state_bytes(ebrank) == 4 * cells * (3 + 3)
    roomy = 1000 * sim.member_bytes(ebrank)
    free = Simulator(sim.data, sim.click_model, CONFIG, memory_budget=roomy)
    capped = Simulator(sim.data, sim.click_model, CONFIG, memory_budget=roomy,
                       state_budget=3 * sim.state_bytes(ebrank) + 1)
    if jax.default_backend() != "cpu":  # found on an H100: the test asserted a CPU backend
        assert capped.state_budget is None and capped.chunk_size(7, policy=ebrank) == 7
        return
    assert capped.state_budget is not None and free.state_budget is None
    assert free.chunk_size(7, policy=ebrank) == 7
    assert capped.chunk_size(7, policy=ebrank) == 3  # 7 members, at most 3 per chunk: 3 + 3 + 1 padded to 3
    assert capped.chunk_size(6, policy=ebrank) == 3 and capped.chunk_size(2, policy=ebrank) == 2
    assert capped.chunk_size(7) == 2  # all six counters: 3 planes more per member, 2 members fit


def test_ucbrank_population_equals_members(sim):
    """MC-dropout refreshes (a new dropout key per member and segment) and one vmapped retrain of the MLPs."""
    policy = UCBRank(sim.data, setting="ie", fit={"max_epochs": 5, "batch_size": 64})
    keys, hypers, solo = solo_runs(sim, policy, [{"exploration": 0.0}, {"exploration": 2.0}])
    assert all(sum(not i.get("skipped") for i in r.train_info) >= 1 for r in solo)
    dropout_keys = {tuple(np.asarray(r.final_params["dropout_key"]).ravel().tolist()) for r in solo}
    assert len(dropout_keys) == 2  # members of one trial share the refresh keys, the two trials do not
    check_population(sim, policy, keys, hypers, solo)


def test_test_only_history_equals_evaluating_every_split(sim, ebrank):
    """The default ``history_splits=test`` evaluates only test queries at the intermediate points (a gathered
    sub-bucket, ``step.evaluate_rows``): its test-split history equals evaluating every query, train/vali are
    NaN there, and the last point (Warm/Cold NDCG, per-query values) covers every split as before."""
    import dataclasses

    policy, keys, hypers, _ = ebrank
    every = Simulator(sim.data, sim.click_model, dataclasses.replace(CONFIG, history_splits="all"),
                      warmup_policy=sim.warmup_policy)
    assert CONFIG.history_splits == "test"
    got = sim.run(policy, keys[0], hyper=hypers[0], progress=False)
    want = every.run(policy, keys[0], hyper=hypers[0], progress=False)
    assert got.cum_ndcg == want.cum_ndcg
    for i, (a, b) in enumerate(zip(got.eval_history, want.eval_history)):
        last = i == len(got.eval_history) - 1
        for m in ("warm", "cold"):
            assert a["test"][m] == pytest.approx(b["test"][m], rel=0, abs=1e-6)
            for split in ("train", "vali"):
                assert np.isfinite(b[split][m])
                if last:
                    assert a[split][m] == pytest.approx(b[split][m], rel=0, abs=1e-6)
                else:
                    assert np.isnan(a[split][m])
    for m in ("warm", "cold"):
        np.testing.assert_allclose(got.query_ndcg[m], want.query_ndcg[m], rtol=0, atol=1e-6)


def test_narrowed_rows_equal_full_rows():
    """A policy with ``narrow_rows`` advances only the entry slots documents can reach in the run
    (``step.scan_segment``): the same run with every slot gives the same sessions, counters and metrics (the
    narrowed run is tests/toy_sims.py's, which tests/test_padding.py reads too)."""
    sim = toy_sims.wide_sim()
    data = sim.data
    warm, main = sim.session_plan(jax.random.fold_in(jax.random.PRNGKey(4), 1))  # any plan: widths are per run
    assert all(w < b.width for w, b in zip(sim.reachable_widths([main]), data.buckets))  # it does narrow here

    class FullRows(EBRank):
        narrow_rows = False

    narrow, got = toy_sims.wide_ebrank_run()
    full = toy_sims.wide_ebrank(FullRows)
    assert type(narrow) is EBRank and narrow.narrow_rows and not full.narrow_rows
    keys, hypers = list(toy_sims.KEYS), list(toy_sims.EBRANK_HYPERS)
    want = sim.run_population(full, keys, hypers, progress=False, keep_logs=True)
    assert len(got) == len(want) == len(keys)
    for a, b in zip(got, want):
        assert any(info.get("epochs", 0) > 0 for info in a.train_info)  # the retrain ran on narrowed counters
        for la, lb in zip(a.logs, b.logs):
            for field in ("query", "shown", "clicks"):
                np.testing.assert_array_equal(getattr(la, field), getattr(lb, field))
        np.testing.assert_array_equal(a.session_ndcg, b.session_ndcg)
        for sa, sb in zip(a.final_states, b.final_states):
            for x, y in zip(jax.tree_util.tree_leaves(sa), jax.tree_util.tree_leaves(sb)):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        np.testing.assert_equal(a.eval_history, b.eval_history)  # NaN (splits not evaluated) equal NaN


@pytest.mark.parametrize("hidden", [(), (8,)])
def test_block_alpha_is_bit_identical_alone_and_in_any_population(sim, hidden):
    """EBRank's prior alpha for a population (``prepare_population``: members in fixed blocks of
    ``MEMBER_BLOCK``, one product over the shared features per block) equals each member's alpha computed
    alone (``prepare``), bit for bit, for populations smaller, equal and larger than a block and at any position;
    and it differs from the plain per-member product only by float32 rounding (the documented block rounding)."""
    from ltrjax.online.policies.ebrank import MEMBER_BLOCK

    policy = EBRank(sim.data, hidden=hidden)
    bucket = sim.data.buckets[0]
    members = [jax.tree_util.tree_map(lambda a, i=i: a * (1.0 + 0.1 * i) + 0.01 * i,
                                      policy.init(jax.random.PRNGKey(i), sim.data)) for i in range(11)]
    prepare = jax.jit(policy.prepare)  # one program for the eleven members
    solo = [np.asarray(prepare(m, bucket)) for m in members]
    assert len({s.tobytes() for s in solo}) == len(members)  # distinct members
    stack = lambda ms: jax.tree_util.tree_map(lambda *a: np.stack(a), *ms)  # noqa: E731  (on the host: exact)
    population = jax.jit(lambda p: policy.prepare_population(p, bucket, None))
    for size in (1, 7, MEMBER_BLOCK, MEMBER_BLOCK + 3):
        order = np.random.RandomState(size).permutation(len(members))[:size]
        got = np.asarray(population(stack([members[i] for i in order])))
        assert got.shape == (size, bucket.doc_features.shape[0])  # one alpha per document (the zero row last)
        for position, i in enumerate(order):
            np.testing.assert_array_equal(got[position], solo[i], err_msg=f"member {i} at {position} of {size}")
    plain = np.asarray(policy.model.apply(members[3]["prior"], bucket.doc_features))
    np.testing.assert_allclose(solo[3], plain, rtol=1e-5, atol=0)


def test_evaluation_reuses_the_segment_prior(sim):
    """Evaluation from the segment's entry-order alpha (``population_segment``'s third output,
    ``scores_from_prepared``) equals recomputing it from the parameters (``test_scores``), bit for bit."""
    policy = toy_sims.small_ebrank(sim.data)  # the EBRank population of the tests above: its segment program
    assert policy.test_from_prepare
    keys, hypers = grid([{"epsilon": 1.0}, {"epsilon": 50.0}, {"epsilon": 20.0}])
    states, n = sim.simulate_frozen(policy, keys, hypers)
    assert n == sim.session_counts()[1]
    params = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[policy.init(jax.random.PRNGKey(i), sim.data)
                                                               for i in range(len(keys))])
    prepared = [policy.prepare_population(params, b, None) for b in sim.data.buckets]
    for b, bucket in enumerate(sim.data.buckets):
        aux = jax.vmap(lambda a, s: to_entry_order(bucket.on_slots(a), s))(prepared[b], states[b])
        args = (sim.protocol, params, (states[b],), (bucket,), (sim.gains[b],), (sim.idcg[b],))  # one bucket
        (recomputed,) = compiled(policy)["evaluate"](*args, (None,))
        (reused,) = compiled(policy)["evaluate"](*args, (aux,))
        assert np.isfinite(np.asarray(recomputed[0])).all()
        for x, y in zip(recomputed, reused):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        rows = jnp.asarray(np.arange(0, bucket.n_queries, 2), jnp.int32)
        for x, y in zip(compiled(policy)["evaluate_rows"](*args, (rows,), (None,))[0],
                        compiled(policy)["evaluate_rows"](*args, (rows,), (aux,))[0]):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_perfect_docs_are_the_perfect_documents_of_the_final_states(sim, ebrank):
    """``TrialResult.perfect_docs`` (all that a run record reads of the final state: UCBRank Fig. 1's click rates)
    equals the perfect documents' values read from the whole final states in dataset order, and a run without
    ``keep_states`` (what the runner does) has the same values, the same click rates and no final states."""
    from ltrjax.measure import perfect_click_rates
    from ltrjax.online.state import entered_mask, to_dataset_order

    policy, keys, hypers, solo = ebrank
    want = solo[1]
    parts = {"doc_query": [], "clicks": [], "entry_session": [], "entered": []}
    for bucket, state in zip(sim.data.buckets, want.final_states):
        keep = np.asarray(bucket.doc_mask) & (np.asarray(bucket.labels) == sim.data.y_max)
        parts["doc_query"].append(np.broadcast_to(np.asarray(bucket.query_index)[:, None], keep.shape)[keep])
        parts["clicks"].append(np.asarray(to_dataset_order(state.counters.clicks, state))[keep])
        parts["entry_session"].append(np.asarray(to_dataset_order(state.entry_session, state))[keep])
        parts["entered"].append(np.asarray(entered_mask(state))[keep])
    expected = {k: np.concatenate(v) for k, v in parts.items()}
    assert expected["clicks"].sum() > 0 and (expected["entry_session"] >= 0).any() and not expected["entered"].all()
    lean = sim.run(policy, keys[1], hyper=hypers[1], progress=False, keep_states=False)
    assert lean.final_states is None
    for result in (want, lean):
        for name, values in expected.items():
            got = getattr(result.perfect_docs, name)
            assert got.dtype == values.dtype, name
            np.testing.assert_array_equal(got, values, err_msg=name)
    rates = [json.dumps(perfect_click_rates(sim, r, 4)) for r in (lean, want)]  # NaN (an empty bin) == NaN
    assert rates[0] == rates[1] and '"rate": [NaN' not in rates[0]
