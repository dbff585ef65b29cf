"""Fits under schedules of faults at moments their own events choose (issue 33).

Each schedule (seeded, :func:`daskabsp.lab.faults.random_schedule`) kills, stops for a while or
slows one or two of four worker processes the moment a round (or an SSP/ASP clock) starts, a
copy is being made, a helper wave is queued or a partition task finishes, with one worker
emulated 3x slower throughout (so that copies and helper waves happen). After each fit:

* it returned (a hang is the worst failure a fit can have);
* it reached scikit-learn's optimum (1e-6 relative; k-means: the same fixed point);
* its history accounts every row exactly once per cycle (rounds) or every (partition,
  clock) exactly once (SSP, ASP) (:func:`daskabsp.lab.faults.accounting_errors`);
* none of its tasks is left on the cluster.

This is the short run for CI; ``benchmarks/soak_faults.py`` runs hundreds of schedules.
"""

from __future__ import annotations

import functools

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn import cluster as sk_cluster
from sklearn import linear_model as sk_linear
from sklearn import svm as sk_svm
from sklearn.datasets import make_blobs, make_classification, make_regression
from test_estimators import logistic_objective, ridge_objective, svc_objective

from daskabsp import ABSP, ASP, SSP, as_policy, slow_workers
from daskabsp.cluster import worker_addresses
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression, Ridge
from daskabsp.lab.faults import (
    KEEP_NANNIES,
    MOMENTS,
    random_schedule,
    run_with_faults,
    wait_for_workers,
)

POLICIES = {"bsp": "bsp", "absp": "absp", "published": ABSP.published(), "ssp3": SSP(3),
            "asp": ASP()}
#: Seconds a fit may take under faults before it counts as hung (a fit here takes 1-5 s,
#: plus the faults' stops, which BSP waits out).
BOUND = 120.0


@functools.cache
def case(name: str):
    """``(X, y, make_estimator(sync), objective(est), optimum)`` of a model on small data."""
    if name == "kmeans":
        X, member = make_blobs(60_000, 5, centers=4, cluster_std=1.0, random_state=0)
        init = X[[int(np.flatnonzero(member == k)[0]) for k in range(4)]]
        ref = sk_cluster.KMeans(4, init=init, n_init=1, tol=0, max_iter=1000).fit(X)
        return (X, None, lambda sync: KMeans(4, init=init, tol=0.0, sync=sync),
                lambda est: est.inertia_, ref.inertia_)
    if name == "ridge":
        X, y = make_regression(60_000, 10, noise=5.0, random_state=0)
        ref = sk_linear.Ridge(alpha=1.0).fit(X, y)
        return (X, y, lambda sync: Ridge(alpha=1.0, tol=1e-8, sync=sync),
                lambda est: ridge_objective(est, X, y), ridge_objective(ref, X, y))
    X, y = make_classification(60_000, 10, n_informative=6, random_state=0)
    if name == "svc":
        ref = sk_svm.LinearSVC(tol=1e-10, max_iter=100_000).fit(X, y)
        return (X, y, lambda sync: LinearSVC(tol=1e-7, sync=sync),
                lambda est: svc_objective(est, X, y), svc_objective(ref, X, y))
    ref = sk_linear.LogisticRegression(tol=1e-10, max_iter=1000).fit(X, y)
    return (X, y, lambda sync: LogisticRegression(tol=1e-8, sync=sync),
            lambda est: logistic_objective(est, X, y), logistic_objective(ref, X, y))


@pytest.fixture(scope="module")
def faulty():
    """Four worker processes of their own (killed workers are restarted by their nannies;
    the shared cluster is left alone; :data:`~daskabsp.lab.faults.KEEP_NANNIES` keeps a
    nanny whose worker is killed twice in a row)."""
    with dask.config.set(KEEP_NANNIES), LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True,
            dashboard_address=":0") as cluster, Client(cluster) as client:
        yield client


def run_case(client, model: str, policy: str, seed: int, bound: float = BOUND):
    """One fit of ``model`` under ``policy`` and the seeded random schedule, with one worker
    3x slower. Returns the run, its schedule and its gap to the optimum (None if it did not
    return)."""
    X, y, make, objective, best = case(model)
    sync = POLICIES[policy]
    # the moments the policy has: without helpers (BSP, A-BSP as published, SSP, ASP) no
    # copy is made and no helper wave queued
    faults = random_schedule(np.random.default_rng(seed),
                             rounds=sync in ("bsp", "absp") or isinstance(sync, ABSP),
                             moments=MOMENTS if as_policy(sync).helped else ("round", "finish"))
    wait_for_workers(client, 4)
    slow = worker_addresses(client)[0]

    run = run_with_faults(client, lambda: make(sync).fit(X, y), faults, seed=seed,
                          bound=bound, around=slow_workers(client, {slow: 3.0}))
    gap = None if run.estimator is None else (objective(run.estimator) - best) / abs(best)
    return run, faults, gap


def check_run(client, model: str, policy: str, seed: int):
    """:func:`run_case` and the checks of the module docstring."""
    run, faults, gap = run_case(client, model, policy, seed)
    what = f"{model} under {policy}, faults {faults}, fired {run.fired}"
    assert run.seconds is not None, f"hung: {what}"
    assert run.error is None, f"{run.error!r}: {what}"
    assert gap <= 1e-6, f"{gap:.2e} above the optimum: {what}"
    assert not run.accounting, f"{run.accounting}: {what}"
    assert not run.left, f"tasks left: {run.left[:5]}: {what}"
    return run


RUNS = [("logistic", "absp", 1), ("logistic", "published", 2), ("logistic", "bsp", 3),
        ("svc", "absp", 4), ("ridge", "ssp3", 5), ("kmeans", "absp", 6),
        ("logistic", "asp", 7), ("svc", "ssp3", 8), ("kmeans", "asp", 9),
        ("ridge", "absp", 10)]


@pytest.mark.slow
@pytest.mark.parametrize("model,policy,seed", RUNS)
def test_a_fit_under_a_random_fault_schedule(faulty, model, policy, seed):
    check_run(faulty, model, policy, seed)
