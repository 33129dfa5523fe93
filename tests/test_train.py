"""The shared fit loop (ltrjax/models/train.py): full-batch L-BFGS, the example cap and the epoch shuffle."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ltrjax.models.train import FitConfig, MemberFit, fit_members, padded_size, shuffled_order, subsample


def linear_loss(params, batch):
    return (batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2


def regression(n, dim=6, seed=0, noise=0.1):
    """y = x w + 0.5 + noise, with one true w (seeded separately) for every sample."""
    w = np.random.default_rng(12345).normal(size=dim)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    y = (x @ w + 0.5 + noise * rng.normal(size=n)).astype(np.float32)
    return {"x": x, "y": y}


def least_squares(data):
    a = np.concatenate([data["x"], np.ones((len(data["y"]), 1), np.float32)], 1).astype(np.float64)
    return np.linalg.lstsq(a, data["y"].astype(np.float64), rcond=None)[0]


def init(dim=6, members=1):
    return {"w": jnp.zeros((members, dim), jnp.float32), "b": jnp.zeros((members,), jnp.float32)}


# one L-BFGS fit (the stop rule is compiled in) for every L-BFGS test: one program per member count and padded size
LBFGS = FitConfig(optimizer="lbfgs", max_epochs=100, patience=10)


def test_lbfgs_reaches_the_least_squares_solution():
    """Full-batch L-BFGS on a convex quadratic: the fitted weights equal NumPy's least squares."""
    train, val = regression(3000, seed=0), regression(1000, seed=1)
    fit = MemberFit(linear_loss, LBFGS)
    params, infos = fit_members(fit, init(), [train], [val], jax.random.PRNGKey(0)[None], "t")
    solution = least_squares(train)
    np.testing.assert_allclose(np.asarray(params["w"][0]), solution[:-1], atol=2e-3)
    np.testing.assert_allclose(float(params["b"][0]), solution[-1], atol=2e-3)
    assert infos[0]["epochs"] < 100  # stopped on patience, long before max_epochs


def test_lbfgs_members_fit_independently():
    """Two members with different data in one program equal two populations of one."""
    data = [regression(800, seed=s) for s in (1, 2)]
    fit = MemberFit(linear_loss, LBFGS)
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    both, _ = fit_members(fit, init(members=2), data, data, keys, "t")
    for i in range(2):
        one, _ = fit_members(fit, init(), [data[i]], [data[i]], keys[i:i + 1], "t")
        np.testing.assert_allclose(np.asarray(both["w"][i]), np.asarray(one["w"][0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])  # blocks queued and fetched at once / each fetched in its thread
def test_member_blocks_fit_a_member_bit_for_bit_wherever_it_sits(threads):
    """``member_batch=B`` vmaps members in blocks of exactly B, a short population padded with copies of its first
    member: a member fitted alone (padded to a block), in a population of 5 (blocks of 2, the last padded) and in
    one of 4 (whole blocks, no padding: a GPU fused that case differently until the blocks were fenced), at another
    place in its block, is the same fit bit for bit, and each member still stops at its own epoch (their data
    differ in size and noise, so they stop at different epochs: the masking inside a block is exercised)."""
    cfg = FitConfig(learning_rate=0.05, batch_size=64, max_epochs=40, patience=1, min_delta=0.0, member_batch=2,
                    threads=threads)
    data = [regression(n, seed=s, noise=z) for s, (n, z) in enumerate([(200, 0.1), (900, 2.0), (450, 0.5),
                                                                        (700, 1.0), (300, 3.0)])]
    fit = MemberFit(linear_loss, cfg)
    keys = jax.random.split(jax.random.PRNGKey(5), len(data))
    population, infos = fit_members(fit, init(members=len(data)), data, data, keys, "t")
    assert fit.block == 2 and len(infos) == len(data) and len({i["epochs"] for i in infos}) > 1
    whole, whole_infos = fit_members(fit, init(members=4), data[1:], data[1:], keys[1:], "t")
    for i in (0, 3, 4):  # first and second place of a block, and the padded last block
        alone, info = fit_members(fit, init(), [data[i]], [data[i]], keys[i:i + 1], "t")
        for a, b in zip(jax.tree_util.tree_leaves(population), jax.tree_util.tree_leaves(alone)):
            np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(b)[0])
        assert info[0] == infos[i]
        if i:  # member i is at place i - 1 of the 4
            for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(alone)):
                np.testing.assert_array_equal(np.asarray(a)[i - 1], np.asarray(b)[0])
            assert whole_infos[i - 1] == info[0]


