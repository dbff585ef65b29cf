"""A discrete-event simulator of a fit's rounds on a cluster of any size (on ``simpy``).

What it answers: how long a round takes, how many rows it counts and how much of it is
coordination, for BSP, A-BSP (the default and as published) and SSP/ASP, on clusters larger than
any one machine can run, under straggler distributions from the literature. The costs come from
measurements on a real cluster (:class:`Costs`; ``benchmarks/sim/calibrate.py`` measures them), and
the decisions are the engine's own functions, imported, never copied: a round's plan and
settlement are :func:`daskabsp.engine.plan.plan_round` and :func:`~daskabsp.engine.plan.settle`
under the real :class:`~daskabsp.ABSP` and :class:`~daskabsp.BSP` policies; the helper phase is
:mod:`daskabsp.engine.helpers`' rules (what was left, which copies to make and where, whether a
wave of helpers is worth it and who scans what, the merge), from
:class:`daskabsp.engine.rates.Rates`; a task that had not started when its round stopped returns
:func:`daskabsp.engine.link.idle_result`; cursors and chunk sizes are kept by
:class:`daskabsp.engine.book.PartitionBook`, and every cursor moves by
:func:`daskabsp.policies.advance`. SSP and ASP (:class:`~daskabsp.SSP`, :class:`~daskabsp.ASP`)
hold back a partition by the engine's staleness bound
(:func:`daskabsp.engine.clocks.within_bound`, as :meth:`~daskabsp.engine.clocks.ClockBook.ready`)
and apply updates as they arrive; their loop is modelled, not the engine's ``ClockLoop``. What
the engine measures (time: scans, messages, the event loop) is the simulator's model.

The model (see ``docs/scale.md`` for its assumptions):

- the scheduler's event loop is one server: each task costs it ``loop_task`` (submit to
  gather), each stop sent or idle report ``stop_message``, the engine's driver ``engine_task``
  per partition and ``engine_round`` per round (the update); in a LocalCluster the driver
  shares that loop, and :class:`Cluster` ``shared_cores`` makes the loop and every worker
  compete for the machine's cores (oversubscription: the cores are a queue taken a chunk at a
  time, the loop's work first, so ``k`` busy workers on ``c < k`` cores each scan at about
  ``c / k`` of a core's speed, and a chunk that finds every core busy costs
  ``row_contention`` times more per row);
- a worker runs ``threads`` tasks at a time, each paying ``worker_task`` and then scanning rows
  at ``row_seconds`` per row times its slowdown, in chunks of ``chunk_target`` seconds, and
  checking its round's stop flag before every chunk, as :func:`daskabsp.extension.run_partition`;
- messages take ``latency``; a stop reaches a worker ``stop_latency`` after the quorum;
- a copy for helpers takes its bytes over ``copy_bandwidth`` and uses no CPU.

Not modelled: workers that die or go silent (and with them the helper wave's deadline,
:func:`daskabsp.engine.helpers.wave_deadline`, which only a wave waiting on such a worker
reaches), memory, the data's placement, the program's convergence (rows counted stand for
progress: "time per epoch" is the time to count as many rows as the data holds).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

try:
    import simpy
except ImportError as e:  # an optional dependency
    raise ImportError("daskabsp.lab.sim needs simpy: pip install simpy (in daskabsp's "
                      "source tree: pip install '.[sim]')") from e

from ..engine.book import PartitionBook, quotas_of
from ..engine.clocks import within_bound
from ..engine.helpers import (
    Helped,
    copies_due,
    copy_targets,
    helper_batches,
    leftovers_of,
    merge_helped,
    shortfall,
)
from ..engine.link import idle_result
from ..engine.plan import RoundPlan, expected_scans, plan_round, settle
from ..engine.rates import Rates
from ..extension import PartialResult
from ..policies import ABSP, BSP, Policy, advance

# -- what the simulation is given ----------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """What each event of a round costs (seconds unless said; defaults are placeholders of the
    right order, measure them with ``benchmarks/sim/calibrate.py``).

    Attributes
    ----------
    loop_task : float
        Event-loop CPU per task of plain Dask: submit, assign, finish, gather.
    loop_round : float
        Event-loop CPU per round of plain Dask, whatever its tasks.
    engine_task, engine_round : float
        The engine's own event-loop CPU, per partition and per round, on top of Dask's
        (planning, settling, the update, the record).
    update : float
        Driver CPU to apply one partition's update as it arrives (SSP/ASP: combine and
        update; a round's update is part of ``engine_round``).
    stop_message : float
        Event-loop CPU per stop sent to a worker, and per idle report received.
    worker_task : float
        A worker's CPU per task outside the scan (receive, deserialise, send back).
    latency : float
        One-way message delay between the scheduler and a worker.
    stop_latency : float
        From the quorum on the scheduler to the stop flag set on a worker.
    row_seconds : float
        Scan CPU per row at speed 1, on a core of its own.
    row_contention : float
        With shared cores (:class:`Cluster` ``shared_cores``): the factor on ``row_seconds``
        of a chunk that finds every core busy (more work than cores: the scans share caches
        and memory bandwidth and are switched in and out).
    row_bytes : float
        Bytes per row (what a copy moves).
    copy_bandwidth : float
        Bytes per second of a copy of a partition to another worker.
    chunk_target : float
        Seconds per chunk of a scan (``daskabsp.chunk-target``).
    help_above : float
        ``daskabsp.help-above``.
    probe_rows : int
        ``daskabsp.probe-rows``.
    replicas : int
        ``daskabsp.replicas``.
    """

    loop_task: float = 5e-4
    loop_round: float = 1e-3
    engine_task: float = 1e-4
    engine_round: float = 2e-3
    update: float = 1e-4
    stop_message: float = 5e-5
    worker_task: float = 1e-3
    latency: float = 5e-4
    stop_latency: float = 3e-3
    row_seconds: float = 5e-7
    row_contention: float = 1.0
    row_bytes: float = 88.0
    copy_bandwidth: float = 2e8
    chunk_target: float = 2e-3
    help_above: float = 2e-3
    probe_rows: int = 256
    replicas: int = 1


@dataclass(frozen=True)
class Cluster:
    """The cluster simulated.

    Attributes
    ----------
    workers : int
        Workers.
    rows : int
        Rows per partition.
    partitions_per_worker : int
        Partitions per worker (partition ``p`` is owned by worker ``p % workers``).
    threads : int
        Threads per worker.
    shared_cores : int or None
        None: every worker has cores of its own and the scheduler's loop has one (a real
        cluster). An int: the loop and every worker share that many cores (a LocalCluster on
        one machine); CPU work queues for them, the loop's first.
    """

    workers: int
    rows: int
    partitions_per_worker: int = 1
    threads: int = 1
    shared_cores: int | None = None

    @property
    def partitions(self) -> int:
        return self.workers * self.partitions_per_worker


# -- stragglers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stragglers:
    """No stragglers: every worker at speed 1. Subclasses slow workers down per round (a
    factor >= 1 on their scan time); :meth:`factors` is deterministic in ``(seed, round)``."""

    def factors(self, seed: int, round: int, n_workers: int) -> np.ndarray:
        """The slowdown of each worker in ``round`` (for SSP/ASP: in that clock)."""
        return np.ones(n_workers)


@dataclass(frozen=True)
class Persistent(Stragglers):
    """A fraction of the workers is ``factor`` times slower throughout (slower machines, a
    busy neighbour)."""

    fraction: float = 0.05
    factor: float = 4.0

    def factors(self, seed: int, round: int, n_workers: int) -> np.ndarray:
        out = np.ones(n_workers)
        slow = np.random.default_rng(seed).permutation(n_workers)
        out[slow[:max(1, round_half(self.fraction * n_workers))]] = self.factor
        return out


@dataclass(frozen=True)
class Fixed(Stragglers):
    """The workers ``slow`` are ``factor`` times slower throughout (a benchmark's emulated
    straggler: worker 0 holds partition 0)."""

    slow: tuple[int, ...] = (0,)
    factor: float = 4.0

    def factors(self, seed: int, round: int, n_workers: int) -> np.ndarray:
        out = np.ones(n_workers)
        out[[w for w in self.slow if w < n_workers]] = self.factor
        return out


@dataclass(frozen=True)
class Transient(Stragglers):
    """Each worker, independently each round, is ``factor`` times slower with ``probability``
    (garbage collection, a burst of other work)."""

    probability: float = 0.05
    factor: float = 4.0

    def factors(self, seed: int, round: int, n_workers: int) -> np.ndarray:
        rng = np.random.default_rng([seed, round])
        return np.where(rng.random(n_workers) < self.probability, self.factor, 1.0)


@dataclass(frozen=True)
class HeavyTail(Stragglers):
    """Each worker's slowdown each round is Pareto with shape ``alpha`` (``P(f > x) =
    x ** -alpha`` for x >= 1): most near 1, a few far slower; the slowest of n workers is
    about ``n ** (1 / alpha)`` times slower."""

    alpha: float = 3.0

    def factors(self, seed: int, round: int, n_workers: int) -> np.ndarray:
        rng = np.random.default_rng([seed, round, 1])
        return 1.0 + rng.pareto(self.alpha, n_workers)


def mode_name(policy: Policy) -> str:
    """``"bsp"``, ``"absp"`` (the default A-BSP), ``"absp-paper"`` (``ABSP.published()``),
    ``"ssp<staleness>"`` (``SSP(staleness)``), ``"asp"``, or the policy's repr."""
    if not policy.rounds:
        bound = policy.staleness_bound
        return "asp" if bound is None else f"ssp{bound}"
    if isinstance(policy, BSP) or policy == ABSP():
        return policy.name
    return "absp-paper" if policy == ABSP.published() else repr(policy)


