"""The cycle ledger stitches exactly one pass over every row from uneven A-BSP rounds."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp.programs import CycleLedger, PartitionStats


def _scan(size: int, start: int, rows: int):
    """What a partition task returns when its statistics count each row it scanned: the
    total and, if the scan wrapped, the part before the wrap (the engine's split)."""
    counts = np.zeros(size)
    head = None
    pos = start
    for _ in range(rows):
        counts[pos] += 1
        pos += 1
        if pos == size:
            pos = 0
            head = counts.copy()
    return counts, head


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4),
       data=st.data())
def test_complete_pass_counts_every_row_once(sizes, data):
    offsets = np.cumsum([0, *sizes])
    n = int(offsets[-1])
    ledger, cursors = CycleLedger(), [0] * len(sizes)
    for rnd in range(data.draw(st.integers(1, 30))):
        pieces = []
        for p, size in enumerate(sizes):
            rows = data.draw(st.integers(0, size))  # a straggler may scan nothing
            counts, head = _scan(size, cursors[p], rows)
            full = np.zeros(n)
            full[offsets[p]:offsets[p + 1]] = counts
            full_head = None
            if head is not None:
                full_head = np.zeros(n)
                full_head[offsets[p]:offsets[p + 1]] = head
            pieces.append(PartitionStats(p, cursors[p], rows, size, full, full_head))
            cursors[p] = (cursors[p] + rows) % size
        ledger = ledger.add(pieces, lambda s: s, rnd)
        complete = ledger.complete(n)
        if complete is not None:
            np.testing.assert_array_equal(complete[0], np.ones(n))
            assert 0 <= complete[1] <= rnd


def test_complete_after_one_pass_per_partition():
    ledger = CycleLedger()
    a, ha = _scan(4, 0, 4)
    ledger = ledger.add([PartitionStats(0, 0, 4, 4, a, ha)], lambda s: s, 0)
    assert ledger.complete(8) is None  # partition 1 not seen yet
    b1, _ = _scan(4, 0, 3)
    ledger = ledger.add([PartitionStats(1, 0, 3, 4, np.r_[b1], None)], lambda s: s, 1)
    assert ledger.complete(8) is None
    b2, hb2 = _scan(4, 3, 2)  # rows 3, 0: closes the pass at the wrap
    ledger = ledger.add([PartitionStats(1, 3, 2, 4, b2, hb2)], lambda s: s, 2)
    total, oldest = ledger.complete(8)
    np.testing.assert_array_equal(total, np.ones(4) + np.ones(4))
    assert oldest == 0
