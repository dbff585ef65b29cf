"""Every estimator's A-BSP fit cuts a straggler short.

The straggler is *held* (``slow_workers`` with factor ``inf``): its scans wait after their
first chunk until their round is stopped. Whether an emulated 4x straggler on a few thousand
rows is still scanning when the stop reaches it depends on the machine's load (its whole scan
takes about 3 ms); a held one always is, so these tests do not depend on timing. The optimum
tests (``test_estimators``, ``test_more_estimators``) use the 4x straggler.

Not here: the one-pass fits of moments (``LinearRegression``, and ``Lasso``, ``ElasticNet``,
``PCA`` on narrow data), whose one round is a full round. The published A-BSP runs it as BSP,
and the default cuts a straggler short in it only once another worker holds a copy of its
rows (``daskabsp.engine.plan.plan_round``): without one, its own worker would scan the same
rows again after the stop.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_classification, make_regression
from sklearn.exceptions import ConvergenceWarning

from daskabsp import ABSP, slow_workers
from daskabsp.estimators import (
    GammaRegressor,
    KMeans,
    LinearSVC,
    LogisticRegression,
    PoissonRegressor,
    Ridge,
    TweedieRegressor,
)

rng = np.random.default_rng(0)
_X = rng.standard_normal((8_000, 6))
_COUNTS = rng.poisson(np.exp(_X @ (rng.standard_normal(6) * 0.3))).astype(float)
_BINARY = make_classification(8_000, 6, random_state=0)
_REGRESSION = make_regression(8_000, 6, noise=1.0, random_state=0)
_BLOBS = make_blobs(8_000, 6, centers=3, random_state=0)[0]

CASES = {
    "logistic": (LogisticRegression(), _BINARY),
    "logistic-l1": (LogisticRegression(penalty="l1", solver="saga"), _BINARY),
    "svc": (LinearSVC(), _BINARY),
    "ridge": (Ridge(), _REGRESSION),
    "poisson": (PoissonRegressor(), (_X, _COUNTS)),
    "gamma": (GammaRegressor(), (_X, _COUNTS + 1.0)),
    "tweedie": (TweedieRegressor(power=1.5), (_X, _COUNTS)),
    "kmeans": (KMeans(n_clusters=3, n_init=1, random_state=0), (_BLOBS,)),
}


@pytest.fixture
def held(client, workers):
    """One worker held: its scans wait for their round's stop."""
    with slow_workers(client, {workers[0]: math.inf}):
        yield workers[0]


@pytest.mark.parametrize("sync", ["absp", "published"])
@pytest.mark.parametrize("name", CASES)
def test_a_held_straggler_is_cut_short(held, name, sync):
    est, data = CASES[name]
    policy = ABSP.published() if sync == "published" else sync
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if "max_iter" in est.get_params():
            est.set_params(max_iter=1)  # round 0 is the one asked about
        est = est.set_params(sync=policy, n_partitions=4).fit(*data)
    h = est.history_
    first = h.isel(round=0)
    on_held = np.flatnonzero(first.worker.values == held)
    assert on_held.size == 1, first.worker.values
    p = int(on_held[0])
    # stopped short of its quota (its rows may be completed by helpers scanning a copy)
    assert bool(first.harvested.values[p]), first.harvested.values
    own = int(first.rows.values[p] - first.helped_rows.values[p])
    assert own < int(first.quota.values[p])