def test_threads_and_population_size_do_not_change_a_fit():
    """``fit.threads`` fits that many blocks at once, each in a host thread: with 3 threads, or one, and alone, each
    member's fit is the same bit for bit (parameters and epochs); the fit program takes one block, so the population
    of 5 and the single members compiled one program for their shared example shape."""
    data = [regression(n, seed=s, noise=z) for s, (n, z) in enumerate([(200, 0.1), (900, 2.0), (450, 0.5),
                                                                        (700, 1.0), (300, 3.0)])]
    keys = jax.random.split(jax.random.PRNGKey(7), len(data))
    runs = {}
    for threads in (3, 1):
        fit = MemberFit(linear_loss, FitConfig(learning_rate=0.05, batch_size=64, max_epochs=40, patience=1,
                                               min_delta=0.0, member_batch=1, threads=threads))
        assert fit.threads == threads
        runs[threads] = fit_members(fit, init(members=len(data)), data, data, keys, "t")
        alone = [fit_members(fit, init(), [d], [d], keys[i:i + 1], "t") for i, d in enumerate(data)]
        assert fit.batched._cache_size() == 1
    (pooled, infos), (one_thread, infos_1) = runs[3], runs[1]
    assert infos == infos_1 and len({i["epochs"] for i in infos}) > 1
    for i, (params, info) in enumerate(alone):
        assert info[0] == infos[i]
        for a, b, c in zip(*(jax.tree_util.tree_leaves(p) for p in (pooled, one_thread, params))):
            np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(b)[i])
            np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(c)[0])


def test_an_error_in_a_fit_thread_reaches_the_caller():
    """A block that fails in one of ``fit.threads``' host threads (here member 3's examples have another feature
    width, so the fit cannot be traced for its block) raises in ``fit_members``, not silently dropping the member."""
    data = [regression(300, seed=s) for s in range(5)]
    data[3] = regression(300, dim=4, seed=3)
    fit = MemberFit(linear_loss, FitConfig(max_epochs=3, member_batch=1, threads=2))
    with pytest.raises(TypeError, match="dot_general"):
        fit_members(fit, init(members=5), data, data, jax.random.split(jax.random.PRNGKey(0), 5), "t")


def test_backend_defaults_resolve_per_backend():
    """``fit.member_batch=None``, ``fit.threads=None`` and ``sim.click_rng="auto"`` become concrete per backend
    (GPU: fits in blocks of ``GPU_MEMBER_BLOCK`` in one thread, clicks drawn on the device; CPU: one member per fit,
    a thread per core, clicks drawn on the host); values set explicitly are kept."""
    from ltrjax.models.train import GPU_MEMBER_BLOCK, usable_cores
    from ltrjax.online.simulator import SimConfig

    assert FitConfig().member_batch is None and SimConfig().click_rng == "auto"
    assert FitConfig().resolved("gpu").member_batch == GPU_MEMBER_BLOCK == 8
    assert FitConfig().resolved("cpu").member_batch == 1
    assert FitConfig(member_batch=3).resolved("gpu").member_batch == 3
    assert FitConfig().threads is None and FitConfig().resolved("cpu").threads == usable_cores() >= 1
    assert FitConfig().resolved("gpu").threads == 1 and FitConfig(threads=4).resolved("gpu").threads == 4
    assert SimConfig().resolved("gpu").click_rng == "device" and SimConfig().resolved("cpu").click_rng == "host"
    assert SimConfig(click_rng="host").resolved("gpu").click_rng == "host"
    assert MemberFit(linear_loss, FitConfig()).block == (8 if jax.default_backend() == "gpu" else 1)


