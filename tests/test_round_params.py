"""Round parameters larger than ``daskabsp.inline-params`` travel once per round, not per task."""

from __future__ import annotations

import time
from collections import Counter

import dask
import numpy as np
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin
from sklearn.datasets import make_blobs, make_classification

from daskabsp import fit
from daskabsp.estimators import KMeans
from daskabsp.programs import MultinomialNewton
from daskabsp.programs.kmeans import squared_distances


class _Recorder(SchedulerPlugin):
    """Logs, in the scheduler's order, the tasks submitted with their dependencies, and the
    keys of round parameters that are forgotten."""

    name = "test-daskabsp-round-params"

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def update_graph(self, scheduler, *, keys=(), **kwargs) -> None:
        for key in keys:
            deps = sorted(str(d.key) for d in scheduler.tasks[key].dependencies)
            self.log.append(("task", key, deps))

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if finish == "forgotten" and "-params-" in str(key):
            self.log.append(("forgotten", key))


def _log(dask_scheduler=None) -> list[tuple]:
    return list(dask_scheduler.plugins[_Recorder.name].log)


@pytest.fixture
def recorder(client):
    client.register_plugin(_Recorder())
    try:
        yield lambda: client.run_on_scheduler(_log)
    finally:
        client.unregister_scheduler_plugin(_Recorder.name)


def _poll(condition, what: str, timeout: float = 30.0) -> None:
    """Wait until ``condition()`` holds (state on the scheduler that no event announces)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _params_deps(log, fit_id: str) -> dict[str, list[str]]:
    """Round key prefix -> the parameter keys each of its tasks (the partitions' own and
    their helpers') depends on."""
    out: dict[str, list[str]] = {}
    for kind, key, *deps in log:
        if kind == "task" and isinstance(key, tuple) and fit_id in key[0]:
            out.setdefault(key[0].split("-help")[0], []).append(
                [d for d in deps[0] if "-params-" in d])
    return out


def test_tuple_params_over_the_inline_size_are_scattered_once_per_round(client, recorder):
    """MultinomialNewton's parameters are a tuple ``(theta, width)``: the size of the array
    inside counts. Each round's tasks share one scattered key, released after the round."""
    X, y = make_classification(4000, 20, n_informative=10, n_classes=5, random_state=0)
    prog = MultinomialNewton(n_classes=5)
    theta_bytes = prog.params(prog.init(X.shape[1], len(y)))[0].nbytes
    with dask.config.set({"daskabsp.inline-params": theta_bytes // 2}):
        res = fit(prog, X, y, sync="bsp", max_iter=3, tol=None, n_partitions=4)
    fit_id = res.history.attrs["fit_id"]
    rounds = _params_deps(recorder(), fit_id)
    assert len(rounds) == res.n_iter == 3
    keys = []
    for deps in rounds.values():
        assert len(deps) == 4 and all(len(d) == 1 for d in deps)  # one key per task ...
        assert len({d[0] for d in deps}) == 1  # ... the same for the whole round
        keys.append(deps[0][0])
    assert len(set(keys)) == 3

    # Released after its round: under BSP, before the next round's graph arrives.
    _poll(lambda: {e[1] for e in recorder() if e[0] == "forgotten"} >= set(keys),
          "the last round's parameters were not released")
    log = recorder()
    for k, nxt in zip(keys, list(rounds)[1:], strict=False):
        forgotten = log.index(next(e for e in log if e[:2] == ("forgotten", k)))
        first_task = next(i for i, e in enumerate(log) if e[0] == "task" and e[1][0] == nxt)
        assert forgotten < first_task

    # The same fit under the default threshold sends these small parameters inline.
    res = fit(prog, X, y, sync="bsp", max_iter=2, tol=None, n_partitions=4)
    rounds = _params_deps(recorder(), res.history.attrs["fit_id"])
    assert len(rounds) == 2
    assert all(d == [] for deps in rounds.values() for d in deps)


def test_kmeans_with_centers_over_the_inline_size_fits_and_predicts(client, recorder):
    k, d = 400, 320  # the centers take 400 * 320 * 8 bytes = 1.02 MB: over the default 1 MB
    X, _ = make_blobs(2000, d, centers=k, random_state=0)
    km = KMeans(n_clusters=k, init="random", random_state=0).fit(X)  # k-means|| takes 10 s
    assert km.cluster_centers_.nbytes > dask.utils.parse_bytes(
        dask.config.get("daskabsp.inline-params"))
    labels = km.predict(X)
    np.testing.assert_array_equal(labels, km.labels_)
    np.testing.assert_array_equal(labels, squared_distances(X, km.cluster_centers_).argmin(1))
    # the rounds took the centers as one scattered key
    rounds = _params_deps(recorder(), km.history_.attrs["fit_id"])
    assert len(rounds) == km.n_iter_
    assert all(len(d) == 1 for deps in rounds.values() for d in deps)


def test_kmeans_parallel_sends_the_candidates_once_per_pass(client, recorder):
    """k-means|| passes the candidate centers (megabytes for hundreds of clusters) to every
    block: one scattered key per pass, not a copy in each task."""
    X, _ = make_blobs(4000, 5, centers=3, random_state=0)
    KMeans(3, n_partitions=4, random_state=0).fit(X)
    tasks = [(key, deps) for kind, key, *deps in recorder() if kind == "task"
             and str(key).startswith(("_top_rows-", "_nearest_weights-"))]
    candidates: Counter[str] = Counter()
    for _key, (deps,) in tasks:
        (c,) = [d for d in deps if d.startswith("Candidates-")]
        candidates[c] += 1
    assert len(candidates) >= 3  # the first center, a sampling pass, the weighing pass
    assert set(candidates.values()) == {4}  # each shared by the 4 blocks of its pass
