"""What the scheduler keeps about the fits on its cluster, for the dashboard page.

The driver reports each fit to the scheduler plugin: once when it starts, once per round (rows,
quota and compute seconds per partition, the objective: numbers it holds anyway after a round)
and once when it ends. The scheduler plugin adds each round's harvest latency from its own
clock. Nothing here runs per task, and nothing is computed for a page that nobody opened except
the per-round bookkeeping below (a few list copies per round).

State is bounded: ``daskabsp.dashboard.rounds`` rounds per fit (oldest dropped first; fewer
for fits with very many partitions, see :data:`MAX_CELLS`),
``daskabsp.dashboard.finished-fits`` finished fits per scheduler, and a client's fits are
dropped when the client leaves. A round is held as numpy arrays (about 30 bytes per
partition). :attr:`FitBook.version` changes with every update, so a page with nothing new to
show costs one comparison per refresh.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import config

#: The path of the page in the scheduler's dashboard. ``individual-`` pages are listed in the
#: dashboard's "More..." menu and in ``/individual-plots.json`` (what dask-labextension reads).
PAGE = "/individual-daskabsp"

#: Weight of the newest round in a worker's smoothed speed: one noisy round moves it by a third.
SPEED_SMOOTHING = 1 / 3

#: A worker not seen in this many rounds of a fit drops out of the fit's speed table.
SPEED_FORGET_ROUNDS = 20

#: Round x partition cells kept per fit (rounds kept: at most this over the partitions, at
#: least 10): the heat map draws one rectangle per cell, and a browser stays responsive with
#: about this many; the scheduler holds about 3 MB for them.
MAX_CELLS = 100_000


@dataclass
class RoundRecord:
    """One round of a fit as the page shows it.

    Attributes
    ----------
    round : int
        Round number (0-based).
    wall : float
        Seconds since the fit started, at the round's end (driver clock).
    duration : float
        Seconds the round took (``wall`` minus the previous round's).
    objective : float
        Objective estimated from the round's statistics.
    rows, quota : ndarray of int64
        Rows each partition processed, and was asked for.
    compute : ndarray of float64
        Seconds each partition spent scanning.
    harvested : ndarray of bool
        Whether the round's stop ended the partition's scan before its quota.
    worker : ndarray of int32
        Worker that ran each partition, as an index into :attr:`FitRecord.workers`.
    bsp_wait : float
        What BSP would have waited for: the slowest partition's compute time scaled to its
        whole quota (a partition that computed nothing is projected at its worker's speed).
    """

    round: int
    wall: float
    duration: float
    objective: float
    rows: np.ndarray
    quota: np.ndarray
    compute: np.ndarray
    harvested: np.ndarray
    worker: np.ndarray
    bsp_wait: float


@dataclass
class FitRecord:
    """A fit as the scheduler knows it: what it is, its last rounds, its workers' speeds."""

    fit: str
    client: str | None
    program: str
    sync: str
    n_partitions: int
    started: float  # scheduler clock
    max_rounds: int
    status: str = "running"
    n_rounds: int = 0
    rounds: deque[RoundRecord] = field(init=False)
    latency: deque[tuple[int, float]] = field(init=False)  # (round, seconds)
    workers: list[str] = field(default_factory=list)  # addresses; RoundRecord.worker indexes
    speed: dict[str, float] = field(default_factory=dict)  # rows per compute second
    seen: dict[str, int] = field(default_factory=dict)  # worker -> last round it ran in

    def __post_init__(self) -> None:
        kept = min(self.max_rounds, max(10, MAX_CELLS // max(1, self.n_partitions)))
        self.rounds = deque(maxlen=kept)
        self.latency = deque(maxlen=kept)
        self._index: dict[str, int] = {}

    @property
    def objective(self) -> float:
        """The last round's objective (NaN before the first round)."""
        return self.rounds[-1].objective if self.rounds else math.nan

    def add_round(self, *, round: int, wall: float, objective: float, rows, quota, compute,
                  harvested, worker, scanned=None) -> RoundRecord:
        """Record one round's summary and update the workers' speeds (from the rows each
        partition's own task ``scanned`` in its ``compute`` seconds; ``rows`` also counts
        what helpers scanned)."""
        worker = [str(w) for w in worker]
        prev = self.rounds[-1].wall if self.rounds else 0.0
        scanned = rows if scanned is None else scanned
        self._measure(round, scanned, compute, worker)
        rec = RoundRecord(
            round=int(round), wall=float(wall), duration=float(wall) - prev,
            objective=float(objective), rows=np.asarray(rows, dtype=np.int64),
            quota=np.asarray(quota, dtype=np.int64),
            compute=np.asarray(compute, dtype=np.float64),
            harvested=np.asarray(harvested, dtype=bool),
            worker=np.asarray([self._worker_index(w) for w in worker], dtype=np.int32),
            bsp_wait=self._bsp_wait(scanned, quota, compute, worker),
        )
        self.rounds.append(rec)
        self.n_rounds += 1
        return rec

    def _worker_index(self, address: str) -> int:
        i = self._index.get(address)
        if i is None:
            i = self._index[address] = len(self.workers)
            self.workers.append(address)
        return i

    def _measure(self, r: int, rows: list[int], compute: list[float], worker: list[str]) -> None:
        done: dict[str, list[float]] = {}
        for k, s, w in zip(rows, compute, worker, strict=True):
            if k > 0 and s > 0 and w:
                acc = done.setdefault(w, [0.0, 0.0])
                acc[0] += k
                acc[1] += s
        for w, (k, s) in done.items():
            old = self.speed.get(w)
            self.speed[w] = k / s if old is None else old + SPEED_SMOOTHING * (k / s - old)
            self.seen[w] = r
        for w in [w for w, last in self.seen.items() if r - last > SPEED_FORGET_ROUNDS]:
            del self.seen[w], self.speed[w]

    def _bsp_wait(self, rows, quota, compute, worker) -> float:
        wait = 0.0
        for k, q, s, w in zip(rows, quota, compute, worker, strict=True):
            if k > 0:
                wait = max(wait, s * q / k)
            elif q > 0 and self.speed.get(w):
                wait = max(wait, q / self.speed[w])
        return wait


class FitBook:
    """The fits on one scheduler, bounded; :attr:`version` changes on every update.

    Parameters
    ----------
    max_rounds : int, optional
        Rounds kept per fit (default ``daskabsp.dashboard.rounds``).
    max_finished : int, optional
        Finished fits kept (default ``daskabsp.dashboard.finished-fits``).
    """

    def __init__(self, max_rounds: int | None = None, max_finished: int | None = None) -> None:
        self.max_rounds = int(max_rounds if max_rounds is not None
                              else config.get("dashboard.rounds"))
        self.max_finished = int(max_finished if max_finished is not None
                                else config.get("dashboard.finished-fits"))
        self.fits: dict[str, FitRecord] = {}
        self.version = 0

    def report(self, fit: str, events: list[dict[str, Any]]) -> None:
        """Apply the driver's reports of ``fit`` (``kind`` "start", "round" or "end")."""
        for ev in events:
            ev = dict(ev)
            kind = ev.pop("kind")
            if kind == "start":
                self.start(fit, **ev)
            elif kind == "round":
                rec = self.fits.get(fit)
                if rec is not None:
                    rec.add_round(**ev)
            elif kind == "end":
                self.end(fit, **ev)
        self.version += 1

    def start(self, fit: str, *, client: str | None, program: str, sync: str,
              n_partitions: int) -> FitRecord:
        """Start recording ``fit``."""
        rec = self.fits[fit] = FitRecord(fit, client, program, sync, int(n_partitions),
                                         time.time(), self.max_rounds)
        self.version += 1
        return rec

    def end(self, fit: str, *, status: str) -> None:
        """Mark ``fit`` ended (``status`` says how); keep the last finished fits only."""
        rec = self.fits.get(fit)
        if rec is None:
            return
        rec.status = status
        ended = [f for f, r in self.fits.items() if r.status != "running"]
        for f in ended[:max(0, len(ended) - self.max_finished)]:
            del self.fits[f]
        self.version += 1

    def note_latency(self, fit: str, round: int, seconds: float) -> None:
        """The scheduler's harvest latency of a round of ``fit`` (quorum to settled)."""
        rec = self.fits.get(fit)
        if rec is not None:
            rec.latency.append((int(round), float(seconds)))
            self.version += 1

    def forget_client(self, client: str) -> None:
        """Drop the fits of a client that left."""
        gone = [f for f, r in self.fits.items() if r.client == client]
        for f in gone:
            del self.fits[f]
        if gone:
            self.version += 1


def page_status(scheduler) -> dict[str, bool]:
    """Whether ``scheduler`` serves the daskabsp page: ``{"page", "dashboard", "bokeh"}``.

    ``dashboard`` is whether it runs a Bokeh dashboard at all, ``bokeh`` whether bokeh can be
    imported where the scheduler runs.
    """
    http = getattr(scheduler, "http_application", None)
    paths: set[str] = set()
    dashboard = False
    for app in getattr(http, "applications", ()):
        app_paths = getattr(app, "app_paths", None)  # a BokehTornado
        if app_paths is not None:
            dashboard = True
            paths.update(app_paths)
    return {"page": PAGE in paths, "dashboard": dashboard,
            "bokeh": importlib.util.find_spec("bokeh") is not None}
