"""Helpers shared by the benchmarks: the cluster, the data, statistics, tables and JSON output.

Every benchmark measures a pair of things side by side in one run, interleaved, and reports the
ratio with its spread (median and interquartile range over the paired repeats), because the
2-core machine the numbers come from is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import dask
import dask.array as da
import distributed
import numpy as np
from distributed import Client, LocalCluster, futures_of, wait
from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

RESULTS = Path(__file__).resolve().parent / "results"


# -- command line, environment, output ---------------------------------------------------------


def parse_args(description: str, add=None) -> argparse.Namespace:
    """Parse ``--quick`` (a smoke run), ``--seed`` and ``--out`` plus a benchmark's own options
    (``add(parser)``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small, fast smoke run")
    p.add_argument("--seed", type=int, default=0, help="random seed of the data")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output file (default: benchmarks/results/<name>[-quick].json)")
    p.add_argument("--event-loop", choices=("tornado", "asyncio", "uvloop"), default="tornado",
                   help="the cluster's event loop (distributed.admin.event-loop; default: "
                        "tornado, Dask's default; uvloop must be installed)")
    if add is not None:
        add(p)
    return p.parse_args()


def add_page_option(p: argparse.ArgumentParser) -> None:
    """``--page {closed,open}``: run with the daskabsp dashboard page open in headless
    Chromium, or not open anywhere (see :func:`dashboard_page`)."""
    p.add_argument("--page", choices=("closed", "open"), default="closed",
                   help="run with the daskabsp dashboard page open in headless Chromium "
                        "(Debian's chromium; it refreshes once a second) or closed (default)")


def environment() -> dict:
    """What the numbers were measured on."""
    import daskabsp

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv,
        "commit": commit,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "daskabsp": daskabsp.__version__,
    }


def write_json(name: str, args: argparse.Namespace, payload: dict) -> Path:
    """Write ``payload`` (plus the environment) to the benchmark's JSON file; return its path."""
    path = args.out or RESULTS / f"{name}{'-quick' if args.quick else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name, "quick": args.quick, "event_loop": args.event_loop,
           "environment": environment(), **payload}
    path.write_text(json.dumps(doc, indent=1, default=_jsonable))
    return path


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A plain fixed-width text table: first column left-aligned, the others right-aligned."""
    rows = [list(r) for r in rows]
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in r] for r in rows]
    width = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    left = [i == 0 for i in range(len(headers))]

    def line(r):
        return "  ".join(c.ljust(w) if lf else c.rjust(w)
                         for c, w, lf in zip(r, width, left, strict=True)).rstrip()

    sep = "  ".join("-" * w for w in width)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def _cell(v) -> str:
    if isinstance(v, float):
        return "nan" if np.isnan(v) else f"{v:.3g}" if abs(v) < 1e-2 else f"{v:.2f}"
    return str(v)


def load_note(start: float) -> str:
    """The machine's 1-minute load average at the start and end of a run (2 cores: above 2,
    other work competes with the benchmark)."""
    return f"load average {start:.1f} at start, {os.getloadavg()[0]:.1f} at end"


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


# -- statistics ---------------------------------------------------------------------------------


def summary(values) -> dict:
    """Median, quartiles, p10, p90 and count of ``values`` (NaNs dropped)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"n": 0, **{k: float("nan") for k in ("median", "p10", "p25", "p75", "p90")}}
    p10, p25, p50, p75, p90 = np.percentile(v, [10, 25, 50, 75, 90])
    return {"n": int(v.size), "median": float(p50), "p10": float(p10), "p25": float(p25),
            "p75": float(p75), "p90": float(p90)}


def spread(s: dict, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """``median [p25-p75]`` of a :func:`summary`, scaled."""
    f = [fmt.format(s[k] * scale) for k in ("median", "p25", "p75")]
    return f"{f[0]} [{f[1]}-{f[2]}]"


# -- the cluster --------------------------------------------------------------------------------


@contextmanager
def local_cluster(n_workers: int = 4, threads_per_worker: int = 1,
                  event_loop: str | None = None, *, processes: bool = True) -> Iterator[Client]:
    """A LocalCluster of worker processes (as the tests use; ``processes=False``: workers as
    threads of this process) and a client on it, running the ``event_loop``
    (``distributed.admin.event-loop``; default: Dask's setting)."""
    loop = {"distributed.admin.event-loop": event_loop} if event_loop else {}
    with dask.config.set(loop), \
            LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                         processes=processes, dashboard_address=":0",
                         memory_limit="4GiB") as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(n_workers)
        if event_loop == "uvloop":
            running = {*client.run(_loop_module).values(), client.run_on_scheduler(_loop_module)}
            if running != {"uvloop"}:
                raise RuntimeError(f"asked for uvloop, the cluster runs {sorted(running)}")
        yield client


