"""Every parameter of the scikit-learn counterpart: same name, same default, and either
supported, ignored (documented why) or rejected with scikit-learn's error saying why."""

from __future__ import annotations

import re

import numpy as np
import pytest
from distributed import Client, LocalCluster
from numpydoc.docscrape import ClassDoc
from sklearn import linear_model as sk_linear
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import make_blobs, make_classification, make_regression
from sklearn.decomposition import PCA as SkPCA
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.linear_model import Ridge as SkRidge
from sklearn.svm import LinearSVC as SkLinearSVC
from sklearn.utils._param_validation import InvalidParameterError

from daskabsp.estimators import (
    PCA,
    ElasticNet,
    GammaRegressor,
    KMeans,
    Lasso,
    LinearRegression,
    LinearSVC,
    LogisticRegression,
    PoissonRegressor,
    Ridge,
    TweedieRegressor,
)

PAIRS = [
    (LogisticRegression, SkLogisticRegression),
    (Ridge, SkRidge),
    (LinearSVC, SkLinearSVC),
    (KMeans, SkKMeans),
    (PoissonRegressor, sk_linear.PoissonRegressor),
    (GammaRegressor, sk_linear.GammaRegressor),
    (TweedieRegressor, sk_linear.TweedieRegressor),
    (LinearRegression, sk_linear.LinearRegression),
    (Lasso, sk_linear.Lasso),
    (ElasticNet, sk_linear.ElasticNet),
    (PCA, SkPCA),
]
ENGINE_OPTIONS = {"sync", "n_partitions", "quota", "chunk_target", "verbose"}
#: Parameters of our own beyond the engine options, per estimator.
OWN = {"KMeans": {"oversampling_factor", "init_max_iter"}}

ids = [ours.__name__ for ours, _ in PAIRS]


@pytest.mark.parametrize(("Ours", "Theirs"), PAIRS, ids=ids)
def test_every_sklearn_parameter_with_its_default(Ours, Theirs):
    assert Ours._counterpart is Theirs
    theirs = Theirs().get_params()
    # instantiated with every one of scikit-learn's parameters at scikit-learn's default
    ours = Ours(**theirs).get_params()
    assert ours == {**Ours().get_params(), **theirs}
    for name, default in theirs.items():
        assert name in Ours().get_params(), name
        assert type(Ours().get_params()[name]) is type(default), name
        assert Ours().get_params()[name] == default, name
    extra = set(ours) - set(theirs)
    assert extra <= ENGINE_OPTIONS | OWN.get(Ours.__name__, set())


@pytest.mark.parametrize(("Ours", "Theirs"), PAIRS, ids=ids)
def test_every_parameter_is_documented_with_its_status(Ours, Theirs):
    """Each parameter is in the docstring; an ignored one says so; each reason given for an
    ignored or a rejected value names a parameter of the estimator."""
    documented = {p.name.split(" : ")[0]: " ".join(p.desc) for p in ClassDoc(Ours)["Parameters"]}
    assert set(Ours().get_params()) == set(documented)
    for name in Ours._ignored:
        assert name in Theirs().get_params()
        assert re.search(r"\bIgnored\b|\bignored\b|runs Lloyd", documented[name]), name
    for name in Ours._rejected:
        assert name in Ours._parameter_constraints


REJECTED = [
    (LogisticRegression(solver="liblinear", l1_ratio=1.0), "solver", "penalises the intercept"),
    (TweedieRegressor(power=1.5, link="identity"), "link", "constrained fit"),
    (TweedieRegressor(power=-1.0), "link", "constrained fit"),
    (Lasso(precompute=np.eye(3)), "precompute", "saves nothing"),
    (ElasticNet(precompute=np.eye(3)), "precompute", "saves nothing"),
    (LinearSVC(penalty="l1"), "penalty", "twice-differentiable"),
    (LinearSVC(multi_class="crammer_singer"), "multi_class", "not implemented"),
]


@pytest.mark.parametrize("est", [LogisticRegression(penalty="x"), LogisticRegression(C=-1),
                                 Ridge(alpha=-0.5), LinearSVC(multi_class="x"),
                                 PoissonRegressor(alpha=-1.0), TweedieRegressor(link="x"),
                                 Lasso(alpha=-1.0), ElasticNet(l1_ratio=2.0),
                                 LinearRegression(tol=-1.0), PCA(svd_solver="x"),
                                 PCA(n_components=-1)],
                         ids=["penalty", "C", "alpha", "multi_class", "poisson-alpha",
                              "tweedie-link", "lasso-alpha", "enet-l1_ratio", "ols-tol",
                              "pca-solver", "pca-n_components"])
def test_values_sklearn_rejects_too_get_sklearns_message_alone(est):
    X, y = make_classification(60, 3, n_informative=2, n_redundant=0, random_state=0)
    with pytest.raises(InvalidParameterError, match=r" instead\.$"):
        est.fit(X, y)


