"""Which rows a round covers: the stragglers' leftover rows shared out, and the pieces merged.

Under A-BSP with helpers a round has two phases. In the first, every partition is scanned by
its own task from its cursor, and the round's stop ends the scans once the quorum has finished.
What a stopped partition left of its quota is then split into *pieces*, contiguous row ranges
given to the workers that hold a copy of the partition, in proportion to the speed they showed
in the first phase, so that the second phase ends at about the same time everywhere. A
partition's counted rows are the longest run of rows from its cursor that the owner's scan and
the pieces cover without a gap: a piece lost with its worker ends the run, and what follows it
waits for the next round. So every row is counted at most once per round, and the cursor moves
past exactly the rows counted.

This module is bookkeeping only (no Dask): :func:`plan` decides the pieces, :func:`merge`
turns a partition's results into what the round counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..policies import advance


@dataclass(frozen=True, slots=True)
class Leftover:
    """Rows of partition ``partition`` (of ``size`` rows) still to cover in a round.

    They are ``start, start + 1, ...`` (``rows`` of them), wrapping from row ``size - 1`` to
    row 0, and can be read on any of ``holders`` (workers with a copy of the partition).
    """

    partition: int
    start: int
    rows: int
    size: int
    holders: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Piece:
    """Rows ``start .. start + rows - 1`` of ``partition`` (never across its last row), to be
    scanned on ``worker``."""

    partition: int
    start: int
    rows: int
    worker: str


def plan(leftovers: Sequence[Leftover], speed: Mapping[str, float],
         threads: Mapping[str, int], *, min_rows: int = 1,
         cost: Mapping[int, float] | None = None) -> list[Piece]:
    """Split ``leftovers`` into pieces for the workers in ``speed`` (rows per second per
    thread) so that they finish together where their copies allow: a worker's share follows
    its speed times its ``threads``, less what it already scans of other leftovers.

    ``cost`` (partition -> relative cost of one of its rows, 1 if absent) makes a row of a
    costly partition count for more of a worker's time: ``speed`` is then in rows of cost 1.

    Workers not in ``speed`` (gone, silent) get nothing; a leftover none of whose holders is
    in ``speed`` gets no piece. A worker's share of a partition below ``min_rows`` rows goes
    to the holder with the largest share instead, so pieces stay worth a task. Each worker's
    share of a partition is cut into at most ``threads`` pieces, and at the partition's last
    row.

    The first of a leftover's holders is its partition's owner: if whole rows make the
    shared plan end later than each owner (or first live holder) scanning its leftovers
    alone, that plan is returned instead (a few rows cannot always be split evenly).
    """
    cap = {w: max(float(s), 0.0) * max(int(threads.get(w, 1)), 1) for w, s in speed.items()}
    todo = [lo for lo in leftovers if lo.rows > 0 and any(w in cap for w in lo.holders)]
    if not todo or sum(cap.values()) <= 0:
        return []
    shared, end = _shared(todo, cap, threads, min_rows, cost or {})
    alone = [Leftover(lo.partition, lo.start, lo.rows, lo.size,
                      (next(w for w in lo.holders if w in cap and cap[w] > 0),))
             for lo in todo if any(w in cap and cap[w] > 0 for w in lo.holders)]
    if len(alone) < len(todo):
        return shared
    own, own_end = _shared(alone, cap, threads, min_rows, cost or {})
    return own if own_end < end else shared


def _shared(todo: Sequence[Leftover], cap: Mapping[str, float], threads: Mapping[str, int],
            min_rows: int, cost: Mapping[int, float]) -> tuple[list[Piece], float]:
    """The water-filled pieces of :func:`plan`, and when the busiest worker ends."""
    # Partitions with the fewest holders go first; each is shared so that its holders finish
    # together, on top of what earlier partitions gave them (water-filling): a holder already
    # busy with another partition's rows gets less, and a slow holder never gets rows merely
    # because the fast ones are busy.
    busy = dict.fromkeys(cap, 0.0)  # seconds of rows given to each worker so far
    pieces: list[Piece] = []
    for lo in sorted(todo, key=lambda lo: (len(lo.holders), lo.partition)):
        holders = sorted({w for w in lo.holders if w in cap}, key=lambda w: (-cap[w], w))
        c = cost.get(lo.partition, 1.0)
        work = _level(lo.rows * c, {w: cap[w] for w in holders}, busy)
        share = (_whole_rows(lo.rows, [work[w] / c for w in holders],
                             [(busy[w], cap[w] / c) for w in holders])
                 if any(work.values()) else _apportion(lo.rows, [1.0] * len(holders)))
        big = max(range(len(holders)), key=lambda i: share[i])
        for i in range(len(holders)):
            if i != big and 0 < share[i] < min_rows:
                share[big] += share[i]
                share[i] = 0
        pos = lo.start
        for w, rows in zip(holders, share, strict=True):
            if rows <= 0:
                continue
            if cap[w] > 0:
                busy[w] += rows * c / cap[w]
            cuts = _apportion(rows, [1.0] * max(1, min(int(threads.get(w, 1)),
                                                        rows // max(min_rows, 1))))
            for n in cuts:
                pos = _emit(pieces, lo, pos, n, w)
    return pieces, max(busy.values())


def _whole_rows(rows: int, share: list[float], pace: list[tuple[float, float]]) -> list[int]:
    """Whole rows from the level shares ``share`` (rows, summing to ``rows``): each rounded
    down, then the rows left one at a time to the worker that would finish first with one
    more (``pace``: seconds it is busy already, rows per second). Rounding a slow worker's
    share up could make it end after the partition's owner alone would have."""
    out = [min(int(x), rows) for x in share]

    def end_with_one_more(i: int) -> tuple[float, int]:
        busy, rate = pace[i]
        return (busy + (out[i] + 1) / rate if rate > 0 else math.inf), i

    for _ in range(rows - sum(out)):
        out[min(range(len(out)), key=end_with_one_more)] += 1
    return out


