"""Faults at the moments a fit's own events choose: worker processes killed, stopped for a
while or slowed, when a round (or an SSP/ASP clock) starts, a copy is being made, a helper
wave is queued, or a partition's task finishes.

:class:`FaultInjector` is a scheduler plugin: it watches the scheduler's task transitions
(the events are the tasks of the fit, recognised by their ``daskabsp`` annotation and their
keys) and acts on the worker process the moment the event happens, with a signal to its
process id. It needs the worker processes on the scheduler's host (a ``LocalCluster``, as
in the tests and the soak, ``benchmarks/soak_faults.py``); a stopped worker is resumed by a
timer on the scheduler's event loop, and by :meth:`FaultInjector.release` in any case.
:func:`random_schedule` draws a schedule of faults for a soak.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import SchedulerPlugin

from ..extension import ANNOTATION, COPY_PREFIX

#: The events a fault can wait for (see :class:`Fault`).
MOMENTS = ("round", "copy", "helpers", "finish")
#: What a fault does to its worker (see :class:`Fault`).
KINDS = ("kill", "stop", "slow")
#: Period of a slowed worker's stop-and-continue cycle (seconds).
SLOW_PERIOD = 0.04
_SCATTERED = re.compile(r"daskabsp-\d+-[0-9a-f]{8}$")
#: Configuration for a ``LocalCluster`` whose workers are killed (``dask.config.set``, held
#: while the cluster lives). A ``LocalCluster`` closes a worker's nanny for good when no worker
#: of its name has come back ``distributed.deploy.lost-worker-timeout`` (15 s) after the worker
#: left, and a restart does not cancel that check: a worker killed twice within 15 s, its
#: second replacement still starting when the first check ran, lost its nanny, and the cluster
#: ran on one worker fewer from then on (``benchmarks/bench_fault_recovery.py``: a 60 s wait
#: for the fourth worker before every later fit, which then ran on three). The nannies restart
#: a killed worker themselves; the check is put past any run.
KEEP_NANNIES = {"distributed.deploy.lost-worker-timeout": "1 day"}


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule.

    Parameters
    ----------
    kind : {"kill", "stop", "slow"}
        ``"kill"``: SIGKILL (its nanny starts a new worker, with a new address); ``"stop"``:
        SIGSTOP for ``seconds``, then SIGCONT; ``"slow"``: stopped ``share`` of every
        :data:`SLOW_PERIOD` for ``seconds`` (a busy neighbour).
    moment : {"round", "copy", "helpers", "finish"}
        The event: the ``n``-th round's tasks (under SSP and ASP: the ``n``-th clock's)
        start running; the ``n``-th copy of a partition starts being made (or, for
        in-memory rows, lands); the ``n``-th helper wave is queued; the ``n``-th partition
        task finishes (under SSP and ASP: an update is about to be applied).
    n : int
        Which occurrence of the event, from 0.
    target : {"bound", "random"}
        The worker the event's task is bound to (running on, restricted to, or holding the
        copy it reads), or any worker.
    seconds : float
        How long a stop or a slow-down lasts.
    share : float
        The stopped share of a slowed worker's time.
    """

    kind: str
    moment: str
    n: int = 0
    target: str = "bound"
    seconds: float = 0.0
    share: float = 0.75

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.moment not in MOMENTS:
            raise ValueError(f"A fault's kind must be one of {KINDS} and its moment one of "
                             f"{MOMENTS}. Got {self.kind!r} and {self.moment!r} instead.")


@dataclass
class Fired:
    """A fault that happened: to which worker, on which task, when (``time.time()``)."""

    fault: Fault
    worker: str
    key: str
    at: float


@dataclass
class _Counts:
    rounds: set = field(default_factory=set)
    helpers: set = field(default_factory=set)
    copies: int = 0
    finished: int = 0


