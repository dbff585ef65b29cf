"""The loop of the policies without global rounds: SSP and ASP.

The fitting process is the parameter server. Each partition's task
(:func:`~daskabsp.extension.run_partition`, its whole partition, never stopped) runs at the
parameters of the newest version when it was submitted. Results are taken as they complete
(``distributed.as_completed``, to which each new task is added): the update is applied at
once (:meth:`~daskabsp.programs.Program.partition_update`), recorded
(:meth:`~daskabsp.engine.observe.Observers.update_end`), and the partitions the
:class:`~daskabsp.engine.clocks.ClockBook` lets go are submitted with the newest parameters.

It shares the rooms of :class:`~daskabsp.engine.loop.RoundLoop`: the link submits, stops and
collects; membership and placement move a partition off a worker that is lost (its task
errs: the partitions are placed again) or frozen (its task is given up on once the worker has
been silent for ``daskabsp.unresponsive-after``); the book revokes the task's lease, so that
whatever it returns later is never applied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distributed import Future, as_completed
from distributed.client import FutureCancelledError
from distributed.scheduler import KilledWorker

from .. import config
from ..extension import PartialResult, RoundId
from ..programs.base import PartitionStats
from .clocks import ClockBook, Lease, Update
from .context import FitContext, FitLoop
from .link import ScanTask
from .membership import Membership
from .observe import UpdateRecord

if TYPE_CHECKING:
    from .placement import Placement

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Task:
    """A partition task in flight: its lease, its future, the parameters it runs at."""

    lease: Lease
    future: Future
    params: Any
    rid: RoundId
    submitted: float  # time.perf_counter()


class ClockLoop(FitLoop):
    """The updates of one fit under a policy without global rounds (SSP, ASP).

    Parameters
    ----------
    ctx : FitContext
        The fit (its program, policy, options, link and watchers).
    placement : Placement
        Where its rows are.
    """

    unit = "update"

    def __init__(self, ctx: FitContext, placement: Placement) -> None:
        super().__init__(ctx, placement)
        n = len(placement)
        self.book = ClockBook(n, ctx.policy.staleness_bound, ctx.options.max_iter * n)
        self.membership: Membership | None = None
        self.chunk_rows: list[int | None] = [None] * n
        self.ran_on: list[str] = []
        self._tasks: dict[Any, _Task] = {}
        self._late: dict[Any, _Task] = {}  # given up on; their results are never applied
        self._shared: tuple[int, Any] | None = None  # (version, its parameters as tasks take them)
        self._next: asyncio.Future | None = None
        self._objectives: deque[float] = deque(maxlen=n + 1)

    @property
    def n_iter(self) -> int:
        """Updates applied per partition, rounded up (the fit's rounds' worth of work)."""
        return self.book.clocks_run()

    @property
    def max_steps(self) -> int:
        return self.ctx.options.max_iter * len(self.placement)

    def attrs(self) -> dict:
        bound = self.ctx.policy.staleness_bound
        return {"replicas": 0, "staleness_bound": -1 if bound is None else int(bound)}

    async def start(self) -> None:
        """Who the workers are, and where each partition runs."""
        self.membership = await Membership.start(self.ctx.link, self.placement)
        self.ran_on = list(self.placement.owner)

    async def run(self, state) -> tuple[Any, bool]:
        """Apply updates from ``state`` until the program converges, a callback stops the
        fit or ``max_iter`` updates per partition have been applied; returns the last state
        and whether it converged."""
        ac = as_completed(loop=self.ctx.link.client.loop)
        try:
            await self._submit(state, ac)
            while self._tasks:
                fut = await self._completed(ac)
                got = None if fut is None else await self._result(fut)
                if got is not None:
                    task, res = got
                    update = self.book.finish(task.lease)
                    if update is not None:
                        state, stop = await self._apply(state, task, res, update)
                        if stop is not None:
                            return state, stop
                await self._submit(state, ac)
            return state, False
        except asyncio.CancelledError:  # Ctrl-C, or the caller cancelled the fit
            await self.ctx.link.halt()
            raise
        finally:
            await self._close()

    # -- submitting ----------------------------------------------------------------------------

    async def _submit(self, state, ac: as_completed) -> None:
        """Submit every partition the book lets go, at the newest parameters."""
        ready = self.book.ready()
        if not ready:
            return
        ctx, book = self.ctx, self.book
        params = ctx.program.params(state)
        arg = await self._params_arg(params)
        for p in ready:
            lease = book.start(p)
            rid = RoundId(ctx.fit_id, lease.clock, lease.attempt)
            task = ScanTask(p, self.placement.data(p), self.placement.owner[p], -lease.clock,
                            0, self.placement.sizes[p], self.chunk_rows[p])
            (fut,) = ctx.link.submit_round(rid, 0, arg, [task], ctx.options.chunk_target)
            self._tasks[fut.key] = _Task(lease, fut, params, rid, time.perf_counter())
            ac.add(fut)

    async def _params_arg(self, params):
        """The newest version's parameters as tasks take them (scattered once per version
        when large, see :meth:`Link.shared_params`)."""
        version = self.book.version
        if self._shared is not None and self._shared[0] == version:
            return self._shared[1]
        self._release_shared()
        arg = await self.ctx.link.shared_params(params, RoundId(self.ctx.fit_id, version))
        self._shared = (version, arg)
        return arg

    def _release_shared(self) -> None:
        if self._shared is not None and isinstance(self._shared[1], Future):
            self._shared[1].release()
        self._shared = None

    # -- collecting ----------------------------------------------------------------------------

    async def _completed(self, ac: as_completed) -> Future | None:
        """The next task to complete; None when tasks on silent workers were given up on
        meanwhile (checked a few times per ``daskabsp.unresponsive-after``)."""
        if self._next is None:
            self._next = asyncio.ensure_future(ac.__anext__())
        every = min(0.5, config.seconds("unresponsive-after") / 4)
        while True:
            done, _ = await asyncio.wait({self._next}, timeout=every)
            if done:
                nxt, self._next = self._next, None
                return nxt.result()
            if await self._give_up_stuck():
                return None

    async def _result(self, fut: Future) -> tuple[_Task, PartialResult] | None:
        """The task of ``fut`` and its result; None for a task given up on already, or one
        that lost its data with a worker (its partition is placed again and resubmitted)."""
        task = self._tasks.pop(fut.key, None)
        if task is None:
            late = self._late.pop(fut.key, None)
            if late is not None:
                logger.info("daskabsp: partition %d's update %d (attempt %d), given up on, "
                            "came back late; not applied", late.lease.partition,
                            late.lease.clock, late.lease.attempt)
            self.ctx.link.release([fut])
            return None
        try:
            (res,) = await self.ctx.link.gather([fut])
            return task, res
        except (KilledWorker, FutureCancelledError) as e:
            self.ctx.link.journal.note(
                logger, logging.WARNING, "partition %d's update %d lost data with a worker "
                "(%r); its rows placed again, the update resubmitted", task.lease.partition,
                task.lease.clock, e)
            self.book.give_up(task.lease)
            await self.placement.recover()
            return None
        finally:
            self.ctx.link.release([fut])

    async def _give_up_stuck(self) -> bool:
        """Give up on the tasks waiting on workers not heard from for
        ``daskabsp.unresponsive-after``: their partitions move to other workers and are
        resubmitted. True if any was given up on.

        Asked only once a task has been out that long, and never when no other worker
        answers either: that is a busy machine (or scheduler), not a frozen worker, and
        there would be nowhere to move the partitions to."""
        link, after = self.ctx.link, config.seconds("unresponsive-after")
        now = time.perf_counter()
        if not any(now - t.submitted >= after for t in self._tasks.values()):
            return False
        stuck = await link.stuck(list(self._tasks))
        silent = set(stuck.values()) | self.membership.silent
        if not stuck or not set(await link.threads()) - silent:
            return False
        late = {}
        for key, worker in stuck.items():
            task = self._tasks.pop(key, None)
            if task is not None and self.book.give_up(task.lease):
                late[task.lease.partition] = worker
                self._late[key] = task  # kept: if it ever returns, it is seen and dropped
        if not late:
            return False
        await self.membership.after_round(self.placement, self.ran_on, late,
                                          self.book.slowest)
        self.ran_on = list(self.placement.owner)
        return True

    # -- applying ------------------------------------------------------------------------------

    async def _apply(self, state, task: _Task, res: PartialResult,
                     update: Update) -> tuple[Any, bool | None]:
        """Apply ``update`` and tell the watchers; the new state, and whether the fit stops
        here (True: converged, False: a callback asked; None: go on)."""
        ctx, program = self.ctx, self.ctx.program
        p = task.lease.partition
        size = self.placement.sizes[p]
        piece = PartitionStats(p, 0, res.rows, size, res.stats, res.stats_before_wrap)
        state = program.partition_update(state, piece, task.params, update.staleness)
        obj = program.partition_objective(state, piece, task.params)
        self.chunk_rows[p] = res.chunk_rows or self.chunk_rows[p]
        self.ran_on[p] = res.worker or self.ran_on[p]
        coef = program.coefficients(state)
        owners = list(self.placement.owner)
        owners[p] = self.ran_on[p]
        if await ctx.observers.update_end(UpdateRecord(
                update, obj, res, size, owners, coef,
                coef if ctx.options.record_params else None, ctx.link.journal.take())):
            return state, False
        prev = self._objectives[0] if len(self._objectives) == self._objectives.maxlen \
            else None
        self._objectives.append(obj)
        if ctx.converged(state, obj, prev):
            ctx.observers.converged(update.applied + 1)
            return state, True
        self.membership.poll()
        await self.membership.after_round(self.placement, self.ran_on, {},
                                          task.lease.clock)
        self.ran_on = list(self.placement.owner)
        return state, None

    async def _close(self) -> None:
        """Stop the tasks still running (they return at their next chunk) and release
        them."""
        if self._next is not None:
            self._next.cancel()
            self._next = None
        tasks, self._tasks = list(self._tasks.values()), {}
        late, self._late = list(self._late.values()), {}
        link = self.ctx.link
        if tasks:
            await link.stop(sorted({t.rid for t in tasks}, key=lambda r: (r.round, r.attempt)))
        if tasks or late:
            await link.cancel([t.future for t in [*tasks, *late]])
        self._release_shared()
