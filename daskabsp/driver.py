"""The fit loop on the client: place the data, run rounds under a policy, record the history.

Each round submits one task per partition (``runtime.run_partition``) with the round's
annotation, waits for the results (under A-BSP the scheduler plugin stops the stragglers as soon
as the quorum has finished, so this returns shortly after the fastest partition; tasks that were
still queued when the stop reached their worker are not waited for: they compute nothing),
aggregates the counted statistics weighted by rows, and applies the program's update.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import queue
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any

import dask
import distributed
import numpy as np
import xarray as xr
from dask.sizeof import sizeof
from dask.utils import apply
from distributed import as_completed
from distributed.client import FutureCancelledError
from distributed.scheduler import KilledWorker

from . import config, coverage
from .answering import gather_answering, silent_of, stuck_of
from .book import PartitionBook, balance
from .callbacks import (
    CallbackArg,
    CallbackList,
    FitInfo,
    ProgressBar,
    RoundInfo,
    as_callbacks,
)
from .caller import Call, run_sync, seceded
from .cluster import get_client
from .history import HistoryRecorder
from .partitions import (
    Partitions,
    check_finite_block,
    copy_partition,
    is_dask,
    move,
    nbytes_by_worker,
    place,
    row_chunks,
    wait_all,
)
from .plugins import ensure_plugins, stop_on_worker
from .policies import Policy, as_policy
from .programs.base import PartitionStats, Program
from .protocol import FORGET_HANDLER, SETTLED_HANDLER, RoundId
from .rates import Rates
from .reporting import FitReporter, open_reporter
from .runtime import PartialResult, run_partition, run_pieces
from .validation import check_data, check_int, check_quota, check_real, check_source

logger = logging.getLogger(__name__)

_ROUND_ATTEMPTS = 3


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    coef : ndarray
        The fitted parameters (``program.coefficients(state)``).
    state : object
        The program's final driver state.
    history : xarray.Dataset
        One record per round (dims ``round``, ``partition``).
    n_iter : int
        Rounds run.
    converged : bool
        Whether the objective change fell below ``tol`` before ``max_iter``.
    """

    coef: np.ndarray
    state: Any
    history: xr.Dataset
    n_iter: int
    converged: bool