def add_netns_options(p: argparse.ArgumentParser) -> None:
    """``--netns RATE`` (a namespace cluster, see :func:`netns_client`) and ``--netns-data``
    (where its data comes from)."""
    p.add_argument("--netns", metavar="RATE", default=None,
                   help="run on a namespace cluster instead of a LocalCluster (root needed; "
                        "daskabsp.lab.netcluster): the scheduler and each worker process in a "
                        "network namespace of its own, every host's link shaped to RATE in "
                        "both directions (e.g. 1gbit, 100mbit), workers pinned one per core")
    p.add_argument("--netns-data", choices=("workers", "driver"), default="workers",
                   help="with --netns: 'workers' (default): each case's rows are made on the "
                        "workers, once, and the fits get them as persisted dask arrays (no "
                        "row crosses a link outside the engine's own moves); 'driver': the "
                        "fits get the in-memory arrays, as on a LocalCluster, so every fit "
                        "scatters its rows across the driver's shaped link")


@contextmanager
def netns_client(n_workers: int, rate: str, threads_per_worker: int = 1) -> Iterator[Client]:
    """A namespace cluster (:func:`daskabsp.lab.netcluster.netns_cluster`: links shaped to
    ``rate`` both ways, workers pinned one per core) and a client on it from this process,
    which sits on the bridge behind a link of the same rate."""
    from daskabsp.lab.netcluster import netns_cluster

    with netns_cluster(n_workers, rate, threads_per_worker=threads_per_worker) as nc, \
            Client(nc.scheduler_address) as client:
        client.wait_for_workers(n_workers, timeout=60)
        yield client


def rows_on_workers(client: Client, make, like: Sequence[np.ndarray]) -> tuple:
    """The arrays ``make()`` returns, made on the workers: worker ``i`` calls ``make()``
    itself and keeps row block ``i`` of each array (the engine's split into one partition per
    worker), so no row crosses a link. ``make`` must be deterministic (seeded) and picklable;
    ``like`` are the driver's own results of it (for shapes and dtypes).

    Returns persisted dask arrays, block ``i`` on worker ``i`` (hard pins, as
    :func:`pin_chunks`): their lineage ends at those workers, so a block whose worker froze is
    not made again elsewhere. Each worker holds a whole copy of the data while it makes its
    block.
    """
    from daskabsp.engine.partitions import split_rows

    addrs = workers(client)
    bounds = np.cumsum([0, *split_rows(like[0].shape[0], len(addrs))]).tolist()
    spans = list(zip(addrs, bounds[:-1], bounds[1:], strict=True))
    blocks = [client.submit(_row_block, make, a, b, workers=[w], pure=False)
              for w, a, b in spans]
    out = [da.concatenate([
        da.from_delayed(client.submit(operator.getitem, blk, j, workers=[w]),
                        shape=(b - a, *ref.shape[1:]), dtype=ref.dtype)
        for blk, (w, a, b) in zip(blocks, spans, strict=True)]) for j, ref in enumerate(like)]
    out = client.persist(out)
    wait(out)
    check_homes(client, *out)
    return tuple(out)


def _row_block(make, a: int, b: int) -> tuple[np.ndarray, ...]:
    return tuple(x[a:b].copy() for x in make())  # copies: the whole arrays are freed


def _loop_module() -> str:
    import asyncio

    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def workers(client: Client) -> list[str]:
    """Worker addresses, sorted (asked of the scheduler itself)."""
    from daskabsp.cluster import worker_addresses

    return worker_addresses(client)