def round_half(x: float) -> int:
    """``x`` rounded half up."""
    return math.floor(x + 0.5)


# -- what the simulation returns ----------------------------------------------------------


@dataclass(frozen=True)
class SimRound:
    """One simulated round (for SSP/ASP: one applied update).

    Attributes
    ----------
    round : int
        The round (the update's number).
    start, end : float
        When it was submitted and when its update was applied.
    counted : tuple of (int, int, int)
        ``(partition, start row, rows)`` of the rows it counted, from each partition's cursor.
    stopped : int
        Partitions stopped before their quota.
    helped : int
        Rows helpers scanned that count.
    staleness : int
        For SSP/ASP: updates applied between the read of the parameters and this one.
    """

    round: int
    start: float
    end: float
    counted: tuple[tuple[int, int, int], ...]
    stopped: int = 0
    helped: int = 0
    staleness: int = 0

    @property
    def rows(self) -> int:
        return sum(n for _, _, n in self.counted)


@dataclass
class SimResult:
    """What a simulation saw.

    Attributes
    ----------
    mode : str
        The sync model simulated.
    cluster : Cluster
        The cluster.
    rounds : list of SimRound
        Rounds (or updates) in the order they ended.
    loop_busy : float
        Seconds the scheduler's event loop worked.
    events : list of (float, str, int, int)
        With ``log=True``: ``(time, what, round, partition)`` in the order they happened.
    """

    mode: str
    cluster: Cluster
    rounds: list[SimRound] = field(default_factory=list)
    loop_busy: float = 0.0
    events: list[tuple[float, str, int, int]] = field(default_factory=list)

    @property
    def total_rows(self) -> int:
        return self.cluster.partitions * self.cluster.rows

    def round_times(self) -> np.ndarray:
        """Each round's duration, start to applied update."""
        return np.asarray([r.end - r.start for r in self.rounds])

    def time_per_epoch(self, after: int = 0) -> float:
        """Seconds per epoch at the rate the rounds (updates) from ``after`` on counted rows:
        their time over the data's rows counted in them."""
        logs = self.rounds[after:]
        rows = sum(r.rows for r in logs)
        if not rows:
            return math.nan
        return (logs[-1].end - logs[0].start) * self.total_rows / rows


