"""The scheduler side of the harvest signal: a plugin that ends rounds.

The scheduler plugin learns each round's tasks from their ``daskabsp`` annotation. When the
quorum-th task of a round goes ``processing -> memory`` it sends ``daskabsp-stop`` to the workers
running the round's other tasks, over the scheduler's batched stream (no driver round trip). A
task of a stopped round that starts later (re-run after a worker died, stolen, queued) gets the
stop re-sent to its worker (a stolen one, to the worker that stole it). On the workers, the
stop sets a ``threading.Event`` per round (:mod:`._worker_plugin`), which partition tasks check
between chunks. Dask's ``cancel`` is never used for this: it cannot stop a running task.

The stop names the round's tasks on that worker; the worker answers with those still queued
there (``daskabsp-idle``), if any. Such a task can compute nothing: the flag is set before it
can start, and it checks the flag before its first row. The round is *settled* when each of its
tasks has either finished or been reported idle, and the driver (``daskabsp_settled``) stops
waiting there instead of for idle tasks to be started only to return nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin
from distributed.protocol.pickle import dumps

from . import _liveness as liveness
from ._fits import FitBook, page_status
from ._protocol import (
    ANNOTATION,
    COPY_PREFIX,
    FORGET_HANDLER,
    FORGET_OP,
    IDLE_OP,
    PAGE_STATUS_HANDLER,
    PLUGIN_NAME,
    REPORT_HANDLER,
    ROUND_INFO_HANDLER,
    SETTLED_HANDLER,
    SILENT_HANDLER,
    STOP_OP,
    STOP_ROUNDS_HANDLER,
    STUCK_HANDLER,
    PageStatus,
    RoundTimes,
    SettledReply,
)
from ._registry import Round, RoundRegistry
from ._worker_plugin import AbspWorkerPlugin

logger = logging.getLogger(__name__)


def keep_copies_in_place() -> bool:
    """Keep Dask's work stealing off the tasks that copy partitions (:data:`COPY_PREFIX`); say
    whether it could. Stealing leaves alone the key prefixes in its ``fast_tasks`` (those
    with a default duration of at most 1 ms), so the copies' prefix joins them."""
    try:
        from distributed import stealing

        stealing.fast_tasks.add(COPY_PREFIX)
    except (ImportError, AttributeError):  # another distributed: copies may be stolen
        logger.info("daskabsp: this distributed's work stealing has no fast_tasks; a copy "
                    "stolen onto its rows' own worker is dropped")
        return False
    return True


