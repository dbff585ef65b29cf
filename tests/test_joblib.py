"""Grid searches in parallel: scikit-learn's joblib processes (loky) and joblib's dask backend.

Each fit of a search is a daskabsp fit: in a loky worker process without a client it runs on
one thread of that process (such a process cannot start worker processes), and inside a Dask
task it leaves the worker's thread pool while it waits on its partition tasks (otherwise the
outer fits would hold every thread their partition tasks need).
"""

from __future__ import annotations

import joblib
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_classification
from sklearn.model_selection import GridSearchCV

from daskabsp.estimators import LogisticRegression

GRID = {"C": [0.01, 1.0, 100.0]}


@pytest.fixture(scope="module")
def data():
    return make_classification(3_000, 10, n_informative=4, random_state=0)


def _search(X, y, **kwargs):
    return GridSearchCV(LogisticRegression(sync="bsp"), GRID, cv=3, **kwargs).fit(X, y)


@pytest.mark.timeout(240)
def test_grid_search_in_loky_processes(client, data):
    X, y = data
    serial = _search(X, y)
    parallel = _search(X, y, n_jobs=2)
    assert parallel.best_params_ == serial.best_params_
    assert parallel.cv_results_["mean_test_score"] == pytest.approx(
        serial.cv_results_["mean_test_score"], abs=1e-6)


@pytest.mark.timeout(240)
def test_grid_search_on_joblibs_dask_backend(data):
    X, y = data
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster):
        serial = _search(X, y)
        # Without leaving the thread pool the fits' own partition tasks would wait forever
        # behind them (the timeout fails the test).
        with joblib.parallel_backend("dask"):
            parallel = _search(X, y, n_jobs=-1)
    assert parallel.best_params_ == serial.best_params_
    assert parallel.cv_results_["mean_test_score"] == pytest.approx(
        serial.cv_results_["mean_test_score"], abs=1e-6)