# -- the cluster's servers ------------------------------------------------------------------


class Servers:
    """The scheduler's event loop and the workers' threads and cores."""

    def __init__(self, env: simpy.Environment, cluster: Cluster) -> None:
        self.env = env
        self.shared = cluster.shared_cores is not None
        self.cores = simpy.PriorityResource(env, cluster.shared_cores) if self.shared else None
        self.loop = simpy.Resource(env, 1) if self.shared else None
        self.slots = [simpy.Resource(env, cluster.threads) for _ in range(cluster.workers)]
        self.loop_busy = 0.0
        self._loop_free = 0.0

    def on_loop(self, seconds: float) -> Iterator:
        """Work of ``seconds`` on the scheduler's event loop (first come, first served)."""
        self.loop_busy += seconds
        env = self.env
        if not self.shared:
            self._loop_free = max(env.now, self._loop_free) + seconds
            yield env.timeout(self._loop_free - env.now)
            return
        with self.loop.request() as lr:
            yield lr
            with self.cores.request(priority=0) as cr:
                yield cr
                yield env.timeout(seconds)

    def on_worker(self, seconds: float) -> Iterator:
        """CPU work of ``seconds`` on a worker (on a shared core: after the loop's work)."""
        if not self.shared:
            yield self.env.timeout(seconds)
            return
        with self.cores.request(priority=1) as cr:
            yield cr
            yield self.env.timeout(seconds)


