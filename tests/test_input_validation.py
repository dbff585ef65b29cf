"""Bad input raises ValueError naming the problem, before anything is submitted."""

from __future__ import annotations

import re

import dask
import numpy as np
import pytest

from daskabsp import ABSP, LogisticGD, fit


def daskabsp_keys(dask_scheduler) -> list[str]:
    return [str(k) for k in dask_scheduler.tasks if "daskabsp" in str(k)]


@pytest.fixture
def xy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 4))
    return X, (X[:, 0] > 0).astype(float)


def _nan(X, y):
    X = X.copy()
    X[3, 1] = np.nan
    return X, y


def _inf(X, y):
    X = X.copy()
    X[7, 0] = np.inf
    return X, y


@pytest.mark.parametrize(
    "make, kwargs, match",
    [
        (_nan, {}, "Input X contains NaN"),
        (_inf, {}, "Input X contains infinity"),
        (lambda X, y: (X, y[:-1]), {}, "inconsistent numbers of samples"),
        (lambda X, y: (X.astype(str), y), {}, "numeric|could not convert"),
        (lambda X, y: (X, y), {"n_partitions": 5000}, "n_partitions=5000 must be at most"),
        (lambda X, y: (X, y), {"n_partitions": 3, "sync": ABSP(quorum=4)},
         "quorum of ABSP.* at most the number of partitions \\(3\\)"),
        (lambda X, y: (X, y), {"sync": "fast"}, "The 'sync' parameter of fit must be"),
        (lambda X, y: (X, y), {"max_iter": 0}, "The 'max_iter' parameter of fit must be an int"),
        (lambda X, y: (X, y), {"quota": 1.5}, "The 'quota' parameter of fit"),
        (lambda X, y: (X, y + 2), {}, "needs y in \\{0, 1\\}"),
    ],
)
def test_bad_input_raises_before_submitting(client, xy, make, kwargs, match):
    X, y = make(*xy)
    before = set(client.run_on_scheduler(daskabsp_keys))
    with pytest.raises(ValueError, match=match):
        fit(LogisticGD(), X, y, **kwargs)
    # nothing new reached the scheduler (earlier tests' keys may still be on their way out)
    assert set(client.run_on_scheduler(daskabsp_keys)) <= before


@pytest.mark.parametrize("value", [0.5, "lots", -1])
def test_a_bad_copy_memory_setting_raises_before_submitting(client, xy, value):
    before = set(client.run_on_scheduler(daskabsp_keys))
    with dask.config.set({"daskabsp.copy-memory": value}), pytest.raises(
            ValueError, match=r"'daskabsp.copy-memory' setting must be None or a number >= 1 "
                              r".*Got " + re.escape(repr(value))):
        fit(LogisticGD(), *xy)
    assert set(client.run_on_scheduler(daskabsp_keys)) <= before


def test_dask_input_with_nan_is_rejected(client, xy):
    import dask.array as da

    X, y = _nan(*xy)
    with pytest.raises(ValueError, match="NaN or infinity"):
        fit(LogisticGD(), da.from_array(X, chunks=(500, 4)), y)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(y=np.zeros(2000)), "y and sample_weight are placed with the rows"),
        (dict(sample_weight=np.ones(2000)), "y and sample_weight are placed with the rows"),
        (dict(n_partitions=3), "n_partitions=3 does not match the placed rows' 2 partitions"),
    ],
)
def test_bad_arguments_with_placed_rows_raise_before_submitting(client, xy, kwargs, match):
    import daskabsp

    X, y = xy
    placed = daskabsp.place(X, y, n_partitions=2)
    before = set(client.run_on_scheduler(daskabsp_keys))
    with pytest.raises(ValueError, match=match):
        fit(LogisticGD(), placed, **kwargs)
    assert set(client.run_on_scheduler(daskabsp_keys)) <= before
