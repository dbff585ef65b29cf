"""A worker killed with SIGKILL mid-round does not fail the fit."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from daskabsp import LogisticGD, fit

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
        before = set(client.scheduler_info()["workers"])
        res = fit(KillOnce(kill_file=str(kill_file)), X, y, sync="absp", max_iter=400,
                  tol=None, n_partitions=4, client=client)
        client.wait_for_workers(4)
        after = set(client.scheduler_info()["workers"])
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
