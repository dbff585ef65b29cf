"""Ctrl-C during a fit: the fit stops quietly and leaves no task running on the cluster."""

from __future__ import annotations

import gc
import signal
import threading
import time

import pytest
from distributed.diagnostics.plugin import SchedulerPlugin
from sklearn.datasets import make_classification

from daskabsp import LogisticGD, fit, slow_workers

NOISE = ("never retrieved", "AllExit", "Exception in callback", "destroyed but it is pending")


class _CtrlCOnFirstResult(SchedulerPlugin):
    """Sends SIGINT to the main thread when the first partition task of a round finishes.

    The test cluster's scheduler runs in the test process, so this is a Ctrl-C that arrives
    while the driver waits for the round's other tasks.
    """

    name = "test-daskabsp-ctrl-c"

    def __init__(self) -> None:
        self.sent = False

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if self.sent or (start, finish) != ("processing", "memory"):
            return
        ts = self.scheduler.tasks.get(key)
        if ts is not None and "daskabsp" in (ts.annotations or {}):
            self.sent = True
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def _executing(dask_worker=None) -> int:
    return len(dask_worker.state.executing)


def _poll(condition, what: str, timeout: float = 30.0) -> None:
    """Wait until ``condition()`` holds (state on the cluster that no event announces)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _round_futures(client) -> list:
    return [k for k in list(client.futures)
            if isinstance(k, tuple) and str(k[0]).startswith("daskabsp-logreg-")]


def test_ctrl_c_stops_the_fit_quietly_and_leaves_no_task_running(client, workers, caplog,
                                                                  capfd):
    X, y = make_classification(n_samples=40_000, n_features=10, random_state=0)
    client.register_plugin(_CtrlCOnFirstResult())
    try:
        # One worker 1000x slower: its partition (a few ms of work) would take minutes, and
        # the BSP round waits for it when the first result interrupts the fit.
        with slow_workers(client, {workers[0]: 1000.0}):
            with pytest.raises(KeyboardInterrupt):
                fit(LogisticGD(), X, y, sync="bsp", max_iter=5, tol=None, n_partitions=4)
            # The straggler's task returns at its next chunk, not at the end of its quota.
            _poll(lambda: not any(client.run(_executing).values()),
                  "a task of the interrupted round is still running", timeout=20)
    finally:
        client.unregister_scheduler_plugin(_CtrlCOnFirstResult.name)

    # Nothing said about the fit's waiters, which end when its futures are released.
    _poll(lambda: not _round_futures(client), "the round's futures were not released")
    client.run_on_scheduler(gc.collect)  # a round trip through the client's event loop
    gc.collect()
    noise = caplog.text + capfd.readouterr().err
    assert not [n for n in NOISE if n in noise], noise