class _NeverStopped:
    """The stop flags of a scan that is never stopped (helpers' pieces, SSP/ASP clocks)."""

    @staticmethod
    def is_set(worker: int) -> bool:
        return False

    @staticmethod
    def flag(worker: int) -> None:
        return None


_NEVER = _NeverStopped()


class _Round:
    """One round's tasks as the scheduler plugin sees them (see
    :class:`daskabsp.extension._registry.RoundRegistry`): open, finished, stopped, idle."""

    def __init__(self, env: simpy.Environment, number: int, plan: RoundPlan,
                 owner: list[int], order: list[int]) -> None:
        self.env = env
        self.number = number
        self.plan = plan
        self.owner = owner
        self.open = set(order)
        self.load = Counter(owner[p] for p in order)
        self.queued: dict[int, set[int]] = {}
        self.results: dict[int, PartialResult] = {}
        self.done_workers: set[int] = set()
        self.finished = 0
        self.stopped = False
        self.t0 = env.now
        self.deadline: float | None = None  # set at the quorum, with patience
        self.flags: dict[int, simpy.Event] = {}
        self.settled = env.event()
        if not self.open:
            self.settled.succeed()

    def flag(self, worker: int) -> simpy.Event:
        ev = self.flags.get(worker)
        if ev is None:
            ev = self.flags[worker] = self.env.event()
        return ev

    def is_set(self, worker: int) -> bool:
        ev = self.flags.get(worker)
        return ev is not None and ev.triggered

    def set_flag(self, worker: int) -> None:
        ev = self.flag(worker)
        if not ev.triggered:
            ev.succeed()

    def settle(self, p: int, result: PartialResult) -> None:
        """Partition ``p``'s task finished or was reported idle with ``result``."""
        if p not in self.open:
            return
        self.open.discard(p)
        self.load[self.owner[p]] -= 1
        self.results[p] = result
        if not self.open:
            self.settled.succeed()

    def finish(self, p: int, result: PartialResult) -> bool:
        """The scheduler saw ``p``'s task finish; True if the round must be stopped now."""
        if p not in self.open:
            return False
        self.finished += 1
        self.settle(p, result)
        w = self.owner[p]
        if self.plan.unit == "workers":
            if not self.load[w]:
                self.done_workers.add(w)
            count = len(self.done_workers)
        else:
            count = self.finished
        if self.stopped or not self.plan.quorum or count < self.plan.quorum \
                or self.deadline is not None:
            return False
        if self.plan.patience > 0:
            if self.open:
                self.deadline = self.env.now + self.plan.patience * (self.env.now - self.t0)
            return False
        self.stopped = True
        return True

    def expire(self) -> bool:
        """The deadline has come: True if the round must be stopped now."""
        if self.stopped or not self.open:
            return False
        self.stopped = True
        return True


class _Base:
    """What the round and clock simulations share: the servers, the costs, the scans."""

    def __init__(self, cluster: Cluster, costs: Costs, stragglers: Stragglers, seed: int,
                 mode: str, log: bool) -> None:
        self.cluster = cluster
        self.costs = costs
        self.stragglers = stragglers
        self.seed = seed
        self.env = simpy.Environment()
        self.srv = Servers(self.env, cluster)
        self.names = [f"w{i}" for i in range(cluster.workers)]
        self.owner = [p % cluster.workers for p in range(cluster.partitions)]
        self.result = SimResult(mode, cluster)
        self._log = log
        self._factors: dict[int, np.ndarray] = {}

    def log(self, what: str, number: int, p: int) -> None:
        if self._log:
            self.result.events.append((self.env.now, what, number, p))

    def factor(self, number: int, worker: int) -> float:
        """Worker ``worker``'s slowdown in round (or clock) ``number``."""
        f = self._factors.get(number)
        if f is None:
            f = self._factors[number] = self.stragglers.factors(self.seed, number,
                                                                self.cluster.workers)
        return float(f[worker])

    def scan(self, flags, w: int, quota: int, grace: int, factor: float) -> Iterator:
        """A partition scan of ``quota`` rows on worker ``w`` (slowed by ``factor``), stopped
        at a chunk boundary once ``flags.is_set(w)`` unless at most ``grace`` rows are left.
        Returns ``(rows, seconds, stopped)``."""
        if self.srv.shared:
            return (yield from self._scan_chunks(flags, w, quota, grace, factor))
        return (yield from self._scan_whole(flags, w, quota, grace, factor))

    def _scan_chunks(self, flags, w: int, quota: int, grace: int, factor: float) -> Iterator:
        """Chunk by chunk on the shared cores; a slowdown sleeps ``factor - 1`` times each
        chunk's time, as :class:`daskabsp.SlowWorkers` does. A chunk that finds every core
        busy costs ``row_contention`` times more per row."""
        c, env = self.costs, self.env
        chunk = max(1, int(c.chunk_target / (c.row_seconds * factor)))
        done, t0 = 0, env.now
        while done < quota:
            if flags.is_set(w) and quota - done > grace:
                break
            n = min(chunk, quota - done)
            t = env.now
            contended = self.srv.cores.count >= self.srv.cores.capacity
            yield from self.srv.on_worker(
                n * c.row_seconds * (c.row_contention if contended else 1.0))
            if factor > 1:
                yield env.timeout((factor - 1) * (env.now - t))
            done += n
        return done, env.now - t0, done < quota

    def _scan_whole(self, flags, w: int, quota: int, grace: int, factor: float) -> Iterator:
        """On a worker's own core: one event for the whole scan, cut at the first chunk
        boundary after the stop flag is set."""
        c, env = self.costs, self.env
        if flags.is_set(w) and quota > grace:
            return 0, 0.0, quota > 0
        rate = 1.0 / (c.row_seconds * factor)
        full = quota / rate
        t0 = env.now
        flag = flags.flag(w)
        yield env.timeout(full) if flag is None else env.timeout(full) | flag
        elapsed = env.now - t0
        if elapsed >= full:
            return quota, full, False
        chunk = max(1, int(c.chunk_target * rate))
        rows = min(quota, math.ceil(elapsed * rate / chunk) * chunk)
        if quota - rows <= grace:
            rows = quota
        yield env.timeout(max(rows / rate - elapsed, 0.0))
        return rows, rows / rate, rows < quota