def test_fits_do_not_depend_on_their_padding():
    """Examples padded to the split capacity (1000 / 700, rounded up to the batch: 1024 / 768 rows) and to the next
    power of two (4096) give the same fit, bit for bit (padding has weight 0 and is shuffled last). The fit is the
    online default's at the warm-start test's shapes: the 4096-row program is compiled once for both."""
    assert padded_size(100, 10**7) == 4096 and padded_size(9000, 10**7) == 16384 and padded_size(100, 1000) == 1000
    train, val = regression(300, seed=6), regression(200, seed=7)
    fit = MemberFit(linear_loss, FitConfig(learning_rate=1e-3, max_examples=10_000))  # the cap is host-side
    key = jax.random.PRNGKey(2)[None]
    one_shape, infos = fit_members(fit, init(), [train], [val], key, "t", capacity=(1000, 700))  # 1024 / 768 rows
    powers, want = fit_members(fit, init(), [train], [val], key, "t")  # no capacity: 4096 rows each
    assert fit.batched._cache_size() == 2  # two shapes were compiled
    for a, b in zip(jax.tree_util.tree_leaves(one_shape), jax.tree_util.tree_leaves(powers)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert infos == want


def test_subsample_is_a_seeded_subset():
    data = {"x": np.arange(100)[:, None] * np.ones((1, 3)), "y": np.arange(100.0)}
    assert subsample(data, None, [1]) is data and subsample(data, 100, [1]) is data
    a, b, c = subsample(data, 30, [1, 2]), subsample(data, 30, [1, 2]), subsample(data, 30, [7])
    assert len(a["y"]) == 30 and len(set(a["y"].tolist())) == 30
    np.testing.assert_array_equal(a["x"][:, 0], a["y"])  # rows stay aligned across arrays
    assert np.all(np.diff(a["y"]) > 0)  # original order kept
    np.testing.assert_array_equal(a["y"], b["y"])
    assert not np.array_equal(a["y"], c["y"])


def test_max_examples_fits_on_the_members_subset():
    """A capped fit equals an uncapped fit on the same subset; the reported n_train is the full count."""
    train, val = regression(2000, seed=4), regression(1500, seed=5)
    key = jax.random.PRNGKey(9)
    capped = MemberFit(linear_loss, dataclasses.replace(LBFGS, max_examples=500))  # the cap is host-side
    full = MemberFit(linear_loss, LBFGS)
    got, infos = fit_members(capped, init(), [train], [val], key[None], "t")
    seed = np.asarray(key, np.uint32).ravel().tolist()
    want, _ = fit_members(full, init(), [subsample(train, 500, seed + [0])], [subsample(val, 500, seed + [1])],
                          key[None], "t")
    np.testing.assert_allclose(np.asarray(got["w"]), np.asarray(want["w"]), rtol=1e-6, atol=1e-7)
    assert infos[0]["n_train"] == 2000
    assert not np.allclose(np.asarray(got["w"]), least_squares(train)[:-1], atol=1e-5)  # it did not see all


def test_capped_document_collection_equals_subsample_of_all():
    """``collect_documents(limit=L, seed=s)`` (features of dropped documents never gathered) equals
    ``subsample(collect_documents(), L, s)``, across several buckets; ``member_splits`` uses the seeds that
    ``fit_members`` would, so its own cap is then a no-op."""
    from ltrjax.data.layout import pad_and_bucket
    from ltrjax.data.queryset import TRAIN, VALI
    from ltrjax.models.train import key_seed
    from ltrjax.online.state import DocCounters
    from ltrjax.online.training_data import collect_documents, member_splits
    from ltrjax.data.toy import toy_queryset

    data = pad_and_bucket(toy_queryset(n_queries=60, n_features=6, docs=(6, 40), y_max=2, seed=5, recipe="latent"),
                          n_buckets=3, single_bucket_cells=0)
    assert len(data.buckets) > 1
    rng = np.random.default_rng(0)
    counters, entered = [], []
    for b in data.buckets:
        shape = b.labels.shape
        imp = rng.integers(0, 40, shape).astype(np.float32)
        stat = lambda: jnp.asarray(rng.random(shape, np.float32) * imp)  # noqa: E731
        counters.append(DocCounters(clicks=stat(), ips_clicks=stat(), impressions=jnp.asarray(imp), exposure=stat(),
                                    alpha_sum=stat(), beta_sum=stat()))
        entered.append(jnp.asarray(rng.random(shape) < 0.8))
    counters, entered = tuple(counters), tuple(entered)
    full = collect_documents(data, counters, entered, TRAIN, 20)
    n = len(full["impressions"])
    assert n > 50
    # a cell-by-cell loop: bucket after bucket, row-major, every counter of each kept document
    want_loop = {k: [] for k in full}
    for b, start, c, e in zip(data.buckets, data.document_starts, counters, entered):
        split, e, mask, row = (np.asarray(a) for a in (b.split, e, b.doc_mask, b.doc_row))
        c = {k: np.asarray(getattr(c, k)) for k in set(full) - {"doc"}}
        for q in range(mask.shape[0]):
            for d in range(mask.shape[1]):
                if split[q] == TRAIN and e[q, d] and c["impressions"][q, d] > 20 and mask[q, d]:
                    want_loop["doc"].append(start + row[q, d])
                    for k in c:
                        want_loop[k].append(c[k][q, d])
    for k in full:
        np.testing.assert_array_equal(full[k], np.asarray(want_loop[k], full[k].dtype))
    capped = collect_documents(data, counters, entered, TRAIN, 20, limit=50, seed=[3, 4])
    want = subsample(full, 50, [3, 4])
    assert set(capped) == set(want)
    for k in want:
        np.testing.assert_array_equal(capped[k], want[k])
    assert collect_documents(data, counters, entered, TRAIN, 20, limit=n, seed=[3])["doc"].shape[0] == n
    # the ids are rows of the document table: the features of the documents chosen, bucket by bucket
    table = data.document_table()
    want_rows = np.concatenate([np.asarray(b.features)[np.asarray(b.split)[:, None].repeat(b.width, 1) == TRAIN]
                                for b in data.buckets])
    got_rows = np.asarray(jax.jit(table.rows)(jnp.asarray(full["doc"])))
    keep = np.concatenate([((np.asarray(b.split)[:, None] == TRAIN) & np.asarray(e) & (np.asarray(c.impressions) > 20)
                            & np.asarray(b.doc_mask))[np.asarray(b.split)[:, None].repeat(b.width, 1) == TRAIN]
                           for b, c, e in zip(data.buckets, counters, entered)])
    np.testing.assert_array_equal(got_rows, want_rows[keep])

    keys = jax.random.split(jax.random.PRNGKey(2), 2)
    stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), counters)
    splits = member_splits(data, stacked, jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), entered), 2, 20,
                           keys, 50)
    for i in range(2):
        for j, split in enumerate((TRAIN, VALI)):
            all_docs = collect_documents(data, counters, entered, split, 20)
            np.testing.assert_array_equal(splits[i][j]["doc"], subsample(all_docs, 50, key_seed(keys[i]) + [j])["doc"])


