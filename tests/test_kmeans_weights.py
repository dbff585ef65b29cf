"""KMeans with ``sample_weight`` is KMeans on the repeated rows.

The cluster tests fit on the shared 4-worker cluster, under BSP (A-BSP rounds depend on timing,
so two A-BSP fits may stop at different rounds even on the same rows). The property tests run
the initialisation's bookkeeping (row hashes, weight totals over partitions, races, merging
the partitions' offers) in-process, over random ways of writing the same weighted rows.
"""

from __future__ import annotations

import itertools

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_blobs

from daskabsp.estimators import KMeans
from daskabsp.estimators._kmeans_init import (
    Candidates,
    _analyse,
    _nearest_weights,
    _top_rows,
    merge_offers,
    reduce_tree,
)
from daskabsp.estimators._row_draws import (
    WeightTable,
    merge_tables,
    race_times,
    row_hashes,
    shared_values,
    smallest,
    uniforms,
    with_shared,
)

# -- on the cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def weighted_rows():
    """Rows with weights 0 to 3, and the same rows repeated (weight 0: left out), shuffled
    so that the copies of a row fall in different partitions."""
    rng = np.random.default_rng(0)
    X, _ = make_blobs(400, 4, centers=5, random_state=0)
    X[rng.random(X.shape) < 0.3] = 0.0  # zeros, so that CSR blocks hold fewer entries
    w = rng.integers(0, 4, size=X.shape[0])
    w[:40] = 2  # weight-2 rows for sure
    order = rng.permutation(int(w.sum()))
    return X, w, X.repeat(w, axis=0)[order], np.arange(X.shape[0]).repeat(w)[order]


def _as(kind: str, X, w=None):
    if kind == "numpy":
        return X, w
    if kind == "csr":
        return sp.csr_matrix(X), w
    Xd = da.from_array(X, chunks=(150, -1))
    if kind == "dask-csr":
        Xd = Xd.map_blocks(sp.csr_matrix, dtype=X.dtype, meta=sp.csr_matrix((0, 0)))
    return Xd, None if w is None else da.from_array(w.astype(float), chunks=(150,))


def _labels(est):
    lab = est.labels_
    return np.asarray(lab.compute() if hasattr(lab, "compute") else lab)


@pytest.mark.parametrize("init", ["k-means++", "random"])
@pytest.mark.parametrize("kind", ["numpy", "csr", "dask", "dask-csr"])
def test_weight_two_is_the_row_twice(client, weighted_rows, kind, init):
    X, w, Xr, source = weighted_rows
    params = dict(n_clusters=6, init=init, n_init=3, random_state=7, sync="bsp", tol=0.0)
    if kind in ("numpy", "csr"):
        params["n_partitions"] = 3  # 3 blocks of the 400 weighted rows, of the 720 repeated
    Xw, ww = _as(kind, X, w)
    Xrep, _ = _as(kind, Xr)
    weighted = KMeans(**params).fit(Xw, sample_weight=ww)
    repeated = KMeans(**params).fit(Xrep)

    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_,
                               rtol=1e-10, atol=1e-12)
    # the same cluster numbers for every row: a repeated row's copies get its label
    np.testing.assert_array_equal(_labels(weighted)[source], _labels(repeated))
    np.testing.assert_allclose(weighted.inertia_, repeated.inertia_, rtol=1e-10)
    assert len(np.unique(_labels(repeated))) == 6


def test_weights_matter(client, weighted_rows):
    """The equality above is not a fit that ignores weights: the weighted rows fitted without
    their weights give other centers."""
    X, w, _Xr, _ = weighted_rows
    params = dict(n_clusters=6, random_state=7, sync="bsp", tol=0.0, n_partitions=3)
    a = KMeans(**params).fit(X, sample_weight=w)
    b = KMeans(**params).fit(X)
    assert not np.allclose(a.cluster_centers_, b.cluster_centers_)