class RoundSim(_Base):
    """BSP and A-BSP rounds as the engine runs them (``engine=False``: a plain Dask loop of
    submit and gather, nobody stopped)."""

    def __init__(self, policy: Policy, cluster: Cluster, costs: Costs, stragglers: Stragglers,
                 seed: int = 0, *, engine: bool = True, log: bool = False,
                 spread_copies: bool = False) -> None:
        super().__init__(cluster, costs, stragglers, seed,
                         mode_name(policy) if engine else "plain", log)
        self.policy = policy if engine else BSP()
        self.engine = engine
        sizes = (cluster.rows,) * cluster.partitions
        self.book = PartitionBook(sizes, quotas_of(None, sizes))
        self.helpers = engine and self.policy.helped and costs.replicas > 0
        self.rates = Rates(cluster.partitions)
        self.copies: list[list[str]] = [[] for _ in range(cluster.partitions)]
        self.copying: set[int] = set()
        self.spread_copies = spread_copies
        self.copies_on: Counter = Counter()  # copies made (or being made) per worker
        self.owner_names = [self.names[w] for w in self.owner]
        self.threads = dict.fromkeys(self.names, cluster.threads)  # helpers may use all
        self.rent_due = [cluster.rows * costs.row_bytes / costs.copy_bandwidth] * len(sizes)

    def run(self, rounds: int, epochs: float | None = None) -> SimResult:
        """Run ``rounds`` rounds, or fewer once ``epochs`` times the data's rows counted."""
        self.env.run(until=self.env.process(self._rounds(rounds, epochs)))
        self.result.loop_busy = self.srv.loop_busy
        return self.result

    def _rounds(self, rounds: int, epochs: float | None) -> Iterator:
        target = math.inf if epochs is None else epochs * self.result.total_rows
        counted = 0
        for r in range(rounds):
            log = yield from self._round(r)
            self.result.rounds.append(log)
            counted += log.rows
            if counted >= target:
                return

    def _round(self, r: int) -> Iterator:
        """One round: plan, the partitions' own tasks, helpers, settle, the update."""
        book, env, c = self.book, self.env, self.costs
        plan = plan_round(self.policy, book.quotas, book.sizes, full=False,
                          helpers=self.helpers, expected=expected_scans(
                              book.quotas, book.steady_rate(),
                              [self.names[w] for w in self.owner]))
        t0 = env.now
        order = book.order()
        rnd = _Round(env, r, plan, self.owner, order)
        for p in order:
            env.process(self._own_task(rnd, p))
        yield rnd.settled
        yield env.timeout(c.latency)  # the settled reply, or the last result, to the driver
        owned = [rnd.results[p] for p in range(len(book))]
        helped = yield from self._help(r, plan, owned)
        settled = settle(self.policy, book.cursor, book.sizes, helped.outcomes,
                         helped.helper_rows,
                         self.names)
        cursors = tuple(book.cursor)
        book.record(settled.cursors, settled.counted, owned, probe_rows=c.probe_rows,
                    chunk_target=c.chunk_target)
        driver = c.loop_round + (c.engine_round + c.engine_task * len(book) if self.engine
                                 else 0.0)
        yield from self.srv.on_loop(driver)
        self.log("round", r, -1)
        return SimRound(r, t0, env.now, tuple((ps.partition, cursors[ps.partition], ps.rows)
                                              for ps in settled.pieces),
                        stopped=sum(res.stopped for res in owned),
                        helped=sum(helped.helper_rows.values()))

    def _own_task(self, rnd: _Round, p: int) -> Iterator:
        """Partition ``p``'s own task: submitted, queued on its owner, scanned, returned."""
        env, c, book = self.env, self.costs, self.book
        w, plan = self.owner[p], rnd.plan
        yield from self.srv.on_loop(c.loop_task / 2)
        self.log("submit", rnd.number, p)
        yield env.timeout(c.latency)
        queued = rnd.queued.setdefault(w, set())
        queued.add(p)
        if rnd.is_set(w):  # arrived after the stop: reported idle at once
            env.process(self._report_idle(rnd, w, [p]))
        with self.srv.slots[w].request() as slot:
            yield slot
            queued.discard(p)
            self.log("start", rnd.number, p)
            t_start = env.now
            yield from self.srv.on_worker(c.worker_task)
            quota = plan.quotas[p]
            rows, seconds, stopped = yield from self.scan(
                rnd, w, quota, plan.grace[p] if plan.grace else 0, self.factor(rnd.number, w))
            if plan.quorum == 1 and plan.unit == "partitions" and not plan.patience \
                    and not stopped:
                rnd.set_flag(w)  # ends_round: its worker's other tasks stop at once
        self.log("end", rnd.number, p)
        result = PartialResult(_stats(rows), rows, advance(book.cursor[p], rows, book.sizes[p]),
                               stopped, seconds, t_start, env.now, self.names[w], 0)
        yield env.timeout(c.latency)
        yield from self.srv.on_loop(c.loop_task / 2)
        had = rnd.deadline
        if rnd.finish(p, result):
            env.process(self._stop(rnd))
        elif had is None and rnd.deadline is not None:
            env.process(self._expire(rnd))

    def _expire(self, rnd: _Round) -> Iterator:
        """A round with patience: stopped at its deadline if tasks are still open."""
        yield self.env.timeout(max(rnd.deadline - self.env.now, 0.0))
        if rnd.expire():
            yield from self._stop(rnd)

    def _stop(self, rnd: _Round) -> Iterator:
        """The quorum has finished: stop the workers with open tasks (one message each)."""
        targets = sorted({self.owner[p] for p in rnd.open})
        self.log("stop", rnd.number, -1)
        yield from self.srv.on_loop(self.costs.stop_message * len(targets))
        for w in targets:
            self.env.process(self._deliver_stop(rnd, w))

    def _deliver_stop(self, rnd: _Round, w: int) -> Iterator:
        yield self.env.timeout(self.costs.stop_latency)
        rnd.set_flag(w)
        waiting = sorted(rnd.queued.get(w, ()))
        if waiting:
            yield from self._report_idle(rnd, w, waiting)

    def _report_idle(self, rnd: _Round, w: int, parts: list[int]) -> Iterator:
        """Worker ``w`` reports tasks that had not started when the stop came."""
        yield self.env.timeout(self.costs.latency)
        yield from self.srv.on_loop(self.costs.stop_message)
        for p in parts:
            rnd.settle(p, idle_result(self.book.cursor[p], self.names[w]))

    # -- helpers: the engine's rules (daskabsp.engine.helpers), applied in the order
    #    RoundLoop._help and HelperPhase apply them, for a program that never needs a full
    #    round and workers that never go silent ----------------------------------------------

    def _help(self, r: int, plan: RoundPlan, owned: list[PartialResult]) -> Iterator:
        """The helper phase: returns each partition's outcome and the helpers' counted rows
        (a :class:`~daskabsp.engine.helpers.Helped`)."""
        own = Helped.own(owned)
        if not (self.helpers and plan.copies):
            return own
        self.rates.observe(owned)
        self._copy_stragglers(owned, plan.quotas)
        if not plan.helped:
            return own
        book, c = self.book, self.costs
        scanned = [res.rows for res in owned]
        leftovers = leftovers_of(scanned, plan.quotas, book.cursor, book.sizes,
                                 {p: self._holders(p) for p in shortfall(scanned, plan.quotas)},
                                 self.owner_names, needed=plan.full)
        batches = helper_batches(leftovers, owned, self.rates, self.threads,
                                 min_rows=c.probe_rows, help_above=c.help_above,
                                 needed=plan.full)
        if not batches:
            return own
        work = [self.env.process(self._pieces_task(r, w, batch)) for w, batch in batches]
        yield self.env.all_of(work)
        yield self.env.timeout(c.latency)
        pieces = [pc for _, batch in batches for pc in batch]
        results = [res for proc in work for res in proc.value]
        self.rates.observe_pieces(owned, ((pc.partition, res) for pc, res in zip(
            pieces, results, strict=True)))
        return merge_helped(book.cursor, book.sizes, owned, plan.quotas, pieces, results, sum)

    def _pieces_task(self, r: int, worker: str, batch: list) -> Iterator:
        """One helper task: the batch's pieces scanned one after the other, never stopped;
        returns their results."""
        env, c = self.env, self.costs
        w = int(worker[1:])
        yield from self.srv.on_loop(c.loop_task / 2)
        yield env.timeout(c.latency)
        out = []
        with self.srv.slots[w].request() as slot:
            yield slot
            yield from self.srv.on_worker(c.worker_task)
            for pc in batch:
                t = env.now
                rows, seconds, _ = yield from self.scan(_NEVER, w, pc.rows, 0,
                                                        self.factor(r, w))
                out.append(PartialResult(_stats(rows), rows, 0, False, seconds, t, env.now,
                                         worker, 0))
        yield env.timeout(c.latency)
        yield from self.srv.on_loop(c.loop_task / 2)
        return out

    def _holders(self, p: int) -> tuple[str, ...]:
        """The workers partition ``p`` can be read on: its owner, then its copies."""
        return (self.owner_names[p], *self.copies[p])

    def _copy_stragglers(self, owned: list[PartialResult], quotas: tuple[int, ...]) -> None:
        """Start a copy of each partition whose waits have paid for one (its rent), where the
        engine would (:func:`~daskabsp.engine.helpers.copies_due`,
        :func:`~daskabsp.engine.helpers.copy_targets`: the worker without one with the most
        scan rate to spare once the copies it holds or receives share it); ``spread_copies``:
        to the fastest of those holding the fewest copies (a what-if)."""
        short = {p: rows for p, rows in shortfall([res.rows for res in owned], quotas).items()
                 if p not in self.copying}
        if not short:
            return
        paid = self.rates.charge(short, self.owner_names, self.names,
                                 slack=self.costs.help_above)
        holders = {p: self._holders(p) for p in short}
        due = copies_due(short, paid, self.rent_due, holders, self.costs.replicas)
        targets = (self._spread(due, holders) if self.spread_copies
                   else copy_targets(due, holders, self.names, self.rates, self.copies_on))
        for p, target in targets.items():
            self.copying.add(p)
            self.copies_on[target] += 1
            self.env.process(self._copy(p, target))

    def _spread(self, due: list[int], holders: dict[int, tuple[str, ...]]) -> dict[int, str]:
        """The what-if ``spread_copies`` (not the engine's rule): each copy of ``due`` to the
        fastest of the workers without one that hold the fewest copies."""
        speed = self.rates.worker_speeds(self.names)
        ranked = sorted(self.names, key=lambda w: (speed[w], w), reverse=True)
        load, out = Counter(self.copies_on), {}
        for p in due:
            free = [w for w in ranked if w not in holders[p]]
            if free:
                fewest = min(load[w] for w in free)
                out[p] = next(w for w in free if load[w] == fewest)
                load[out[p]] += 1
        return out

    def _copy(self, p: int, worker: str) -> Iterator:
        yield self.env.timeout(self.rent_due[p])
        self.copies[p].append(worker)
        self.copying.discard(p)