class FaultInjector(SchedulerPlugin):
    """Carries out a schedule of :class:`Fault` on the workers of the scheduler it is
    registered with, at the moments the fit's task transitions say.

    Parameters
    ----------
    faults : sequence of Fault
        The schedule.
    seed : int
        Seed of the choice of ``"random"`` targets.
    name : str
        The plugin's name (one injector per schedule).
    """

    def __init__(self, faults, seed: int = 0, name: str = "daskabsp-faults") -> None:
        self.faults = list(faults)
        self.seed = seed
        self.name = name
        self.fired: list[Fired] = []
        self.scheduler = None
        self._rng = np.random.default_rng(seed)
        self._phase: dict = {}  # key -> (round, phase)
        self._counts = _Counts()
        self._stopped: set[int] = set()
        self._handles: list[asyncio.TimerHandle] = []

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def update_graph(self, scheduler, *, annotations=None, **kwargs: Any) -> None:
        for key, a in ((annotations or {}).get(ANNOTATION) or {}).items():
            self._phase[key] = (int(a["round"]), int(a.get("phase", 0)))

    def transition(self, key, start, finish, *args: Any, **kwargs: Any) -> None:
        if len(self.fired) == len(self.faults):
            return
        c = self._counts
        phase = self._phase.get(key)
        if phase is not None:
            r, ph = phase
            if ph == 0 and finish == "processing" and r not in c.rounds:
                c.rounds.add(r)
                self._event("round", len(c.rounds) - 1, key)
            elif ph == 1 and finish in ("waiting", "processing", "no-worker") \
                    and r not in c.helpers:
                c.helpers.add(r)
                self._event("helpers", len(c.helpers) - 1, key)
            elif ph == 0 and start == "processing" and finish == "memory":
                c.finished += 1
                self._event("finish", c.finished - 1, key)
            if finish == "forgotten":
                self._phase.pop(key, None)
            return
        k = str(key)
        if (k.startswith(COPY_PREFIX) and finish == "processing") or (
                c.rounds and finish == "memory" and _SCATTERED.match(k)):
            c.copies += 1
            self._event("copy", c.copies - 1, key)

    # -- the faults ----------------------------------------------------------------------------

    def _event(self, moment: str, n: int, key) -> None:
        for fault in self.faults:
            if fault.moment == moment and fault.n == n:
                worker = self._target(fault, key)
                if worker is not None:
                    self._act(fault, worker)
                    self.fired.append(Fired(fault, worker, str(key), time.time()))

    def _target(self, fault: Fault, key) -> str | None:
        workers = self.scheduler.workers
        if fault.target == "bound":
            ts = self.scheduler.tasks.get(key)
            if ts is not None:
                bound = [ts.processing_on.address] if ts.processing_on is not None else []
                bound += sorted(ws.address for d in ts.dependencies
                                if str(d.key).startswith(COPY_PREFIX)
                                for ws in d.who_has or ())
                bound += sorted(ts.worker_restrictions or ())
                bound += sorted(ws.address for ws in ts.who_has or ())
                for w in bound:
                    if w in workers:
                        return w
        names = sorted(workers)
        return names[int(self._rng.integers(len(names)))] if names else None

    def _act(self, fault: Fault, worker: str) -> None:
        pid = self.scheduler.workers[worker].pid
        if fault.kind == "kill":
            _signal(pid, signal.SIGKILL)
            return
        loop = asyncio.get_running_loop()
        if fault.kind == "stop":
            self._stop(pid)
            self._handles.append(loop.call_later(fault.seconds, self._cont, pid))
            return
        end = loop.time() + fault.seconds
        on, off = fault.share * SLOW_PERIOD, (1 - fault.share) * SLOW_PERIOD

        def cycle() -> None:
            if loop.time() >= end:
                self._cont(pid)
                return
            self._stop(pid)
            self._handles.append(loop.call_later(on, resume))

        def resume() -> None:
            self._cont(pid)
            self._handles.append(loop.call_later(off, cycle))

        cycle()

    def _stop(self, pid: int) -> None:
        self._stopped.add(pid)
        _signal(pid, signal.SIGSTOP)

    def _cont(self, pid: int) -> None:
        self._stopped.discard(pid)
        _signal(pid, signal.SIGCONT)

    def release(self) -> list[Fired]:
        """Resume every worker this injector stopped and cancel its timers; returns what
        it did (run on the scheduler, e.g. with ``Client.run_on_scheduler``)."""
        for h in self._handles:
            h.cancel()
        self._handles = []
        for pid in list(self._stopped):
            self._cont(pid)
        return self.fired

    async def close(self) -> None:
        self.release()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the process is gone already
        os.kill(pid, sig)


def random_schedule(rng: np.random.Generator, *, rounds: bool, max_faults: int = 2,
                    max_seconds: float = 4.0, moments=None) -> list[Fault]:
    """A random schedule of one to ``max_faults`` faults, at moments a fit with global
    rounds (``rounds``) or with clocks (SSP, ASP) has; ``moments``, if given, the moments
    to draw from (a policy without helpers, BSP or A-BSP as published, makes no copies and
    queues no helper wave: a fault waiting for those never happens)."""
    if moments is None:
        moments = ["round", "copy", "helpers", "finish"] if rounds else ["round", "finish"]
    moments = list(moments)
    out = []
    for _ in range(int(rng.integers(1, max_faults + 1))):
        kind = str(rng.choice(KINDS, p=[0.4, 0.3, 0.3]))
        moment = str(rng.choice(moments))
        n = int(rng.integers(0, {"round": 6, "copy": 2, "helpers": 2, "finish": 12}[moment]))
        seconds = float(rng.uniform(0.5, max_seconds)) if kind != "kill" else 0.0
        out.append(Fault(kind, moment, n, str(rng.choice(["bound", "random"])), seconds,
                         float(rng.uniform(0.5, 0.9))))
    return out


# -- a fit under a schedule, and what must hold after it ---------------------------------------


