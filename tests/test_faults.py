"""A worker killed with SIGKILL mid-round, or the moment work is bound to it, does not fail
or hang the fit."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from daskabsp import ABSP, LogisticGD, fit, slow_workers
from daskabsp.cluster import worker_addresses
from daskabsp.engine import placement
from daskabsp.estimators import LogisticRegression as AbspLogistic
from daskabsp.lab.faults import KEEP_NANNIES, wait_for_workers

_chunks_seen = [0]


@dataclass
class KillOnce(LogisticGD):
    """LogisticGD whose scan kills its own worker process once, after some chunks.

    The first worker to see ``kill_file`` (after ``after_chunks`` chunks in its process) removes
    it and SIGKILLs itself, so exactly one worker dies, in the middle of a round.
    """

    kill_file: str = ""
    after_chunks: int = 50

    def accumulate(self, acc, params, X, y, sample_weight):
        _chunks_seen[0] += 1
        if _chunks_seen[0] >= self.after_chunks and os.path.exists(self.kill_file):
            try:
                os.remove(self.kill_file)
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        super().accumulate(acc, params, X, y, sample_weight)


@pytest.mark.slow
def test_worker_killed_mid_round(tmp_path):
    X, y = make_classification(n_samples=40_000, n_features=10, n_informative=6,
                               random_state=0)
    sk = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(X, y)
    f_opt = LogisticGD().full_objective(np.r_[sk.coef_.ravel(), sk.intercept_], X, y)
    kill_file = tmp_path / "kill"
    kill_file.touch()
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        before = set(worker_addresses(client))
        res = fit(KillOnce(kill_file=str(kill_file)), X, y, sync="absp", max_iter=400,
                  tol=None, n_partitions=4, client=client)
        wait_for_workers(client, 4)
        after = set(worker_addresses(client))
    assert not kill_file.exists(), "no worker was killed"
    assert len(before - after) == 1  # one worker died and its nanny started a new one
    h = res.history
    ran = {w for w in np.unique(h.worker.values) if w}
    assert ran - before, "the restarted worker never received a partition"
    # after the re-balance every live worker holds exactly one partition again
    last = h.worker.isel(round=-1).values
    assert len(set(last)) == 4
    f = LogisticGD().full_objective(res.coef, X, y)
    assert f <= f_opt * (1 + 1e-3)


# -- a worker killed at the moment a round's work is bound to it (issue 33) ----------------------


class KillAt(SchedulerPlugin):
    """SIGKILLs a worker the moment the scheduler moves a task of a chosen kind
    (``moment``): the worker a queued helper task reads a copy from, or the worker a copy is
    being made on. Runs inside the scheduler's transitions (the test's LocalCluster has its
    scheduler in this process), so the kill lands exactly then."""

    def __init__(self, name: str, moment: str, lazy: bool) -> None:
        self.name, self.moment, self.lazy = name, moment, lazy
        self.killed: tuple | None = None
        self.scheduler = None

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if self.killed is not None or self.scheduler is None:
            return
        ts = self.scheduler.tasks.get(key)
        if ts is None:
            return
        target = None
        if self.moment == "helper queued" and "-help1" in str(key) and finish in (
                "waiting", "processing", "no-worker"):
            # the worker holding the copy it is to read (a dask array's: a copy task's
            # result; in-memory input's: scattered rows)
            deps = [d for d in ts.dependencies if d.who_has and (
                str(d.key).startswith("daskabsp-copy") or not self.lazy)]
            holders = sorted(ws.address for d in deps for ws in d.who_has)
            restricted = ts.worker_restrictions or set()
            target = next((h for h in holders if h in restricted), None)
        elif self.moment == "copy started" and str(key).startswith("daskabsp-copy") and \
                finish == "processing" and ts.processing_on is not None:
            target = ts.processing_on.address
        ws = self.scheduler.workers.get(target) if target else None
        if ws is not None:
            self.killed = (str(key), target)
            os.kill(ws.pid, signal.SIGKILL)


def _killed(name, dask_scheduler=None):
    return dask_scheduler.plugins[name].killed


def _keys_of_fit(fit_id, dask_scheduler=None):
    """The fit's tasks left on the scheduler, with what holds each there."""
    return sorted((str(k), ts.state, sorted(str(c.client_key) for c in ts.who_wants or ()),
                   sorted(str(d.key) for d in ts.dependents))
                  for k, ts in dask_scheduler.tasks.items() if fit_id in str(k))



