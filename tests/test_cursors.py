"""Cursor bookkeeping: every row of a partition is visited exactly once per cycle, in order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp import ABSP, BSP
from daskabsp.extension._core import run_partition
from daskabsp.policies import advance
from daskabsp.programs import Program


class RowRecorder(Program):
    """Statistics = how often each row was seen, plus the order (via a running counter)."""

    name = "rows"
    needs_y = False

    def __init__(self, n: int) -> None:
        self.n = n

    def init(self, n_features, n_rows):
        return None

    def new_stats(self, params):
        return np.full(self.n, -1.0)  # position in the visit order, -1 for unseen

    def accumulate(self, acc, params, X, y, sample_weight):
        ids = X[:, 0].astype(int)
        start = acc.max() + 1
        acc[ids] = start + np.arange(ids.size)

    def update(self, state, stats, n_rows):
        return state

    def objective(self, state, stats, n_rows):
        return 0.0


def visit_order(acc: np.ndarray) -> list[int]:
    seen = np.flatnonzero(acc >= 0)
    return seen[np.argsort(acc[seen])].tolist()


@st.composite
def rounds(draw):
    n = draw(st.integers(1, 60))
    steps = draw(st.lists(st.tuples(st.integers(1, n), st.floats(0, 1)), min_size=1,
                          max_size=25))
    # (quota, fraction of the quota processed before the stop)
    return n, [(q, int(f * q)) for q, f in steps]


@settings(max_examples=200, deadline=None)
@given(rounds())
def test_cursor_visits_every_row_once_per_cycle_in_order(case):
    n, steps = case
    policy = ABSP()
    cursor, visited = 0, []
    for quota, rows in steps:
        visited.extend((cursor + i) % n for i in range(rows))
        cursor = policy.next_cursor(cursor, rows, n, finished=rows == quota)
    expected = [i % n for i in range(len(visited))]
    assert visited == expected


@settings(max_examples=100, deadline=None)
@given(rounds(), st.integers(1, 7))
def test_runtime_scan_follows_the_cursor(case, chunk_rows):
    """The runtime's chunked scan visits exactly the rows the cursor bookkeeping says."""
    n, steps = case
    X = np.arange(n, dtype=float)[:, None]
    program = RowRecorder(n)
    cursor = 0
    for quota, _ in steps:
        res = run_partition(program, None, X, None, None, round_id="t", cursor=cursor,
                            quota=quota, chunk_rows=chunk_rows)
        assert res.rows == quota and not res.stopped
        assert visit_order(res.stats) == [(cursor + i) % n for i in range(quota)]
        assert res.cursor == advance(cursor, quota, n)
        cursor = res.cursor


def test_drop_keeps_cursor_and_restart_resets():
    assert ABSP(on_quorum="drop").next_cursor(5, 3, 10, finished=False) == 5
    assert ABSP(on_quorum="drop").next_cursor(5, 10, 10, finished=True) == 5
    assert ABSP().next_cursor(5, 7, 10, finished=False) == 2
    assert ABSP(cursor="restart").next_cursor(5, 3, 10, finished=False) == 0
    assert BSP().next_cursor(0, 10, 10, finished=True) == 0
