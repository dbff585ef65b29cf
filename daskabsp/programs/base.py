"""The contract of an iterative program the engine can run under any policy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class PartitionStats:
    """The statistics one partition handed back in a round, and which rows they cover.

    The rows are ``start, start + 1, ...`` (``rows`` of them), wrapping from the partition's
    last row to row 0.

    Attributes
    ----------
    partition : int
        Index of the partition.
    start : int
        Row the partition's scan started at (its cursor).
    rows : int
        Rows processed.
    size : int
        Rows in the partition.
    stats : ndarray
        Statistics over the rows processed.
    stats_before_wrap : ndarray or None
        For programs with ``split_at_wrap``: the statistics over rows ``start .. size - 1``
        when the scan reached the partition's last row (the rows after the wrap have
        ``stats - stats_before_wrap``); None when it did not, or for other programs.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.programs import PartitionStats
    >>> part = PartitionStats(partition=0, start=900, rows=200, size=1_000,
    ...                       stats=np.zeros(3))
    >>> (part.start + part.rows) % part.size    # where its next scan starts: it wrapped
    100
    """

    partition: int
    start: int
    rows: int
    size: int
    stats: np.ndarray
    stats_before_wrap: np.ndarray | None = None


class Program(ABC):
    """An iterative data-parallel program: additive statistics per row range, then an update.

    The engine calls, per fit::

        state = program.init(n_features, n_rows)            # on the driver
        loop:
            params = program.params(state)                   # broadcast to partition tasks
            acc = program.new_stats(params)                  # in each task
            program.accumulate(acc, params, X, y, sw)        # per chunk of rows, in place
            stats = program.combine_round(parts, params)     # on the driver; by default
                                                             # combine([acc_1, ..., acc_p])
            objective = program.objective(state, stats, k)
            state = program.update(state, stats, k)          # k = rows counted this round
            stop if program.converged(state) (None: if the objective changed < tol)

    Statistics must be additive over rows, so that the statistics of the rows a stopped
    partition did process are exact for those rows. A program object is shipped to every
    partition task: keep its attributes small (hyper-parameters), and keep what the driver
    needs between rounds in ``state``.

    Examples
    --------
    A program that counts the rows and sums ``y`` (one round is enough):

    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import numpy as np
    >>> import daskabsp
    >>> from daskabsp.programs import Program
    >>> class MeanOfY(Program):
    ...     name = "mean-y"
    ...     def init(self, n_features, n_rows):
    ...         return np.zeros(1)                   # the driver's state: the mean so far
    ...     def new_stats(self, params):
    ...         return np.zeros(2)                   # rows, sum of y
    ...     def accumulate(self, acc, params, X, y, sample_weight):
    ...         acc[0] += len(y)
    ...         acc[1] += y.sum()
    ...     def update(self, state, stats, n_rows):
    ...         return np.array([stats[1] / stats[0]])
    ...     def objective(self, state, stats, n_rows):
    ...         return 0.0
    ...     def converged(self, state):
    ...         return True                          # stop after one round
    >>> res = daskabsp.fit(MeanOfY(), X, y.astype(float), sync="bsp")
    >>> bool(np.isclose(res.coef[0], y.mean()))
    True
    """

    #: Short name used in task keys and the fit history.
    name: ClassVar[str] = "program"
    #: Whether the program needs the target ``y``.
    needs_y: ClassVar[bool] = True
    #: Whether :meth:`accumulate` uses ``sample_weight``.
    accepts_sample_weight: ClassVar[bool] = False
    #: Whether partition tasks also return their statistics up to the partition's last row
    #: when a scan wraps to row 0 (:attr:`PartitionStats.stats_before_wrap`; one copy of the
    #: accumulator per task and round).
    split_at_wrap: ClassVar[bool] = False
    #: Seconds of work per chunk of a partition scan, at least (see :func:`daskabsp.fit`'s
    #: ``chunk_target``): a program whose chunks have a sizeable fixed cost raises it.
    min_chunk_seconds: ClassVar[float] = 0.0
    #: Whether the default A-BSP may help this program's rounds at all: copy stragglers'
    #: partitions to other workers and scan from the copies what stopped partitions leave
    #: (see :meth:`help_round`). A first-order program, whose step from the rows the fastest
    #: workers scanned moves as far as from every row, sets False: its rounds are A-BSP as
    #: published (one wave, the stopped partitions resuming at their cursors), and no copy is
    #: made, so a worker holds only its own rows.
    helpable: ClassVar[bool] = True

    def min_partition_rows(self, n_features: int) -> int:
        """Rows a partition should hold at least for this program's rounds to be useful
        (default 0: no minimum beyond ``daskabsp.min-partition-rows``)."""
        return 0

    def check_input(self, X, y) -> None:
        """Raise ``ValueError`` if in-memory ``X``, ``y`` are not valid for this program."""
        return None

    @abstractmethod
    def init(self, n_features: int, n_rows: int) -> Any:
        """Return the driver state before the first round."""

    def params(self, state: Any) -> Any:
        """Return what the partition tasks need from ``state`` (default: the state itself)."""
        return state

    def prepare(self, params: Any) -> Any:
        """What :meth:`accumulate` receives as ``params`` in a partition task, made once per
        task from the round's ``params`` (default: ``params`` unchanged). The place for work
        that would otherwise be repeated in every chunk, such as a contiguous copy of a
        transposed coefficient matrix."""
        return params

    @abstractmethod
    def new_stats(self, params: Any) -> np.ndarray:
        """Return a zeroed statistics accumulator (a float64 array) for ``params``."""

    @abstractmethod
    def accumulate(
        self,
        acc: np.ndarray,
        params: Any,
        X: Any,
        y: np.ndarray | None,
        sample_weight: np.ndarray | None,
    ) -> None:
        """Add the statistics of the rows ``X`` (with ``y``, ``sample_weight``) into ``acc``.

        This runs once per chunk in the partition task's hot loop: no locks, no I/O, and no
        allocation beyond the numpy temporaries of the computation itself.
        """

    def combine(self, stats: list[np.ndarray]) -> np.ndarray:
        """Combine the statistics of several partitions (default: their sum)."""
        return np.sum(stats, axis=0)

    def combine_round(self, parts: list[PartitionStats], params: Any) -> Any:
        """Combine a round's statistics, knowing which rows of which partition they cover.

        ``parts`` holds the partitions whose statistics count this round (in partition
        order). The result is what :meth:`objective` and :meth:`update` receive. The default
        is :meth:`combine` of the statistics (zeroed statistics when nothing counts); a
        program overrides this when the uneven coverage of A-BSP rounds matters to it.
        """
        if not parts:
            return self.new_stats(params)
        return self.combine([p.stats for p in parts])

    def full_round(self, state: Any) -> bool:
        """Whether the next round must cover every row, whatever the policy (default: no).

        A program returns True when the partial rounds of A-BSP can no longer move it towards
        its optimum (for example when the progress a round predicts is within the sampling
        noise of the rows it saw): the engine then runs the round as BSP would, every
        partition scanning all its rows from its cursor, nobody stopped.
        """
        return False

    def help_round(self, state: Any) -> bool:
        """Whether helpers should scan, from copies, the rows this round's stopped partitions
        leave (default: yes).

        Under the default A-BSP a round's helpers make it count every row a copy can reach,
        at the price of a second wave of tasks. A program whose updates from the rows the
        fastest workers scanned are as good as from every row (early Newton steps on large
        data) returns False until it needs more: its rounds are then A-BSP as published,
        one wave each, the stopped partitions resuming at their cursors next round; copies
        are still made in the background, for the rounds that need every row
        (:meth:`full_round`, always helped).
        """
        return True

    def converged(self, state: Any) -> bool | None:
        """Whether the fit has converged at ``state`` (after an update).

        None (the default) leaves the decision to the engine: the objective changed by at
        most ``tol`` (relative). A program with its own stopping rule returns a bool, and the
        engine then ignores ``tol``.
        """
        return None

    @abstractmethod
    def update(self, state: Any, stats: np.ndarray, n_rows: int) -> Any:
        """Return the next state from the combined statistics over ``n_rows`` rows."""

    @abstractmethod
    def objective(self, state: Any, stats: np.ndarray, n_rows: int) -> float:
        """Return the objective at ``state`` estimated from statistics over ``n_rows`` rows."""

    def params_array(self, params: Any) -> np.ndarray:
        """The parameters a round's statistics are taken at (``params``, from :meth:`params`)
        as an array, for the history's ``params`` (default: ``params`` itself)."""
        return np.asarray(params)

    def coefficients(self, state: Any) -> np.ndarray:
        """Return the fitted parameters as an array (for the history and the user)."""
        return np.asarray(self.params(state))

    # -- policies without rounds (SSP, ASP) ---------------------------------------------------

    def partition_update(self, state: Any, piece: PartitionStats, params: Any,
                         staleness: int) -> Any:
        """Return the state after one partition's statistics are applied (SSP, ASP).

        ``piece`` holds the statistics of one partition's whole scan, computed at ``params``
        (:meth:`params` of the state its task started from), ``staleness`` updates ago; the
        state is the newest one. The default applies the round update to the piece alone,
        at the newest state: the textbook asynchronous update, whatever parameters the
        statistics were computed at. Programs override it to fold the piece into an
        aggregate of every partition's latest statistics (each counted once, whatever its
        speed), as :class:`~daskabsp.programs.LogisticGD`, the Newton programs and
        :class:`~daskabsp.programs.LloydKMeans` do.
        """
        return self.update(state, self.combine_round([piece], params), piece.rows)

    def partition_objective(self, state: Any, piece: PartitionStats, params: Any) -> float:
        """The objective recorded after :meth:`partition_update` of ``piece`` gave ``state``
        (SSP, ASP). Default: the round objective over the piece's rows."""
        return self.objective(state, self.combine_round([piece], params), piece.rows)