@pytest.fixture(scope="module")
def killing_cluster():
    """Four worker processes of their own (their nannies restart the killed ones, and stay:
    :data:`~daskabsp.lab.faults.KEEP_NANNIES`)."""
    with dask.config.set(KEEP_NANNIES), LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True,
            dashboard_address=":0") as cluster, Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def wide_data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((800_000, 20))
    y = (X @ rng.standard_normal(20) + rng.standard_normal(len(X)) > 0).astype(int)
    ref = LogisticRegression(C=1.0, tol=1e-10, max_iter=1000).fit(X, y)
    return X, y, _logistic_objective(np.r_[ref.coef_.ravel(), ref.intercept_], X, y)


def _logistic_objective(w, X, y) -> float:
    z = X @ w[:-1] + w[-1]
    return float((np.logaddexp(0.0, z) - y * z).sum() + 0.5 * w[:-1] @ w[:-1])


@pytest.mark.slow
@pytest.mark.parametrize("moment,lazy", [("helper queued", True), ("helper queued", False),
                                         ("copy started", True)])
def test_a_worker_killed_when_helpers_or_copies_are_bound_to_it(killing_cluster, wide_data,
                                                                moment, lazy):
    """The hang of issue 33: a worker SIGKILLed the moment a queued helper task is bound to
    it (it holds the copy the task reads), or the moment a copy is being made on it. On
    1bd534e the copies' re-runs stayed strictly bound to the dead worker (``no-worker``) and
    the helper task waited for them forever (3 of 3 such fits hung). The fit must return at
    scikit-learn's optimum and leave none of its tasks on the cluster."""
    client = killing_cluster
    wait_for_workers(client, 4)
    X, y, best = wide_data
    if lazy:
        X, y = da.from_array(X, chunks=(200_000, 20)), da.from_array(y, chunks=200_000)
    name = f"kill-{moment.replace(' ', '-')}-{lazy}"
    client.register_plugin(KillAt(name, moment, lazy), name=name)
    # Helpers (and so the moment) need a copy before the fit's last rounds. Copies are priced
    # at the rate the last copy on this scheduler reached, and the previous test's copy may
    # have crossed while its worker was being killed: forget it.
    placement._LINK_RATES.clear()
    workers = sorted(client.sync(client.scheduler.identity)["workers"])
    done: dict = {}

    def fit_it():
        # without patience every round is stopped at its quorum, so the straggler's rent
        # pays for a copy early and helpers are queued (with the default's patience a 3x
        # worker's rounds may finish unhelped: the moment once never came)
        with slow_workers(client, {workers[0]: 3.0}):
            done["est"] = AbspLogistic(tol=1e-9, sync=ABSP(patience=0.0)).fit(X, y)

    thread = threading.Thread(target=fit_it, daemon=True)
    try:
        thread.start()
        thread.join(timeout=150)
        assert not thread.is_alive(), "the fit hung after the worker was killed"
        assert client.run_on_scheduler(_killed, name) is not None, f"no {moment} moment came"
    finally:
        client.unregister_scheduler_plugin(name)
    est = done["est"]
    w = np.r_[est.coef_.ravel(), est.intercept_]
    Xn, yn = (np.asarray(a) for a in wide_data[:2])
    assert (_logistic_objective(w, Xn, yn) - best) / best <= 1e-6
    fit_id = est.history_.attrs["fit_id"]
    deadline = time.monotonic() + 30
    while client.run_on_scheduler(_keys_of_fit, fit_id) and time.monotonic() < deadline:
        pass  # releases reach the scheduler on the client's batched stream
    assert client.run_on_scheduler(_keys_of_fit, fit_id) == []


class _StopAtRealign(SchedulerPlugin):
    """Sends ``sig`` to the worker realigning a fit's first scattered rows, the moment the
    task starts there (the rows as received live only on that worker)."""

    name = "stop-at-realign"

    def __init__(self, sig: int) -> None:
        self.sig, self.hit = sig, None

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if self.hit is not None or finish != "processing" or \
                not str(key).startswith("daskabsp-0-"):
            return
        ws = self.scheduler.tasks[key].processing_on
        if ws is not None:
            self.hit = ws.address
            os.kill(ws.pid, self.sig)


def _hit(dask_scheduler=None):
    return dask_scheduler.plugins[_StopAtRealign.name].hit


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_worker_lost_while_placed_rows_are_realigned(sig):
    """Killed or frozen between receiving a partition's rows and realigning them: the rows
    are placed on another worker and the fit completes."""
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        client.register_plugin(_StopAtRealign(sig))
        X, y = make_classification(60_000, 10, random_state=0)
        try:
            res = fit(LogisticGD(), X, y, sync="absp", max_iter=4, tol=None, client=client)
            assert client.run_on_scheduler(_hit) is not None
            assert res.n_iter == 4 and int(res.history.rows.sum()) > 0
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
