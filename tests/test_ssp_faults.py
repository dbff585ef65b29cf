"""SSP with a worker frozen or killed mid-fit: its partitions move, no update is lost or
applied twice, and a late result of a task given up on is never applied."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster, get_worker
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from test_ssp import check_history

from daskabsp import SSP, LogisticGD, RoundCallback, fit
from daskabsp.programs import LinearNewton

_chunks_seen = [0]


@dataclass
class KillOnce(LinearNewton):
    """Logistic Newton whose scan SIGKILLs its own worker once, after some chunks (the
    first worker to see ``kill_file`` removes it and dies)."""

    kill_file: str = ""
    after_chunks: int = 30

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


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=200_000, n_features=10, n_informative=6,
                               random_state=0)
    return X, y.astype(float)


@pytest.mark.slow
def test_worker_killed_under_ssp(tmp_path, data):
    X, y = data
    sk = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(X, y)
    program = KillOnce(loss="logistic", l2=1.0 / len(y), kill_file=str(tmp_path / "kill"))
    f_opt = program.full_objective(np.r_[sk.coef_.ravel(), sk.intercept_][None], X, y)
    (tmp_path / "kill").touch()
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        res = fit(program, X, y, sync=SSP(1), n_partitions=4, client=client)
    assert not (tmp_path / "kill").exists(), "no worker was killed"
    assert res.converged
    h = res.history
    check_history(h)  # every (partition, clock) applied once: none lost, none twice
    assert program.full_objective(res.coef, X, y) <= f_opt * (1 + 1e-3)


@dataclass
class FreezeOnce(LogisticGD):
    """Gradient descent whose scan freezes (SIGSTOP) its own worker once, in the middle of
    a task, after some chunks, for ``seconds`` (the first worker to see ``freeze_file``
    removes it, writes its address to ``freeze_file + ".who"``; a shell it starts sends the
    SIGCONT)."""

    freeze_file: str = ""
    after_chunks: int = 20
    seconds: float = 5.0

    def accumulate(self, acc, params, X, y, sample_weight):
        _chunks_seen[0] += 1
        if _chunks_seen[0] >= self.after_chunks and os.path.exists(self.freeze_file):
            try:
                os.remove(self.freeze_file)
            except FileNotFoundError:
                pass
            else:
                pid = os.getpid()
                with open(self.freeze_file + ".who", "w") as f:
                    f.write(get_worker().address)
                subprocess.Popen(["sh", "-c", f"sleep {self.seconds}; kill -CONT {pid}"],
                                 start_new_session=True)
                os.kill(pid, signal.SIGSTOP)
        super().accumulate(acc, params, X, y, sample_weight)


class StopWhenLate(RoundCallback):
    """Stops the fit once the late result of the task given up on has been seen, or after
    ``seconds`` (on a loaded machine the resumed worker's answer can be lost with its
    connection; the fit must not then run its whole budget)."""

    def __init__(self, late: threading.Event, seconds: float = 60.0) -> None:
        self.late = late
        self.deadline = time.monotonic() + seconds

    def on_round_end(self, info) -> bool:
        return self.late.is_set() or time.monotonic() > self.deadline


class _Seen(logging.Handler):
    """Sets ``late`` when the loop says it dropped a late result."""

    def __init__(self, late: threading.Event) -> None:
        super().__init__(logging.INFO)
        self.late = late

    def emit(self, record: logging.LogRecord) -> None:
        if "came back late" in record.getMessage():
            self.late.set()


@pytest.mark.slow
def test_worker_frozen_under_ssp(tmp_path, data):
    """A worker frozen longer than daskabsp.unresponsive-after: its task is given up on,
    its partition moves and is resubmitted (attempt 1), the fit goes on, and the frozen
    task's result, which comes back once the worker resumes, is not applied.

    The workers import this module before the fit: with a core kept busy, three workers
    importing it at once (in their event loops, as they unpickle the first tasks) were
    silent for over 2 s, and their tasks were rightly given up on too, which leaves nothing
    to tell the frozen worker's give-up from theirs."""
    X, y = data
    late = threading.Event()
    handler = _Seen(late)
    log = logging.getLogger("daskabsp.engine.clock_loop")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    with dask.config.set({"daskabsp.unresponsive-after": "2s"}), \
            LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                         dashboard_address=":0") as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        client.run(importlib.import_module, __name__)
        (tmp_path / "freeze").touch()
        try:
            res = fit(FreezeOnce(freeze_file=str(tmp_path / "freeze")), X, y, sync=SSP(2),
                      max_iter=2000, tol=None, n_partitions=3, client=client,
                      callback=StopWhenLate(late))
        finally:
            for pid in pids.values():  # if anything went wrong before the shell resumed it
                os.kill(pid, signal.SIGCONT)
            log.removeHandler(handler)
            log.setLevel(level)
    h = res.history
    check_history(h)  # every (partition, clock) applied once: none lost, none twice
    # When the frozen task's result comes back (usual) it is dropped, never applied: the
    # history above holds every (partition, clock) once. It may also never come back (its
    # worker's connection closed while it was stopped): then there is nothing to drop.
    assert not (tmp_path / "freeze").exists(), "no worker was frozen"
    frozen = (tmp_path / "freeze.who").read_text()
    again = h.attempt.values > 0
    assert again.any(), "no task was given up on"
    given_up = np.unique(h.partition.values[again])
    first_again = {p: np.flatnonzero(again & (h.partition.values == p))[0] for p in given_up}
    assert all(h.worker.values[i] != frozen for i in first_again.values()), \
        "a given-up partition was resubmitted to its frozen worker"