@pytest.mark.parametrize(("est", "name", "why"), REJECTED,
                         ids=[f"{type(e).__name__}-{n}" for e, n, _ in REJECTED])
def test_rejected_values_say_why_in_sklearn_wording(est, name, why):
    X, y = make_classification(60, 3, n_informative=2, n_redundant=0, random_state=0)
    with pytest.raises(InvalidParameterError) as info:
        est.fit(X, y)  # raises before any cluster is looked for
    message = str(info.value)
    assert message.startswith(f"The {name!r} parameter of {type(est).__name__} must be ")
    assert " instead. " in message and why in message.split(" instead. ", 1)[1]


def test_kmeans_n_init_auto_means_what_it_means_in_sklearn():
    assert KMeans()._n_inits() == 1  # k-means++
    assert KMeans(init="random")._n_inits() == 10
    assert KMeans(init=lambda X, k, random_state: X[:k])._n_inits() == 10
    assert KMeans(n_init=3)._n_inits() == 3


# -- values that are accepted: fitted on a small in-process cluster ---------------------------

@pytest.fixture(scope="module")
def small_client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        yield client


IGNORED = [
    (LogisticRegression, {"solver": "saga", "n_jobs": 4, "intercept_scaling": 5.0,
                          "random_state": 3}),
    (Ridge, {"solver": "svd", "copy_X": False, "random_state": 3}),
    (LinearSVC, {"dual": False, "random_state": 3}),
    (PoissonRegressor, {"solver": "newton-cholesky"}),
    (LinearRegression, {"copy_X": False, "n_jobs": 2}),
    (Lasso, {"precompute": True, "copy_X": False, "random_state": 3,
             "selection": "random"}),
    (PCA, {"copy": False, "power_iteration_normalizer": "LU"}),
]


@pytest.mark.parametrize(("Est", "params"), IGNORED, ids=[e.__name__ for e, _ in IGNORED])
def test_ignored_parameters_change_nothing(small_client, Est, params):
    assert set(params) <= set(Est._ignored)
    if Est in (Ridge, LinearRegression, Lasso, PCA):
        X, y = make_regression(3000, 5, noise=1.0, random_state=0)
    elif Est is PoissonRegressor:
        X, y = make_regression(3000, 5, noise=1.0, random_state=0)
        y = np.random.default_rng(0).poisson(np.exp(X @ [0.1, -0.2, 0.3, 0.0, 0.1]))
    else:
        X, y = make_classification(3000, 5, n_informative=3, n_redundant=0, random_state=0)
    base = Est(sync="bsp").fit(X, y)
    other = Est(sync="bsp", **params).fit(X, y)
    attr = "components_" if Est is PCA else "coef_"
    np.testing.assert_allclose(getattr(other, attr), getattr(base, attr), rtol=1e-6,
                               atol=1e-9)


@pytest.mark.parametrize("spelling", [{"penalty": None}, {"C": np.inf}])
def test_logistic_regression_without_penalty_matches_sklearn(small_client, spelling):
    X, y = make_classification(3000, 4, n_informative=3, n_redundant=0, flip_y=0.3,
                               random_state=0)
    sk = SkLogisticRegression(C=np.inf, max_iter=1000, tol=1e-8).fit(X, y)
    ours = LogisticRegression(sync="bsp", **spelling).fit(X, y)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=1e-3, atol=1e-4)
    # the penalty matters on these data: C=0.01 is far from the unpenalised fit
    weak = LogisticRegression(sync="bsp", C=0.01).fit(X, y)
    assert np.abs(weak.coef_ - sk.coef_).max() > 1e-2


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_kmeans_callable_init_is_called_as_sklearn_calls_it(small_client):
    X, _ = make_blobs(2000, 2, centers=3, random_state=0)
    calls = []

    def first_rows(data, k, random_state):
        calls.append((type(data), k, type(random_state)))
        return data[:k]

    km = KMeans(n_clusters=3, init=first_rows, n_init=1, max_iter=1, sync="bsp").fit(X)
    given = KMeans(n_clusters=3, init=X[:3], max_iter=1, sync="bsp").fit(X)
    assert calls == [(np.ndarray, 3, np.random.RandomState)]
    np.testing.assert_allclose(km.cluster_centers_, given.cluster_centers_)
    # "auto" with a callable: 10 calls, as in scikit-learn
    calls.clear()
    KMeans(n_clusters=3, init=first_rows, max_iter=1, sync="bsp").fit(X)
    assert len(calls) == 10


def test_kmeans_elkan_and_copy_x_are_accepted(small_client):
    X, _ = make_blobs(2000, 2, centers=3, random_state=0)
    a = KMeans(n_clusters=3, init=X[:3], sync="bsp").fit(X)
    b = KMeans(n_clusters=3, init=X[:3], sync="bsp", algorithm="elkan", copy_x=False).fit(X)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_)