@pytest.mark.parametrize("n", [1, 2, 7, 4096, 1 << 17])
def test_shuffled_order_is_a_permutation_with_the_real_indices_first(n):
    real = np.random.default_rng(n).random(n) < 0.6
    order = np.asarray(jax.jit(shuffled_order)(jax.random.PRNGKey(3), jnp.asarray(real)))
    assert np.array_equal(np.sort(order), np.arange(n))
    assert real[order[: real.sum()]].all() and not real[order[real.sum():]].any()
    assert np.array_equal(order[real.sum():], np.flatnonzero(~real))  # the others in index order


@pytest.mark.parametrize("n_real", [1, 7, 4096])
def test_shuffled_order_does_not_depend_on_the_padding(n_real):
    """A member fitted inside a population is padded to the largest member's size: its order must not change
    (populations equal their members run one by one; benchmarks/sweep.py's max_abs_diff). The lengths are those
    the other shuffle tests compile (one program per length)."""
    key = jax.random.PRNGKey(n_real)
    orders = [np.asarray(jax.jit(shuffled_order)(key, jnp.arange(n) < n_real))[:n_real]
              for n in (n_real, 1 << 17, 1 << 18)]
    assert all(np.array_equal(orders[0], o) for o in orders[1:])


def test_shuffled_order_is_uniform():
    """Over 4000 keys, the position of each of 6 real indices (of 8) is uniform (chi-square per index), and
    so is the ordered pair in the first two positions."""
    real = jnp.asarray([True, True, False, True, True, True, False, True])
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    orders = np.asarray(jax.jit(jax.vmap(lambda k: shuffled_order(k, real)))(keys))
    reals = np.flatnonzero(np.asarray(real))
    for i in reals:
        counts = np.bincount(np.argmax(orders == i, axis=1), minlength=6)
        assert counts[6:].sum() == 0 and stats.chisquare(counts[:6]).pvalue > 1e-3
    pairs = np.unique(orders[:, 0] * 8 + orders[:, 1], return_counts=True)[1]
    assert len(pairs) == 30 and stats.chisquare(pairs).pvalue > 1e-3