def fit(
    program: Program,
    X,
    y=None,
    *,
    sample_weight=None,
    sync: str | Policy = "absp",
    max_iter: int = 100,
    tol: float | None = 1e-4,
    n_partitions: int | None = None,
    quota: int | float | None = None,
    chunk_target: float | None = None,
    record_params: bool = False,
    callback: CallbackArg = None,
    verbose: int = 0,
    client: distributed.Client | None = None,
    source: tuple | None = None,
):
    """Run ``program`` over ``X`` (and ``y``) on a Dask cluster under a synchronisation policy.

    Parameters
    ----------
    program : Program
        The iterative program, e.g. :class:`daskabsp.programs.LogisticGD`.
    X : ndarray, CSR matrix or dask array of shape (n_samples, n_features)
        Training rows. In-memory input is split into ``n_partitions`` row partitions; a dask
        array keeps its row chunks as partitions (unless ``n_partitions`` is given).
    y : array-like of shape (n_samples,), optional
        Target, if the program needs one.
    sample_weight : array-like of shape (n_samples,), optional
        Row weights, for programs that accept them.
    sync : {"absp", "bsp"} or Policy, default="absp"
        Synchronisation policy, see :class:`daskabsp.ABSP` and :class:`daskabsp.BSP`.
    max_iter : int, default=100
        Maximum number of rounds.
    tol : float or None, default=1e-4
        Stop when the relative change of the objective between rounds is at most ``tol``.
        Under A-BSP the objective is estimated over the rows processed, so it varies by sampling
        noise; a ``tol`` below that noise runs to ``max_iter``. Unused by programs with their
        own stopping rule (:meth:`Program.converged <daskabsp.programs.Program.converged>`).
    n_partitions : int, optional
        Number of row partitions for in-memory input (default: one per worker thread, none
        smaller than ``daskabsp.min-partition-rows`` rows).
    quota : int or float, optional
        Rows a partition processes per round: an int (rows), a float in (0, 1] (fraction of
        the partition) or None (the whole partition).
    chunk_target : float, optional
        Seconds of work per chunk (default ``daskabsp.chunk-target``).
    record_params : bool, default=False
        Store the parameters of every round in the history (variable ``params``).
    callback : RoundCallback, callable or list of these, optional
        Called in this process (in the calling thread, with a synchronous client; never in a
        partition task) around every round: a :class:`daskabsp.RoundCallback`, or a function
        ``callback(round, coef, objective)`` called after each round with the updated
        parameters. Returning True stops the fit after that round. Time spent in callbacks
        is not counted in the history's ``wall_time``.
    verbose : int, default=0
        0: silent. 1 or more: show a progress bar of the rounds
        (:class:`daskabsp.ProgressBar`, a notebook widget or a text bar).
    client : distributed.Client, optional
        Default: the current client, or an embedded LocalCluster.
    source : tuple of (X, y, sample_weight), optional
        For a dask ``X`` made from in-memory arrays (scattered by the caller, say): those
        arrays, rows in the same order (None where there is none). A partition whose only
        copy is on a worker that stopped answering is then scattered again from them, as
        in-memory input is, instead of waiting for that worker.

    Returns
    -------
    FitResult
        The fit (a coroutine of it when the client is asynchronous).
    """
    owner = "fit"
    policy = as_policy(sync, owner=owner)
    check_int(max_iter, "max_iter", owner)
    check_real(tol, "tol", owner, none_ok=True)
    check_int(n_partitions, "n_partitions", owner, none_ok=True)
    check_quota(quota, owner)
    check_real(chunk_target, "chunk_target", owner, closed=False, none_ok=True)
    check_int(int(verbose) if isinstance(verbose, bool) else verbose, "verbose", owner, low=0)
    callbacks = as_callbacks(callback)
    if verbose:
        callbacks.append(ProgressBar())
    if not isinstance(program, Program):
        raise TypeError(f"program must be a daskabsp Program, got {type(program).__name__}.")
    if sample_weight is not None and not program.accepts_sample_weight:
        raise ValueError(f"{type(program).__name__} does not accept sample_weight.")
    X, y, sample_weight = check_data(X, y, sample_weight, needs_y=program.needs_y)
    if n_partitions is not None and n_partitions > X.shape[0]:
        raise ValueError(
            f"n_partitions={n_partitions} must be at most the number of rows "
            f"({X.shape[0]})."
        )
    if not is_dask(X):
        program.check_input(X, y)
    if source is not None:
        source = check_source(source, X)
    client = client if client is not None else get_client()
    run = _Fit(client, program, policy, X, y, sample_weight, source, max_iter=max_iter, tol=tol,
               n_partitions=n_partitions, quota=quota, chunk_target=chunk_target,
               record_params=record_params, callbacks=CallbackList(callbacks))
    if client.asynchronous:
        return run.run()
    with seceded():
        return run_sync(client, run)


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


def idle_result(cursor: int, worker: str) -> PartialResult:
    """The result of a task that had not started when its round stopped: nothing computed."""
    return PartialResult(stats=None, rows=0, cursor=cursor, stopped=True, compute_seconds=0.0,
                         start=math.nan, stop=math.nan, worker=worker, chunk_rows=0)