class AbspSchedulerPlugin(SchedulerPlugin):
    """Ends each A-BSP round on the scheduler as soon as its quorum of tasks has finished.

    A thin adapter: the rounds' bookkeeping is a :class:`~._registry.RoundRegistry` (fed from
    ``update_graph``, ``transition``, the workers' idle reports), who is silent comes from
    :mod:`._liveness`; this class sends the stops and answers the fitting process. Rounds are
    recognised by the annotation ``daskabsp={"fit": ..., "round": ..., "quorum": k}`` on their
    tasks; transitions of keys that belong to no round cost one dict lookup.

    Client-callable handlers (names in :mod:`daskabsp.extension`): ``daskabsp_round_info(fit)``
    returns the timing log of a fit's rounds, ``daskabsp_settled(round)`` waits until a
    round has settled, ``daskabsp_silent(workers, seconds)`` and ``daskabsp_stuck(keys,
    seconds)`` name what waits on silent workers, ``daskabsp_fit_report(fit, events)`` takes
    a driver's reports for the dashboard page (:attr:`book`), ``daskabsp_page_status()``
    says whether this scheduler serves that page, ``daskabsp_forget_fit(fit)`` drops an
    ended fit's log and stop flags.
    """

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.scheduler = None
        self._pending: set[asyncio.Future] = set()
        self._unequipped: set[str] = set()  # workers the worker plugin has not reached yet
        self._announced: dict[str, asyncio.Event] = {}  # rounds waited for before they exist
        self._settled: dict[str, asyncio.Event] = {}  # rounds waited for until they settle
        self.registry = RoundRegistry(on_settle=self._wake)
        self.book = FitBook()  # the fits the dashboard page shows

    async def start(self, scheduler) -> None:
        """Install the handlers, and the worker plugin on every worker, now and to come."""
        self.scheduler = scheduler
        self._unequipped = install_worker_plugin(scheduler, AbspWorkerPlugin(), self._spawn)
        scheduler.handlers.update({
            ROUND_INFO_HANDLER: self.round_info, FORGET_HANDLER: self.forget_fit,
            SETTLED_HANDLER: self.settled, SILENT_HANDLER: self.silent,
            STUCK_HANDLER: self.stuck, REPORT_HANDLER: self.fit_report,
            STOP_ROUNDS_HANDLER: self.stop_rounds,
            PAGE_STATUS_HANDLER: self.page_status})
        scheduler.stream_handlers[IDLE_OP] = self._idle
        keep_copies_in_place()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    # -- the scheduler's events ----------------------------------------------------------------

    def update_graph(self, scheduler, *, client=None, annotations=None, **kwargs: Any) -> None:
        ann = (annotations or {}).get(ANNOTATION)
        for key, a in (ann or {}).items():
            r = self.registry.announce(key, a, client)
            self._wake_announced(r.rid)
            if r.stopped:  # a task added to an already stopped round (resubmitted, say)
                ts = scheduler.tasks.get(key)
                if ts is not None and ts.processing_on is not None:
                    self._send_stop(r, {ts.processing_on.address: [key]})

    def transition(self, key, start, finish, *args: Any, **kwargs: Any) -> None:
        reg = self.registry
        r = reg.round_of(key)
        if r is None:
            if finish == "memory" and isinstance(key, str) and key.startswith(COPY_PREFIX):
                self._drop_fetched_sources(key)
            return
        if finish == "memory" and start == "processing":
            had = r.deadline
            if reg.finished(key) is not None:
                self._stop(r)
            elif had is None and r.deadline is not None:  # its quorum, with patience
                asyncio.get_running_loop().call_later(max(r.deadline - time.time(), 0.0),
                                                      self._expire, r.rid)
        elif finish == "processing":
            ws = self.scheduler.tasks[key].processing_on
            if ws is not None:
                reg.processing(key, ws.address)
                if r.stopped:
                    self._send_stop(r, {ws.address: [key]})
        elif finish == "erred":
            reg.erred(key)
        elif finish == "forgotten":
            gone = reg.forgotten(key)
            if gone is not None and gone.t_quorum is not None and gone.t_last is not None:
                self.book.note_latency(gone.fit, gone.number, gone.t_last - gone.t_quorum)

    def _drop_fetched_sources(self, key: str) -> None:
        """A copy has landed: the replica of its source that Dask fetched to the copy's
        worker to make it is dropped at once (the copy, a key of its own, holds the same
        rows). Dask's active memory manager would drop it within seconds; meanwhile the
        source had two holders, and a fit started then placed a partition where a copy had
        been, its worker scanning two partitions (measured: the rounds of the fit after a
        copying one twice as long)."""
        sched = self.scheduler
        ts = sched.tasks.get(key) if sched is not None else None
        if ts is None:
            return
        for ws in list(ts.who_has or ()):
            # never a replica a task processing there still reads: the worker refuses to drop
            # it while that task executes, and the error takes the worker down
            extra = [d.key for d in ts.dependencies
                     if ws in d.who_has and len(d.who_has) > 1
                     and not any(w.processing_on is ws for w in d.waiters or ())]
            if extra:
                try:
                    sched.request_remove_replicas(ws.address, extra,
                                                  stimulus_id=f"daskabsp-copy-{time.time()}")
                except Exception as e:  # an older or newer scheduler: the AMM still drops it
                    logger.debug("daskabsp: could not drop %s on %s: %r", extra, ws.address,
                                 e)

    def log_event(self, topic: str, msg: Any) -> None:
        # Work stealing moves a queued task to another worker without a transition: a task
        # of a stopped round stolen by a worker that never got the stop would run its whole
        # quota there.
        if topic == "stealing" and isinstance(msg, (tuple, list)) and msg and msg[0] == "confirm":
            r = self.registry.round_of(msg[1])
            if r is not None:
                self.registry.processing(msg[1], msg[4])
                if r.stopped:
                    self._send_stop(r, {msg[4]: [msg[1]]})

    def remove_worker(self, scheduler, worker: str, **kwargs: Any) -> None:
        # Its tasks are rescheduled (or wait for a worker): none of them is open there now.
        self.registry.left(worker)
        self._unequipped.discard(worker)

    def remove_client(self, scheduler, client: str) -> None:
        self.registry.remove_client(client)
        self.book.forget_client(client)

    def _idle(self, worker: str, round: str, keys=(), occupied: bool = False,
              **kwargs: Any) -> None:
        """A worker's answer to a stop: these tasks of ``round`` were not executing there."""
        tasks = self.scheduler.tasks

        def queued_on(key):
            ts = tasks.get(key)
            return ts.processing_on.address if ts is not None and ts.processing_on else None

        self.registry.reported_idle(round, worker, keys, occupied, queued_on)

    def _wake(self, r: Round) -> None:
        ev = self._settled.get(r.rid)
        if ev is not None:
            ev.set()

    def _wake_announced(self, rid: str) -> None:
        ev = self._announced.get(rid)
        if ev is not None:
            ev.set()  # a waiter that came before the round's graph: the round exists now

    # -- the stop ------------------------------------------------------------------------------

    def _expire(self, rid: str) -> None:
        r = self.registry.expire(rid)
        if r is not None:
            self._stop(r)

    def _stop(self, r: Round) -> None:
        """One stop per worker with open tasks of ``r`` (the registry knows where each open
        task is processing: no look-up in the scheduler's state)."""
        on: dict[str, list] = {}
        for key, worker in r.on.items():
            on.setdefault(worker, []).append(key)
        self._send_stop(r, on)

    def _send_stop(self, r: Round, on: dict[str, list]) -> None:
        """Send the stop of ``r`` to the workers in ``on``, naming the round's keys there."""
        known = self.scheduler.workers
        for addr, keys in on.items():
            if addr not in known:  # left meanwhile: its tasks get the stop where they go next
                continue
            if addr not in self._unequipped:
                self.scheduler.worker_send(addr, {"op": STOP_OP, "rounds": [r.rid],
                                                  "keys": keys})
            else:  # a stream op unknown to the worker would drop its connection; RPC only logs
                self._spawn(self._rpc_stop(addr, [r.rid]))

    def stop_rounds(self, rounds=()) -> None:
        """Set the stop flags of ``rounds`` on every worker, without waiting for any (a
        frozen worker gets the stop when it resumes): the driver's stop of a fit it ends
        or a wave it gives up."""
        rounds = list(rounds)
        for addr in list(self.scheduler.workers):
            if addr not in self._unequipped:
                self.scheduler.worker_send(addr, {"op": STOP_OP, "rounds": rounds,
                                                  "keys": []})
            else:
                self._spawn(self._rpc_stop(addr, rounds))

    async def _rpc_stop(self, addr: str, rounds: list[str]) -> None:
        try:
            await self.scheduler.rpc(addr).daskabsp_stop(rounds=rounds)
        except Exception as e:  # the worker may be gone; its tasks are rescheduled
            logger.debug("daskabsp: stop to %s failed: %s", addr, e)

    # -- handlers ------------------------------------------------------------------------------

    async def settled(self, round: str, timeout: float = 10.0,
                      unresponsive: float | None = None) -> SettledReply | None:
        """Wait until ``round`` has settled (see :class:`~daskabsp.extension.SettledReply`).

        With ``unresponsive`` (seconds), give up on the round's open tasks once every one
        of them is on a worker not heard from for that long (a frozen or cut-off worker: its
        stop cannot arrive and its answer would not either), and at once on those that can
        never run (bound to a worker that has left). Returns None if the round is
        unknown after ``timeout`` seconds (the caller then waits for every task). The call
        may arrive before the round's graph does.
        """
        reg = self.registry
        if round not in reg.rounds:
            ev = self._announced.setdefault(round, asyncio.Event())
            try:
                await asyncio.wait_for(ev.wait(), timeout)
            except asyncio.TimeoutError:
                return None
            finally:
                self._announced.pop(round, None)
        r = reg.rounds.get(round)
        if r is None:
            return None
        ev = self._settled.setdefault(round, asyncio.Event())
        late: list = []
        try:
            while r.open and not late and reg.rounds.get(round) is r:
                if unresponsive is None:
                    await ev.wait()
                    continue
                try:
                    await asyncio.wait_for(ev.wait(), min(0.5, unresponsive / 4))
                except asyncio.TimeoutError:
                    late = self._given_up(r, unresponsive)
        finally:
            self._settled.pop(round, None)
        return {"idle": list(r.idle.items()), "late": late, "occupied": sorted(r.occupied)}

    def _quiet(self, seconds: float) -> liveness.Quiet:
        """The workers not heard from for ``seconds``, judged one at a time (a question
        about a few workers does not scan the whole cluster)."""
        return liveness.Quiet(self.scheduler.workers.values(), _last_seen, time.time(),
                              seconds)

    def _given_up(self, r: Round, seconds: float) -> list:
        """The open tasks of ``r`` to give up on (see :func:`._liveness.given_up`)."""
        tasks, present = self.scheduler.tasks, self.scheduler.workers
        stuck = liveness.waiting_on((tasks[k] for k in r.open if k in tasks),
                                    self._quiet(seconds), present)
        return liveness.given_up(r.open, stuck, present)

    def silent(self, workers=(), seconds: float = 3.0) -> list[str]:
        """Those of ``workers`` still in the cluster and not heard from for ``seconds`` (see
        :class:`daskabsp.extension._liveness.Quiet`)."""
        known, quiet = self.scheduler.workers, self._quiet(seconds)
        return [w for w in workers if w in known and known[w] in quiet]

    def stuck(self, keys=(), seconds: float = 3.0) -> list:
        """``[(key, worker), ...]`` for those of ``keys`` that wait on workers not heard from
        for ``seconds``, or on workers that have left (see
        :func:`daskabsp.extension._liveness.waiting_on`)."""
        tasks = self.scheduler.tasks
        found = liveness.waiting_on((tasks[k] for k in keys if k in tasks),
                                    self._quiet(seconds), self.scheduler.workers)
        return list(found.items())

    def fit_report(self, fit: str, events=()) -> None:
        """A driver's reports of ``fit`` for the dashboard page, see :class:`FitBook`."""
        self.book.report(fit, list(events))

    def page_status(self) -> PageStatus:
        """Whether this scheduler serves the daskabsp dashboard page, see
        :func:`daskabsp.extension.page_status`."""
        return page_status(self.scheduler)

    def forget_fit(self, fit: str) -> None:
        """Forget ``fit``'s round log here and its stop flags on the workers its tasks went
        to (it has ended and its driver has read the log): a long-lived cluster's plugins
        then hold nothing per round of the fits it ran."""
        known = self.scheduler.workers
        for addr in self.registry.forget_fit(fit):  # the workers its tasks were sent to
            if addr in known and addr not in self._unequipped:
                self.scheduler.worker_send(addr, {"op": FORGET_OP, "fit": fit})

    def round_info(self, fit: str) -> dict[str, RoundTimes]:
        """Timings of the rounds of ``fit``: quorum time and last result time (scheduler
        clock)."""
        return self.registry.times(fit)


def _last_seen(ws) -> float:
    return ws.last_seen


def install_worker_plugin(scheduler, plugin: WorkerPlugin, spawn) -> set[str]:
    """Install ``plugin`` on the workers of ``scheduler``, as distributed's own shuffle
    extension does: workers that join later get it when they register (it is in the
    scheduler's ``worker_plugins``), those here now get it one by one in the background
    (``spawn(coroutine)`` runs one), so that a frozen worker cannot hold up the first fit.
    Returns the workers not equipped yet; each leaves the set once it has answered (a
    stream op unknown to a worker drops its connection: send those only stops by RPC)."""
    if PLUGIN_NAME in scheduler.worker_plugins:
        return set()
    blob = dumps(plugin)
    scheduler.worker_plugins[PLUGIN_NAME] = blob
    waiting = set(scheduler.workers)

    async def equip(addr: str) -> None:
        try:
            await scheduler.broadcast(msg={"op": "plugin-add", "plugin": blob,
                                           "name": PLUGIN_NAME}, workers=[addr],
                                      on_error="ignore")
        finally:
            waiting.discard(addr)

    for addr in list(waiting):
        spawn(equip(addr))
    return waiting