def logistic_data(client: Client, n_rows: int, n_features: int, n_partitions: int,
                  seed: int = 0, *, scale: float | None = None):
    """A synthetic binary classification problem, generated on the workers and persisted as
    ``n_partitions`` row chunks (lineage-backed, as the engine wants its data).

    Features are independent normals with column scales spread over ``[1/scale, scale]`` (a
    moderately ill-conditioned problem, so gradient descent needs tens of rounds); labels are
    drawn from a logistic model with a random true coefficient vector. Returns ``(X, y)`` as
    persisted dask arrays; each chunk is on its own worker when ``n_partitions`` equals the
    number of workers.
    """
    rng = np.random.default_rng(seed)
    col_scale = (np.geomspace(1.0 / scale, scale, n_features) if scale else
                 np.ones(n_features))
    w_true = rng.standard_normal(n_features) / np.sqrt(n_features) * 2.0
    rows = -(-n_rows // n_partitions)
    drng = da.random.default_rng(seed)
    X = drng.standard_normal((n_rows, n_features), chunks=(rows, n_features)) * col_scale
    z = (X / col_scale) @ w_true
    y = (drng.random(n_rows, chunks=rows) < 1.0 / (1.0 + da.exp(-z))).astype(np.float64)
    return pin_chunks(client, X, y)


def pin_chunks(client: Client, *arrays):
    """Persist dask arrays that share their row chunks so that chunk ``i`` of every array sits
    on worker ``i % n_workers``: an even spread that the benchmarks can rely on (a plain persist
    sometimes puts two chunks on one worker, and the engine then moves a task off its data).

    The placement is a per-key ``workers=`` annotation (hard), so these chunks could not be
    recomputed elsewhere if their worker died: fine for a benchmark, not for real fits.
    """
    addrs = workers(client)

    def home(key):
        return [addrs[key[1] % len(addrs)]]

    with dask.annotate(workers=home):
        out = client.persist(list(arrays))
    wait(out)
    check_homes(client, *out)
    return tuple(out)


def gather_local(client: Client, *arrays) -> list[np.ndarray]:
    """In-memory copies of persisted dask arrays, fetched chunk by chunk (``client.compute``
    would concatenate them on one worker first, leaving a replica of every chunk there)."""
    out = []
    for a in arrays:
        by_key = {f.key: f for f in futures_of(a)}
        out.append(np.concatenate(client.gather([by_key[k] for k in
                                                 dask.core.flatten(a.__dask_keys__())])))
    return out


def check_homes(client: Client, *arrays) -> None:
    """Raise if chunk ``i`` of an array is not (only) on worker ``i % n_workers``."""
    addrs = workers(client)
    for a in arrays:
        keys = list(dask.core.flatten(a.__dask_keys__()))
        who = client.who_has(a)
        want = [(addrs[i % len(addrs)],) for i in range(len(keys))]
        got = [tuple(who.get(k) or ()) for k in keys]
        if got != want:
            raise RuntimeError(f"chunks not (only) where they were pinned: {got} != {want}")


def chunk_homes(client: Client, X) -> list[str]:
    """The worker holding each row chunk of the persisted dask array ``X``."""
    keys = [k for k in dask.core.flatten(X.__dask_keys__())]
    who = client.who_has(X)
    return [(who.get(k) or [""])[0] for k in keys]


def noop(X, y, params):
    """A no-op partition task for baselines: touches nothing, returns an array the size of the
    logistic program's statistics. It lives in an importable module (the workers share the
    driver's ``sys.path``), so it is pickled by reference, as the engine's task function is."""
    return np.zeros(params.shape[0] + 2)


# -- the dashboard page ---------------------------------------------------------------------------


@contextmanager
def dashboard_page(client: Client, state: str) -> Iterator[None]:
    """Inside the block, the daskabsp page of ``client``'s dashboard is open in headless
    Chromium (``state="open"``; waits until the page's session is live on the scheduler), or
    nothing is done (``"closed"``)."""
    if state == "closed":
        yield
        return
    from daskabsp.extension import PAGE

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise RuntimeError("--page open needs Chromium (apt-get install chromium)")
    url = client.dashboard_link.rsplit("/status", 1)[0] + PAGE
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", url],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while client.run_on_scheduler(page_sessions) < 1:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the page did not open in Chromium: {url}")
                time.sleep(0.2)
            yield
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def page_sessions(dask_scheduler=None) -> int:
    """Browser sessions of the daskabsp page open on this scheduler's dashboard."""
    from daskabsp.extension import PAGE

    for app in dask_scheduler.http_application.applications:
        if hasattr(app, "get_sessions") and PAGE in getattr(app, "app_paths", ()):
            return len(app.get_sessions(PAGE))
    return 0


# -- Dask's own floor for the harvest: the round's shape with no computing at all -----------


def floor_first(rid: str, seconds: float) -> int:
    """The round's first finisher: waits ``seconds`` (while the others start), then returns."""
    time.sleep(seconds)
    return 1