class _Fit:
    def __init__(self, client, program, policy, X, y, sample_weight, source, *, max_iter, tol,
                 n_partitions, quota, chunk_target, record_params, callbacks) -> None:
        self.client = client
        self.program = program
        self.policy = policy
        self.data = (X, y, sample_weight)
        # where a silent worker's partitions are scattered again from (None: nowhere)
        self.source = source if source is not None else (
            None if is_dask(X) else self.data)
        self.max_iter = max_iter
        self.tol = tol
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = (
            chunk_target if chunk_target is not None else config.seconds("chunk-target")
        )
        self.record_params = record_params
        self.callbacks: CallbackList = callbacks
        # Where callbacks run: None calls them on the event loop (an asynchronous client's
        # caller is there); a queue hands them to the thread that called fit (caller.run_sync).
        self.caller: queue.SimpleQueue | None = None
        self._ran = (0, False)  # (rounds run, converged), for the callbacks' on_fit_end
        self._callback_seconds = 0.0
        self.fit_id = uuid.uuid4().hex[:8]
        self._in_flight: list[RoundId] = []  # the rounds whose tasks may be running
        self._halted: asyncio.Future | None = None
        self.reporter: FitReporter | None = None  # reports to the dashboard page

    async def run(self) -> FitResult:
        try:
            result = await self._run()
        except BaseException as e:
            if self.caller is None:
                self.end_callbacks(error=e)
            raise
        if self.caller is None:
            self.end_callbacks(error=None)
        return result

    def end_callbacks(self, *, error: BaseException | None) -> None:
        """The callbacks' ``on_fit_end`` (once; nothing if the rounds never started)."""
        self.callbacks.end(*self._ran, error)

    async def _call(self, func, *args):
        """``func(*args)`` where callbacks run (see ``caller``), its time excluded from the
        fit's clock."""
        c0 = time.perf_counter()
        try:
            if self.caller is None:
                return func(*args)
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self.caller.put(Call(func, args, future, loop))
            return await future
        finally:
            self._callback_seconds += time.perf_counter() - c0

    async def _run(self) -> FitResult:
        client, policy = self.client, self.policy
        X, y, sw = self.data
        self.signal = await ensure_plugins(client)
        self.reporter = await open_reporter(client, self.fit_id, self.signal)
        if self.signal == "driver-opaque":
            # The scheduler deserialises task graphs: ship daskabsp's functions and the program
            # as scattered data, called through dask.utils.apply, so it never imports daskabsp.
            self._remote = dict(zip(
                ("run", "pieces", "check", "program"),
                await client.scatter([run_partition, run_pieces, check_finite_block,
                                      self.program],
                                     broadcast=True, hash=False), strict=True))
        nthreads = await client.scheduler.ncores()
        chunks = row_chunks(X, self.n_partitions, sum(nthreads.values()) or 1,
                            int(config.get("min-partition-rows")))
        P = len(chunks)
        policy.check(P)
        if any(c == 0 for c in chunks):
            raise ValueError("X has an empty row chunk; every partition needs at least one row.")
        t_place = time.perf_counter()
        parts = await place(client, X, y, sw, chunks, silent=partial(silent_of, client),
                            stuck=partial(stuck_of, client),
                            source=self.source if is_dask(X) else None)
        self._place_seconds = time.perf_counter() - t_place
        status = "failed"
        try:
            if is_dask(X):
                await self._check_finite(parts)
            res = await self._rounds(parts, nthreads)
            status = "converged" if res.converged else "finished"
            return res
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        finally:
            del parts
            if self.reporter is not None:
                self.reporter.end(status)
                if status != "interrupted":
                    await self.reporter.flush()

    def halt(self) -> asyncio.Future:
        """Stop the round in flight, if any, on every worker; call on the client's loop.

        For a fit that was interrupted or cancelled: Dask cannot interrupt a running task, and
        releasing its future would leave it computing its whole quota; with its round's stop
        flag set it returns at its next chunk. Stops once; later calls wait for the same stop.
        """
        if self._halted is None:
            self._halted = asyncio.ensure_future(self._stop_everywhere(list(self._in_flight)))
        return self._halted

    async def _stop_everywhere(self, rids: list[RoundId]) -> None:
        if not rids:
            return
        try:
            await self.client.run(stop_on_worker, [str(r) for r in rids])
        except Exception as e:  # e.g. the client is closing: its tasks are released anyway
            logger.debug("daskabsp: could not stop rounds %s: %r", rids, e)

    async def _gather(self, futs) -> list:
        """``client.gather(futs)``, entered once they are all done.

        A gather cancelled while it waits (Ctrl-C) leaves distributed's waiters behind, which
        raise ``AllExit`` when the futures are released ("Task exception was never
        retrieved"); the waiters of :func:`~daskabsp.partitions.wait_all` end quietly.
        """
        await wait_all(self.client, futs)
        return await self.client.gather(futs)

    async def _check_finite(self, parts: Partitions) -> None:
        if self.source is not None:
            # The in-memory rows the dask input was made from: checked here, not by tasks
            # that a worker frozen already would hold up.
            ok = [await asyncio.to_thread(check_finite_block, self.source[0])]
        else:
            checks = [self._submit_call("check", check_finite_block, x, key=None)
                      for x in parts.X]
            ok = await self._gather(checks)
        if not all(bool(o[0]) for o in ok):
            raise ValueError("Input X contains NaN or infinity.")

    def _quotas(self, sizes) -> list[int]:
        q = self.quota
        if q is None:
            return list(sizes)
        if isinstance(q, float):
            return [max(1, round(q * n)) for n in sizes]
        return [min(int(q), n) for n in sizes]

    async def _rounds(self, parts: Partitions, nthreads) -> FitResult:
        client, program, policy = self.client, self.program, self.policy
        P = len(parts)
        sizes = parts.sizes
        N = int(sum(sizes))
        state = program.init(parts.n_features, N)
        # workers silent already (frozen while the input was made) get no partition
        unresponsive = await silent_of(self.client, nthreads)
        nthreads = {w: n for w, n in nthreads.items() if w not in unresponsive} or nthreads
        who = await client.scheduler.who_has(keys=[f.key for f in parts.X])
        book = PartitionBook(sizes, self._quotas(sizes), balance(
            [(who.get(f.key) or [None])[0] for f in parts.X], nthreads))
        quorum = policy.round_quorum(P) if policy.stops else 0
        rec = HistoryRecorder(P)
        if self.reporter is not None:
            self.reporter.start(program=program.name, sync=policy.name, n_partitions=P)
        rids: list[RoundId] = []
        helped = policy.helped and int(config.get("replicas")) > 0
        rates = Rates(P)
        if helped:
            self._rent_due = await self._copy_seconds(parts)
        self._copying: dict[int, asyncio.Future] = {}
        self.silent_helpers: set[str] = set()  # workers a helper phase gave up on
        prev_obj = None
        converged = False
        if self.callbacks:
            await self._call(self.callbacks.begin, FitInfo(
                max_iter=self.max_iter, n_samples=N, n_partitions=P, sync=policy.name,
                program=program.name, fit_id=self.fit_id))
        self._callback_seconds = 0.0
        t0 = time.perf_counter()
        epoch0 = time.time()
        interval = config.seconds("membership-interval")
        probe_rows = int(config.get("probe-rows"))
        next_check = t0 + interval
        for r in range(self.max_iter):
            if self.callbacks:
                await self._call(self.callbacks.round_begin, r,
                                 np.asarray(program.coefficients(state)))
            params = program.params(state)
            full = bool(quorum) and program.full_round(state)
            q, round_quotas = (0 if full else quorum), book.round_quotas(full)
            # Ask who the workers are at most once per interval, concurrently with the round.
            members = None
            if time.perf_counter() >= next_check:
                members = asyncio.ensure_future(client.scheduler.ncores())
                # a round that fails never reads it: no "exception never retrieved" then
                members.add_done_callback(_retrieve)
                next_check = time.perf_counter() + interval
            if helped:  # helpers make every round cover its quota: stop at the quorum
                q, round_quotas = quorum, book.round_quotas(False)
            for attempt in range(_ROUND_ATTEMPTS):
                rid = RoundId(self.fit_id, r).retry(attempt)
                futs = []
                self._in_flight = [rid]
                try:
                    async with self._round_params(params, rid) as arg:
                        futs = self._submit(parts, book, arg, rid, q, round_quotas)
                        if q and self.signal != "scheduler":
                            await self._driver_stop(futs, rid, q)
                        results, late, occupied = await self._collect(
                            futs, rid, book.cursor,
                            settle=policy.stops and self.signal == "scheduler")
                        owned = results
                        if helped:
                            rates.observe(results)
                            # Other work holds these for now: no piece can run there, and
                            # their partitions' rows can only move on through copies.
                            blocked = unresponsive | set(late.values()) | occupied
                            self._copy_stragglers(parts, book, results, round_quotas, rates,
                                                  nthreads, blocked)
                            self._in_flight.append(rid.helpers())
                            results, helped_rows, by_worker = await self._help(
                                parts, book, arg, rid.helpers(), results, round_quotas,
                                rates, nthreads, blocked, needed=full)
                    break
                except (KilledWorker, FutureCancelledError) as e:
                    logger.warning("daskabsp: round %d failed (%r); retrying", r, e)
                    await client.cancel(futs)
                    if any(f.status != "finished" for f in parts.futures):
                        parts = await place(client, *self.data, sizes,
                                            silent=partial(silent_of, self.client))
                    if attempt == _ROUND_ATTEMPTS - 1:
                        raise
                except asyncio.CancelledError:  # Ctrl-C, or the caller cancelled the fit
                    await self.halt()
                    raise
            self._in_flight = []
            rids.append(rid)
            del futs
            if not helped:
                helped_rows, by_worker = [0] * P, {}
            worker_rows = Counter(dict.fromkeys([*nthreads, *sorted(unresponsive)], 0))
            worker_rows.update(by_worker)
            for res in owned:
                if res.rows:
                    worker_rows[res.worker] += res.rows

            counted = [res.rows > 0 and (policy.keep_partial or not res.stopped)
                       for res in results]
            pieces = [PartitionStats(p, book.cursor[p], res.rows, sizes[p], res.stats,
                                     res.stats_before_wrap)
                      for p, (res, c) in enumerate(zip(results, counted, strict=False)) if c]
            stats = program.combine_round(pieces, params)
            k = sum(ps.rows for ps in pieces)
            obj = program.objective(state, stats, k)
            # The user's time in callbacks is not the fit's.
            wall = time.perf_counter() - t0 - self._callback_seconds
            rec.add(
                wall=wall, objective=obj,
                params=params if self.record_params else None,
                rows=[res.rows for res in results], quota=round_quotas, cursor=list(book.cursor),
                compute_seconds=[res.compute_seconds for res in results],
                task_start=[res.start - epoch0 for res in results],
                task_stop=[res.stop - epoch0 for res in results],
                harvested=[res.stopped for res in owned], counted=counted,
                worker=[res.worker for res in owned], helped_rows=helped_rows,
                worker_rows=worker_rows,
            )
            if self.reporter is not None:
                self.reporter.round(
                    round=r, wall=wall, objective=float(obj),
                    rows=[int(res.rows) for res in results], quota=[int(q) for q in round_quotas],
                    compute=[float(res.compute_seconds) for res in results],
                    harvested=[bool(res.stopped) for res in owned],
                    worker=[res.worker for res in owned],
                    scanned=[int(res.rows) for res in owned],
                )
            book.record(policy, results, owned, counted, probe_rows=probe_rows,
                        chunk_target=self.chunk_target)
            state = program.update(state, stats, k)

            nthreads = await self._membership(parts, book, owned, late, members, nthreads,
                                              unresponsive, r)

            self._ran = (r + 1, False)
            if self.callbacks:
                info = RoundInfo(
                    round=r, max_iter=self.max_iter, objective=float(obj),
                    coef=np.asarray(program.coefficients(state)), rows=int(k),
                    rows_asked=int(sum(round_quotas)), n_samples=N,
                    harvested=sum(bool(res.stopped) for res in owned), n_partitions=P,
                    elapsed=rec.wall[-1])
                if await self._call(self.callbacks.round_end, info):
                    break
            verdict = program.converged(state)
            if verdict or (verdict is None and self.tol is not None and prev_obj is not None
                           and abs(obj - prev_obj) <= self.tol * max(abs(obj), abs(prev_obj))):
                converged = True
                self._ran = (r + 1, True)
                break
            prev_obj = obj

        for task in self._copying.values():
            task.cancel()
        held = await nbytes_by_worker(client, parts, book.owner)
        latency, stop_time = (await self._round_times(rids, epoch0) if self.signal == "scheduler"
                              else (None, None))
        if self.signal == "scheduler":
            await getattr(client.scheduler, FORGET_HANDLER)(fit=self.fit_id)
        attrs = {
            "sync": policy.name, "policy": repr(policy), "program": program.name,
            "program_repr": repr(program), "fit_id": self.fit_id, "n_partitions": P,
            "converged": int(converged),
            "replicas": int(config.get("replicas")) if helped else 0,
            "max_worker_data_bytes": max(held.values(), default=0),
        }
        history = rec.dataset(attrs=attrs, sizes=sizes, harvest_latency=latency,
                              stop_time=stop_time)
        return FitResult(coef=np.asarray(program.coefficients(state)), state=state,
                         history=history, n_iter=len(rids), converged=converged)

    @contextlib.asynccontextmanager
    async def _round_params(self, params, rid: RoundId):
        """``params`` as round ``rid``'s tasks take them: inline, or, when larger than
        ``daskabsp.inline-params``, scattered once for the round (every task then depends on
        that one key instead of carrying a copy) and released when the round is over."""
        if sizeof(params) <= config.nbytes("inline-params"):
            yield params
            return
        key = rid.key_prefix(self.program.name, "-params")
        # A dict, because scatter would split a tuple of parameters into one key per item.
        fut = (await self.client.scatter({key: params}, broadcast=True, hash=False))[key]
        try:
            yield fut
        finally:
            fut.release()

    def _submit(self, parts: Partitions, book: PartitionBook, params, rid: RoundId,
                quorum: int, quotas: list[int]):
        program = self.program
        prefix = rid.key_prefix(program.name)
        ann = rid.annotation(quorum)
        futs = []
        with distributed.span("daskabsp", f"{program.name}-{self.fit_id}"), \
                dask.annotate(daskabsp=ann):
            # Workers start tasks in the order they arrive: partitions that got nothing
            # last round go first, so a partition queued behind another does not starve.
            for p in book.order():
                futs.append(self._submit_call(
                    "run", run_partition, self._program_arg(), params, parts.X[p], parts.y[p],
                    parts.sample_weight[p], round_id=str(rid), cursor=book.cursor[p],
                    quota=quotas[p],
                    chunk_rows=book.chunk_rows[p], chunk_target=self.chunk_target,
                    ends_round=quorum == 1,
                    key=(prefix, p), workers=[book.owner[p]], allow_other_workers=True,
                    priority=book.staleness[p],
                ))
        order = {f.key[1]: f for f in futs}
        return [order[p] for p in range(len(parts))]

    async def _membership(self, parts: Partitions, book: PartitionBook, owned, late,
                          members, nthreads, unresponsive: set[str], r: int):
        """After round ``r``: who is alive and answering (``unresponsive`` is updated in
        place: workers given up on join it, those heard from again leave it), partitions
        re-balanced over those workers, and a silent worker's partitions moved to a copy or
        placed again. Returns the threads per worker to use from now on."""
        client = self.client
        assign = book.owner
        ran_on = [res.worker or a for res, a in zip(owned, assign, strict=False)]
        if ran_on != assign and members is None:
            members = asyncio.ensure_future(client.scheduler.ncores())
        live = await members if members is not None else nthreads
        if members is not None and unresponsive:
            unresponsive &= await silent_of(self.client, unresponsive)  # who answers rejoins
        owned_by_silent = list(parts.X)
        newly = (self.silent_helpers | set(late.values())) - unresponsive
        if self.silent_helpers:
            unresponsive |= self.silent_helpers
            self.silent_helpers = set()
        if late:
            unresponsive |= set(late.values())
            logger.warning(
                "daskabsp: round %d gave up on partitions %s: no heartbeat from %s for "
                "%s; their rows move to other workers", r, sorted(late),
                sorted(set(late.values())), config.get("unresponsive-after"))
        stranded = set(late)
        if newly:
            # Not only the partitions whose tasks were given up on: any whose rows are held
            # only by silent workers (a task reading them elsewhere would wait to fetch them).
            who = await client.scheduler.who_has(keys=[f.key for f in parts.X])
            stranded |= {p for p, f in enumerate(parts.X)
                         if not set(who.get(f.key) or ()) - unresponsive}
        live = {w: n for w, n in live.items() if w not in unresponsive} or live
        if set(live) != set(nthreads) or ran_on != assign or stranded:
            nthreads = live
            new = balance(ran_on, live)
            for p in stranded:  # a partition with a copy on a live worker moves there
                ok = [w for w in (parts.copies[p] if parts.copies else ()) if w in live]
                if ok:
                    new[p] = ok[0]
                    parts.X[p], parts.y[p], parts.sample_weight[p] = parts.copies[p].pop(ok[0])
            if new != assign:
                logger.info("daskabsp: workers changed; partitions re-balanced: %s", new)
            book.owner = assign = new
        lost = [p for p in stranded if parts.X[p] is owned_by_silent[p]]
        if lost and self.source is not None:
            # In-memory input (or the source a dask input was made from): the fitting
            # process holds the rows, so the partitions of a silent worker are placed again
            # on the worker they are assigned to now.
            await asyncio.gather(*(self._place_again(parts, book, p, unresponsive)
                                   for p in lost))
        return nthreads

    async def _place_again(self, parts: Partitions, book: PartitionBook, p: int,
                           unresponsive: set[str]) -> None:
        """Scatter partition ``p``'s rows again to its owner; if that worker is gone by now
        (a killed worker may still have been listed), to another one that answers."""
        try:
            await move(self.client, parts, p, *self.source, book.owner[p])
            return
        except (OSError, KeyError) as e:  # KeyError: the scheduler no longer knows it
            logger.info("daskabsp: placing partition %d on %s failed (%r); trying another "
                        "worker", p, book.owner[p], e)
        workers = [w for w in sorted(await self.client.scheduler.ncores())
                   if w != book.owner[p] and w not in unresponsive]
        if not workers:
            raise OSError(f"no worker left to place partition {p} on")
        book.owner[p] = workers[p % len(workers)]
        await move(self.client, parts, p, *self.source, book.owner[p])

    def _copy_stragglers(self, parts: Partitions, book: PartitionBook, results, quotas,
                         rates: Rates, nthreads, exclude) -> None:
        """Start copying, in the background, each partition whose copy has paid for itself
        (see :meth:`Rates.charge`: the time its owner alone spent on what it left, summed over
        the rounds, exceeds the copy's time; at once for a partition whose owner is in
        ``exclude``: silent, or its threads held by other work) to the fastest worker without one,
        up to ``daskabsp.replicas`` copies: from the next round on, helpers can scan its rows
        there. The round does not wait for it."""
        limit = int(config.get("replicas"))
        left = {p: quotas[p] - res.rows for p, res in enumerate(results)
                if quotas[p] > res.rows and p not in self._copying}
        paid = rates.charge(left, book.owner, [w for w in nthreads if w not in exclude],
                            slack=config.seconds("help-above"), blocked=exclude)
        for p in left:
            have = parts.holders(p, book.owner[p])
            if len(have) > limit or paid[p] < self._rent_due[p]:
                continue
            free = [w for w in nthreads if w not in have and w not in exclude]
            if not free:
                continue
            w = max(free, key=lambda w: (rates.rate(w, p), w))
            task = asyncio.ensure_future(
                copy_partition(self.client, parts, p, self.source or self.data, w))
            self._copying[p] = task
            task.add_done_callback(lambda t, p=p: self._copied(p, t))

    async def _copy_seconds(self, parts: Partitions) -> list[float]:
        """Per partition, the time a copy of it is expected to take: its bytes (as the
        scheduler measured them) at the rate this fit placed in-memory input, or at
        ``daskabsp.copy-rate`` for dask arrays (copied worker to worker)."""
        keys = [[f.key for f in fs if f is not None] for fs in zip(
            parts.X, parts.y, parts.sample_weight, strict=True)]
        size = await self.client.scheduler.nbytes(keys=[k for ks in keys for k in ks],
                                                  summary=False)
        nbytes = [sum(int(size.get(k, 0)) for k in ks) for ks in keys]
        rate = float(config.nbytes("copy-rate"))
        if not is_dask(self.data[0]) and self._place_seconds > 0:
            rate = sum(nbytes) / self._place_seconds
        return [b / max(rate, 1.0) for b in nbytes]

    def _copied(self, p: int, task: asyncio.Future) -> None:
        self._copying.pop(p, None)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("daskabsp: copying partition %d for helpers failed: %r", p,
                           task.exception())

    async def _help(self, parts: Partitions, book: PartitionBook, params, hid: RoundId,
                    results, quotas, rates: Rates, nthreads, exclude, *,
                    needed: bool) -> tuple[list, list[int], Counter]:
        """The helper phase of a round: what the partitions' own scans left of their quotas,
        split by :func:`coverage.plan` among the workers holding copies (not those in
        ``exclude``) and scanned there; returns the results merged per partition, per
        partition the rows scanned in this phase, and per worker the rows it scanned here
        that count.

        Unless the program ``needed`` the round to cover every row, the phase is skipped
        when the leftovers are small (their owners would scan them in less than
        ``daskabsp.help-above``): a task round trip would cost more than counting those
        rows in the next round."""
        program, sizes = self.program, parts.sizes
        helped = [0] * len(sizes)
        leftovers = [
            coverage.Leftover(p, book.leftover_start(p, res.rows), quotas[p] - res.rows,
                              sizes[p], tuple(w for w in parts.holders(p, book.owner[p])
                                              if w not in exclude))
            for p, res in enumerate(results) if quotas[p] > res.rows]
        live = {w: n for w, n in nthreads.items() if w not in exclude}
        if not needed and leftovers and max(
                lo.rows / max(rates.own[lo.partition] or rates.rate(
                    results[lo.partition].worker, lo.partition), 1e-9)
                for lo in leftovers) < config.seconds("help-above"):
            return results, helped, Counter()
        speed = {w: rates.worker_speed(w) for w in live}
        pieces = coverage.plan(leftovers, speed, live, min_rows=int(config.get("probe-rows")),
                               cost={lo.partition: rates.cost(lo.partition) for lo in leftovers})
        by_worker: Counter[str] = Counter()
        if not pieces:
            return results, helped, by_worker
        prefix = hid.key_prefix(program.name)
        batches = coverage.batches(pieces, live)
        futs = []
        with distributed.span("daskabsp", f"{program.name}-{self.fit_id}"), \
                dask.annotate(daskabsp=hid.annotation(0)):
            for i, (w, batch) in enumerate(batches):
                args = [(*parts.holders(pc.partition, book.owner[pc.partition])[w], pc.start,
                         pc.rows, max(1, int(rates.rate(w, pc.partition) * self.chunk_target)))
                        for pc in batch]
                futs.append(self._submit_call(
                    "pieces", run_pieces, self._program_arg(), params, args,
                    round_id=str(hid), chunk_target=self.chunk_target, key=(prefix, i),
                    workers=[w], allow_other_workers=True))
        got, late, _ = await self._collect(futs, hid, [0] * len(futs),
                                           settle=self.signal == "scheduler")
        self.silent_helpers.update(late.values())
        # A batch given up on (its worker went silent) or never run lost all its pieces.
        scanned = [res for (w, batch), res in zip(batches, got, strict=True)
                for res in (res if isinstance(res, list) else
                            [idle_result(pc.start, w) for pc in batch])]
        pieces = [pc for _, batch in batches for pc in batch]
        rates.observe_pieces(results, ((pc.partition, res) for pc, res in zip(
            pieces, scanned, strict=True)))
        del futs
        by_part: dict[int, list] = {}
        for pc, res in zip(pieces, scanned, strict=True):
            # A piece given up on (its worker went silent) counts nothing.
            by_part.setdefault(pc.partition, []).append(
                (pc, res.stats if res.rows == pc.rows else None))
        out = list(results)
        for p, done in by_part.items():
            own = results[p]
            cov = coverage.merge(book.cursor[p], sizes[p], own.rows, own.stats,
                                 own.stats_before_wrap, done, program.combine)
            out[p] = dataclasses.replace(
                own, stats=cov.stats, rows=cov.rows, cursor=book.leftover_start(p, cov.rows),
                stopped=cov.rows < quotas[p], stats_before_wrap=cov.stats_before_wrap)
            helped[p] = cov.helped
            for pc in cov.pieces:
                by_worker[pc.worker] += pc.rows
        return out, helped, by_worker

    def _program_arg(self):
        return self._remote["program"] if self.signal == "driver-opaque" else self.program

    def _submit_call(self, name, func, *args, key, workers=None, allow_other_workers=False,
                     priority=0, **kwargs):
        """``client.submit(func, *args, **kwargs)``; with a scheduler that lacks daskabsp, the
        same call through ``dask.utils.apply`` on the scattered function."""
        opts = dict(key=key, workers=workers, allow_other_workers=allow_other_workers,
                    priority=priority, pure=False)
        if self.signal == "driver-opaque":
            return self.client.submit(apply, self._remote[name], list(args), kwargs, **opts)
        return self.client.submit(func, *args, **kwargs, **opts)

    async def _collect(self, futs, rid: RoundId, cursors: list[int], *,
                       settle: bool) -> tuple[list[PartialResult], dict[int, str], set[str]]:
        """The round's results, the partitions given up on (``{partition: silent worker}``)
        and the workers whose threads other work held when the round stopped.

        With ``settle``, stop waiting once the scheduler says the round has settled: a task
        that was still queued when the stop reached its worker (behind the round's other
        partitions, or behind another job's task) computes nothing, so it gets an empty
        result here and its future is released, usually before it runs."""
        if not settle:
            return await self._gather(futs), {}, set()
        settled = getattr(self.client.scheduler, SETTLED_HANDLER)
        ans = await settled(round=str(rid),
                            unresponsive=config.seconds("unresponsive-after")) or {}
        idle = dict(ans.get("idle", ()))
        # Given up: their worker went silent. Their rows stay unprocessed; whatever they
        # return later is never gathered (the futures are released with the round).
        late = dict(ans.get("late", ()))
        # A result finished just before its worker froze is given up on the same way.
        got, lost = await gather_answering(
            self.client, [f for f in futs if f.key not in {**idle, **late}])
        late.update(lost)
        skipped = {**idle, **late}
        results = [idle_result(cursors[p], skipped[f.key]) if f.key in skipped else got[f.key]
                   for p, f in enumerate(futs)]
        return (results, {p: late[f.key] for p, f in enumerate(futs) if f.key in late},
                set(ans.get("occupied", ())))

    async def _driver_stop(self, futs, rid: RoundId, quorum: int) -> None:
        done = 0
        async for _ in as_completed(futs, loop=self.client.loop):
            done += 1
            if done == quorum:
                await self.client.run(stop_on_worker, [str(rid)])
                return

    async def _round_times(self, rids: list[RoundId], epoch0: float):
        """Per round, from the scheduler's log: quorum to last result (the harvest latency), and
        when the quorum was reached (the stop sent) in seconds after ``epoch0``."""
        nan = [math.nan] * len(rids)
        try:
            info = await self.client.scheduler.daskabsp_round_info(fit=self.fit_id)
        except Exception:
            return nan, nan
        latency, stop_time = [], []
        for rid in rids:
            i = info.get(str(rid)) or {}
            tq, tl = i.get("quorum_time"), i.get("last_time")
            latency.append(tl - tq if tq is not None and tl is not None else math.nan)
            stop_time.append(tq - epoch0 if tq is not None else math.nan)
        return latency, stop_time
