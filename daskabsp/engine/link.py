"""The fit's link to the cluster: submit a round's tasks, stop them, collect what they return.

How a round's stop reaches the workers is chosen once per fit, as a :class:`Path`:

- :class:`SchedulerPath`: daskabsp's scheduler plugin stops the round when its quorum has
  finished, and says when the round has settled (its queued tasks reported idle);
- :class:`DriverPath`: the fitting process watches the results and sends the stop itself
  (``daskabsp.signal: driver``);
- :class:`OpaquePath`: as the driver path, for a scheduler that cannot import daskabsp: the
  tasks call daskabsp's functions, scattered to the workers, through ``dask.utils.apply``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import dask
import distributed
from dask.sizeof import sizeof
from dask.task_spec import Task, TaskRef
from dask.utils import apply
from distributed import Future, as_completed

from .. import config
from ..extension import (
    SETTLED_HANDLER,
    STOP_ROUNDS_HANDLER,
    PartialResult,
    RoundId,
    SettledReply,
    SignalPath,
    check_finite_block,
    ensure_plugins,
    gather_answering,
    run_partition,
    run_pieces,
    stop_on_worker,
    wait_all,
)
from .journal import Journal
from .queries import SchedulerQueries

logger = logging.getLogger(__name__)


def stop_in_background(client, rounds: list[str]) -> None:
    """Set the stop flags of ``rounds`` on every worker with ``Client.run``, not waiting
    for its answers (it waits for every worker's, a frozen one's too)."""
    task = asyncio.ensure_future(client.run(stop_on_worker, rounds, on_error="ignore"))
    _background.add(task)
    task.add_done_callback(_settle_background)


_background: set[asyncio.Future] = set()


def _settle_background(task: asyncio.Future) -> None:
    _background.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.debug("daskabsp: a stop did not reach every worker: %r", task.exception())


async def _first_failure(client, futs: list[Future]) -> Future | None:
    """The first of ``futs`` to end otherwise than finished (erred, cancelled, its data
    lost), or None once all have finished."""
    async for f in as_completed(futs, loop=client.loop):
        if f.status != "finished":
            return f
    return None


def idle_result(cursor: int, worker: str) -> PartialResult:
    """The result of a task that had not started when its round stopped: nothing computed."""
    return PartialResult(stats=None, rows=0, cursor=cursor, stopped=True, compute_seconds=0.0,
                         start=math.nan, stop=math.nan, worker=worker, chunk_rows=0)


@dataclass
class Collected:
    """What a round's tasks came back with.

    Attributes
    ----------
    results : list of PartialResult
        In the order the futures were given; an idle result for a task not waited for.
    late : dict
        ``{index: worker}`` of the tasks given up on (their worker went silent).
    occupied : set of str
        Workers whose threads other work held when the round stopped.
    dropped : set of int
        Indices of the tasks dropped without a worker to blame: past the wave's deadline,
        or their data lost with a worker (see :meth:`Link.collect`).
    """

    results: list[PartialResult]
    late: dict[int, str]
    occupied: set[str]
    dropped: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class ScanTask:
    """One partition's own task of a round (see :func:`~daskabsp.extension.run_partition`).

    Attributes
    ----------
    partition : int
        The partition.
    data : tuple
        Its ``(X, y, sample_weight)`` futures.
    owner : str
        The worker asked to run it (others may, if it cannot).
    priority : int
        Its priority among the round's tasks (the scheduler starts higher ones first).
    cursor, quota : int
        Where its scan starts, and the rows it is asked for.
    chunk_rows : int or None
        Rows per chunk (None: calibrate).
    grace_rows : int
        Rows it may have left when stopped and still finish.
    """

    partition: int
    data: tuple
    owner: str
    priority: int
    cursor: int
    quota: int
    chunk_rows: int | None
    grace_rows: int = 0


class Path:
    """How stops reach the workers, and how tasks are submitted on that path."""

    #: The scheduler plugin runs: it stops rounds, settles them and times them.
    scheduler_plugin = False
    #: A round's tasks go to the scheduler as one graph (:meth:`Link.submit_round`).
    one_graph = True

    async def start(self, client, program) -> None:
        """Prepare the path for a fit of ``program``."""

    def submit(self, client, name: str, func, args: tuple, kwargs: dict, opts: dict) -> Future:
        """``client.submit(func, *args, **kwargs, **opts)``; ``name`` names ``func``."""
        return client.submit(func, *args, **kwargs, **opts)

    def program(self, program):
        """The program as the tasks take it."""
        return program

    async def watch(self, link: Link, futs: list[Future], rid: RoundId, quorum: int,
                    patience: float = 0.0) -> None:
        """Stop round ``rid`` once ``quorum`` of ``futs`` have finished (0: never), and
        ``patience`` times the time that took has passed without the rest finishing."""


class SchedulerPath(Path):
    """The scheduler plugin stops the round: nothing to do here."""

    scheduler_plugin = True


class DriverPath(Path):
    """The fitting process stops the round: it counts the results as they arrive."""

    async def watch(self, link: Link, futs: list[Future], rid: RoundId, quorum: int,
                    patience: float = 0.0) -> None:
        if not quorum:
            return
        t0 = link.submitted_at(rid)
        done = 0
        async for _ in as_completed(futs, loop=link.client.loop):
            done += 1
            if done == quorum:
                break
        else:
            return
        if patience > 0 and done < len(futs):
            rest = [f for f in futs if not f.done()]
            wait = patience * (time.perf_counter() - t0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wait_all(link.client, rest), wait)
                return
        stop_in_background(link.client, [str(rid)])


class OpaquePath(DriverPath):
    """The scheduler deserialises task graphs and cannot import daskabsp: daskabsp's
    functions and the program travel as scattered data, called through
    ``dask.utils.apply``."""

    async def start(self, client, program) -> None:
        names = ("run", "pieces", "check", "program")
        remote = await client.scatter(
            [run_partition, run_pieces, check_finite_block, program], broadcast=True,
            hash=False)
        self._remote = dict(zip(names, remote, strict=True))

    one_graph = False  # its tasks' functions are futures inside their arguments

    def submit(self, client, name: str, func, args: tuple, kwargs: dict, opts: dict) -> Future:
        return client.submit(apply, self._remote[name], list(args), kwargs, **opts)

    def program(self, program):
        return self._remote["program"]


_PATHS: dict[SignalPath, type[Path]] = {
    SignalPath.SCHEDULER: SchedulerPath, SignalPath.DRIVER: DriverPath,
    SignalPath.OPAQUE: OpaquePath,
}


class Link(SchedulerQueries):
    """One fit's dealings with the cluster.

    Parameters
    ----------
    client : distributed.Client
        The fit's client (the fit runs on its event loop).
    fit_id : str
        The fit's id.
    program : Program
        The fit's program.
    path : Path
        How stops reach the workers (:meth:`open` chooses it).
    """

    def __init__(self, client, fit_id: str, program, path: Path) -> None:
        self.client = client
        self.fit_id = fit_id
        self.program = program
        self.path = path
        self._live: dict = {}  # key -> round of the tasks submitted and not yet let go
        self._halted: asyncio.Future | None = None
        #: Seconds a wave of tasks (a round's own tasks, or its helpers') costs beyond its
        #: longest task's scan, smoothed over the waves collected (None before the first):
        #: what a second wave in the same round would add to it.
        self.wave_overhead: float | None = None
        self._submitted: dict[str, float] = {}  # round id -> when its wave was submitted
        #: What the engine did on its own since the last recorded round (every room notes
        #: there; the round's record takes the notes).
        self.journal = Journal()

    @property
    def in_flight(self) -> list[RoundId]:
        """The rounds whose tasks may be running: submitted here, and not yet collected,
        gathered, cancelled or released here (the link is the one writer of this)."""
        return sorted(set(self._live.values()), key=lambda r: (r.round, r.attempt, r.phase))

    def _track(self, rid: RoundId, futs: list[Future]) -> list[Future]:
        for f in futs:
            self._live[f.key] = rid
        return futs

    def _let_go(self, futs) -> None:
        for f in futs:
            self._live.pop(f.key, None)

    def release(self, futs: list[Future]) -> None:
        """Release ``futs`` (tasks whose results are not needed)."""
        self._let_go(futs)
        for f in futs:
            f.release()

    @classmethod
    async def open(cls, client, fit_id: str, program) -> Link:
        """Install daskabsp's plugins if needed and choose the stop path."""
        path = _PATHS[await ensure_plugins(client)]()
        await path.start(client, program)
        return cls(client, fit_id, program, path)

    # -- submitting ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _annotated(self, rid: RoundId, quorum: int, unit: str = "partitions",
                   patience: float = 0.0) -> Iterator[None]:
        with distributed.span("daskabsp", f"{self.program.name}-{self.fit_id}"), \
                dask.annotate(daskabsp=rid.annotation(quorum, unit, patience)):
            yield

    def _submit(self, name, func, *args, key, workers=None, priority=0, **kwargs) -> Future:
        opts = dict(key=key, workers=workers, allow_other_workers=True, priority=priority,
                    pure=False)
        return self.path.submit(self.client, name, func, args, kwargs, opts)

    def submit_round(self, rid: RoundId, quorum: int, params, tasks: list[ScanTask],
                     chunk_target: float, unit: str = "partitions",
                     patience: float = 0.0) -> list[Future]:
        """Submit ``tasks`` as round ``rid``, stopped once ``quorum`` partitions (or workers,
        ``unit``) have finished (0: never) and a further ``patience`` times the time that
        took has passed, each soft-pinned to its owner and started by priority (workers
        start tasks in the order they arrive, then). Returns the futures in partition
        order."""
        prefix = rid.key_prefix(self.program.name)
        program = self.path.program(self.program)
        self._submitted[str(rid)] = time.perf_counter()
        # the first task to finish ends the round: it stops the others on its worker at once
        ends = quorum == 1 and unit == "partitions" and not patience
        calls = [((prefix, t.partition), (program, params, *t.data),
                  dict(round_id=str(rid), cursor=t.cursor, quota=t.quota,
                       chunk_rows=t.chunk_rows, chunk_target=chunk_target, ends_round=ends,
                       grace_rows=t.grace_rows), t.owner, t.priority) for t in tasks]
        with self._annotated(rid, quorum, unit if self.path.scheduler_plugin else "partitions",
                             patience):
            if self.path.one_graph:
                got = self._submit_graph(run_partition, calls)
            else:
                got = [self._submit("run", run_partition, *args, key=key, workers=[w],
                                    priority=prio, **kwargs)
                       for key, args, kwargs, w, prio in calls]
        futs = {t.partition: f for t, f in zip(tasks, got, strict=True)}
        return self._track(rid, [futs[p] for p in sorted(futs)])

    def _submit_graph(self, func, calls: list[tuple]) -> list[Future]:
        """``func`` called once per ``(key, args, kwargs, worker, priority)`` of ``calls``,
        submitted as one graph: the scheduler takes in one graph update a round, not one per
        partition (measured with 64 tasks: a quarter to a third less CPU on its event loop).
        Futures among ``args`` become the tasks' dependencies; each task prefers ``worker``
        and may run elsewhere, as :meth:`_submit`'s do."""
        graph = {key: Task(key, func, *(TaskRef(a.key) if isinstance(a, Future) else a
                                        for a in args), **kwargs)
                 for key, args, kwargs, _, _ in calls}
        keys = [key for key, *_ in calls]
        owner = {key: [w] for key, _, _, w, _ in calls}
        priority = {key: prio for key, *_, prio in calls}
        # Callables are resolved per key on the scheduler (distributed >= 2025.1).
        with dask.annotate(workers=owner.__getitem__, priority=priority.__getitem__,
                           allow_other_workers=True):
            return self.client.get(graph, keys, sync=False)

    def submit_pieces(self, rid: RoundId, params, batches: list[tuple[str, list]],
                      chunk_target: float) -> list[Future]:
        """One task per ``(worker, pieces)`` batch, scanning each piece's rows in turn
        (:func:`~daskabsp.extension.run_pieces`); the round is never stopped."""
        prefix = rid.key_prefix(self.program.name)
        self._submitted[str(rid)] = time.perf_counter()
        with self._annotated(rid, 0):
            return self._track(rid, [
                self._submit("pieces", run_pieces, self.path.program(self.program), params,
                             args, round_id=str(rid), chunk_target=chunk_target,
                             key=(prefix, i), workers=[w])
                for i, (w, args) in enumerate(batches)])

    def submit_check(self, block: Future) -> Future:
        """A task that says whether ``block`` holds only finite values."""
        return self.path.submit(self.client, "check", check_finite_block, (block,), {},
                                dict(pure=False))

    @contextlib.asynccontextmanager
    async def round_params(self, params, rid: RoundId):
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

    async def shared_params(self, params, rid: RoundId):
        """``params`` as tasks submitted one at a time take them (SSP, ASP: the tasks of one
        parameter version start as their partitions become ready): inline, or, when larger
        than ``daskabsp.inline-params``, scattered once under ``rid``'s key (release the
        future once no further task will take it; tasks submitted keep it alive)."""
        if sizeof(params) <= config.nbytes("inline-params"):
            return params
        key = rid.key_prefix(self.program.name, "-params")
        return (await self.client.scatter({key: params}, broadcast=True, hash=False))[key]

    # -- collecting ----------------------------------------------------------------------------

    async def gather(self, futs: list[Future]) -> list:
        """``client.gather(futs)``, entered once they are all done (a gather cancelled while
        it waits leaves distributed's waiters behind, which raise when the futures are
        released; :func:`~daskabsp.engine.partitions.wait_all`'s end quietly)."""
        await wait_all(self.client, futs)
        got = await self.client.gather(futs)
        self._let_go(futs)  # (not when cancelled: a halt still has to stop them)
        return got

    async def collect(self, futs: list[Future], rid: RoundId, cursors: list[int], *,
                      quorum: int, settle: bool, deadline: float | None = None,
                      patience: float = 0.0) -> Collected:
        """Round ``rid``'s results, once it is stopped (at ``quorum``, 0: never, and
        ``patience``, see :meth:`submit_round`) and settled.

        With ``settle``, on the scheduler path, stop waiting once the scheduler says the round
        has settled: a task still queued when the stop reached its worker computes nothing,
        so it gets an idle result here (``cursors[i]``: where task ``i`` would have started)
        and its future is released, usually before it runs; and tasks on a worker that went
        silent, or bound to one that left, are given up on (``late``).

        With a ``deadline`` (seconds; for waves the fit can do without, such as helpers),
        the round is stopped once it has passed (running tasks return at their next chunk)
        and, half the deadline later, the tasks that have not answered are dropped
        (``dropped``, with idle results), as are those whose data was lost with a worker.
        """
        if deadline is None:
            got = await self._collect(futs, rid, cursors, quorum=quorum, settle=settle,
                                      patience=patience)
        else:
            got = await self._collect_by(deadline, futs, rid, cursors, quorum=quorum,
                                         settle=settle)
        # Released here, not when the last reference goes: a traceback of a lost worker's
        # error can hold the futures in a reference cycle, and their tasks stayed on the
        # cluster after the fit (1 helper task in 1 CI run of the killed-worker test).
        self.release(futs)
        self._timed(str(rid), got.results)
        return got

    async def _collect_by(self, deadline: float, futs: list[Future], rid: RoundId,
                          cursors: list[int], **kwargs) -> Collected:
        """:meth:`_collect` within ``deadline`` seconds (see :meth:`collect`)."""
        task = asyncio.ensure_future(self._collect(futs, rid, cursors, **kwargs))
        done, _ = await asyncio.wait({task}, timeout=deadline)
        if not done:
            await self.stop([rid])
            done, _ = await asyncio.wait({task}, timeout=max(deadline / 2, 0.5))
        if done and task.exception() is None:
            return task.result()
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task  # (its error, if any: the data of some task lost with a worker)
        ready = [f for f in futs if f.status == "finished"]
        got: dict = {}
        if ready:  # finished, but their results may have been lost since: not waited for again
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                got = await asyncio.wait_for(self.client.gather(
                    {f.key: f for f in ready}, errors="skip"), max(deadline / 2, 0.5))
        results, dropped = [], set()
        for i, f in enumerate(futs):
            if got.get(f.key) is not None:
                results.append(got[f.key])
            else:
                dropped.add(i)
                results.append(idle_result(cursors[i], ""))
        await self.cancel([f for i, f in enumerate(futs) if i in dropped])
        return Collected(results, {}, set(), dropped)

    def submitted_at(self, rid: RoundId) -> float:
        """When round ``rid``'s wave was submitted (``time.perf_counter``)."""
        return self._submitted.get(str(rid), time.perf_counter())

    def _timed(self, rid: str, results: list) -> None:
        """Take in the overhead of wave ``rid``: its time from submission to collected, less
        its longest task's scan (a helpers' task scans its pieces one after another)."""
        t0 = self._submitted.pop(rid, None)
        if t0 is None:
            return
        scans = [sum(r.compute_seconds for r in res) if isinstance(res, list)
                 else res.compute_seconds for res in results]
        x = max(time.perf_counter() - t0 - max(scans, default=0.0), 0.0)
        old = self.wave_overhead
        self.wave_overhead = x if old is None else old + (x - old) / 3

    async def _collect(self, futs: list[Future], rid: RoundId, cursors: list[int], *,
                      quorum: int, settle: bool, patience: float = 0.0) -> Collected:
        """:meth:`collect`, without the timing."""
        await self.path.watch(self, futs, rid, quorum, patience)
        if not (settle and self.path.scheduler_plugin):
            return Collected(await self.gather(futs), {}, set())
        settled = getattr(self.client.scheduler, SETTLED_HANDLER)
        ask = asyncio.ensure_future(settled(
            round=str(rid), unresponsive=config.seconds("unresponsive-after")))
        # A round whose tasks lost their data before the scheduler took them in is never
        # announced to the plugin: its first failed future ends the wait (measured: a round
        # after a killed worker otherwise waited out the plugin's 60 s for the round).
        failed = asyncio.ensure_future(_first_failure(self.client, futs))
        await asyncio.wait({ask, failed}, return_when=asyncio.FIRST_COMPLETED)
        failed.cancel()
        if not ask.done():
            ask.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await failed
        ans: SettledReply = (ask.result() if ask.done() and not ask.cancelled()
                             and ask.exception() is None else None) or {
            "idle": [], "late": [], "occupied": []}
        idle = dict(ans["idle"])
        # Given up: their worker went silent. Their rows stay unprocessed; whatever they
        # return later is never gathered (the futures are released with the round).
        late = dict(ans["late"])
        # A result finished just before its worker froze is given up on the same way.
        got, lost = await gather_answering(
            self.client, [f for f in futs if f.key not in idle and f.key not in late])
        late.update(lost)
        skipped = {**idle, **late}
        results = [idle_result(cursors[i], skipped[f.key]) if f.key in skipped
                   else got[f.key] for i, f in enumerate(futs)]
        return Collected(results, {i: late[f.key] for i, f in enumerate(futs) if f.key in late},
                         set(ans["occupied"]))

    async def cancel(self, futs: list[Future]) -> None:
        """Cancel ``futs`` on the cluster (a round being retried, a fit that ended)."""
        self._let_go(futs)
        await self.client.cancel(futs)

    # -- stopping ------------------------------------------------------------------------------

    def halt(self) -> asyncio.Future:
        """Stop the rounds in flight, if any, on every worker; call on the client's loop.

        For a fit that was interrupted or cancelled: Dask cannot interrupt a running task, and
        releasing its future would leave it computing its whole quota; with its round's stop
        flag set it returns at its next chunk. Stops once; later calls wait for the same stop.
        """
        if self._halted is None:
            self._halted = asyncio.ensure_future(self._stop_everywhere(list(self.in_flight)))
        return self._halted

    async def stop(self, rids: list[RoundId]) -> None:
        """Stop the tasks of rounds ``rids`` on every worker (they return at their next
        chunk; e.g. the tasks still running when an SSP or ASP fit has converged)."""
        await self._stop_everywhere(list(rids))

    async def _stop_everywhere(self, rids: list[RoundId]) -> None:
        """Set the stop flags of ``rids`` on every worker, waiting for none of them (a
        frozen worker would hold the fit up until it resumes)."""
        if not rids:
            return
        rounds = [str(r) for r in rids]
        try:
            if self.path.scheduler_plugin:
                await getattr(self.client.scheduler, STOP_ROUNDS_HANDLER)(rounds=rounds)
            else:
                stop_in_background(self.client, rounds)
        except Exception as e:  # e.g. the client is closing: its tasks are released anyway
            logger.debug("daskabsp: could not stop rounds %s: %r", rids, e)
