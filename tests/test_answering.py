"""Plain Dask passes (an estimator's initialisation, the engine's placement) do not wait for a
frozen worker: what waits on it is given up, the rest is computed, and a KMeans fit returns
while the worker is still stopped."""

from __future__ import annotations

import os
import signal
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_blobs

from daskabsp.answering import answering_workers, compute_answering, stuck_keys
from daskabsp.cluster import worker_addresses
from daskabsp.estimators import KMeans
from daskabsp.estimators._kmeans_init import BlockDraws, Candidates

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")


def _total(a) -> float:
    return float(np.sum(a))


class _SharedOnFrozen(BlockDraws):
    """Draws whose first pass reads the shared candidates from a given future (placed on the
    worker that will freeze): as when they were scattered there just before it froze."""

    first = None

    def _share(self, cand):
        if self.first is not None:
            shared, self.first = self.first, None
            return shared
        return super()._share(cand)


def test_passes_and_fits_go_around_a_frozen_worker():
    X, _ = make_blobs(30_000, 4, centers=5, random_state=0)
    blocks = np.array_split(X, 3)
    with dask.config.set({"daskabsp.unresponsive-after": "1s"}), \
            LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                         dashboard_address=":0") as cluster, Client(cluster) as client:
        workers = worker_addresses(client)
        futs = [client.scatter(b, workers=[w]) for b, w in zip(blocks, workers, strict=True)]
        empty = Candidates(np.zeros((0, 4)), np.zeros(0, dtype=np.uint64))
        shared_on_frozen = client.scatter(empty, workers=[workers[0]])
        reference = KMeans(5, random_state=0).fit(X)
        pid = client.run(os.getpid)[workers[0]]
        os.kill(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 30  # until the scheduler has missed its heartbeats
            while workers[0] in answering_workers() and time.monotonic() < deadline:
                pass
            assert answering_workers() == workers[1:]
            # the block only the frozen worker holds, and a task that needs it, are stuck
            total = dask.delayed(_total)
            assert stuck_keys([f.key for f in futs]) == {futs[0].key}
            got = compute_answering([total(f) for f in futs], workers=answering_workers())
            assert got[0] is None
            assert got[1:] == pytest.approx([b.sum() for b in blocks[1:]])
            # k-means|| draws leave that block out and draw from the others
            Xd = da.concatenate([da.from_delayed(f, shape=b.shape, dtype=b.dtype)
                                 for f, b in zip(futs, blocks, strict=True)])
            draws = BlockDraws(Xd, None, seed=1)
            assert draws.alive == [1, 2]
            drawn = draws.draw(empty, 0, 20)
            assert drawn.centers.shape == (20, 4)
            rest = np.vstack(blocks[1:])
            assert all((rest == c).all(axis=1).any() for c in drawn.centers)
            # a pass whose shared candidates only the frozen worker holds is run again
            # (the blocks themselves are readable): the same draw
            retried = _SharedOnFrozen(Xd, None, seed=1)
            retried.first = shared_on_frozen
            again = retried.draw(empty, 0, 20)
            assert retried.alive == [1, 2] and retried.first is None
            np.testing.assert_array_equal(again.centers, drawn.centers)
            # a whole KMeans fit returns with the worker still stopped, at the same centers
            # (its draws depend on the rows' values, not on where they are)
            est = KMeans(5, random_state=0).fit(X)
            assert workers[0] not in set(est.history_.worker.values.ravel())
        finally:
            os.kill(pid, signal.SIGCONT)
    order = np.lexsort(est.cluster_centers_.T)
    ref_order = np.lexsort(reference.cluster_centers_.T)
    np.testing.assert_allclose(est.cluster_centers_[order],
                               reference.cluster_centers_[ref_order], rtol=1e-6)