def test_fewer_distinct_rows_than_clusters(client):
    """Two distinct rows of positive weight (one of them written twice, a third row weighing
    nothing) and three clusters: the centers are those rows, repeated; lazy weights that are
    all zero are refused as in-memory ones are."""
    X = np.array([[0.0, 1.0], [5.0, 5.0], [0.0, 1.0], [9.0, 9.0]])
    w = np.array([1.0, 2.0, 1.0, 0.0])
    km = KMeans(3, random_state=0, sync="bsp").fit(X, sample_weight=w)
    assert {tuple(c) for c in km.cluster_centers_} == {(0.0, 1.0), (5.0, 5.0)}
    assert km.inertia_ == 0.0
    with pytest.raises(ValueError, match="at least one non-zero"):
        KMeans(2, random_state=0).fit(da.from_array(X, chunks=2),
                                      sample_weight=da.zeros(4, chunks=2))


# -- the bookkeeping, in-process --------------------------------------------------------------

def _initial_candidates(parts, seed: int, m: int, rounds: int, fan_in: int) -> Candidates:
    """What KMeans' k-means|| does over blocks ``parts`` ([(X, w)]), run in-process."""
    rows = [_analyse(X, w) for X, w in parts]
    total = reduce_tree([WeightTable.of(r) for r in rows], merge_tables, fan_in)
    rows = [with_shared(r, shared_values(total)) for r in rows]
    d = parts[0][0].shape[1]
    cand = Candidates(np.zeros((0, d)), np.zeros(0, dtype=np.uint64))
    for r in range(rounds + 1):
        size = m if r else 1  # round 0 draws the first center
        new = merge_offers([_top_rows(X, rr, cand, seed, r, size)
                            for (X, _w), rr in zip(parts, rows, strict=True)], size)
        cand = Candidates(np.vstack([cand.centers, new.centers]),
                          np.concatenate([cand.hashes, new.hashes]))
    return cand


@st.composite
def spellings(draw):
    """Distinct rows with integer weights, written twice: (a) each row once with its weight,
    (b) each row as pieces of positive weight summing to it (e.g. 2 = 1 + 1 or 2), the
    pieces of all rows shuffled and cut into blocks; dense or CSR blocks."""
    n_values = draw(st.integers(2, 25))
    d = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    V = np.unique(rng.integers(-2, 3, size=(n_values, d)).astype(float), axis=0)
    W = rng.integers(0, 4, size=V.shape[0])
    W[rng.integers(V.shape[0])] += 1  # at least one positive weight
    pieces, owner = [], []
    for i, wi in enumerate(W):
        while wi > 0:
            p = int(rng.integers(1, wi + 1))
            pieces.append(p)
            owner.append(i)
            wi -= p
    order = rng.permutation(len(pieces))
    owner, pieces = np.array(owner)[order], np.array(pieces, dtype=float)[order]

    def cut(X, w, n_blocks):
        bounds = np.sort(rng.integers(0, X.shape[0] + 1, size=n_blocks - 1))
        edges = [0, *bounds.tolist(), X.shape[0]]
        sparse = draw(st.booleans())
        return [(sp.csr_matrix(X[a:b]) if sparse else X[a:b], w[a:b])
                for a, b in itertools.pairwise(edges)]

    once = cut(V, W.astype(float), draw(st.integers(1, 4)))
    split = cut(V[owner], pieces, draw(st.integers(1, 5)))
    return V, W, once, split


@settings(max_examples=150, deadline=None)
@given(spellings(), st.integers(0, 2**64 - 1), st.integers(1, 4), st.integers(2, 3))
def test_draws_do_not_depend_on_how_weights_are_spelled(case, seed, m, fan_in):
    V, W, once, split = case
    a = _initial_candidates(once, seed, m, rounds=3, fan_in=fan_in)
    b = _initial_candidates(split, seed, m, rounds=3, fan_in=fan_in)
    np.testing.assert_array_equal(a.hashes, b.hashes)
    np.testing.assert_array_equal(a.centers, b.centers)
    # candidates are distinct rows of positive weight, as many as there are, up to the draws
    hv = row_hashes(V)
    assert len(set(a.hashes.tolist())) == len(a.hashes)
    assert set(a.hashes.tolist()) <= set(hv[W > 0].tolist())
    assert len(a.hashes) == min(1 + 3 * m, int((W > 0).sum()))
    # the weighing pass gives each candidate the same total either way
    wa = sum(_nearest_weights(X, w, a) for X, w in once)
    wb = sum(_nearest_weights(X, w, b) for X, w in split)
    np.testing.assert_allclose(wa, wb, rtol=1e-12)
    np.testing.assert_allclose(wa.sum(), W.sum())


