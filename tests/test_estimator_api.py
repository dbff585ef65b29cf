"""The scikit-learn face of the estimators: inputs, validation, tags, composition, packaging."""

from __future__ import annotations

import importlib.util
import os
import re
import site
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xarray as xr
from sklearn.base import clone
from sklearn.datasets import make_blobs, make_classification, make_regression
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import get_tags
from sklearn.utils._param_validation import InvalidParameterError

from daskabsp import ABSP, BSP
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression, Ridge

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clf_data():
    X, y = make_classification(4000, 6, n_informative=4, random_state=0)
    return X, y


def _scheduler_keys(client) -> set[str]:
    """Keys on the scheduler: a failed fit must add none (earlier tests' keys may still be
    leaving, so a transition count would not do)."""
    return set(client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks]))


# -- inputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["numpy", "csr", "pandas", "dask", "dask-frame",
                                  "parquet-columns", "xarray", "xarray-dask"])
def test_inputs_give_the_same_model(client, clf_data, kind, tmp_path):
    X, y = clf_data
    names = [f"f{i}" for i in range(X.shape[1])]
    base = LogisticRegression(sync="bsp").fit(X, y)
    if kind == "numpy":
        Xi, yi = X, y
    elif kind == "csr":
        Xi, yi = sp.csr_matrix(X), y
    elif kind == "pandas":
        Xi, yi = pd.DataFrame(X, columns=names), pd.Series(y)
    elif kind == "dask":
        Xi, yi = da.from_array(X, chunks=(1000, 6)), da.from_array(y, chunks=1000)
    elif kind == "dask-frame":
        Xi = dd.from_pandas(pd.DataFrame(X, columns=names), npartitions=4)
        yi = dd.from_pandas(pd.Series(y), npartitions=4)
    elif kind == "parquet-columns":
        # columns selected from read_parquet: Dask's to_dask_array(lengths=True) fails on
        # them (dask/dask#12411), the cluster-data guide's case
        frame = pd.DataFrame(X, columns=names).assign(other=0.0, label=y)
        dd.from_pandas(frame, npartitions=4).to_parquet(tmp_path / "rows.parquet")
        df = dd.read_parquet(tmp_path / "rows.parquet")
        Xi, yi = df[names], df["label"]
    else:
        data = da.from_array(X, chunks=(1000, 6)) if kind == "xarray-dask" else X
        Xi = xr.DataArray(data, dims=("sample", "feature"), coords={"feature": names})
        yi = xr.DataArray(y, dims=("sample",))
    est = LogisticRegression(sync="bsp").fit(Xi, yi)
    np.testing.assert_allclose(est.coef_, base.coef_, rtol=1e-5, atol=1e-7)
    assert est.n_features_in_ == 6
    if kind in ("pandas", "dask-frame", "parquet-columns", "xarray", "xarray-dask"):
        np.testing.assert_array_equal(est.feature_names_in_, names)
    else:
        assert not hasattr(est, "feature_names_in_")
    pred = est.predict(Xi)
    if kind in ("dask", "dask-frame", "parquet-columns", "xarray-dask"):
        assert isinstance(pred, da.Array)  # lazy
        assert isinstance(est.predict_proba(Xi), da.Array)
        pred = pred.compute()
    np.testing.assert_array_equal(pred, base.predict(X))


def test_dask_input_predicts_and_transforms_lazily(client):
    X, _ = make_blobs(6000, 4, centers=3, random_state=0)
    Xd = da.from_array(X, chunks=(1500, 4))
    km = KMeans(3, random_state=0).fit(Xd)
    assert isinstance(km.labels_, da.Array)
    t = km.transform(Xd)
    assert isinstance(t, da.Array) and t.shape == (6000, 3)
    np.testing.assert_array_equal(km.predict(Xd).compute(), km.predict(X))
    y = X @ np.arange(1.0, 5.0)
    r = Ridge(sync="bsp").fit(Xd, da.from_array(y, chunks=1500))
    p = r.predict(Xd)
    assert isinstance(p, da.Array)
    np.testing.assert_allclose(p.compute(), r.predict(X))


def test_feature_names_are_checked_at_predict(client, clf_data):
    X, y = clf_data
    names = [f"f{i}" for i in range(X.shape[1])]
    est = LogisticRegression(sync="bsp").fit(pd.DataFrame(X, columns=names), y)
    wrong = xr.DataArray(X, dims=("s", "f"), coords={"f": names[::-1]})
    with pytest.raises(ValueError, match="The feature names should match"):
        est.predict(wrong)
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        est.predict(X)
    with pytest.raises(ValueError, match="X has 3 features, but LogisticRegression is "
                                         "expecting 6 features as input"), \
            pytest.warns(UserWarning, match="X does not have valid feature names"):
        est.predict(da.from_array(X[:, :3]))


