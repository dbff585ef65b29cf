"""The solvers above the full-Hessian size (L-BFGS steps from Hessian-vector products), the
full rounds that end a fit once partial rounds stop paying, and what a task holds in memory.

Like ``test_estimators.py``: a live 4-worker cluster, one worker emulated 4x slower, and
objectives compared with scikit-learn's optimum in scikit-learn's own scaling.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model as sk_linear
from sklearn.datasets import load_digits, make_classification
from sklearn.preprocessing import StandardScaler
from test_estimators import assert_close_objective, harvested_rounds, logistic_objective

import daskabsp
from daskabsp import ABSP, slow_workers
from daskabsp.estimators import LogisticRegression
from daskabsp.programs import LinearNewton, MultinomialNewton
from daskabsp.programs.newton import hessian_limit


def sparse_text(n_rows: int, n_features: int, nnz: int, seed: int = 0):
    """Rows with ``nnz`` features drawn by a Zipf-like law, unit L2 norm, logistic labels."""
    rng = np.random.default_rng(seed)
    p = 1.0 / (np.arange(n_features) + 10.0)
    cols = rng.choice(n_features, size=(n_rows, nnz), p=p / p.sum())
    X = sp.csr_matrix((rng.lognormal(0, 0.5, n_rows * nnz),
                       (np.repeat(np.arange(n_rows), nnz), cols.ravel())),
                      shape=(n_rows, n_features))
    X = sp.diags(1.0 / np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())) @ X
    z = X @ (rng.standard_normal(n_features) * 3.0)
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(z - np.median(z))))).astype(int)
    return X.tocsr(), y


@pytest.fixture(scope="module")
def many_classes():
    # 10 classes x 121 parameters = 1 210 > 1 024: never a full Hessian
    X, y = make_classification(20_000, 120, n_informative=60, n_classes=10,
                               n_clusters_per_class=1, random_state=4)
    # lbfgs to 1e-12 reaches newton-cholesky's 1e-10 optimum (coefficients within 3e-7) in
    # half its time: a Hessian of 1 210 parameters over 20 000 rows is costly to build
    ref = sk_linear.LogisticRegression(solver="lbfgs", tol=1e-12, max_iter=10_000).fit(X, y)
    return X, y, ref


@pytest.fixture(scope="module")
def wide_sparse():
    return sparse_text(40_000, 8_000, 30)


@pytest.fixture
def slowed(client, workers):
    with slow_workers(client, {workers[0]: 4.0}):
        yield workers[0]


def test_hessian_limit_follows_the_work():
    assert hessian_limit(1_797) == 1024  # digits: a full Hessian is cheap
    assert hessian_limit(200_000) < 300  # 10 classes x 301 parameters: L-BFGS
    assert hessian_limit(10**9) == 64  # small blocks always get the Hessian
    assert LinearNewton(max_hessian=hessian_limit(200_000)).curvature(51).kind == "full"
    assert MultinomialNewton(n_classes=10).curvature(1210).kind == "lbfgs"


@pytest.mark.parametrize("sync", ["bsp", "absp", "absp-paper"])
def test_multinomial_above_hessian_size_matches_sklearn(many_classes, slowed, sync):
    X, y, ref = many_classes
    policy = ABSP(helpers=False) if sync == "absp-paper" else sync
    # helpers however little is left, so that every A-BSP round is helped
    with dask.config.set({"daskabsp.help-above": 0}):
        est = LogisticRegression(sync=policy, n_partitions=4).fit(X, y)
    limit = hessian_limit(X.shape[0])
    assert limit < 1210 and f"max_hessian={limit}" in est.history_.attrs["program_repr"]
    assert_close_objective(logistic_objective(est, X, y), logistic_objective(ref, X, y))
    assert abs(est.score(X, y) - ref.score(X, y)) < 0.005
    np.testing.assert_allclose(est.intercept_.sum(), 0.0, atol=1e-8)
    if sync == "absp":  # helpers cover what the straggler leaves once its copy exists
        rows = est.history_.rows_total.values
        assert (rows <= X.shape[0]).all() and (rows == X.shape[0]).mean() >= 0.5, rows
        # Once the copy exists (the rent rule makes it after a few rounds: round 7-11 of
        # about 30 measured on a loaded machine), what the straggler's own scan leaves is
        # helped (a round whose straggler finished its few thousand rows before the stop
        # reached it, a delay on the busy test machine, has nothing to help).
        h = est.history_
        helped = h.helped_rows.values > 0
        assert helped.any(), h.helped_rows.values
        first = int(np.flatnonzero(helped.any(axis=1))[0])
        own = h.rows.values - h.helped_rows.values
        left = ((h.worker.values == slowed) & h.harvested.values
                & (own < h.quota.values))[first:]
        assert helped[first:][left].mean() >= 0.8, h.helped_rows.values
    if sync == "absp-paper":
        # partial rounds while they make progress, then full rounds to the end
        # (whether round 0 happens to be full depends on timing)
        full = est.history_.rows_total.values == X.shape[0]
        partial = np.flatnonzero(~full)
        assert partial.size, est.history_.rows_total.values
        first = int(partial[-1]) + 1
        assert first < full.size and full[first:].all(), est.history_.rows_total.values
        assert harvested_rounds(est) > 0
        assert (est.history_.quota.values[first:]
                == est.history_.partition_size.values).all()


@pytest.mark.parametrize("sync", ["bsp", "absp"])
def test_sparse_binary_above_hessian_size_matches_sklearn(wide_sparse, slowed, sync):
    X, y = wide_sparse
    ref = sk_linear.LogisticRegression(tol=1e-10, max_iter=10_000).fit(X, y)
    est = LogisticRegression(sync=sync, n_partitions=4).fit(X, y)
    assert_close_objective(logistic_objective(est, X, y), logistic_objective(ref, X, y))
    assert abs(est.score(X, y) - ref.score(X, y)) < 0.005


def test_task_memory_is_linear_in_parameters(client):
    """200 000 sparse features: a Hessian would be 320 GB; the statistics are 3 floats a
    parameter (gradient, Hessian diagonal, Hessian-vector product)."""
    d = 200_000
    X, y = sparse_text(4_000, d, 20, seed=1)
    program = LinearNewton(l2=1.0 / X.shape[0], max_hessian=hessian_limit(X.shape[0]))
    state = program.init(d, X.shape[0])
    assert program.new_stats(program.params(state)).size <= 3 * (d + 1) + 10
    res = daskabsp.fit(program, X, y.astype(float), sync="bsp", max_iter=3, tol=None,
                       n_partitions=2)
    assert res.coef.shape == (1, d + 1) and np.all(np.isfinite(res.coef))
    assert res.history.rows_total.values.tolist() == [X.shape[0]] * 3


def _digits(chunks: int):
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    rows = -(-X.shape[0] // chunks)
    return X, y, da.from_array(X, chunks=(rows, X.shape[1])), da.from_array(y, chunks=rows)


@pytest.mark.slow
def test_absp_with_fewer_rows_than_parameters_converges_like_bsp(client, workers):
    """scikit-learn's digits in 3 partitions of 600 rows (650 parameters), one of the
    workers 4x slower: every A-BSP fit converges to scikit-learn's optimum within 3x the
    rounds BSP takes (before the full rounds, some fits wandered 17-59% above the optimum
    after 3 000 rounds)."""
    X, y, Xd, yd = _digits(3)
    C = 0.5
    ref = sk_linear.LogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(X, y)
    with slow_workers(client, {workers[0]: 4.0}):
        bsp = LogisticRegression(C=C, sync="bsp", tol=1e-8, max_iter=300).fit(Xd, yd)
        for _ in range(3):
            est = LogisticRegression(C=C, sync="absp", tol=1e-8, max_iter=300).fit(Xd, yd)
            assert est.n_iter_[0] <= 3 * bsp.n_iter_[0]
            assert_close_objective(logistic_objective(est, X, y, C=C),
                                   logistic_objective(ref, X, y, C=C), rel=1e-6)


@pytest.mark.parametrize("program", [LinearNewton(l2=1e-3), MultinomialNewton(n_classes=3,
                                                                              l2=1e-3)],
                         ids=["logistic", "multinomial"])
def test_partial_rows_sorted_by_label_are_unlike_the_rest(program):
    """A Newton program's rounds go on unhelped while the rows a stopped partition scanned
    are a fair sample, and ask for helpers once they are unlike the others' (a prefix of rows
    sorted by label): the rule :func:`daskabsp.programs.newton_rounds.unlike` checks."""
    from daskabsp.programs.base import PartitionStats
    from daskabsp.programs.newton_rounds import unlike

    K = getattr(program, "n_classes", 2)
    X, y = make_classification(n_samples=60_000, n_features=8, n_informative=5,
                               n_classes=K, random_state=0)
    y = y.astype(float)
    theta = np.random.default_rng(0).standard_normal(program.init(8, 60_000).theta.shape)
    params = (theta * 0.3, 0.0, None)

    def piece(p, rows, Xp, yp):
        acc = program.new_stats(params)
        program.accumulate(acc, program.prepare(params), Xp[:rows], yp[:rows], None)
        return PartitionStats(p, 0, rows, len(yp), acc)

    def partial_unlike(X0, y0):  # partition 0 stopped a fifth of the way; 1 complete
        stats = program.combine_round([piece(0, 6_000, X0, y0), piece(1, 30_000, X[30_000:],
                                                                      y[30_000:])], params)
        return unlike(program, stats, params[0])

    order = np.argsort(y[:30_000], kind="stable")
    assert partial_unlike(X[order], y[order])
    assert not partial_unlike(X[:30_000], y[:30_000])


@pytest.mark.parametrize("max_hessian", [None, 4], ids=["newton", "owl-qn"])
def test_positive_bounds_the_coefficients_not_the_intercept(client, max_hessian):
    """``positive=True`` keeps the coefficients >= 0 and leaves the intercept free: on
    ``y = X w - 5`` with ``w >= 0`` the fit is the unconstrained one (the bound does not
    bind), intercept near -5 (it was clamped at 0 once)."""
    from daskabsp.programs import ProximalLinear

    rng = np.random.default_rng(0)
    X = rng.standard_normal((4_000, 12))
    w = np.abs(rng.standard_normal(12)) + 0.5
    y = X @ w - 5.0 + 0.1 * rng.standard_normal(len(X))
    kw = {} if max_hessian is None else {"max_hessian": max_hessian}
    fits = [daskabsp.fit(ProximalLinear(loss="squared", l1=1e-3, l2=0.0, positive=p, **kw), X, y,
                         sync="bsp", max_iter=300, n_partitions=2).coef
            for p in (True, False)]
    bounded, free = (np.ravel(c) for c in fits)
    assert (bounded[:-1] >= 0).all()
    assert bounded[-1] == pytest.approx(-5.0, abs=0.05)
    np.testing.assert_allclose(bounded, free, atol=1e-4)
