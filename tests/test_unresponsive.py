"""A worker frozen mid-fit (SIGSTOP: a VM pause, a swap storm or a stuck read look the same to
Dask) does not hold up an A-BSP fit: its tasks are given up once it has been silent for
``daskabsp.unresponsive-after``, its partitions move to the other workers, and the fit ends
while it is still stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn import linear_model as sk_linear
from sklearn.datasets import make_classification

import daskabsp
from daskabsp.programs import LinearNewton


@contextlib.contextmanager
def _cluster(n_workers: int, unresponsive_after: str) -> Iterator[Client]:
    """A client on ``n_workers`` single-threaded worker processes, with a worker given up
    on after ``unresponsive_after`` of silence."""
    with dask.config.set({"daskabsp.unresponsive-after": unresponsive_after}), \
            LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                         dashboard_address=":0") as cluster, Client(cluster) as client:
        yield client


def _problem(n_samples: int, n_features: int, n_informative: int):
    """Binary classification rows, and the Newton program fitting scikit-learn's objective."""
    X, y = make_classification(n_samples, n_features, n_informative=n_informative,
                               random_state=0)
    y = y.astype(float)
    return X, y, LinearNewton(l2=1.0 / len(y), tol=1e-6)


def _processing(dask_scheduler=None) -> list:
    return [str(k) for k, ts in dask_scheduler.tasks.items() if ts.state == "processing"]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_frozen_worker_does_not_hold_up_the_fit():
    X, y, program = _problem(60_000, 20, 10)
    ref = sk_linear.LogisticRegression(tol=1e-10, max_iter=1000).fit(X, y)
    with _cluster(3, "2s") as client:
        pids = client.run(os.getpid)
        frozen = sorted(pids)[0]
        stopped_at: list[float] = []

        def freeze(r, coef, obj):
            if r == 1:
                os.kill(pids[frozen], signal.SIGSTOP)
                stopped_at.append(time.monotonic())
            return False

        try:
            res = daskabsp.fit(program, X, y, sync="absp", max_iter=200, tol=None,
                               n_partitions=3, callback=freeze)
            returned = time.monotonic()
        finally:
            os.kill(pids[frozen], signal.SIGCONT)
        h = res.history
        assert stopped_at and res.converged
        # the fit went on without the frozen worker...
        on_frozen = h.worker.values == frozen
        assert on_frozen[:2].any() and not on_frozen[-1].any()
        given_up = on_frozen & np.isnan(h.task_start.values)
        assert given_up[2:].any()  # ...after giving up at least one of its tasks...
        # ...and saw every row at the end (the frozen worker's partitions moved, and helpers
        # scan their rows from copies), the frozen worker scanning none after the freeze
        assert h.rows_total.values[-1] == len(y)
        assert (h.worker_rows.sel(address=frozen).values[2:] == 0).all()
        # the history says where its rows went and why (issue 32: every row move is told)
        events = " ".join(str(e) for e in h.events.values)
        assert "scattered again" in events or "read from its copy" in events, events
        assert returned - stopped_at[0] < 60
        # the result is scikit-learn's: nothing was counted twice or lost
        W = res.coef[0]
        z = X @ W[:-1] + W[-1]
        ours = (np.logaddexp(0, z) - y * z).sum() + 0.5 * W[:-1] @ W[:-1]
        zr = X @ ref.coef_[0] + ref.intercept_[0]
        theirs = (np.logaddexp(0, zr) - y * zr).sum() + 0.5 * ref.coef_[0] @ ref.coef_[0]
        assert (ours - theirs) / theirs <= 1e-6
        # once resumed, the frozen worker's stale task ends: nothing is left running
        deadline = time.monotonic() + 30
        while client.run_on_scheduler(_processing) and time.monotonic() < deadline:
            client.run_on_scheduler(_processing)  # poll the scheduler, no sleep
        assert client.run_on_scheduler(_processing) == []
        # and it rejoins: a new fit runs tasks on it again
        again = daskabsp.fit(program, X, y, sync="bsp", max_iter=2, tol=None, n_partitions=3)
        assert frozen in set(again.history.worker.values.ravel())


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_placement_goes_around_a_frozen_worker():
    """A worker frozen before the cluster's first fit: the plugins are installed around it
    (the worker plugin reaches it when it resumes), the rows scattered to it go to another
    worker once it has been silent for ``unresponsive-after``, and the fit ends with it still
    stopped, having given it no rows to scan."""
    X, y, program = _problem(30_000, 10, 5)
    with _cluster(3, "1s") as client:
        pids = client.run(os.getpid)
        frozen = sorted(pids)[0]
        os.kill(pids[frozen], signal.SIGSTOP)
        try:
            # (the fit returns before the SIGCONT below, or never)
            res = daskabsp.fit(program, X, y, sync="absp", max_iter=50, tol=None,
                               n_partitions=3)
        finally:
            os.kill(pids[frozen], signal.SIGCONT)
        ref = daskabsp.fit(program, X, y, sync="bsp", max_iter=50, tol=None, n_partitions=3)
        assert res.converged
        h = res.history
        assert not (h.worker.values[1:] == frozen).any()
        assert (h.worker_rows.sel(address=frozen).values == 0).all()
        np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-4, atol=1e-6)
        # once resumed, nothing of the fit is left running
        deadline = time.monotonic() + 30
        while client.run_on_scheduler(_processing) and time.monotonic() < deadline:
            pass
        assert client.run_on_scheduler(_processing) == []