# -- validation before anything is submitted -----------------------------------------------

@pytest.mark.parametrize("est, message", [
    (LogisticRegression(C=-1), "The 'C' parameter of LogisticRegression must be a float in "
                               "the range (0.0, inf]. Got -1 instead."),
    (LogisticRegression(sync="fast"), "The 'sync' parameter of LogisticRegression must be a "
                                      "str among {...} or an instance of "
                                      "'daskabsp.Policy'. Got 'fast' instead."),
    (LinearSVC(loss="log"), "The 'loss' parameter of LinearSVC must be a str among "
                            "{...}. Got 'log' instead."),
    (LogisticRegression(solver="liblinear", l1_ratio=1.0),
     "The 'solver' parameter of LogisticRegression must be one of the solvers other than "
     "'liblinear' with an L1 penalty. Got 'liblinear' instead. 'liblinear' with an L1 "
     "penalty penalises the intercept by L1 too, which daskabsp's proximal steps do not; "
     "solver='saga' is the same model with the intercept unpenalised."),
    (Ridge(alpha=-0.5), "The 'alpha' parameter of Ridge must be a float in the range "
                        "[0.0, inf) or an array-like. Got -0.5 instead."),
    (KMeans(n_clusters=0), "The 'n_clusters' parameter of KMeans must be an int in the "
                           "range [1, inf). Got 0 instead."),
    (KMeans(sync="asp", quota=0.5), "The 'quota' parameter of KMeans must be None with "
                                    "sync='asp' (each of its updates replaces a partition's "
                                    "whole statistics; use more partitions for smaller "
                                    "updates). Got 0.5 instead."),
    (LogisticRegression(quota=1.5), "The 'quota' parameter of LogisticRegression must be "
                                    "an int in the range [1, inf), a float in the range "
                                    "(0.0, 1.0] or None. Got 1.5 instead."),
])
def test_invalid_parameters_fail_before_submitting(client, clf_data, est, message):
    X, y = clf_data
    Xd, yd = da.from_array(X, chunks=(1000, 6)), da.from_array(y, chunks=1000)
    before = _scheduler_keys(client)
    with pytest.raises(InvalidParameterError) as info:
        est.fit(Xd, yd)
    # scikit-learn lists a set's options in the set's (hash-seeded) order
    assert re.sub(r"\{[^}]*\}", "{...}", str(info.value)) == message
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert _scheduler_keys(client) <= before


