"""Stragglers for tests, benchmarks and demos: emulated, and caused by CPU contention.

* **Emulation** (:class:`SlowWorkers`, :func:`slow_workers`): after each chunk of a partition
  scan that took ``t`` seconds, a slowed worker sleeps ``(factor - 1) * t``. The worker's other
  work (data transfer, the event loop) is not slowed, and sleeping frees the core for the other
  workers, as a slower machine of its own would. A factor of ``inf`` *holds* a worker: each
  of its scans waits, after its first chunk, until its round is stopped (the event a test
  needs to cut a straggler short whatever the timing; at most 30 s a scan, so a policy that
  never stops a round, BSP or SSP, is slowed, not hung).
* **CPU contention** (:func:`pinned_workers`, :func:`cpu_neighbour`): the worker processes are
  pinned one per core, and a CPU-bound neighbour process (another tenant) is pinned to one
  worker's core. Nothing in the engine knows: the operating system's scheduler shares the core,
  so everything that worker does is slower, as on a shared machine. A neighbour busy a fraction
  ``duty`` of the time gives its worker a partial share (a heterogeneous cluster).

The other straggler sources of the lab are in the data: :mod:`daskabsp.lab.datasets`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field

from dask.base import tokenize
from distributed.diagnostics.plugin import WorkerPlugin

from ..cluster import worker_addresses
from ..extension import SLOW_EXTENSION


class SlowWorkers(WorkerPlugin):
    """A worker plugin that slows the partition scans of the given workers.

    Parameters
    ----------
    factors : mapping of str to float
        Worker address (or worker name) to slowdown factor (>= 1): a worker with factor 4
        scans its partitions as if its CPU were 4 times slower. A factor of ``inf`` holds the
        worker: each scan waits after its first chunk until its round is stopped (at most
        30 s, then it scans on at full speed), so that an A-BSP round always cuts it short.

    Examples
    --------
    >>> import daskabsp
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
    ...                   dashboard_address=":0") as cluster, Client(cluster) as client:
    ...     slow = sorted(client.scheduler_info()["workers"])[0]
    ...     plugin = daskabsp.SlowWorkers({slow: 4.0})
    ...     _ = client.register_plugin(plugin)          # until unregistered
    ...     _ = client.unregister_worker_plugin(plugin.name)
    """

    idempotent = False

    def __init__(self, factors: Mapping[str, float]) -> None:
        for addr, f in factors.items():
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not f >= 1:
                raise ValueError(
                    f"The slowdown factor of worker {addr!r} must be a float in the range "
                    f"[1, inf]. Got {f!r} instead."
                )
        self.factors = {str(k): float(v) for k, v in factors.items()}
        self.name = f"daskabsp-slow-workers-{tokenize(sorted(self.factors.items()))}"

    def setup(self, worker) -> None:
        f = self.factors.get(worker.address, self.factors.get(str(worker.name)))
        if f is not None:
            worker.extensions[SLOW_EXTENSION] = f

    def teardown(self, worker) -> None:
        worker.extensions.pop(SLOW_EXTENSION, None)


@contextmanager
def slow_workers(client, factors: Mapping[str, float]) -> Iterator[SlowWorkers]:
    """Slow the given workers while the block runs (synchronous client).

    Parameters
    ----------
    client : distributed.Client
    factors : mapping of str to float
        Worker address (or name) to slowdown factor, see :class:`SlowWorkers`.

    Examples
    --------
    >>> import daskabsp
    >>> from distributed import Client, LocalCluster
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=200_000, n_features=20, random_state=0)
    >>> with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
    ...                   dashboard_address=":0") as cluster, Client(cluster) as client:
    ...     slow = sorted(client.scheduler_info()["workers"])[0]
    ...     with daskabsp.slow_workers(client, {slow: 4.0}):
    ...         res = daskabsp.fit(daskabsp.LogisticGD(), X, y, sync="absp", n_partitions=2,
    ...                            max_iter=5, tol=None)
    >>> h = res.history
    >>> slow_partition = int(h.worker.isel(round=0).values.tolist().index(slow))
    >>> # stopped every round once its speed is known (its first scan is a cold start, and
    >>> # a round before any measurement gives the quorum patience)
    >>> bool(h.harvested.isel(partition=slow_partition)[2:].all())
    True
    """
    plugin = SlowWorkers(factors)
    client.register_plugin(plugin)
    try:
        yield plugin
    finally:
        # a worker that died meanwhile has no plugin left to remove (the broadcast to it
        # fails; the soak's 279th schedule killed two workers just before this)
        with suppress(OSError):
            client.unregister_worker_plugin(plugin.name)


# -- CPU contention: pinned workers and a busy neighbour ------------------------------------------


def _set_affinity(cpus: Sequence[int]) -> list[int]:
    """Set the CPU affinity of every thread of this process; return the previous one.

    On Linux an affinity belongs to a thread (``sched_setaffinity(0)`` changes only the calling
    one), and a new thread inherits its creator's: so all threads are set, the event loop's
    and the executor's included, and threads started later follow.
    """
    before = sorted(os.sched_getaffinity(0))
    for tid in os.listdir("/proc/self/task"):
        with suppress(ProcessLookupError):  # the thread ended meanwhile
            os.sched_setaffinity(int(tid), set(cpus))
    return before


def _usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


@contextmanager
def pinned_workers(client, cores: Sequence[int] | None = None) -> Iterator[dict[str, int]]:
    """Pin each worker process to a core of its own while the block runs (Linux).

    Workers, in address order, get ``cores`` in turn (default: the cores any of them may use
    now, so pinning pinned workers again gives each the core it has). On exit every worker's
    threads get their previous affinity back; a worker that is gone by then is skipped.

    Parameters
    ----------
    client : distributed.Client
        A synchronous client.
    cores : sequence of int, optional
        CPU numbers to hand out.

    Yields
    ------
    dict of str to int
        Worker address to the core it is pinned to.

    Warns
    -----
    RuntimeWarning
        With more workers than cores: several workers then share a core.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError("pinned_workers needs os.sched_setaffinity (Linux).")
    from ..cluster import in_process

    if in_process(client):
        # pinning an in-process worker would pin the whole fitting process
        raise RuntimeError("pinned_workers needs worker processes; this client's workers run "
                           "in this process (e.g. the embedded cluster's default). Start a "
                           "LocalCluster(processes=True).")
    addrs = worker_addresses(client)
    if cores is None:  # the cores the workers may use (already pinned ones: together)
        cores = sorted(set().union(*client.run(_usable_cpus, workers=addrs).values()))
    cores = [int(c) for c in cores]
    if len(addrs) > len(cores):
        warnings.warn(f"{len(addrs)} workers on {len(cores)} cores: some share a core.",
                      RuntimeWarning, stacklevel=3)
    assigned = {a: cores[i % len(cores)] for i, a in enumerate(addrs)}
    previous: dict[str, list[int]] = {}
    try:
        for a, core in assigned.items():
            previous.update(client.run(_set_affinity, [core], workers=[a]))
        yield assigned
    finally:
        for a, cpus in previous.items():
            with suppress(OSError, ValueError, KeyError):  # the worker is gone
                client.run(_set_affinity, cpus, workers=[a])