@dataclass
class FaultRun:
    """A fit run under a schedule of faults (see :func:`run_with_faults`).

    Attributes
    ----------
    seconds : float or None
        The fit's wall time; None if it had not returned within the bound (a hang).
    estimator : object
        The fitted estimator (None if it hung or raised).
    error : BaseException or None
        What the fit raised, if anything.
    fired : list of Fired
        The faults that happened.
    left : list of str
        Keys of the fit still on the scheduler after it returned (and a grace period).
    accounting : list of str
        Violations of the history's accounting (see :func:`accounting_errors`).
    """

    seconds: float | None
    estimator: Any
    error: BaseException | None
    fired: list[Fired]
    left: list[str]
    accounting: list[str]


def run_with_faults(client, fit, faults, *, seed: int = 0, bound: float = 120.0,
                    grace: float = 30.0, around=None) -> FaultRun:
    """Run ``fit()`` (a synchronous fit on ``client``'s cluster, returning the fitted
    estimator) with a :class:`FaultInjector` of ``faults`` registered, waiting at most
    ``bound`` seconds; then resume every stopped worker and check what must hold.

    ``around``, a context manager (e.g. :func:`daskabsp.slow_workers`), is entered before
    and left after the faults, outside the time measured (leaving it may wait for a worker
    stopped until then)."""
    name = f"daskabsp-faults-{seed}-{time.time_ns()}"
    client.register_plugin(FaultInjector(faults, seed, name), name=name)
    with around if around is not None else contextlib.nullcontext():
        return _run(client, fit, name, bound, grace)


def _run(client, fit, name: str, bound: float, grace: float) -> FaultRun:
    import threading

    out: dict = {}

    def target() -> None:
        t0 = time.perf_counter()
        try:
            out["est"] = fit()
        except BaseException as e:  # reported, not raised in this thread
            out["error"] = e
        out["seconds"] = time.perf_counter() - t0

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(bound)
    seconds = None if thread.is_alive() else out.get("seconds")
    fired = client.run_on_scheduler(_release, name)
    client.unregister_scheduler_plugin(name)
    est = out.get("est")
    left: list[str] = []
    problems: list[str] = []
    if est is not None:
        h = est.history_
        problems = accounting_errors(h)
        deadline = time.monotonic() + grace
        while (left := client.run_on_scheduler(_keys_of_fit, h.attrs["fit_id"])) and \
                time.monotonic() < deadline:
            pass  # releases reach the scheduler on the client's batched stream
    return FaultRun(seconds, est, out.get("error"), fired, left, problems)


def wait_for_workers(client, n: int, timeout: float = 60.0) -> list[str]:
    """Wait (at most ``timeout`` seconds) until ``client``'s scheduler has ``n`` workers
    running, asking the scheduler itself (``Client.wait_for_workers`` of a LocalCluster's
    client reads the cluster's cached view, which once stayed at 3 workers for half an hour
    after a killed worker's nanny had started a new one); returns the workers there are."""
    deadline = time.monotonic() + timeout
    while True:
        info = client.sync(client.scheduler.identity)["workers"]
        running = sorted(w for w, i in info.items() if i.get("status") == "running")
        if len(running) >= n or time.monotonic() >= deadline:
            return running
        time.sleep(0.1)  # polling the scheduler: nothing to wait on in between


def _release(name: str, dask_scheduler=None) -> list[Fired]:
    return dask_scheduler.plugins[name].release()


def _keys_of_fit(fit_id: str, dask_scheduler=None) -> list[str]:
    return sorted(str(k) for k in dask_scheduler.tasks if fit_id in str(k))


def accounting_errors(history) -> list[str]:
    """What is wrong with a fit history's accounting of rows (an empty list: nothing).

    With rounds: no partition covers more rows than asked, and its cursor moves past
    exactly the rows it counted (the rows a round counts are those from its cursor on), so
    every row is counted exactly once per cycle, whoever scanned it. Without (SSP, ASP):
    every (partition, clock) is applied once, each partition's clocks from 0 without a gap.
    """
    out = []
    if "update" in history.dims:
        part, clock = history.partition.values, history.clock.values
        if len(set(zip(part.tolist(), clock.tolist(), strict=True))) != len(part):
            out.append("an update of a (partition, clock) was applied twice")
        for p in np.unique(part):
            clocks = np.sort(clock[part == p])
            if not np.array_equal(clocks, np.arange(len(clocks))):
                out.append(f"partition {p}'s clocks have a gap: {clocks.tolist()}")
        return out
    rows, quota = history.rows.values, history.quota.values
    counted, cursor = history.counted.values, history.cursor.values
    size = history.partition_size.values
    if (rows > quota).any():
        out.append(f"rounds {np.flatnonzero((rows > quota).any(1)).tolist()} covered more "
                   "rows than asked")
    moved = (cursor[:-1] + rows[:-1] * counted[:-1]) % size
    bad = np.flatnonzero((cursor[1:] != moved).any(1))
    if bad.size:
        out.append(f"after rounds {bad.tolist()} a cursor did not move past exactly the "
                   "rows counted")
    per_worker = history.worker_rows.sum("address").values
    if not np.array_equal(per_worker, (rows * counted).sum(1)):
        out.append("the rows counted per worker do not add up to the rows counted")
    return out