def floor_running(rid: str) -> int:
    """A task in flight: blocks on its round's stop flag and returns the moment it is set (a
    straggler with no chunk left to finish)."""
    return 2 if _stop_flag(rid).wait(30) else -1


def floor_queued(rid: str) -> int:
    """A task queued behind another on its worker: returns at once (as an engine task that
    starts after the stop does)."""
    return 3 if _stop_flag(rid).is_set() else -1


def _stop_flag(rid: str):
    from distributed import get_worker

    from daskabsp.extension._core import EXTENSION

    return get_worker().extensions[EXTENSION].flag(rid)


def warm_up(client: Client) -> None:
    """Import the engine on every worker and let the cluster settle."""
    client.run(lambda: __import__("daskabsp") and __import__("_common"))
    time.sleep(0.5)


# -- an independent observer on the scheduler ----------------------------------------------------


class FinishTimes(SchedulerPlugin):
    """Records, on the scheduler, when each task of each engine round reached memory.

    Independent of the engine's own plugin: it groups tasks by the first element of their key
    (one group per round, ``daskabsp-<program>-<fit>-<round>``) and keeps, per task, the
    scheduler time of ``processing -> memory``, the worker, and the worker's compute start and
    stop of the task (from the ``startstops`` the worker reports; one host, one clock).
    ``finish_times(contains)`` is callable as ``client.scheduler.bench_finish_times(...)``.
    """

    name = "bench-finish-times"
    idempotent = True

    def __init__(self) -> None:
        self.times: dict[str, list[dict]] = defaultdict(list)

    async def start(self, scheduler) -> None:
        scheduler.handlers["bench_finish_times"] = self.finish_times

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if (start == "processing" and finish == "memory" and isinstance(key, tuple)
                and isinstance(key[0], str) and key[0].startswith("daskabsp-")):
            compute = [s for s in kwargs.get("startstops", ()) if s["action"] == "compute"]
            self.times[key[0]].append({
                "partition": key[1], "seen": time.time(), "worker": kwargs.get("worker"),
                "start": compute[-1]["start"] if compute else None,
                "stop": compute[-1]["stop"] if compute else None,
            })

    def finish_times(self, contains: str) -> dict[str, list[dict]]:
        return {k: v for k, v in self.times.items() if contains in k}


def round_finishes(client: Client, fit_id: str, n_rounds: int) -> list[list[dict]]:
    """Per round of fit ``fit_id``, the :class:`FinishTimes` records of its partitions' own
    tasks (first attempt only, not the helpers'; an empty list where a round is missing)."""
    got = client.sync(client.scheduler.bench_finish_times, contains=f"-{fit_id}-")
    by_round = {int(k.rsplit("-", 1)[1]): v for k, v in got.items()
                if "retry" not in k and "-help" not in k}
    return [by_round.get(r, []) for r in range(n_rounds)]


class StopReceipts(WorkerPlugin):
    """Wraps the engine's stop handler on each worker to log when a stop message arrived
    (``worker.extensions["bench-stop-receipts"]``: a list of ``(time, rounds)``). Register it
    after the engine's worker plugin (i.e. after a first fit); it changes nothing else."""

    name = "bench-stop-receipts"
    idempotent = True

    def setup(self, worker) -> None:
        from daskabsp.extension._protocol import STOP_OP

        inner = worker.stream_handlers[STOP_OP]
        log = worker.extensions.setdefault("bench-stop-receipts", [])

        def logged(rounds=(), **kwargs):
            log.append((time.time(), list(rounds)))
            return inner(rounds=rounds, **kwargs)

        worker.stream_handlers[STOP_OP] = logged


def stop_receipts(client: Client) -> dict[str, float]:
    """``{(worker, round id): first arrival time}`` of the stop messages logged by
    :class:`StopReceipts`."""
    logs = client.run(lambda dask_worker: dask_worker.extensions.get("bench-stop-receipts", []))
    out = {}
    for addr, log in logs.items():
        for t, rounds in log:
            for rid in rounds:
                out.setdefault((addr, rid), t)
    return out


class FitCallback:
    """Base of the benchmarks' scikit-learn fit callbacks (``set_callbacks``, scikit-learn >=
    1.9): every hook a no-op; subclasses override ``on_fit_task_end``."""

    def setup(self, estimator, context) -> None:
        pass

    def teardown(self, estimator, context) -> None:
        pass

    def on_fit_task_begin(self, estimator, context) -> None:
        pass

    def on_fit_task_end(self, estimator, context, *, fitted_estimator=None) -> bool:
        return False