#: The neighbour: pins itself, says so, then spins (a duty cycle if ``duty < 1``) until it is
#: terminated or its parent dies (its parent process id changes), so it never outlives the
#: process that started it, even one killed with SIGKILL.
_NEIGHBOUR = """\
import os, sys, time
core, duty, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
parent = os.getppid()
os.sched_setaffinity(0, {core})
print("ready", flush=True)
clock = time.perf_counter
while os.getppid() == parent:
    t0 = clock()
    while clock() - t0 < duty * period:
        pass
    if duty < 1:
        time.sleep(max(0.0, period - (clock() - t0)))
"""


@dataclass
class Neighbour:
    """A running CPU neighbour (see :func:`cpu_neighbour`).

    Attributes
    ----------
    worker : str
        Address of the worker whose core it shares.
    core : int
        That core.
    pids : list of int
        Process ids of the neighbour's processes (gone once the block has exited).
    duty : float
        Fraction of the time each neighbour process is busy.
    cores : dict of str to int
        Every worker's core while the block runs.
    """

    worker: str
    core: int
    pids: list[int]
    duty: float
    cores: dict[str, int] = field(default_factory=dict)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout is not None:
            p.stdout.close()


@contextmanager
def cpu_neighbour(client, worker: str, *, duty: float = 1.0, processes: int = 1,
                  period: float = 0.05) -> Iterator[Neighbour]:
    """A CPU-bound neighbour on one worker's core while the block runs (Linux, local workers).

    Pins the workers one per core (:func:`pinned_workers`), then starts ``processes`` busy
    processes pinned to the core of ``worker``. The operating system shares that core among
    them: with one neighbour at ``duty=1`` the worker gets about half of it (2x slower), with
    ``k`` neighbours about ``1 / (k + 1)``; a neighbour busy ``duty`` of each ``period`` leaves
    the worker about ``1 - duty * k / (k + 1)`` of it. The neighbours are stopped and the
    workers' affinity restored on exit, whatever ends the block (an exception, Ctrl-C); a
    neighbour also exits by itself if the process that started it dies.

    Each neighbour runs in a session of its own, another tenant: where Linux groups sessions
    for scheduling (autogroup), the worker's whole session competes with each neighbour for
    the core, so the worker gets less than these shares (measured on 2 cores, ~0.12 s scans:
    one neighbour 2.0x-2.6x slower, one at ``duty=0.4`` 1.5x, two at ``duty=0.3`` 2.2x). The
    neighbour's core is saturated, so threads that may run on any core (the client's, other
    processes') move to the other cores and slow the workers there: compare a slowed worker
    with the others in the same fit. A duty cycle gives a partial share only to tasks many
    periods long: a scan shorter than a few periods gets whole busy or idle phases (with the
    default 50 ms, ~40 ms scans at ``duty=0.4`` were slowed 1.0x-1.8x from round to round).

    Parameters
    ----------
    client : distributed.Client
        A synchronous client whose workers run on this machine.
    worker : str
        Address of the worker to slow.
    duty : float, default=1.0
        Fraction of each ``period`` the neighbour spins, in (0, 1].
    processes : int, default=1
        Number of neighbour processes on that core.
    period : float, default=0.05
        Seconds of one busy-then-idle cycle; well below the duration of the tasks to slow.

    Yields
    ------
    Neighbour

    Examples
    --------
    >>> with cpu_neighbour(client, addr) as n:  # doctest: +SKIP
    ...     daskabsp.fit(program, X, y, sync="bsp")
    """
    if not 0 < duty <= 1:
        raise ValueError(f"The 'duty' parameter of cpu_neighbour must be a float in the range "
                         f"(0, 1]. Got {duty!r} instead.")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"The 'processes' parameter of cpu_neighbour must be an int in the "
                         f"range [1, inf). Got {processes!r} instead.")
    if worker not in worker_addresses(client):
        raise ValueError(f"No worker {worker!r} on this cluster.")
    hosts = client.run(socket.gethostname, workers=[worker])
    if hosts[worker] != socket.gethostname():
        raise ValueError(f"cpu_neighbour starts its neighbour on this machine, and worker "
                         f"{worker!r} runs on {hosts[worker]!r}.")
    with ExitStack() as stack:
        cores = stack.enter_context(pinned_workers(client))
        procs: list[subprocess.Popen] = []
        stack.callback(_stop, procs)  # runs before the workers' affinity is restored
        for _ in range(processes):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _NEIGHBOUR, str(cores[worker]), repr(float(duty)),
                 repr(float(period))],
                stdout=subprocess.PIPE, text=True, start_new_session=True))
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"The CPU neighbour (pid {p.pid}) did not start.")
        yield Neighbour(worker=worker, core=cores[worker], pids=[p.pid for p in procs],
                        duty=float(duty), cores=dict(cores))
