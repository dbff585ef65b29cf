"""scikit-learn's own tests with daskabsp's estimators swapped in (issue 41): a stable subset
of ``benchmarks/sklearn_suite.py``'s run, through its plugin, in a pytest subprocess.

Each test below passes with scikit-learn's class and must pass with daskabsp's, and must have
constructed daskabsp's class (a test that passes without it proves nothing). The full run,
with its table per estimator, is ``python benchmarks/sklearn_suite.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

#: node id (relative to scikit-learn's package) -> the daskabsp class it must construct
SUBSET = {
    "linear_model/tests/test_logistic.py::test_predict_2_classes[csr_matrix]":
        "LogisticRegression",
    "linear_model/tests/test_logistic.py::test_elastic_net_l1_l2_equivalence[42-l1-1-1]":
        "LogisticRegression",
    "linear_model/tests/test_logistic.py::test_warm_start[42-True-True-lbfgs]":
        "LogisticRegression",
    "linear_model/tests/test_ridge.py::test_ridge_regression_sample_weights"
    "[long-42-1.0-csr_matrix-True-sag]": "Ridge",
    "linear_model/tests/test_ridge.py::test_ridge_regression_unpenalized"
    "[long-42-False-cholesky]": "Ridge",
    "linear_model/tests/test_base.py::test_linear_regression": "LinearRegression",
    "linear_model/tests/test_coordinate_descent.py::test_enet_positive_constraint":
        "ElasticNet",
    "linear_model/_glm/tests/test_glm.py::test_normal_ridge_comparison[None-True-10-100]":
        "Ridge",
    "svm/tests/test_svm.py::test_linearsvc_verbose": "LinearSVC",
    "cluster/tests/test_k_means.py::test_kmeans_elkan_iter_attribute": "KMeans",
    "decomposition/tests/test_pca.py::test_pca[3-full]": "PCA",
    "decomposition/tests/test_pca.py::test_pca_score[covariance_eigh]": "PCA",
}


@pytest.mark.slow
def test_sklearn_tests_pass_with_daskabsp_classes_swapped_in(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import sklearn_suite
    finally:
        sys.path.remove(str(BENCHMARKS))
    paths = [str(sklearn_suite.SKLEARN / nodeid) for nodeid in SUBSET]
    results = sklearn_suite.run_pytest("swapped", paths, tmp_path / "swapped.json",
                                       timeout=60, quiet=True)
    results.pop("__seconds__")
    assert set(results) == set(SUBSET)
    for nodeid, name in SUBSET.items():
        r = results[nodeid]
        assert r["outcome"] == "passed", (nodeid, r.get("cause"))
        assert name in r["constructed"], (nodeid, r["constructed"])