def test_data_errors_fail_before_submitting(client, clf_data):
    X, y = clf_data
    before = _scheduler_keys(client)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        LogisticRegression().fit(np.where(X > 2, np.nan, X), y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        LogisticRegression().fit(X, y[:-1])
    with pytest.raises(ValueError, match="at least 2 classes"):
        LogisticRegression().fit(X, np.zeros(len(y)))
    with pytest.raises(ValueError, match="n_samples=5 should be >= n_clusters=8"):
        KMeans().fit(X[:5])
    assert _scheduler_keys(client) <= before
    with pytest.raises(NotFittedError):
        LinearSVC().predict(X)


def test_convergence_warning_and_history(client, clf_data):
    X, y = clf_data
    with pytest.warns(ConvergenceWarning, match="did not converge in 1 rounds"):
        est = LogisticRegression(max_iter=1).fit(X, y)
    assert est.n_iter_[0] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = LogisticRegression(n_partitions=2, sync=ABSP()).fit(X, y)
    h = est.history_
    assert dict(h.sizes) == {"round": est.n_iter_[0], "partition": 2,
                             "address": len(client.nthreads())}
    assert h.attrs["sync"] == "absp"
    assert {"rows", "harvested", "objective", "wall_time"} <= set(h.variables)


# -- tags, clone, composition ---------------------------------------------------------------

@pytest.mark.parametrize("sync, expected", [("bsp", False), ("absp", True), (BSP(), False),
                                            (ABSP(quorum=2), True)])
def test_non_deterministic_tag_follows_sync(sync, expected):
    for cls in (LogisticRegression, LinearSVC, Ridge, KMeans):
        tags = get_tags(cls(sync=sync))
        assert tags.non_deterministic is expected
        assert tags.input_tags.sparse


def test_clone_pipeline_and_grid_search(client, clf_data):
    X, y = clf_data
    est = LogisticRegression(C=0.5, sync=ABSP(quorum=2))
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    pipe = make_pipeline(StandardScaler(), LogisticRegression(sync="bsp")).fit(X, y)
    ref = make_pipeline(StandardScaler(), SkLogisticRegression()).fit(X, y)
    assert abs(pipe.score(X, y) - ref.score(X, y)) < 0.005
    search = GridSearchCV(LogisticRegression(), {"C": [0.01, 1.0], "sync": ["bsp", "absp"]},
                          cv=2, n_jobs=1)
    search.fit(X, y)
    assert len(search.cv_results_["params"]) == 4
    assert search.best_params_["sync"] in ("bsp", "absp")
    assert search.best_estimator_.history_.sizes["round"] >= 1


def test_ridge_and_svc_in_pipelines(client):
    X, y = make_regression(3000, 5, noise=1.0, random_state=0)
    pipe = make_pipeline(StandardScaler(), Ridge(alpha=0.1))
    assert pipe.fit(X, y).score(X, y) > 0.99
    Xc, yc = make_classification(3000, 5, random_state=0)
    assert make_pipeline(StandardScaler(), LinearSVC()).fit(Xc, yc).score(Xc, yc) > 0.8


# -- packaging ----------------------------------------------------------------------------

def _builds_offline() -> bool:
    """Whether this interpreter can build a wheel without fetching build requirements."""
    if importlib.util.find_spec("setuptools") is None:
        return False  # e.g. a fresh virtualenv that installed only the test extras
    if importlib.util.find_spec("wheel") is not None:
        return True
    import setuptools

    return tuple(int(p) for p in setuptools.__version__.split(".")[:2]) >= (70, 1)


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
        return True
    except OSError:
        return False


def _see_this_interpreters_packages(venv: Path) -> None:
    """Make the site-packages of the interpreter running the tests visible in ``venv``, after
    the venv's own.

    Not ``venv --system-site-packages``: run from inside a virtualenv, that exposes the base
    interpreter's packages, not the virtualenv's where the dependencies are installed.
    ``site.addsitedir`` also runs those directories' .pth files (editable installs).
    """
    dirs = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE
                                     else [])
    line = "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs
                                       if os.path.isdir(d))
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "_daskabsp_test_deps.pth").write_text(line + "\n")


def test_wheel_installs_daskabsp_estimators(tmp_path):
    """Build a wheel of the checkout and import daskabsp.estimators from a fresh venv.

    The venv sees this interpreter's site-packages for the dependencies (``--no-deps``), but
    daskabsp itself comes from the wheel. The build runs without network when this
    interpreter can build wheels; otherwise pip fetches the build requirements, and the test
    is skipped when PyPI cannot be reached. Works whether this interpreter is a base one or
    a virtualenv's.
    """
    wheels = tmp_path / "wheels"
    isolation = ["--no-build-isolation"] if _builds_offline() else []
    if not _builds_offline() and not _pypi_reachable():
        pytest.skip("cannot build a wheel offline here, and PyPI is unreachable")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation,
                    "-q", "-w", str(wheels), str(ROOT)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("daskabsp-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _see_this_interpreters_packages(venv)
    py = venv / "bin" / "python"
    # --ignore-installed: with the checkout also installed in the parent interpreter (as in
    # CI), pip would call the same version "already satisfied" and install nothing here.
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--ignore-installed", str(wheel)], check=True)
    code = ("import daskabsp, daskabsp.estimators as e; "
            "print(daskabsp.__file__); print(e.__file__); print(e.LogisticRegression())")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True,
                         cwd=tmp_path, env=env).stdout.splitlines()
    assert out[0].startswith(str(venv)) and out[1].startswith(str(venv)), out
    assert out[1].endswith(os.path.join("daskabsp", "estimators", "__init__.py"))
    assert out[2] == "LogisticRegression()"


def test_fits_without_a_client_use_the_embedded_cluster(tmp_path):
    """With no client in the process, the first fit starts the engine's embedded cluster; the
    estimators' own dask work (k-means||, dask-input checks) must run there too."""
    code = """
import numpy as np, dask.array as da
from sklearn.datasets import make_blobs
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression
X, y = make_blobs(3000, 4, centers=3, random_state=0)
km = KMeans(3, random_state=0).fit(X)
lr = LogisticRegression().fit(da.from_array(X, chunks=1000), da.from_array(y, chunks=1000))
# rows persisted on the embedded cluster: the classes are computed there, not by dask's
# default scheduler (which does not know its futures)
from daskabsp.cluster import get_client
c = get_client()
Xp, yp = c.persist([da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)])
sv = LinearSVC().fit(Xp, yp)
print(round(km.inertia_, 6) > 0, lr.score(X, y) > 0.9, sv.score(X, y) > 0.8)
"""
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True", "True"]
