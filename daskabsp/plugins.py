"""The harvest signal path: a scheduler plugin that ends rounds, a worker plugin with the flags.

The scheduler plugin learns each round's tasks from their ``daskabsp`` annotation. When the
quorum-th task of a round goes ``processing -> memory`` it sends ``daskabsp-stop`` to the workers
running the round's other tasks, over the scheduler's batched stream (no driver round trip). A
task of a stopped round that starts later (re-run after a worker died, stolen, queued) gets the
stop re-sent to its worker (a stolen one, to the worker that stole it). On the workers, the
stop sets a ``threading.Event`` per round, which partition tasks check between chunks. Dask's
``cancel`` is never used for this: it cannot stop a running task.

The stop names the round's tasks on that worker; the worker answers with those that are not
executing (``daskabsp-idle``). Such a task can compute nothing: the flag is set before it can
start, and it checks the flag before its first row. The round is *settled* when each of its
tasks has either finished or been reported idle, and the driver (``daskabsp_settled``) stops
waiting there instead of for idle tasks to be started only to return nothing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin
from distributed.protocol.pickle import dumps
from distributed.scheduler import heartbeat_interval

from . import config
from .monitor import FitBook, page_status
from .protocol import (
    ANNOTATION,
    FORGET_HANDLER,
    FORGET_OP,
    IDLE_OP,
    PAGE_STATUS_HANDLER,
    REPORT_HANDLER,
    ROUND_INFO_HANDLER,
    SETTLED_HANDLER,
    SILENT_HANDLER,
    STOP_HANDLER,
    STOP_OP,
    STUCK_HANDLER,
    RoundId,
)
from .runtime import EXTENSION

logger = logging.getLogger(__name__)

PLUGIN_NAME = "daskabsp"


class AbspWorkerPlugin(WorkerPlugin):
    """Keeps the per-round stop flags of one worker and sets them when told to stop.

    Registered as ``worker.extensions["daskabsp"]``; its handlers are the batched-stream op
    ``daskabsp-stop`` (used by the scheduler plugin) and the RPC ``daskabsp_stop``.
    """

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker) -> None:
        self._worker = worker
        self._held: dict[Any, tuple[dict, set]] = {}  # executing key -> idle report it holds
        self._lock = threading.Lock()
        self._flags: OrderedDict[str, threading.Event] = OrderedDict()
        self._max = int(config.get("max-rounds-per-worker"))
        worker.stream_handlers[STOP_OP] = self.stop
        worker.stream_handlers[FORGET_OP] = self.forget
        worker.handlers[STOP_HANDLER] = self._stop_rpc
        worker.extensions[EXTENSION] = self

    def flag(self, round_id: str) -> threading.Event:
        """The stop flag of ``round_id`` (created unset on first use)."""
        with self._lock:
            ev = self._flags.get(round_id)
            if ev is None:
                ev = self._flags[round_id] = threading.Event()
                if len(self._flags) > self._max:
                    self._flags.popitem(last=False)
            return ev

    def stop(self, rounds=(), keys=(), **kwargs: Any) -> None:
        """Set the stop flags of ``rounds``; report which of ``keys`` are not executing.

        Runs on the worker's event loop, where tasks also become ``executing``: a task that is
        not executing now starts after its flag is set, so it will return without a row.
        """
        for rid in rounds:
            self.flag(rid).set()
        state = getattr(self._worker, "state", None)
        if not (keys and rounds) or state is None:
            return
        running = {ts.key for ts in state.executing} | {ts.key for ts in state.long_running}
        busy = {k for k in keys if k in running}
        if len(busy) == len(keys):
            return
        report = {"op": IDLE_OP, "round": rounds[0], "keys": [k for k in keys if k not in busy],
                  # every thread held by other work: the round's tasks here wait for it
                  "occupied": not busy and len(running) >= state.nthreads}
        if busy:
            # The round cannot settle before these return: send the report with their
            # results (one write) rather than just before them, which would hold the
            # results back by the batched stream's interval.
            held = (report, busy)
            for k in busy:
                self._held[k] = held
        else:
            self._worker.batched_stream.send(report)

    def forget(self, fit: str = "", **kwargs: Any) -> None:
        """Drop the stop flags of the rounds of ``fit`` (it has ended)."""
        prefix = f"{fit}:"
        with self._lock:
            for rid in [r for r in self._flags if r.startswith(prefix)]:
                del self._flags[rid]

    def transition(self, key, start, finish, **kwargs: Any) -> None:
        if self._held and start == "executing":
            held = self._held.pop(key, None)
            if held is not None:
                report, busy = held
                busy.discard(key)
                if not busy:
                    self._worker.batched_stream.send(report)

    async def _stop_rpc(self, rounds=(), **kwargs: Any) -> None:
        self.stop(rounds)


@dataclass
class _Round:
    rid: str  # str(RoundId), as on the wire
    number: int  # the round's number in its fit
    fit: str
    quorum: int  # 0: never stop (BSP)
    client: str | None
    keys: set = field(default_factory=set)
    open: set = field(default_factory=set)  # neither finished nor reported idle
    idle: dict = field(default_factory=dict)  # key -> worker that reported it idle
    occupied: set = field(default_factory=set)  # workers whose threads other work held
    finished: int = 0
    stopped: bool = False
    t_quorum: float | None = None
    t_last: float | None = None  # when the round settled (its last key left ``open``)
    settled: asyncio.Event | None = None  # created by a waiter
    logged: bool = True  # False once its fit is forgotten: its keys may still be released


def _settle(r: _Round, key) -> None:
    if key in r.open:
        r.open.discard(key)
        if not r.open:
            r.t_last = time.time()
            if r.settled is not None:
                r.settled.set()


class AbspSchedulerPlugin(SchedulerPlugin):
    """Ends each A-BSP round on the scheduler as soon as its quorum of tasks has finished.

    Rounds are recognised by the annotation ``daskabsp={"fit": ..., "round": ..., "quorum": k}``
    on their tasks. Transitions of keys that belong to no round cost one dict lookup.

    Client-callable handlers: ``daskabsp_round_info(fit)`` returns the timing log of a fit's
    rounds (when the quorum was reached, when the round settled), ``daskabsp_settled(round)``
    waits until a round has settled and returns its idle tasks, ``daskabsp_silent(workers,
    seconds)`` names the silent ones among workers, ``daskabsp_fit_report(fit, events)`` takes
    a driver's reports of a fit for the dashboard page (:attr:`book`) and
    ``daskabsp_page_status()`` says whether this scheduler serves that page.
    """

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.scheduler = None
        self._pending: set[asyncio.Future] = set()
        self._unequipped: set[str] = set()  # workers the worker plugin has not reached yet
        self.rounds: dict[str, _Round] = {}
        self.key_round: dict[Any, _Round] = {}
        self._announced: dict[str, asyncio.Event] = {}  # rounds waited for before they exist
        # rid -> (fit, n, quorum time, last result time), bounded
        self.log: deque[tuple[str, str, int, float | None, float | None]] = deque(maxlen=100_000)
        self.book = FitBook()  # the fits the dashboard page shows

    async def start(self, scheduler) -> None:
        """Install the handlers, and the worker plugin on every worker, now and to come
        (as distributed's own shuffle extension does)."""
        self.scheduler = scheduler
        if PLUGIN_NAME not in scheduler.worker_plugins:
            # Workers that join from now on get it when they register; those here now get it
            # one by one, in the background: a frozen worker would otherwise hold the first
            # fit until it resumed. Until one has answered it gets no stream op (a stream op
            # unknown to a worker drops its connection); its stops go by RPC.
            plugin = dumps(AbspWorkerPlugin())
            scheduler.worker_plugins[PLUGIN_NAME] = plugin
            self._unequipped = set(scheduler.workers)
            for addr in list(self._unequipped):
                task = asyncio.ensure_future(self._equip(addr, plugin))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
        scheduler.handlers[ROUND_INFO_HANDLER] = self.round_info
        scheduler.handlers[FORGET_HANDLER] = self.forget_fit
        scheduler.handlers[SETTLED_HANDLER] = self.settled
        scheduler.handlers[SILENT_HANDLER] = self.silent
        scheduler.handlers[STUCK_HANDLER] = self.stuck
        scheduler.handlers[REPORT_HANDLER] = self.fit_report
        scheduler.handlers[PAGE_STATUS_HANDLER] = self.page_status
        scheduler.stream_handlers[IDLE_OP] = self._idle

    async def _equip(self, addr: str, plugin: bytes) -> None:
        try:
            await self.scheduler.broadcast(msg={"op": "plugin-add", "plugin": plugin,
                                                "name": PLUGIN_NAME}, workers=[addr],
                                           on_error="ignore")
        finally:
            self._unequipped.discard(addr)

    # -- bookkeeping ---------------------------------------------------------------------------

    def update_graph(self, scheduler, *, client=None, annotations=None, **kwargs: Any) -> None:
        ann = (annotations or {}).get(ANNOTATION)
        if not ann:
            return
        for key, a in ann.items():
            round_id = RoundId.from_annotation(a)
            rid = str(round_id)
            r = self.rounds.get(rid)
            if r is None:
                r = self.rounds[rid] = _Round(rid, round_id.round, round_id.fit,
                                              int(a["quorum"]), client)
                announced = self._announced.pop(rid, None)
                if announced is not None:
                    announced.set()
            r.keys.add(key)
            r.open.add(key)
            self.key_round[key] = r
            if r.stopped:
                # A task added to an already stopped round (e.g. resubmitted).
                ts = scheduler.tasks.get(key)
                if ts is not None and ts.processing_on is not None:
                    self._send_stop(r, {ts.processing_on.address: [key]})

    def transition(self, key, start, finish, *args: Any, **kwargs: Any) -> None:
        r = self.key_round.get(key)
        if r is None:
            return
        if finish == "memory" and start == "processing":
            r.finished += 1
            _settle(r, key)
            if not r.stopped and r.quorum and r.finished >= r.quorum:
                r.t_quorum = time.time()
                self._stop(r)
        elif finish == "processing":
            if r.stopped:
                ws = self.scheduler.tasks[key].processing_on
                if ws is not None:
                    self._send_stop(r, {ws.address: [key]})
        elif finish == "erred":
            _settle(r, key)
        elif finish == "forgotten":
            del self.key_round[key]
            r.keys.discard(key)
            _settle(r, key)
            if not r.keys:
                self._retire(r)

    def log_event(self, topic: str, msg: Any) -> None:
        # Work stealing moves a queued task to another worker without a transition: a task
        # of a stopped round stolen by a worker that never got the stop would run its whole
        # quota there.
        if topic == "stealing" and isinstance(msg, (tuple, list)) and msg and msg[0] == "confirm":
            r = self.key_round.get(msg[1])
            if r is not None and r.stopped:
                self._send_stop(r, {msg[4]: [msg[1]]})

    def remove_client(self, scheduler, client: str) -> None:
        for r in [r for r in self.rounds.values() if r.client == client]:
            for key in r.keys:
                self.key_round.pop(key, None)
            self._retire(r)
        self.book.forget_client(client)

    def _retire(self, r: _Round) -> None:
        if self.rounds.pop(r.rid, None) is not None:
            if r.logged:
                self.log.append((r.rid, r.fit, r.finished, r.t_quorum, r.t_last))
            if r.t_quorum is not None and r.t_last is not None:
                self.book.note_latency(r.fit, r.number, r.t_last - r.t_quorum)
        if r.settled is not None:
            r.settled.set()  # release waiters of a round that can no longer settle

    # -- the stop ------------------------------------------------------------------------------

    def _stop(self, r: _Round) -> None:
        r.stopped = True
        tasks = self.scheduler.tasks
        on: dict[str, list] = {}
        for key in r.keys:
            ts = tasks.get(key)
            if ts is not None and ts.processing_on is not None:
                on.setdefault(ts.processing_on.address, []).append(key)
        self._send_stop(r, on)

    def _send_stop(self, r: _Round, on: dict[str, list]) -> None:
        """Send the stop of ``r`` to the workers in ``on``, naming the round's keys there."""
        s = self.scheduler
        for addr, keys in on.items():
            if addr not in self._unequipped:
                s.worker_send(addr, {"op": STOP_OP, "rounds": [r.rid], "keys": keys})
            else:
                # A stream op unknown to the worker would drop its connection; RPC only logs.
                task = asyncio.ensure_future(self._rpc_stop(addr, [r.rid]))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    async def _rpc_stop(self, addr: str, rounds: list[str]) -> None:
        try:
            await self.scheduler.rpc(addr).daskabsp_stop(rounds=rounds)
        except Exception as e:  # the worker may be gone; its tasks are rescheduled
            logger.debug("daskabsp: stop to %s failed: %s", addr, e)

    def _idle(self, worker: str, round: str, keys=(), occupied: bool = False,
              **kwargs: Any) -> None:
        """A worker's answer to a stop: these tasks of ``round`` were not executing there
        (``occupied``: because other work held all its threads)."""
        r = self.rounds.get(round)
        if r is None:
            return
        if occupied:
            r.occupied.add(worker)
        tasks = self.scheduler.tasks
        for key in keys:
            ts = tasks.get(key)
            # Only while it is still queued on that worker: a task moved since then gets the
            # stop again at its new worker, whose answer counts.
            if (key in r.open and ts is not None and ts.processing_on is not None
                    and ts.processing_on.address == worker):
                r.idle[key] = worker
                _settle(r, key)

    # -- handlers ------------------------------------------------------------------------------

    async def settled(self, round: str, timeout: float = 60.0,
                      unresponsive: float | None = None) -> dict | None:
        """Wait until ``round`` has settled.

        Returns ``{"idle": [(key, worker), ...], "late": [(key, worker), ...], "occupied":
        [worker, ...]}``: the tasks reported idle; (with ``unresponsive``, in seconds) the
        tasks given up because every task still open is on a worker whose last heartbeat is
        older than that (a frozen or cut-off worker: its stop cannot arrive and its answer
        would not either); and the workers that reported tasks idle because other work held
        all their threads.
        Returns None if the round is unknown after ``timeout`` seconds (the caller then waits
        for every task). The call may arrive before the round's graph does.
        """
        r = self.rounds.get(round)
        if r is None:
            ev = self._announced.setdefault(round, asyncio.Event())
            try:
                await asyncio.wait_for(ev.wait(), timeout)
            except asyncio.TimeoutError:
                self._announced.pop(round, None)
                return None
            r = self.rounds.get(round)
            if r is None:
                return None
        if r.settled is None:
            r.settled = asyncio.Event()
        late: list = []
        while r.open and not late:
            if unresponsive is None:
                await r.settled.wait()
                break
            try:
                await asyncio.wait_for(r.settled.wait(), min(0.5, unresponsive / 4))
            except asyncio.TimeoutError:
                late = self._on_unresponsive(r, unresponsive)
        return {"idle": list(r.idle.items()), "late": late, "occupied": sorted(r.occupied)}

    def silent(self, workers=(), seconds: float = 3.0) -> list[str]:
        """Those of ``workers`` still in the cluster and not heard from for ``seconds``
        (none while no worker at all has been: see :meth:`_silent_now`)."""
        quiet = {ws.address for ws in self._silent_now(seconds)}
        return [w for w in workers if w in quiet]

    def stuck(self, keys=(), seconds: float = 3.0) -> list:
        """``[(key, worker), ...]`` for those of ``keys`` that wait on workers not heard from
        for ``seconds``: running there, or needing (directly or through the tasks they wait
        for) a result that only such workers hold; ``worker`` is one of them."""
        silent = self._silent_now(seconds)
        if not silent:
            return []
        memo: dict = {}

        def waits(ts):
            """The silent worker ``ts`` waits on, or None."""
            if ts.key not in memo:
                memo[ts.key] = None  # (a cycle cannot occur; this only ends the recursion)
                if ts.state == "memory":
                    holders = ts.who_has or set()
                    if holders and not holders - silent:
                        memo[ts.key] = next(iter(holders))
                elif ts.state in ("processing", "waiting", "queued", "no-worker"):
                    memo[ts.key] = (ts.processing_on if ts.processing_on in silent else next(
                        (w for w in map(waits, ts.dependencies) if w is not None), None))
            return memo[ts.key]

        tasks = self.scheduler.tasks
        return [(k, ws.address) for k in keys
                if k in tasks and (ws := waits(tasks[k])) is not None]

    def _silent_now(self, seconds: float) -> set:
        """The workers not heard from for ``seconds``, or for three heartbeat intervals if that
        is longer (Dask spaces heartbeats out as a cluster grows: 0.5 s up to 10 workers, 2 s
        at 100); none if that is every worker: then the cluster as a whole is held up (every
        worker importing the modules a fit's first tasks need, or this scheduler's own event
        loop blocked), not one worker frozen, and giving up on all of them would leave no one
        to move their rows to."""
        now, workers = time.time(), self.scheduler.workers.values()
        seconds = max(seconds, 3 * heartbeat_interval(len(workers)))
        quiet = {ws for ws in workers if now - ws.last_seen > seconds}
        return set() if len(quiet) == len(workers) else quiet

    def _on_unresponsive(self, r: _Round, seconds: float) -> list:
        """``[(key, worker), ...]`` of the open tasks of ``r`` if every one of them is on a
        worker not heard from for ``seconds``; ``[]`` otherwise."""
        quiet, out = self._silent_now(seconds), []
        tasks = self.scheduler.tasks
        for key in r.open:
            ts = tasks.get(key)
            ws = ts.processing_on if ts is not None else None
            if ws not in quiet:
                return []
            out.append((key, ws.address))
        return out

    def fit_report(self, fit: str, events=()) -> None:
        """A driver's reports of ``fit`` for the dashboard page, see :class:`FitBook`."""
        self.book.report(fit, list(events))

    def page_status(self) -> dict[str, bool]:
        """Whether this scheduler serves the daskabsp dashboard page, see
        :func:`daskabsp.monitor.page_status`."""
        return page_status(self.scheduler)

    def forget_fit(self, fit: str) -> None:
        """Forget ``fit``'s round log here and its stop flags on the workers (it has ended
        and its driver has read the log): a long-lived cluster's plugins then hold nothing
        per round of the fits it ran."""
        self.log = deque((e for e in self.log if e[1] != fit), maxlen=self.log.maxlen)
        for r in self.rounds.values():
            if r.fit == fit:
                r.logged = False  # its keys are released after this: keep it out of the log
        for addr in self.scheduler.workers:
            if addr not in self._unequipped:
                self.scheduler.worker_send(addr, {"op": FORGET_OP, "fit": fit})

    def round_info(self, fit: str) -> dict[str, dict]:
        """Timings of the rounds of ``fit``: quorum time and last result time (scheduler clock)."""
        out = {}
        for rid, f, n, tq, tl in self.log:
            if f == fit:
                out[rid] = {"finished": n, "quorum_time": tq, "last_time": tl}
        for r in self.rounds.values():
            if r.fit == fit:
                out[r.rid] = {"finished": r.finished, "quorum_time": r.t_quorum,
                              "last_time": r.t_last}
        return out


def stop_on_worker(rounds: list[str], dask_worker=None) -> None:
    """Set the stop flags of ``rounds`` on this worker (for ``Client.run``)."""
    ext = dask_worker.extensions.get(EXTENSION) if dask_worker is not None else None
    if ext is not None:
        ext.stop(rounds)


_ready: dict[str, str] = {}  # client id -> how stops are sent (see ensure_plugins)
_warned_fallback = False


async def ensure_plugins(client) -> str:
    """Register the daskabsp plugins on ``client``'s cluster (once per client).

    Returns how stops are sent: ``"scheduler"`` (the scheduler plugin), ``"driver"`` (the
    ``daskabsp.signal`` config asks for it) or ``"driver-opaque"`` (the scheduler plugin could
    not be installed, e.g. daskabsp is missing on the scheduler: the driver sends the stops and
    submits tasks whose functions the scheduler need not import).
    """
    global _warned_fallback
    if client.id in _ready:
        return _ready[client.id]
    mode = "driver"
    if config.get("signal") == "scheduler":
        try:  # the scheduler plugin installs the worker plugin itself
            await client.register_plugin(AbspSchedulerPlugin())
            mode = "scheduler"
        except Exception as e:
            mode = "driver-opaque"
            if not _warned_fallback:
                _warned_fallback = True
                warnings.warn(
                    "daskabsp could not install its scheduler plugin (is daskabsp installed "
                    f"on the scheduler?): {e!r}. The fitting process will send the stops "
                    "itself, which adds a round trip to each harvest.",
                    RuntimeWarning,
                    stacklevel=2,
                )
    if mode != "scheduler":
        await client.register_plugin(AbspWorkerPlugin())
    _ready[client.id] = mode
    return mode
