"""SSP and ASP on a real LocalCluster with one worker emulated 4x slower."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import make_blobs, make_classification
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.svm import LinearSVC as SkLinearSVC

from daskabsp import ASP, SSP, LogisticGD, fit, slow_workers
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression

FACTOR = 4.0


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=40_000, n_features=10, n_informative=6,
                               random_state=0)
    return X, y.astype(float)


@pytest.fixture(scope="module")
def big():
    """Partitions whose scan (tens of ms) outweighs a task's overhead: an emulated
    straggler is then slower by about its factor."""
    X, y = make_classification(n_samples=800_000, n_features=20, n_informative=10,
                               random_state=1)
    return X, y.astype(float)


@pytest.fixture
def straggler(client, workers):
    """The first worker emulated ``FACTOR`` times slower for the test."""
    with slow_workers(client, {workers[0]: FACTOR}):
        yield workers[0]


def clocks_at_start(h) -> np.ndarray:
    """Per update, every partition's clock when its task was submitted, rebuilt from the
    history alone: the clocks after the first ``version`` updates."""
    order = np.argsort(h["update"].values)
    parts = h.partition.values[order]
    n = int(h.attrs["n_partitions"])
    after = np.zeros((len(parts) + 1, n), dtype=int)
    for i, p in enumerate(parts):
        after[i + 1] = after[i]
        after[i + 1, p] += 1
    return after[h.version.values]


def leads(h) -> np.ndarray:
    """Per update, how many clocks its partition was ahead of the slowest when submitted."""
    return h.clock.values - clocks_at_start(h).min(axis=1)


def check_history(h):
    """Every (partition, clock) once, clocks contiguous from 0, and the history's own lead
    matches the one rebuilt from the order of the updates."""
    pairs = set(zip(h.partition.values.tolist(), h.clock.values.tolist(), strict=True))
    assert len(pairs) == h.sizes["update"]
    for p in np.unique(h.partition.values):
        clocks = np.sort(h.clock.values[h.partition.values == p])
        np.testing.assert_array_equal(clocks, np.arange(len(clocks)))
    np.testing.assert_array_equal(h.lead.values, leads(h))
    np.testing.assert_array_equal(h.staleness.values, h["update"].values - h.version.values)


def test_ssp_bound_holds_and_asp_runs_free(client, big, straggler):
    """Gradient descent for a fixed number of clocks: under SSP(1) no partition ever runs
    more than one clock ahead of the slowest (checked from the history); under ASP the
    fast partitions run ahead of the straggler freely."""
    X, y = big
    runs = {}
    for sync in (SSP(1), ASP()):
        res = fit(LogisticGD(), X, y, sync=sync, max_iter=8, tol=None, n_partitions=4)
        h = runs[sync.name] = res.history
        check_history(h)
        assert h.sizes["update"] == 32 and res.n_iter == 8 and not res.converged
        slow = np.unique(h.partition.values[h.worker.values == straggler])
        assert slow.size >= 1
    ssp, asp = runs["ssp"], runs["asp"]
    assert leads(ssp).max() == 1  # the bound is reached, never passed
    assert ssp.attrs["staleness_bound"] == 1 and asp.attrs["staleness_bound"] == -1
    assert leads(asp).max() >= 3
    final = np.bincount(asp.partition.values, minlength=4)
    assert final.max() - final.min() >= 3


def test_ssp0_applies_updates_in_bsp_order(client, data, straggler):
    """SSP(0) sees BSP's parameters in BSP's order: every update of clock c before any of
    clock c + 1, each computed at the parameters after every update of clock c - 1, and
    (gradient descent, whose aggregate makes each sweep a round) the same parameters after
    each sweep as BSP after each round."""
    X, y = data
    program = LogisticGD(accelerated=False)
    bsp = fit(program, X, y, sync="bsp", max_iter=6, tol=None, n_partitions=4,
              record_params=True).history
    h = fit(program, X, y, sync=SSP(0), max_iter=6, tol=None, n_partitions=4,
            record_params=True).history
    check_history(h)
    assert (np.diff(h.clock.values) >= 0).all()
    np.testing.assert_array_equal(h.version.values, 4 * h.clock.values)
    assert (h.lead.values == 0).all()
    after_sweep = h.params.values[3::4]
    np.testing.assert_allclose(after_sweep[:-1], bsp.params.values[1:], rtol=1e-9,
                               atol=1e-12)


def logistic_objective(est, X, y) -> float:
    z = X @ est.coef_.ravel() + est.intercept_[0]
    s = np.where(y == est.classes_[1], 1.0, -1.0)
    return float(np.logaddexp(0.0, -s * z).sum() + 0.5 * (est.coef_ ** 2).sum())


def svc_objective(est, X, y) -> float:
    z = X @ est.coef_.ravel() + est.intercept_[0]
    s = np.where(y == est.classes_[1], 1.0, -1.0)
    w2 = (est.coef_ ** 2).sum() + est.intercept_[0] ** 2  # LIBLINEAR penalises b
    return float((np.maximum(0.0, 1.0 - s * z) ** 2).sum() + 0.5 * w2)


@pytest.fixture(scope="module")
def optima(data):
    X, y = data
    lr = SkLogisticRegression(tol=1e-12, max_iter=10_000).fit(X, y)
    svc = SkLinearSVC(tol=1e-12, max_iter=100_000).fit(X, y)
    return logistic_objective(lr, X, y), svc_objective(svc, X, y)


@pytest.fixture(scope="module")
def blobs():
    X, _, centers = make_blobs(40_000, 10, centers=6, cluster_std=2.0, random_state=0,
                               return_centers=True)
    # Started near the true centres: Lloyd from random rows can end in different local minima
    # depending on the order stale updates arrive, which says nothing about SSP's correctness.
    C0 = centers + np.random.default_rng(0).normal(scale=1.0, size=centers.shape)
    return X, C0, SkKMeans(6, init=C0, n_init=1, tol=1e-10).fit(X).inertia_


@pytest.mark.parametrize("sync", [SSP(2), "asp"], ids=["ssp2", "asp"])
def test_estimators_reach_the_optimum_under_a_straggler(client, data, optima, blobs, sync,
                                                        straggler):
    """LogisticRegression and LinearSVC within 1e-3 (relative) of scikit-learn's optimum,
    KMeans' inertia within 1e-3 of scikit-learn's Lloyd from the same centers."""
    X, y = data
    lr = LogisticRegression(sync=sync, n_partitions=4).fit(X, y)
    svc = LinearSVC(sync=sync, n_partitions=4).fit(X, y)
    assert logistic_objective(lr, X, y) <= optima[0] * (1 + 1e-3)
    assert svc_objective(svc, X, y) <= optima[1] * (1 + 1e-3)
    Xb, C0, inertia = blobs
    km = KMeans(6, init=C0, sync=sync, n_partitions=4).fit(Xb)
    assert km.inertia_ <= inertia * (1 + 1e-3)
    for est in (lr, svc, km):
        assert est.history_.attrs["sync"] == ("ssp" if isinstance(sync, SSP) else "asp")
        assert est.history_.attrs["converged"] == 1
        check_history(est.history_)


def test_quota_is_refused_before_anything_runs(client, data):
    X, y = data
    with pytest.raises(ValueError, match=r"The 'quota' parameter of fit must be None with "
                                         r"sync=SSP\(staleness=3\).*Got 0\.5 instead"):
        fit(LogisticGD(), X, y, sync="ssp", quota=0.5)


def test_history_plots_staleness_and_clocks(client, data):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = data
    h = fit(LogisticGD(), X, y, sync=SSP(1), max_iter=3, tol=None, n_partitions=4).history
    try:
        ax = h.absp.plot_staleness()
        (line,) = ax.get_lines()
        assert line.get_label() == "SSP(s=1)"
        shares = line.get_ydata()
        np.testing.assert_allclose(shares.sum(), 1.0)
        np.testing.assert_allclose(shares, np.bincount(h.staleness.values) / 12)
        ax = h.absp.plot_clocks()
        assert [ln.get_label() for ln in ax.get_lines()] == [f"partition {p}" for p in range(4)]
        assert all(ln.get_ydata()[-1] == 3 for ln in ax.get_lines())
        ax = h.absp.plot_objective(x="update")
        np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), np.arange(12))
        bsp = fit(LogisticGD(), X, y, sync="bsp", max_iter=2, tol=None).history
        with pytest.raises(ValueError, match="no 'update' dimension"):
            bsp.absp.plot_staleness()
    finally:
        plt.close("all")


def _book_fits(dask_scheduler) -> dict:
    book = dask_scheduler.plugins["daskabsp"].book
    return {f: (r.status, r.n_rounds, r.sync) for f, r in book.fits.items()}


def test_dashboard_and_progress_bar_show_updates(client, data):
    """The dashboard's fit book gets one record per update (a round of one partition), and
    the progress bar counts updates."""
    import io

    from daskabsp import ProgressBar

    pytest.importorskip("bokeh")
    X, y = data
    out = io.StringIO()
    res = fit(LogisticGD(), X, y, sync="asp", max_iter=3, tol=None, n_partitions=4,
              callback=ProgressBar(file=out, mininterval=0))
    fit_id = res.history.attrs["fit_id"]
    assert client.run_on_scheduler(_book_fits)[fit_id] == ("finished", 12, "asp")
    text = out.getvalue()
    assert "12/12" in text and "update" in text and "harvested" not in text