def _stats(rows: int) -> int | None:
    """A scan's statistics in the simulation: its rows (a round's pieces merge with ``sum``),
    None for a scan of none, as the engine's idle result has."""
    return rows or None


class ClockSim(_Base):
    """SSP and ASP (a policy without rounds): each partition's task loops over its own
    clocks, reading the newest parameters, scanning its whole partition and sending its
    update, which the driver applies as it arrives; a partition waits while the engine's
    bound (:func:`~daskabsp.engine.clocks.within_bound` at the policy's
    ``staleness_bound``) holds it back."""

    def __init__(self, policy: Policy, cluster: Cluster, costs: Costs, stragglers: Stragglers,
                 seed: int = 0, *, log: bool = False) -> None:
        super().__init__(cluster, costs, stragglers, seed, mode_name(policy), log)
        self.bound = policy.staleness_bound
        n = cluster.partitions
        self.clock = [0] * n
        self.at_clock = Counter({0: n})  # partitions per clock, for the slowest clock
        self.slowest = 0
        self.advanced = self.env.event()
        self.version = 0
        self.counted = 0
        self.done = self.env.event()

    def run(self, rounds: int, epochs: float | None = None) -> SimResult:
        """Run until ``epochs`` (default: ``rounds`` clocks' worth of) times the data's rows
        have been counted."""
        target = (rounds if epochs is None else epochs) * self.result.total_rows
        for p in range(self.cluster.partitions):
            self.env.process(self._partition(p, target))
        self.env.run(until=self.done)
        self.result.loop_busy = self.srv.loop_busy
        return self.result

    def _partition(self, p: int, target: float) -> Iterator:
        env, c = self.env, self.costs
        w, size, cursor = self.owner[p], self.cluster.rows, 0
        while not self.done.triggered:
            while not within_bound(self.clock[p], self.slowest, self.bound):
                yield self.advanced
            read, t0 = self.version, env.now
            yield from self.srv.on_loop(c.loop_task / 2)
            yield env.timeout(c.latency)
            with self.srv.slots[w].request() as slot:
                yield slot
                yield from self.srv.on_worker(c.worker_task)
                rows, _, _ = yield from self.scan(_NEVER, w, size, 0,
                                                  self.factor(self.clock[p], w))
            yield env.timeout(c.latency)
            yield from self.srv.on_loop(c.loop_task / 2 + c.engine_task + c.update)
            if self.done.triggered:
                return
            self._applied(p, SimRound(self.version, t0, env.now, ((p, cursor, rows),),
                                      staleness=self.version - read), target)
            cursor = advance(cursor, rows, size)

    def _applied(self, p: int, log: SimRound, target: float) -> None:
        """Partition ``p``'s update was applied: its clock advances."""
        self.version += 1
        self.result.rounds.append(log)
        self.log("update", log.round, p)
        self.counted += log.rows
        self.at_clock[self.clock[p]] -= 1
        self.clock[p] += 1
        self.at_clock[self.clock[p]] += 1
        while not self.at_clock[self.slowest]:
            del self.at_clock[self.slowest]
            self.slowest += 1
            old, self.advanced = self.advanced, self.env.event()
            old.succeed()
        if self.counted >= target:
            self.done.succeed()