def _level(work: float, cap: Mapping[str, float], busy: Mapping[str, float]) -> dict[str, float]:
    """How much of ``work`` each worker of ``cap`` (work per second) takes so that those
    that take some all finish at the same time, the earliest possible given ``busy`` (seconds
    each is already given): returns each worker's share of the work."""
    live = sorted((w for w in cap if cap[w] > 0), key=lambda w: busy[w])
    level, rate, filled = 0.0, 0.0, 0.0
    for i, w in enumerate(live):
        rate += cap[w]
        filled += cap[w] * busy[w]
        level = (work + filled) / rate
        if i + 1 == len(live) or level <= busy[live[i + 1]]:
            break
    return {w: max(level - busy[w], 0.0) * cap[w] if w in live else 0.0 for w in cap}


def batches(pieces: Sequence[Piece], threads: Mapping[str, int]) -> list[tuple[str, list[Piece]]]:
    """``pieces`` grouped into at most ``threads[w]`` batches per worker ``w``, one task
    each (a round of many partitions then adds a task per worker thread, not per piece):
    largest piece first onto the worker's least loaded batch. Returns ``(worker, pieces)``
    pairs, each batch's pieces in partition order."""
    batch: dict[tuple[str, int], list[Piece]] = {}
    rows: dict[tuple[str, int], int] = {}
    for pc in sorted(pieces, key=lambda pc: -pc.rows):
        n = max(int(threads.get(pc.worker, 1)), 1)
        slot = min(((pc.worker, t) for t in range(n)), key=lambda s: rows.get(s, 0))
        batch.setdefault(slot, []).append(pc)
        rows[slot] = rows.get(slot, 0) + pc.rows
    return [(w, sorted(b, key=lambda pc: (pc.partition, pc.start)))
            for (w, _), b in sorted(batch.items())]


def _emit(pieces: list[Piece], lo: Leftover, pos: int, rows: int, worker: str) -> int:
    """Append ``rows`` rows of ``lo`` from ``pos`` as pieces on ``worker`` (two if they cross
    the partition's last row); return the row after them."""
    while rows > 0:
        n = min(rows, lo.size - pos)
        pieces.append(Piece(lo.partition, pos, n, worker))
        rows -= n
        pos = advance(pos, n, lo.size)
    return pos


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split into integers following ``weights`` (largest remainders)."""
    s = float(sum(weights))
    if s <= 0:
        return [total] + [0] * (len(weights) - 1)
    raw = [total * w / s for w in weights]
    out = [math.floor(r) for r in raw]
    rest = total - sum(out)
    for i in sorted(range(len(raw)), key=lambda i: out[i] - raw[i])[:rest]:
        out[i] += 1
    return out


@dataclass(frozen=True, slots=True)
class Covered:
    """What a partition's round counts: ``rows`` rows from its cursor, their statistics,
    and (for programs that split at the wrap) the statistics up to its last row."""

    rows: int
    stats: Any
    stats_before_wrap: Any
    helped: int  # of ``rows``, those scanned by pieces
    pieces: tuple[Piece, ...] = ()  # the pieces counted


def merge(start: int, size: int, owner_rows: int, owner_stats: Any, owner_head: Any,
          pieces: Sequence[tuple[Piece, Any | None]],
          combine: Callable[[list[Any]], Any]) -> Covered:
    """Merge a partition's own scan (``owner_rows`` rows from ``start``) with its pieces.

    ``pieces`` pairs each piece with its statistics, or None for a piece that was lost (its
    worker was given up on). Counted are the owner's rows and then the pieces that continue
    them without a gap; ``combine`` adds statistics. ``owner_head`` is the owner's statistics
    up to the partition's last row when its scan wrapped (None otherwise).
    """
    by_start = {p.start: (p, s) for p, s in pieces if s is not None and p.rows > 0}
    stats = [owner_stats] if owner_rows > 0 and owner_stats is not None else []
    rows, helped, counted = owner_rows, 0, []
    head = owner_head
    pos = advance(start, owner_rows, size)
    wrapped = owner_head is not None or (owner_rows > 0 and pos == 0)
    while pos in by_start and rows < size:
        piece, s = by_start.pop(pos)
        if rows + piece.rows > size:
            break
        stats.append(s)
        counted.append(piece)
        rows += piece.rows
        helped += piece.rows
        pos = advance(piece.start, piece.rows, size)
        if pos == 0 and not wrapped:
            head = combine(stats)
            wrapped = True
    if not stats:
        return Covered(0, None, None, 0)
    return Covered(rows, combine(stats) if len(stats) > 1 else stats[0], head, helped,
                   tuple(counted))