@settings(max_examples=150, deadline=None)
@given(spellings(), st.integers(0, 2**64 - 1), st.integers(1, 5))
def test_the_blocks_race_is_the_race_over_all_rows(case, seed, m):
    """Each block offers its m first values, the driver keeps the m first of the offers: the
    same m as a race run over the distinct rows in one place."""
    V, W, _once, split = case
    centers = V[:1] + 0.5
    D = ((V - centers) ** 2).sum(axis=1)
    cand = Candidates(centers, np.zeros(0, dtype=np.uint64))
    rows = [_analyse(X, w) for X, w in split]
    total = merge_tables(*[WeightTable.of(r) for r in rows])
    rows = [with_shared(r, shared_values(total)) for r in rows]
    got = merge_offers([_top_rows(X, r, cand, seed, 5, m)
                        for (X, _w), r in zip(split, rows, strict=True)], m)
    hv = row_hashes(V)
    want = smallest(race_times(hv, W * D, seed, 5), hv, m)
    np.testing.assert_array_equal(got.hashes, hv[want])
    np.testing.assert_allclose(got.centers, V[want])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 6))
def test_row_hashes_identify_rows(seed, n, d):
    rng = np.random.default_rng(seed)
    X = rng.integers(-1, 2, size=(n, d)).astype(float)
    X[rng.random(X.shape) < 0.2] = -0.0
    h = row_hashes(X)
    same_row = (X[:, None, :] == X[None, :, :]).all(axis=2)
    np.testing.assert_array_equal(h[:, None] == h[None, :], same_row)
    np.testing.assert_array_equal(row_hashes(X.astype(np.float32)), h)
    # CSR with explicit zeros and unsorted, duplicated entries (to be summed) hashes the same
    cols = np.repeat(np.arange(d)[::-1], 2)
    S = sp.csr_matrix((np.repeat(X[:, ::-1] / 2, 2, axis=1).ravel(), np.tile(cols, n),
                       np.arange(n + 1) * 2 * d), shape=X.shape)
    assert not S.has_canonical_format
    np.testing.assert_array_equal(row_hashes(S), h)
    np.testing.assert_array_equal(S.toarray(), X)


def test_races_draw_in_proportion_to_mass():
    """The first value of a race is drawn with probability mass / total mass: over 40 000
    seeds, each value's share within 4 standard deviations."""
    hashes = row_hashes(np.arange(5.0)[:, None])
    mass = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    seeds = 40_000
    wins = np.zeros(5)
    for s in range(seeds):
        wins[smallest(race_times(hashes, mass, s, 0), hashes, 1)[0]] += 1
    p = mass / mass.sum()
    assert wins[4] == 0
    assert np.all(np.abs(wins - seeds * p) <= 4 * np.sqrt(seeds * p * (1 - p)) + 1e-9)


def test_uniforms_depend_on_seed_and_stream_not_on_position():
    h = row_hashes(np.arange(1000.0).reshape(-1, 2))
    u = uniforms(h, 3, 1)
    assert ((u > 0) & (u < 1)).all()
    np.testing.assert_array_equal(uniforms(h[::-1], 3, 1), u[::-1])
    for other in (uniforms(h, 4, 1), uniforms(h, 3, 2)):
        assert abs(np.corrcoef(u, other)[0, 1]) < 0.15
    assert abs(u.mean() - 0.5) < 0.05