def _silent_for(address: str, dask_scheduler=None) -> float:
    return time.time() - dask_scheduler.workers[address].last_seen


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_rows_placed_on_a_worker_silent_before_the_fit_are_placed_again():
    """Rows placed with :func:`daskabsp.place`, then their worker freezes before the fit
    starts: the fit finds it silent, places its partition again from the rows it was given
    (a task elsewhere would wait to fetch them for as long as the freeze lasts) and ends
    while the worker is still stopped."""
    X, y, program = _problem(30_000, 10, 5)
    with _cluster(3, "1s") as client:
        placed = daskabsp.place(X, y, n_partitions=3)
        pids = client.run(os.getpid)
        frozen = sorted(pids)[0]
        assert client.has_what()[frozen]  # (3 partitions dealt over 3 workers)
        resumed: list[bool] = []

        def resume():
            resumed.append(True)
            os.kill(pids[frozen], signal.SIGCONT)

        os.kill(pids[frozen], signal.SIGSTOP)
        safety = threading.Timer(120, resume)  # a fit that waits for the worker ends then
        safety.start()
        try:
            while client.run_on_scheduler(_silent_for, frozen) < 1.5:
                pass  # until the scheduler has not heard from it for unresponsive-after
            res = daskabsp.fit(program, placed, sync="absp", max_iter=50, tol=None)
            still_stopped = not resumed
        finally:
            safety.cancel()
            if not resumed:
                resume()
        assert still_stopped
        assert (res.history.worker_rows.sel(address=frozen).values == 0).all()
        ref = daskabsp.fit(program, X, y, sync="bsp", max_iter=50, tol=None, n_partitions=3)
        np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_a_cluster_held_up_as_a_whole_is_waited_for():
    """Every worker silent at once (as when all of them import the modules of a fit's first
    tasks, on a loaded machine): no task is given up, since no worker would be left to take
    its rows, and the fit goes on where it was once they answer."""
    X, y, program = _problem(20_000, 10, 5)
    with _cluster(2, "0.5s") as client:
        pids = sorted(client.run(os.getpid).values())
        resume = threading.Timer(2.5, lambda: [os.kill(p, signal.SIGCONT) for p in pids])

        def hold_all(r, coef, obj):
            if r == 1:  # the next round's tasks go to workers that all stay silent 2.5 s
                for p in pids:
                    os.kill(p, signal.SIGSTOP)
                resume.start()
            return False

        try:
            res = daskabsp.fit(program, X, y, sync="absp", max_iter=4, tol=None,
                               n_partitions=2, callback=hold_all)
        finally:
            resume.cancel()
            for p in pids:
                os.kill(p, signal.SIGCONT)
        h = res.history
        assert res.n_iter == 4
        assert np.isfinite(h.task_start.values).all()  # every task ran: none given up
        assert (h.worker.values == h.worker.values[0]).all()  # no partition moved
