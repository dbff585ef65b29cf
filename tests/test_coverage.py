"""Property tests of the helpers' bookkeeping: which rows a round covers and counts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp.engine.coverage import Leftover, Piece, batches, merge, plan

WORKERS = ("a", "b", "c", "d")


def rows_of(start: int, rows: int, size: int) -> np.ndarray:
    """Indicator statistics of rows ``start .. start + rows - 1`` (cyclic): row i adds 1 at
    index i, so a sum of statistics shows how often each row was counted."""
    out = np.zeros(size)
    out[(start + np.arange(rows)) % size] += 1
    return out


def combine(stats):
    return np.sum(stats, axis=0)


@st.composite
def leftovers(draw):
    out = []
    for p in range(draw(st.integers(1, 5))):
        size = draw(st.integers(1, 300))
        rows = draw(st.integers(0, size))
        holders = draw(st.lists(st.sampled_from(WORKERS), min_size=1, max_size=3,
                                unique=True))
        out.append(Leftover(p, draw(st.integers(0, size - 1)), rows, size, tuple(holders)))
    return out


speeds = st.dictionaries(st.sampled_from(WORKERS), st.floats(0.1, 1e6), max_size=4)
threads = st.dictionaries(st.sampled_from(WORKERS), st.integers(1, 4), max_size=4)


costs = st.none() | st.dictionaries(st.integers(0, 4), st.floats(0.01, 100), max_size=5)


@settings(max_examples=300, deadline=None)
@given(leftovers(), speeds, threads, st.integers(1, 64), costs)
def test_plan_tiles_every_leftover_with_pieces_on_its_holders(los, speed, nthreads, min_rows,
                                                              cost):
    pieces = plan(los, speed, nthreads, min_rows=min_rows, cost=cost)
    for lo in los:
        mine = [pc for pc in pieces if pc.partition == lo.partition]
        live = set(lo.holders) & set(speed)
        if not live or lo.rows == 0:
            assert not mine
            continue
        assert all(pc.worker in live and pc.rows > 0 for pc in mine)
        assert all(pc.start + pc.rows <= lo.size for pc in mine)  # never across the wrap
        # in order from the leftover's start, contiguous, exactly its rows
        pos = lo.start
        for pc in mine:
            assert pc.start == pos
            pos = (pc.start + pc.rows) % lo.size
        assert sum(pc.rows for pc in mine) == lo.rows
        for w in live:  # at most a worker's threads of pieces per partition (+1 at the wrap)
            assert sum(pc.worker == w for pc in mine) <= max(nthreads.get(w, 1), 1) + 1


def test_plan_follows_speed():
    lo = Leftover(0, 100, 10_000, 20_000, ("fast", "slow"))
    pieces = plan([lo], {"fast": 4.0, "slow": 1.0}, {"fast": 1, "slow": 1})
    got = {pc.worker: pc.rows for pc in pieces}
    assert got == {"fast": 8_000, "slow": 2_000}
    # a worker without a copy gets nothing of it, however fast
    pieces = plan([lo], {"fast": 4.0, "other": 100.0}, {"fast": 1, "other": 1})
    assert {pc.worker for pc in pieces} == {"fast"}


def test_a_slow_owner_does_not_get_its_rows_back_when_the_copy_holder_is_busy():
    """A round the helpers' plan once got wrong: ``fast`` holds the copy of the slow
    worker's partition 0 and has leftovers of its own partition 1, and ``idle`` holds no copy.
    Partition 0's rows must still go mostly to ``fast``, so both finish together, not all to
    the 10x slower owner."""
    los = [Leftover(0, 0, 180_000, 200_000, ("slow", "fast")),
           Leftover(1, 0, 80_000, 200_000, ("fast",))]
    speed = {"slow": 100_000.0, "fast": 1_000_000.0, "idle": 2_000_000.0}
    pieces = plan(los, speed, dict.fromkeys(speed, 1))
    del speed["idle"]
    busy = {w: sum(pc.rows for pc in pieces if pc.worker == w) / s for w, s in speed.items()}
    assert busy["slow"] == pytest.approx(busy["fast"], rel=1e-3)  # 0.236 s each
    assert busy["fast"] < 0.25


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 100_000), st.dictionaries(st.sampled_from(WORKERS), st.floats(1.0, 1e6),
                                                min_size=1, max_size=4))
def test_one_leftover_is_shared_so_its_holders_finish_together(rows, speed):
    lo = Leftover(0, 0, rows, 100_000, tuple(speed))
    pieces = plan([lo], speed, dict.fromkeys(speed, 1))
    took = {w: sum(pc.rows for pc in pieces if pc.worker == w) / s for w, s in speed.items()}
    # each gets its share by speed to within one row (rounding), none more
    assert max(took.values()) <= rows / sum(speed.values()) + 1 / min(speed.values())


@st.composite
def rounds(draw):
    """A partition's round: where its scan starts, how far the owner got, how its leftover
    was cut into pieces, and which pieces were lost (their worker given up on)."""
    size = draw(st.integers(1, 200))
    start = draw(st.integers(0, size - 1))
    quota = draw(st.integers(1, size))
    owner = draw(st.integers(0, quota))
    left = quota - owner
    cuts = sorted(draw(st.lists(st.integers(1, max(left - 1, 1)), max_size=4, unique=True)))
    cuts = [c for c in cuts if 0 < c < left]
    bounds = [0, *cuts, left] if left else [0]
    pieces = []
    for a, b in itertools.pairwise(bounds):
        pos = (start + owner + a) % size
        n = b - a
        while n > 0:  # pieces never cross the wrap, as plan makes them
            k = min(n, size - pos)
            pieces.append(Piece(0, pos, k, "w"))
            n -= k
            pos = (pos + k) % size
    lost = draw(st.lists(st.booleans(), min_size=len(pieces), max_size=len(pieces)))
    order = draw(st.permutations(range(len(pieces))))
    return size, start, owner, [pieces[i] for i in order], [lost[i] for i in order]


def owner_stats(size, start, owner):
    stats = rows_of(start, owner, size)
    head = rows_of(start, size - start, size) if owner >= size - start else None
    return stats, head


@settings(max_examples=500, deadline=None)
@given(rounds())
def test_merge_counts_a_gapless_run_from_the_cursor_once(case):
    size, start, owner, pieces, lost = case
    stats, head = owner_stats(size, start, owner)
    got = merge(start, size, owner, stats, head,
                [(pc, None if gone else rows_of(pc.start, pc.rows, size))
                 for pc, gone in zip(pieces, lost, strict=True)], combine)
    # the rows counted are exactly the run of got.rows rows from the cursor, each once
    expect = rows_of(start, got.rows, size)
    if got.rows:
        np.testing.assert_array_equal(got.stats, expect)
    else:
        assert got.stats is None
    assert got.rows >= owner and got.helped == got.rows - owner
    # the run stops at the first lost piece: everything before it counts
    ordered = sorted(zip(pieces, lost, strict=True),
                     key=lambda t: (t[0].start - start - owner) % size)
    want = owner
    for pc, gone in ordered:
        if gone:
            break
        want += pc.rows
    assert got.rows == want
    assert sum(pc.rows for pc in got.pieces) == got.helped
    # statistics up to the partition's last row, when the run reaches it
    if got.rows >= size - start:
        np.testing.assert_array_equal(got.stats_before_wrap, rows_of(start, size - start, size))
    else:
        assert got.stats_before_wrap is None


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 150), st.data())
def test_rounds_of_harvests_pieces_and_give_ups_count_each_row_once_per_cycle(size, data):
    """Over any sequence of rounds (owner progress, pieces, lost pieces), the cursor moves
    past exactly the rows counted, so the rows counted so far are the first ``total`` of the
    cyclic sequence from row 0: each row counted once per cycle."""
    cursor, seen, total = 0, np.zeros(size), 0
    for _ in range(data.draw(st.integers(1, 8))):
        quota = data.draw(st.integers(1, size))
        owner = data.draw(st.integers(0, quota))
        stats, head = owner_stats(size, cursor, owner)
        lo = Leftover(0, (cursor + owner) % size, quota - owner, size, ("a", "b", "c"))
        speed = data.draw(st.dictionaries(st.sampled_from(("a", "b", "c")),
                                          st.floats(0.5, 10.0), max_size=3))
        pieces = plan([lo], speed, {"a": 1, "b": 2, "c": 1})
        lost = data.draw(st.lists(st.booleans(), min_size=len(pieces), max_size=len(pieces)))
        got = merge(cursor, size, owner, stats, head,
                    [(pc, None if gone else rows_of(pc.start, pc.rows, size))
                     for pc, gone in zip(pieces, lost, strict=True)], combine)
        if got.rows:
            seen += got.stats
        total += got.rows
        cursor = (cursor + got.rows) % size
    np.testing.assert_array_equal(seen, rows_of(0, total % size, size) + total // size)


@settings(max_examples=300, deadline=None)
@given(leftovers(), speeds, threads, st.integers(1, 64))
def test_batches_hold_each_piece_once_on_its_worker_within_its_threads(los, speed, nthreads,
                                                                       min_rows):
    pieces = plan(los, speed, nthreads, min_rows=min_rows)
    out = batches(pieces, nthreads)
    flat = [pc for _, b in out for pc in b]
    assert sorted(flat, key=repr) == sorted(pieces, key=repr)  # each piece exactly once
    assert all(b and all(pc.worker == w for pc in b) for w, b in out)
    for w in {pc.worker for pc in pieces}:
        n = sum(1 for v, _ in out if v == w)
        assert 1 <= n <= max(nthreads.get(w, 1), 1)
        # largest first onto the least loaded: no batch exceeds another by more than a piece
        loads = [sum(pc.rows for pc in b) for v, b in out if v == w]
        biggest = max(pc.rows for pc in pieces if pc.worker == w)
        assert max(loads) - min(loads) <= biggest
