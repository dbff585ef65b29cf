"""What every estimator shares: the engine options, running a fit, tags, the fit record."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import numpy as np
from sklearn.exceptions import ConvergenceWarning

import daskabsp
from daskabsp import BSP, as_policy, get_client

from ._callbacks import CallbackSupportMixin, caller_stacklevel
from ._inputs import FitInput

#: The ``sync`` parameter as every estimator documents it: a subclass's docstring entry for
#: ``sync`` is replaced by this one (:meth:`EngineMixin.__init_subclass__`), so each page
#: tells the whole story, and a new estimator gets it without copying it.
SYNC_DOC = """\
    sync : {"absp", "bsp", "ssp", "asp"} or daskabsp.Policy, default="absp"
        How the partitions of the data synchronise (the :doc:`sync models guide
        </user-guide/sync-models>` compares them, measured):

        * ``"absp"``, :class:`daskabsp.ABSP`: once a worker is known to straggle, a round
          ends when the fastest worker has scanned its partitions; the others stop at their
          next chunk, their rows so far count, and they start from their first unscanned row
          next round (helpers scan them sooner where a copy exists). A round whose workers
          are balanced is not cut: it counts every row, as BSP's does. For shared or uneven
          clusters and long fits; results vary slightly from run to run.
        * ``"bsp"``, :class:`daskabsp.BSP`: every round waits for every partition. For equal
          workers and short fits, and whenever the same data must give the same result on
          every run.
        * ``"ssp"``, :class:`daskabsp.SSP` (staleness 3): no rounds; each partition's update
          is applied as it arrives, and no partition runs more than 3 updates ahead of the
          slowest.
        * ``"asp"``, :class:`daskabsp.ASP`: as ``"ssp"`` without the bound.
        * A policy object for other settings, e.g. ``daskabsp.ABSP.published()`` (A-BSP as
          published: every round ends when the first partition finishes; no helpers, no grace),
          ``daskabsp.ABSP(quorum=2)``,
          ``daskabsp.SSP(staleness=10)``.
"""
_SYNC_ENTRY = re.compile(r"^    sync : .*?\n(?=    \w+ : |\n|\Z)", re.MULTILINE | re.DOTALL)


def document_sync(doc: str | None) -> str | None:
    """``doc`` with its ``sync`` parameter entry replaced by :data:`SYNC_DOC`."""
    if not doc or not _SYNC_ENTRY.search(doc):
        return doc
    return _SYNC_ENTRY.sub(lambda _: SYNC_DOC, doc, count=1)


class EngineMixin(CallbackSupportMixin):
    """Engine options shared by the estimators (see each estimator's docstring), and the
    ways to watch a fit: ``verbose`` and scikit-learn's callbacks.

    Subclasses define ``sync``, ``n_partitions``, ``quota``, ``chunk_target`` and ``verbose``
    in their ``__init__``, and decorate ``fit`` with
    :func:`~daskabsp.estimators._callbacks.fit_with_callbacks`. Their docstring's ``sync``
    entry is replaced by :data:`SYNC_DOC`.
    """

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "__doc__" in vars(cls):
            cls.__doc__ = document_sync(cls.__doc__)

    def _sync_is_bsp(self) -> bool:
        return self.sync == "bsp" or isinstance(self.sync, BSP)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Under A-BSP the rows a round sees depend on timing, so results do too (within the
        # tolerance); under BSP a fit is a deterministic function of the data.
        tags.non_deterministic = not self._sync_is_bsp()
        tags.input_tags.sparse = True
        return tags

    def _callback_max_rounds(self) -> int | None:
        """Most engine rounds of a fit; None (not known in advance) under SSP and ASP,
        whose updates are reported one by one as rounds."""
        try:
            rounds = as_policy(self.sync).rounds
        except ValueError:  # an invalid sync is reported by the parameter check
            rounds = True
        # (a fault's retried updates count too: Ridge's 100 were exceeded under ASP)
        return self._max_rounds() if rounds else None

    def _n_partitions(self, data: FitInput) -> int | None:
        """The user's ``n_partitions``, at most one per row of in-memory input (None: the
        engine's default, see :func:`daskabsp.fit`)."""
        if self.n_partitions is None or data.lazy:
            return self.n_partitions
        return min(int(self.n_partitions), data.n_samples)

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

    def _client(self):
        """The client the fit runs on; an asynchronous one is refused before any work."""
        client = get_client()
        if client.asynchronous:
            raise TypeError(
                f"{type(self).__name__}.fit needs a synchronous dask client; the current "
                "client is asynchronous. Await daskabsp.fit_async with the programs in "
                "daskabsp.programs from async code instead.")
        return client

    def _run_engine(self, program, data, y, sample_weight, *, max_iter: int,
                    attributes: Callable[[np.ndarray], dict]) -> daskabsp.FitResult:
        """Run ``program`` on the engine over ``data`` (a :class:`FitInput`, or rows placed
        by :func:`daskabsp.place`). ``attributes(coef)`` gives the fitted attributes of the
        engine's parameters, for the callbacks' ``fitted_estimator`` of each round."""
        placed = isinstance(data, daskabsp.PlacedData)
        res = daskabsp.fit(
            program, data if placed else data.X, None if placed else y,
            sample_weight=None if placed else sample_weight, sync=self.sync,
            max_iter=max_iter, tol=None,
            n_partitions=None if placed else self._n_partitions(data), quota=self.quota,
            chunk_target=self.chunk_target, callback=self._round_callbacks(attributes),
            client=self._client())
        self.history_ = res.history
        if not res.converged:
            warnings.warn(
                f"{type(self).__name__} did not converge in {res.n_iter} rounds "
                f"(max_iter={max_iter}). Consider increasing max_iter, or using "
                "sync='bsp' if the rounds see too few rows to settle.",
                ConvergenceWarning, stacklevel=caller_stacklevel(),
            )
        return res
