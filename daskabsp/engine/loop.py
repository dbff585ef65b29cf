"""The round loop of the policies with global rounds: BSP and A-BSP (quorum, drop, the
published variant and the default with helpers).

One round is a short pipeline: plan (:func:`~daskabsp.engine.plan.plan_round`) -> run (the
partitions' own tasks, stopped at the quorum) -> help (the leftovers scanned by helpers) ->
settle (:func:`~daskabsp.engine.plan.settle`) -> update (the program) -> membership -> observe
-> stop? Every decision lives in a room of its own; this module only strings them together.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distributed.client import FutureCancelledError
from distributed.scheduler import KilledWorker

from .. import config
from ..extension import PartialResult, RoundId
from .book import PartitionBook, quotas_of
from .context import FitContext, FitLoop
from .helpers import Helped, HelperPhase
from .link import ScanTask
from .membership import Membership
from .observe import RoundRecord
from .plan import RoundPlan, expected_scans, plan_round, settle

if TYPE_CHECKING:
    from .placement import Placement

logger = logging.getLogger(__name__)

#: Attempts at a round whose tasks lost their data with a worker.
ROUND_ATTEMPTS = 3


@dataclass
class RoundRun:
    """What one round's tasks came back with.

    Attributes
    ----------
    rid : RoundId
        The round (its last attempt).
    owned : list of PartialResult
        Each partition's own task's result.
    helped : Helped
        The outcomes, merged with the helpers' pieces.
    late : dict
        ``{partition: worker}`` of the own tasks given up on (their worker went silent).
    """

    rid: RoundId
    owned: list[PartialResult]
    helped: Helped
    late: dict[int, str]

    def ran_on(self, owner: list[str]) -> list[str]:
        """Where each partition's own task ran (its owner if it ran nowhere)."""
        return [res.worker or w for res, w in zip(self.owned, owner, strict=True)]


