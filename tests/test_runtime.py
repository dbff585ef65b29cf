"""Chunk views of a partition: the rows asked for, sharing the partition's memory."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp.runtime import _rows


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
