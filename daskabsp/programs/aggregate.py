"""Each partition's latest statistics, kept by the parameter server of an SSP or ASP fit.

Without rounds, partitions hand back their statistics one at a time, each computed at the
parameters its task started from. Adding every partition's statistics into the parameters as
they come (a delta per update) counts a fast partition's rows more often than a slow one's,
so with a straggler the fit settles at the optimum of a re-weighted objective. The programs
here keep instead, per partition, its latest statistics and the parameters they were taken
at, and step from the aggregate of all of them: every row counts exactly once in every
update, a fast partition only refreshes its share more often. This is the incremental
aggregated gradient (Blatt, Hero and Gauchman, SIAM J. Optim. 2007), in the delay-tolerant
averaged form of Mishchenko, Iutzeler, Malick and Amini (ICML 2018, "A Delay-tolerant
Proximal-Gradient Algorithm for Distributed Learning"), whose step size does not depend on
the delays; for Newton programs each piece is a Taylor model around its own parameters, as in
the Newton-type incremental method of Rodomanov and Kropotov (ICML 2016).

That is why these programs do not scale their steps by the staleness: the rule ``lr / tau``
(Zhang, Gupta, Lian and Liu, IJCAI 2016, "Staleness-aware Async-SGD") damps *additive* stale
gradients, each of which would otherwise move the parameters by a full step computed
elsewhere; an aggregate replaces a partition's share instead of adding to it. A program that
keeps the default :meth:`~daskabsp.programs.Program.partition_update` (deltas) can scale its
step with :func:`staleness_scale`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Piece:
    """One partition's latest statistics.

    Attributes
    ----------
    partition : int
        The partition.
    rows : int
        Rows they cover (the whole partition).
    stats : ndarray
        The statistics (or a program's form of them, e.g. a Taylor model).
    params : object
        What they were computed at.
    """

    partition: int
    rows: int
    stats: Any
    params: Any


def put_piece(pieces: Sequence[Piece], piece: Piece) -> tuple[Piece, ...]:
    """``pieces`` with ``piece`` in place of its partition's previous one, in partition
    order (so that sums over them add in the order a round's combine does)."""
    kept = [q for q in pieces if q.partition != piece.partition]
    return tuple(sorted([*kept, piece], key=lambda q: q.partition))


def previous(pieces: Sequence[Piece], partition: int) -> Piece | None:
    """The piece of ``partition`` in ``pieces``, if any."""
    return next((q for q in pieces if q.partition == partition), None)


def total(pieces: Sequence[Piece]) -> np.ndarray:
    """The sum of the pieces' statistics, in partition order."""
    return np.sum([q.stats for q in pieces], axis=0)


def rows_of(pieces: Sequence[Piece]) -> int:
    """Rows the pieces cover."""
    return sum(q.rows for q in pieces)


def staleness_scale(staleness: int, n_partitions: int) -> float:
    """The factor of a stale additive update's step (Zhang et al. 2016: ``lr / tau``).

    ``staleness`` counts the updates applied since the update's parameters were read. With
    one update per partition making up a full step's worth, a staleness below
    ``n_partitions`` is what BSP has too (every partition's statistics of a round are
    computed at the same parameters), so ``tau`` is counted in full sweeps:
    ``1 / max(1, staleness / n_partitions)``.
    """
    return 1.0 / max(1.0, staleness / max(n_partitions, 1))
