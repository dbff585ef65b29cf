"""Cyclic cursors over the rows of a partition.

A partition of ``n`` rows is scanned cyclically: a round starts at the partition's cursor, takes
up to its quota of rows, wrapping from the last row to row 0, and the next round starts where the
last one stopped. Rows a straggler did not reach are therefore the first rows of its next round,
and every row is visited once per cycle, in order.
"""

from __future__ import annotations


def advance(cursor: int, rows: int, n: int) -> int:
    """Return the cursor after processing ``rows`` rows from ``cursor`` in a partition of ``n``."""
    return (cursor + rows) % n if n else 0

