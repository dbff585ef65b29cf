"""Chunk views of a partition: the rows asked for, sharing the partition's memory."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp import LogisticGD
from daskabsp.extension._core import _rows, run_partition


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 60), d=st.integers(1, 8), data=st.data())
def test_csr_chunk_view_is_the_rows_and_shares_memory(n, d, data):
    X = sp.random(n, d, density=0.3, format="csr", random_state=data.draw(st.integers(0, 99)))
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    view = _rows(X, start, stop)
    np.testing.assert_array_equal(view.toarray(), X[start:stop].toarray())
    r = np.arange(stop - start, dtype=float)
    np.testing.assert_allclose(view.T @ r, X[start:stop].T @ r)
    np.testing.assert_allclose(view @ np.ones(d), X[start:stop] @ np.ones(d))
    if view.nnz:  # neither the view nor its transpose copies the partition's arrays
        assert np.shares_memory(view.data, X.data)
        assert np.shares_memory(view.T.data, X.data)
    assert view.shape == (stop - start, d) and view.T.shape == (d, stop - start)


def _scan_after_stop(grace_rows: int, rid: str):
    """A partition scan (in a task) whose round was stopped on its worker before it
    started."""
    from distributed import get_worker

    from daskabsp.extension._worker_plugin import stop_on_worker

    stop_on_worker([rid], dask_worker=get_worker())
    X = np.ones((1000, 3))
    return run_partition(LogisticGD(), np.zeros(4), X, np.ones(1000), None, round_id=rid,
                         cursor=0, quota=1000, chunk_rows=100, grace_rows=grace_rows)


def test_a_stopped_task_within_its_grace_finishes_its_quota(client):
    """Nothing is stopped that would finish within its grace: a task told to stop with at
    most ``grace_rows`` left finishes (a round without a straggler counts every row); one
    with more left stops at its next chunk."""
    from daskabsp.extension._client import ensure_plugins

    client.sync(ensure_plugins, client)  # the workers' stop flags
    ok = client.submit(_scan_after_stop, 1000, "grace-test:0", pure=False).result()
    assert ok.worker and ok.rows == 1000 and not ok.stopped
    cut = client.submit(_scan_after_stop, 999, "grace-test:1", pure=False).result()
    assert cut.worker and cut.rows == 0 and cut.stopped