def simulate(mode: str | Policy, cluster: Cluster, costs: Costs | None = None,
             stragglers: Stragglers | None = None, *, rounds: int = 20,
             epochs: float | None = None, seed: int = 0, log: bool = False,
             spread_copies: bool = False) -> SimResult:
    """Simulate a fit's rounds.

    Parameters
    ----------
    mode : "plain" or Policy
        ``"plain"``: a plain Dask loop of submit and gather; a policy with rounds (``BSP()``,
        ``ABSP()``, ``ABSP.published()``): the engine's rounds under it; one without
        (``SSP(staleness)``, ``ASP()``): its clocks.
    cluster : Cluster
        The cluster.
    costs : Costs, optional
        The cost model (default: :class:`Costs`' placeholders).
    stragglers : Stragglers, optional
        How workers are slowed down (default: not at all).
    rounds : int
        Rounds to run (SSP/ASP: clocks' worth of rows).
    epochs : float, optional
        Stop once this many times the data's rows have been counted.
    seed : int
        Seeds the stragglers.
    log : bool
        Keep every event in :attr:`SimResult.events`.
    spread_copies : bool
        A-BSP with helpers: copies go to the fastest of the workers holding the fewest copies
        instead of to the fastest worker (a what-if; not what the engine does).

    Returns
    -------
    SimResult
    """
    costs = costs or Costs()
    stragglers = stragglers or Stragglers()
    if isinstance(mode, str) and mode == "plain":
        return RoundSim(BSP(), cluster, costs, stragglers, seed, engine=False,
                        log=log).run(rounds, epochs)
    if not isinstance(mode, Policy):
        raise ValueError(f"The 'mode' parameter of simulate must be 'plain' or a "
                         f"daskabsp.Policy instance. Got {mode!r} instead.")
    if not mode.rounds:
        return ClockSim(mode, cluster, costs, stragglers, seed, log=log).run(rounds, epochs)
    return RoundSim(mode, cluster, costs, stragglers, seed, log=log,
                    spread_copies=spread_copies).run(rounds, epochs)