class RoundLoop(FitLoop):
    """The rounds of one fit under a policy with global rounds.

    Parameters
    ----------
    ctx : FitContext
        The fit (its program, policy, options, link and watchers).
    placement : Placement
        Where its rows are.
    """

    unit = "round"

    def __init__(self, ctx: FitContext, placement: Placement) -> None:
        super().__init__(ctx, placement)
        sizes = placement.sizes
        self.book = PartitionBook(sizes, quotas_of(ctx.options.quota, sizes))
        self.membership: Membership | None = None
        self.helpers: HelperPhase | None = None

    @property
    def n_iter(self) -> int:
        return len(self.rids)

    def attrs(self) -> dict:
        return {"replicas": int(config.get("replicas")) if self.helpers is not None else 0}

    async def start(self) -> None:
        """Who the workers are, where each partition runs, and the helpers' prices."""
        ctx, placement = self.ctx, self.placement
        self.membership = await Membership.start(ctx.link, placement)
        if ctx.policy.helped and ctx.program.helpable and int(config.get("replicas")) > 0:
            self.helpers = HelperPhase(len(placement), await placement.copy_seconds(),
                                       ctx.options.chunk_target, ctx.program.combine)

    async def run(self, state) -> tuple[Any, bool]:
        """Run rounds from ``state`` until the program converges, a callback stops the fit
        or ``max_iter`` rounds have run; returns the last state and whether it converged."""
        ctx, book, obs = self.ctx, self.book, self.ctx.observers
        program, policy = ctx.program, ctx.policy
        prev = None
        for r in range(ctx.options.max_iter):
            await obs.round_begin(r, program.coefficients(state))
            params = program.params(state)
            plan = plan_round(policy, book.quotas, book.sizes, helpers=self.helpers is not None,
                              full=program.full_round(state), expected=expected_scans(
                                  book.quotas, book.steady_rate(), self.placement.owner),
                              help_wanted=program.help_round(state),
                              copied=[bool(self.placement.copy_holders(p))
                                      for p in range(len(book.sizes))])
            ran = await self.run_round(r, plan, params)
            outcomes = ran.helped.outcomes
            settled = settle(policy, book.cursor, book.sizes, outcomes, ran.helped.helper_rows,
                             [*self.membership.threads, *sorted(self.membership.silent)])
            stats = program.combine_round(settled.pieces, params)
            obj = program.objective(state, stats, settled.rows)
            state = program.update(state, stats, settled.rows)
            cursors = tuple(book.cursor)
            book.record(settled.cursors, settled.counted, ran.owned,
                        probe_rows=int(config.get("probe-rows")),
                        chunk_target=ctx.options.chunk_target)
            await self.membership.after_round(self.placement,
                                              ran.ran_on(self.placement.owner), ran.late, r)
            if await obs.round_end(RoundRecord(
                    r, obj, program.params_array(params) if ctx.options.record_params else None,
                    plan.quotas, cursors, ran.owned, outcomes, settled,
                    program.coefficients(state), ctx.link.journal.take())):
                return state, False
            if ctx.converged(state, obj, prev):
                obs.converged(r + 1)
                return state, True
            prev = obj
        return state, False

    async def run_round(self, r: int, plan: RoundPlan, params) -> RoundRun:
        """Round ``r``: its tasks run, stopped and collected, then its helpers; a round whose
        tasks lost their data with a worker is placed again and run again."""
        link = self.ctx.link
        for attempt in range(ROUND_ATTEMPTS):
            rid = RoundId(self.ctx.fit_id, r).retry(attempt)
            self.membership.poll()
            try:
                ran = await self._attempt(rid, plan, params)
            except (KilledWorker, FutureCancelledError) as e:
                # Its traceback holds this round's frames, and with them the next attempt's
                # futures: their keys would outlive the fit on the cluster.
                e.__traceback__ = None
                link.journal.note(logger, logging.WARNING,
                                  "round %d lost data with a worker (%r); its rows placed "
                                  "again, the round retried", r, e)
                await self.placement.recover()
                if attempt == ROUND_ATTEMPTS - 1:
                    raise
                continue
            except asyncio.CancelledError:  # Ctrl-C, or the caller cancelled the fit
                await link.halt()
                raise
            self.rids.append(rid)
            return ran
        raise AssertionError("unreachable")

    async def _attempt(self, rid: RoundId, plan: RoundPlan, params) -> RoundRun:
        """One attempt at a round (its tasks released if their data was lost)."""
        link, options = self.ctx.link, self.ctx.options
        futs: list = []
        try:
            async with link.round_params(params, rid) as arg:
                futs = link.submit_round(rid, plan.quorum, arg, self._tasks(plan),
                                         options.chunk_target, plan.unit, plan.patience)
                got = await link.collect(futs, rid, self.book.cursor, quorum=plan.quorum,
                                         settle=self.ctx.policy.stops,
                                         patience=plan.patience)
                helped = await self._help(rid, plan, arg, got.results,
                                          self.membership.blocked(got.late.values(),
                                                                  got.occupied))
            return RoundRun(rid, got.results, helped, got.late)
        except (KilledWorker, FutureCancelledError):
            await link.cancel(futs)
            raise

    def _tasks(self, plan: RoundPlan) -> list[ScanTask]:
        """The round's own tasks, most stale partition first."""
        book, placement = self.book, self.placement
        return [ScanTask(p, placement.data(p), placement.owner[p], book.staleness[p],
                         book.cursor[p], plan.quotas[p], book.chunk_rows[p],
                         plan.grace[p] if plan.grace else 0)
                for p in book.order()]

    async def _help(self, rid: RoundId, plan: RoundPlan, params,
                    owned: list[PartialResult], blocked: set[str]) -> Helped:
        """The round's helper phase, if the plan has one (copies of stragglers' partitions
        started first, for later rounds)."""
        helpers = self.helpers
        own = Helped.own(owned)
        if helpers is None or not plan.copies:
            return own
        helpers.observe(owned)
        self.placement.price_overdue()  # copies in the making past their price raise it
        # Other work holds the blocked workers for now: no piece can run there, and their
        # partitions' rows can only move on through copies.
        helpers.copy_stragglers(self.placement, owned, plan.quotas, self.membership.threads,
                                blocked)
        if not plan.helped:
            return own
        helped = await helpers.run(self.ctx.link, self.placement, self.book, params,
                                   rid.helpers(), owned, plan.quotas, self.membership.threads,
                                   blocked, needed=plan.full)
        self.membership.give_up(helped.silent)
        return helped
