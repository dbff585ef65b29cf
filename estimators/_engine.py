"""What every estimator shares: the engine options, running a fit, tags, the fit record."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable

import numpy as np
from sklearn.exceptions import ConvergenceWarning

import daskabsp
from daskabsp import BSP, get_client

from ._callbacks import CallbackSupportMixin, caller_stacklevel
from ._inputs import FitInput

#: A partition holds at least this many rows per model parameter (and at least
#: ``daskabsp.min-partition-rows``): a sub-sampled Newton step over a straggler's share of a
#: round is only useful when the rows processed outnumber the parameters well.
ROWS_PER_PARAMETER = 10
#: Seconds of chunk work per float of partition statistics, at least: adding a chunk's
#: statistics into the accumulator costs about 3 ns per float (measured: a multinomial
#: Hessian of 650^2 floats costs 1.2 ms per chunk), which should stay under a tenth of the
#: chunk's work.
CHUNK_SECONDS_PER_STAT = 3e-8
#: Smallest default chunk target of the estimators. A chunk of these programs has a fixed
#: cost of a few tenths of a millisecond (tens of numpy calls) on top of its rows; the engine
#: sizes chunks from the measured throughput, so where the target divided by a straggler's
#: slowdown falls below that fixed cost its chunks shrink round after round towards one row
#: (measured: a 4x straggler of a 3-class model went from 9000 to 20 rows per round at the
#: engine's 2 ms target). 10 ms keeps a 4x straggler's chunks well above it, and bounds the
#: harvest latency to 10 ms.
MIN_CHUNK_TARGET = 0.010


class EngineMixin(CallbackSupportMixin):
    """Engine options shared by the estimators (see each estimator's docstring), and the
    ways to watch a fit: ``verbose`` and scikit-learn's callbacks.

    Subclasses define ``sync``, ``n_partitions``, ``quota``, ``chunk_target`` and ``verbose``
    in their ``__init__``, and decorate ``fit`` with
    :func:`~daskabsp.estimators._callbacks.fit_with_callbacks`.
    """

    def _sync_is_bsp(self) -> bool:
        return self.sync == "bsp" or isinstance(self.sync, BSP)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Under A-BSP the rows a round sees depend on timing, so results do too (within the
        # tolerance); under BSP a fit is a deterministic function of the data.
        tags.non_deterministic = not self._sync_is_bsp()
        tags.input_tags.sparse = True
        return tags

    def _n_partitions(self, data: FitInput, n_params: int) -> int | None:
        n = data.n_samples
        if self.n_partitions is not None:
            return min(int(self.n_partitions), n) if not data.lazy else self.n_partitions
        if data.lazy:
            return None  # the dask array's row chunks are the partitions
        client = get_client()
        threads = sum(client.nthreads().values()) or 1
        min_rows = int(daskabsp.config.get("min-partition-rows"))
        rows = max(min_rows, ROWS_PER_PARAMETER * n_params)
        return max(1, min(threads, n // rows))

    def _chunk_target(self, program, data: FitInput) -> float | None:
        """The user's chunk target, or the engine's default raised for large statistics."""
        if self.chunk_target is not None:
            return self.chunk_target
        size = program.new_stats(program.params(program.init(data.X.shape[1], 1))).size
        default = daskabsp.config.seconds("chunk-target")
        return max(default, MIN_CHUNK_TARGET, CHUNK_SECONDS_PER_STAT * size)

    def _round_callbacks(self, attributes: Callable[[np.ndarray], dict]) -> list:
        """What watches the engine's rounds: a progress bar (``verbose``) and the
        scikit-learn callbacks set with ``set_callbacks``."""
        callbacks: list = []
        if self.verbose:
            sync = self.sync if isinstance(self.sync, str) else type(self.sync).__name__
            callbacks.append(daskabsp.ProgressBar(desc=f"{type(self).__name__} {sync}"))
        sklearn_rounds = self._sklearn_rounds(attributes)
        if sklearn_rounds is not None:
            callbacks.append(sklearn_rounds)
        return callbacks

    def _run_engine(self, program, data: FitInput, y, sample_weight, *, max_iter: int,
                    n_params: int, attributes: Callable[[np.ndarray], dict],
                    source: tuple | None = None) -> daskabsp.FitResult:
        """Run ``program`` on the engine. ``attributes(coef)`` gives the fitted attributes of
        the engine's parameters, for the callbacks' ``fitted_estimator`` of each round;
        ``source``, the in-memory rows a placed dask input was made from (see
        :func:`daskabsp.fit`)."""
        res = daskabsp.fit(
            program, data.X, y, sample_weight=sample_weight, sync=self.sync,
            max_iter=max_iter, tol=None, n_partitions=self._n_partitions(data, n_params),
            quota=self.quota, chunk_target=self._chunk_target(program, data),
            callback=self._round_callbacks(attributes), source=source,
        )
        if inspect.isawaitable(res):
            res.close()
            raise TypeError(
                f"{type(self).__name__}.fit needs a synchronous dask client; the current "
                "client is asynchronous. Call daskabsp.fit with the programs in "
                "daskabsp.programs from async code instead."
            )
        self.history_ = res.history
        if not res.converged:
            warnings.warn(
                f"{type(self).__name__} did not converge in {res.n_iter} rounds "
                f"(max_iter={max_iter}). Consider increasing max_iter, or using "
                "sync='bsp' if the rounds see too few rows to settle.",
                ConvergenceWarning, stacklevel=caller_stacklevel(),
            )
        return res