def test_shuffled_order_two_rounds_leave_no_index_order():
    """At 2^18 examples consecutive output positions are no closer in index than at random: the first round alone
    keeps its ties (~2^5 examples per key value) in index order."""
    n = 1 << 18
    order = np.asarray(jax.jit(shuffled_order)(jax.random.PRNGKey(1), jnp.ones(n, bool))).astype(np.int64)
    near = np.mean(np.abs(np.diff(order)) < n // 1000)
    assert near < 0.003  # uniform: ~0.002; one round alone: 0.031


def test_default_warm_start_stops_after_one_epoch_without_forced_epochs():
    """From a converged warm start the default online rule (``FitConfig()``: patience 0, grace 0, min_delta 1e-4)
    stops after one epoch (``fit_passes`` 1: one gradient pass over the training examples) and returns the better of
    the warm start and that epoch; the papers' form of the rule (patience P, grace 1, min_delta 0:
    ``fit_overrides=papers``) trains at least P + 2 epochs."""
    train, val = regression(2048, seed=0), regression(1024, seed=1)
    solution = least_squares(train)
    warm = {"w": jnp.asarray(solution[None, :-1], jnp.float32), "b": jnp.asarray(solution[None, -1], jnp.float32)}
    key = jax.random.PRNGKey(0)[None]
    default = FitConfig(learning_rate=1e-3)
    assert (default.patience, default.grace, default.min_delta, default.min_epochs) == (0, 0, 1e-4, 0)
    params, infos = fit_members(MemberFit(linear_loss, default), warm, [train], [val], key, "t")
    assert infos[0]["epochs"] == 1 and infos[0]["fit_passes"] == 1

    def val_loss(p):
        return float(np.mean((val["x"] @ np.asarray(p["w"][0]) + float(p["b"][0]) - val["y"]) ** 2))

    assert val_loss(params) <= val_loss(warm) + 1e-6 and abs(infos[0]["val_loss"] - val_loss(params)) < 1e-4
    papers = FitConfig(learning_rate=1e-3, patience=5, grace=1, min_delta=0.0)
    _, infos = fit_members(MemberFit(linear_loss, papers), warm, [train], [val], key, "t")
    assert infos[0]["epochs"] >= 5 + 2 and infos[0]["fit_passes"] == infos[0]["epochs"]


def test_fit_passes_per_retrain_is_the_median_over_fitted_retrains():
    from ltrjax.runner import fit_passes_per_retrain

    infos = [{"fit_passes": 1.0}, {"skipped": True}, {"fit_passes": 3.0}, {"fit_passes": 8.0}]
    assert fit_passes_per_retrain(infos) == 3.0
    assert fit_passes_per_retrain([{"skipped": True}]) is None and fit_passes_per_retrain([]) is None


def padded_by_concatenation(arrays, multiple, size):
    """The plain reference: every array concatenated with zeros up to ``size`` rounded to ``multiple``, ``weight``
    (given or 1) then zeros."""
    n = len(next(iter(arrays.values())))
    size = max(multiple, -(-size // multiple) * multiple)
    out = {k: np.concatenate([v, np.zeros((size - n,) + v.shape[1:], v.dtype)]) for k, v in arrays.items()}
    out["weight"] = np.concatenate([arrays.get("weight", np.ones(n, np.float32)), np.zeros(size - n, np.float32)])
    return out


def test_stack_padded_equals_stacking_padded_examples():
    """``stack_padded`` (what ``fit_members`` hands the device) and its one-member case ``pad_examples`` equal
    ``np.stack`` of plainly concatenated padding per member, with and without a ``weight`` column, empty members
    included; padding to fewer rows than a member has is refused."""
    from ltrjax.models.train import pad_examples, stack_padded

    rng = np.random.default_rng(0)
    for weighted in (False, True):
        sets = []
        for n in (0, 5, 300):
            d = {"features": rng.random((n, 3), dtype=np.float32), "c": rng.random(n).astype(np.float32)}
            if weighted:
                d["weight"] = rng.random(n).astype(np.float32)
            sets.append(d)
        for multiple, size in ((256, 300), (64, 512)):
            padded = [padded_by_concatenation(d, multiple, size) for d in sets]
            got = stack_padded(sets, multiple, size)
            assert sorted(got) == sorted(padded[0])
            for k in got:
                want = np.stack([p[k] for p in padded])
                assert got[k].dtype == want.dtype
                np.testing.assert_array_equal(got[k], want, err_msg=k)
            for d, p in zip(sets, padded):
                one = pad_examples(d, multiple, size)
                assert sorted(one) == sorted(p)
                for k in one:
                    assert one[k].dtype == p[k].dtype
                    np.testing.assert_array_equal(one[k], p[k], err_msg=k)
    with pytest.raises(ValueError, match="cannot pad 70 examples to 65"):
        pad_examples({"c": np.zeros(70, np.float32)}, 8, 65)
    with pytest.raises(ValueError, match="cannot pad 70 examples to 65"):
        stack_padded([{"c": np.zeros(70, np.float32)}], 8, 65)


@pytest.mark.parametrize("optimizer", ["adam", "lbfgs"])
def test_a_fit_on_document_ids_equals_the_fit_on_their_features(optimizer):
    """Examples that carry document ids (``doc``, rows of a ``DocumentTable`` of three blocks, plus ``extra``
    columns) fit bit for bit as the same examples with their features copied in, for two members."""
    from ltrjax.data.layout import DocumentTable

    rng = np.random.default_rng(7)
    blocks = [rng.normal(size=(n, 5)).astype(np.float32) for n in (9, 30, 17)]
    table = DocumentTable(tuple(jnp.asarray(b) for b in blocks), (0, 9, 39))
    flat = np.concatenate(blocks)

    def loss(params, batch):
        return (batch["features"] @ params["w"] + params["b"] - batch["target"]) ** 2

    def examples(seed, n):
        r = np.random.default_rng(seed)
        doc = r.integers(0, len(flat), n).astype(np.int32)
        extra = r.normal(size=(n, 1)).astype(np.float32)
        target = (flat[doc] @ np.arange(1, 6) + 2 * extra[:, 0]).astype(np.float32)
        by_id = {"doc": doc, "extra": extra, "target": target}
        copied = {"features": np.concatenate([flat[doc], extra], axis=1), "target": target}
        return by_id, copied

    sets = [[examples(10 * m + s, 300 + 50 * m) for s in (0, 1)] for m in range(2)]
    cfg = FitConfig(optimizer=optimizer, max_epochs=30, patience=3, batch_size=64)
    fit = MemberFit(loss, cfg)
    keys = jax.random.split(jax.random.PRNGKey(5), 2)
    got, got_info = fit_members(fit, init(dim=6, members=2), [s[0][0] for s in sets], [s[1][0] for s in sets], keys,
                                "t", table=table)
    want, want_info = fit_members(fit, init(dim=6, members=2), [s[0][1] for s in sets], [s[1][1] for s in sets],
                                  keys, "t")
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(a, b)
    assert got_info == want_info
    assert got_info[0]["epochs"] > 1  # it trained
