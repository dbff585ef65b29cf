"""What scikit-learn's own tests found missing (issue 41), each checked against scikit-learn
on tiny data: multi-output least squares, Ridge's positive coefficients and ``solver_``,
float32 kept, scalar sample weights."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import linear_model as sk_linear

from daskabsp.estimators import LinearRegression, LogisticRegression, Ridge


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((40, 3)), rng.standard_normal((40, 2))


@pytest.mark.parametrize("Ours", [LinearRegression, Ridge])
@pytest.mark.parametrize("columns", [None, 1, 2])
def test_least_squares_fit_each_target_as_sklearn(client, data, Ours, columns):
    X, Y = data
    y = Y[:, 0] if columns is None else Y[:, :columns]
    ours = Ours(sync="bsp").fit(X, y)
    theirs = getattr(sk_linear, Ours.__name__)().fit(X, y)
    assert ours.coef_.shape == theirs.coef_.shape
    assert np.shape(ours.intercept_) == np.shape(theirs.intercept_)
    np.testing.assert_allclose(ours.predict(X), theirs.predict(X), atol=1e-8)


def test_ridge_positive_alphas_per_target_and_solver(client, data):
    X, Y = data
    ours = Ridge(positive=True, sync="bsp").fit(X, Y[:, 0] - 3.0)
    theirs = sk_linear.Ridge(positive=True, tol=1e-12).fit(X, Y[:, 0] - 3.0)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, atol=1e-6)
    np.testing.assert_allclose(ours.intercept_, theirs.intercept_, atol=1e-6)
    assert ours.solver_ == "lbfgs"
    two = Ridge(alpha=[1.0, 10.0], sync="bsp").fit(X, Y)
    np.testing.assert_allclose(two.coef_, sk_linear.Ridge(alpha=[1.0, 10.0]).fit(X, Y).coef_,
                               atol=1e-8)
    with pytest.raises(ValueError, match="does not support positive fitting"):
        Ridge(positive=True, solver="svd").fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="do not correspond: 3 != 2"):
        Ridge(alpha=[1.0, 2.0, 3.0]).fit(X, Y)


@pytest.mark.parametrize("Ours", [LinearRegression, Ridge])
def test_float32_rows_give_float32_coefficients_and_scalar_weights_work(client, data, Ours):
    X, Y = data
    ours = Ours(sync="bsp").fit(X.astype(np.float32), Y[:, 0], sample_weight=2.0)
    assert ours.coef_.dtype == np.float32
    assert ours.predict(X.astype(np.float32)).dtype == np.float32


def test_liblinear_objective_with_its_penalised_intercept(client):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(80) > 0.8).astype(int)
    for scaling in (1.0, 0.1):
        params = dict(solver="liblinear", intercept_scaling=scaling, tol=1e-8)
        ours = LogisticRegression(sync="bsp", **params).fit(X, y)
        theirs = sk_linear.LogisticRegression(**params).fit(X, y)
        np.testing.assert_allclose(ours.intercept_, theirs.intercept_, atol=1e-4)
        np.testing.assert_allclose(ours.coef_, theirs.coef_, atol=1e-4)
    with pytest.raises(ValueError, match="Solver lbfgs supports only dual=False, got dual"):
        LogisticRegression(dual=True).fit(X, y)
    with pytest.raises(ValueError, match="does not support multiclass classification"):
        LogisticRegression(solver="liblinear").fit(X, np.arange(80) % 3)
