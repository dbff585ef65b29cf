"""One fit from start to end: set up the rooms, run the policy's loop, write the record."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from .. import config
from ..monitor.callbacks import CallbackList, FitInfo
from ..monitor.reporting import open_reporter
from ..policies import Policy
from ..programs.base import Program
from .clock_loop import ClockLoop
from .context import FitContext, FitLoop, FitOptions
from .link import Link
from .loop import RoundLoop
from .observe import Observers
from .partitions import is_dask, row_chunks
from .placement import Placement


@dataclass
class FitResult:
    """What :func:`daskabsp.fit` returns.

    Attributes
    ----------
    coef : ndarray
        The fitted parameters (``program.coefficients(state)``).
    state : object
        The program's final driver state.
    history : xarray.Dataset
        One record per round (dims ``round``, ``partition``); under SSP and ASP one record
        per update (dim ``update``).
    n_iter : int
        Rounds run (SSP, ASP: updates per partition, rounded up).
    converged : bool
        Whether the program's stopping rule (or ``tol``) was met before ``max_iter``.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> res = daskabsp.fit(daskabsp.LogisticGD(), X, y, max_iter=200)
    >>> res.converged, res.n_iter == res.history.sizes["round"]
    (True, True)
    >>> res.coef.shape
    (6,)
    """

    coef: np.ndarray
    state: Any
    history: xr.Dataset
    n_iter: int
    converged: bool


@dataclass(frozen=True)
class Rows:
    """A fit's rows: as given (``X``, ``y``, ``sample_weight``), or already placed
    (``placed``, from :func:`daskabsp.place`)."""

    X: Any
    y: Any = None
    sample_weight: Any = None
    n_features: int = 0
    placed: Any = None  # a daskabsp.PlacedData


class FitRun:
    """One fit on the cluster.

    Parameters
    ----------
    client : distributed.Client
        The fit's client; the fit runs on its event loop.
    program : Program
        The iterative program.
    policy : Policy
        The sync model.
    rows : Rows
        The training rows.
    options : FitOptions
        Engine options.
    callbacks : CallbackList
        The fit's callbacks.
    """

    def __init__(self, client, program: Program, policy: Policy, rows: Rows,
                 options: FitOptions, callbacks: CallbackList) -> None:
        self.client = client
        self.program = program
        self.policy = policy
        self.rows = rows
        self.options = options
        self.fit_id = uuid.uuid4().hex[:8]
        self.observers = Observers(callbacks)
        self.link: Link | None = None

    # -- what caller.run_sync drives -----------------------------------------------------------

    @property
    def caller(self):
        return self.observers.caller

    def halt(self) -> asyncio.Future:
        """Stop the round in flight, if any (see :meth:`Link.halt`)."""
        if self.link is None:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self.link.halt()

    def end_callbacks(self, *, error: BaseException | None) -> None:
        self.observers.end_callbacks(error=error)

    async def run(self) -> FitResult:
        """The fit; callbacks ended here when they run on the event loop."""
        try:
            result = await self._run()
        except BaseException as e:
            if self.caller is None:
                self.end_callbacks(error=e)
            raise
        if self.caller is None:
            self.end_callbacks(error=None)
        return result

    # -- the fit -------------------------------------------------------------------------------

    async def _run(self) -> FitResult:
        self.link = link = await Link.open(self.client, self.fit_id, self.program)
        self.observers.report_to(await open_reporter(self.client, self.fit_id,
                                                     link.path.scheduler_plugin))
        placement = await self._place()
        status = "failed"
        try:
            if self.rows.placed is None and is_dask(self.rows.X):
                await placement.check_finite()
            result = await self._rounds(placement)
            status = "converged" if result.converged else "finished"
            return result
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        finally:
            await self.observers.end(status)

    async def _place(self) -> Placement:
        placed = self.rows.placed
        if placed is not None:
            self.policy.check(placed.n_partitions)
            return placed._placement(self.link)
        X = self.rows.X
        threads = await self.link.threads()
        min_rows = max(int(config.get("min-partition-rows")),
                       self.program.min_partition_rows(self.rows.n_features))
        chunks = row_chunks(X, self.options.n_partitions, sum(threads.values()) or 1, min_rows)
        self.policy.check(len(chunks))
        if any(c == 0 for c in chunks):
            raise ValueError("X has an empty row chunk; every partition needs at least one row.")
        return await Placement.place(self.link, X, self.rows.y, self.rows.sample_weight, chunks)

    async def _rounds(self, placement: Placement) -> FitResult:
        program = self.program
        ctx = FitContext(self.fit_id, program, self.policy, self.options, self.link,
                         self.observers)
        loop = LOOPS[self.policy.rounds](ctx, placement)
        sizes = placement.sizes
        state = program.init(placement.parts.n_features, int(sum(sizes)))
        await loop.start()
        await self.observers.begin(FitInfo(
            max_iter=loop.max_steps, n_samples=int(sum(sizes)), n_partitions=len(sizes),
            sync=self.policy.name, program=program.name, fit_id=self.fit_id, unit=loop.unit))
        try:
            state, converged = await loop.run(state)
            held = await placement.nbytes_by_worker()
        finally:
            await placement.close()
        latency, stop_time = await self.link.round_times(loop.rids, self.observers.epoch0)
        await self.link.forget()
        attrs = {
            "sync": self.policy.name, "policy": repr(self.policy), "program": program.name,
            "program_repr": repr(program), "fit_id": self.fit_id, "n_partitions": len(sizes),
            "converged": int(converged), "max_worker_data_bytes": max(held.values(), default=0),
            **loop.attrs(),
        }
        history = self.observers.recorder.dataset(attrs=attrs, sizes=sizes,
                                                  harvest_latency=latency, stop_time=stop_time)
        return FitResult(coef=np.asarray(program.coefficients(state)), state=state,
                         history=history, n_iter=loop.n_iter, converged=converged)


#: The loop of each kind of sync model: global rounds, or a clock per partition.
LOOPS: dict[bool, type[FitLoop]] = {True: RoundLoop, False: ClockLoop}
