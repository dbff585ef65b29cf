"""The fit record as an ``xarray.Dataset``: dimensions ``round`` and ``partition`` for the
policies with rounds (BSP, A-BSP), ``update`` for those without (SSP, ASP)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from . import plot  # noqa: F401  (registers the histories' accessor, Dataset.absp)

_PER_PARTITION = {
    "rows": ("int64", "rows processed", None),
    "quota": ("int64", "rows asked for", None),
    "cursor": ("int64", "row the partition started at", None),
    "compute_seconds": ("float64", "time spent scanning", "s"),
    "task_start": ("float64", "task start since the fit started (worker clock; NaN: a task "
                   "still queued when the round stopped, not waited for)", "s"),
    "task_stop": ("float64", "task end since the fit started (worker clock; NaN as for "
                  "task_start)", "s"),
    "harvested": ("bool", "stopped by the round's stop before its quota", None),
    "counted": ("bool", "statistics used in the update", None),
    "worker": ("str", "worker that ran the task", None),
    "helped_rows": ("int64", "of rows, those scanned in the round's helper phase", None),
}


_EVENTS = ("what the engine did on its own (pieces dropped, tasks given up on, rounds retried, "
           "rows moved) and why; empty if nothing")


class HistoryRecorder:
    """Accumulates one record per round; :meth:`dataset` builds the ``xarray.Dataset``."""

    def __init__(self, n_partitions: int) -> None:
        self.n_partitions = n_partitions
        self.wall: list[float] = []
        self.objective: list[float] = []
        self.params: list[np.ndarray] = []
        self.worker_rows: list[dict[str, int]] = []
        self.events: list[str] = []
        self.parts: dict[str, list] = {k: [] for k in _PER_PARTITION}

    def add(self, *, wall: float, objective: float, params: np.ndarray | None,
            worker_rows: dict[str, int] | None = None, events: str = "", **parts) -> None:
        self.wall.append(wall)
        self.events.append(events)
        self.worker_rows.append(dict(worker_rows or {}))
        self.objective.append(objective)
        if params is not None:
            self.params.append(np.array(params, copy=True).ravel())
        parts.setdefault("helped_rows", [0] * self.n_partitions)
        for k in _PER_PARTITION:
            self.parts[k].append(parts[k])

    def dataset(self, *, attrs: dict, sizes, harvest_latency=None,
                stop_time=None) -> xr.Dataset:
        n = len(self.wall)
        rounds = np.arange(n)
        data = {
            "wall_time": (("round",), np.asarray(self.wall, dtype=float),
                          {"long_name": "time since the fit started, at the round's end",
                           "units": "s"}),
            "objective": (("round",), np.asarray(self.objective, dtype=float),
                          {"long_name": "objective estimated from the round's statistics"}),
            "events": (("round",), np.asarray(self.events, dtype=str), {"long_name": _EVENTS}),
        }
        for k, (dtype, long_name, units) in _PER_PARTITION.items():
            values = np.asarray(self.parts[k], dtype=object if dtype == "str" else dtype)
            if dtype == "str":
                values = values.astype(str)
            values = values.reshape(n, self.n_partitions)
            a = {"long_name": long_name}
            if units:
                a["units"] = units
            data[k] = (("round", "partition"), values, a)
        data["rows_total"] = (("round",), data["rows"][1].sum(axis=1) if n else
                              np.zeros(0, dtype="int64"), {"long_name": "rows processed"})
        data["partition_size"] = (("partition",), np.asarray(sizes, dtype="int64"),
                                  {"long_name": "rows in the partition"})
        if harvest_latency is not None:
            data["harvest_latency"] = (
                ("round",), np.asarray(harvest_latency, dtype=float),
                {"long_name": "quorum reached to round settled (its last result, or the "
                              "report that its remaining tasks were still queued), on the "
                              "scheduler", "units": "s"},
            )
        if stop_time is not None:
            data["stop_time"] = (
                ("round",), np.asarray(stop_time, dtype=float),
                {"long_name": "quorum reached (stop sent) since the fit started, scheduler "
                              "clock, on the task_start / task_stop timeline", "units": "s"},
            )
        workers = sorted({w for d in self.worker_rows for w in d})
        data["worker_rows"] = (
            ("round", "address"),
            np.array([[d.get(w, 0) for w in workers] for d in self.worker_rows],
                     dtype="int64").reshape(n, len(workers)),
            {"long_name": "counted rows each worker scanned (own partitions and helping)"})
        if self.params:
            data["params"] = (("round", "param"), np.stack(self.params),
                              {"long_name": "parameters the round's statistics were taken at"})
        return xr.Dataset(
            data,
            coords={"round": rounds, "partition": np.arange(self.n_partitions),
                    "address": np.asarray(workers, dtype=str)},
            attrs=attrs,
        )


_PER_UPDATE = {
    "version": ("int64", "updates applied when the update's task was submitted (the "
                "parameters it computed at)", None),
    "staleness": ("int64", "updates applied between the task's parameters and this update",
                  None),
    "lead": ("int64", "clocks the partition was ahead of the slowest partition when its task "
             "was submitted", None),
    "attempt": ("int64", "0, or the resubmission after a task given up on", None),
    "objective": ("float64", "objective after the update: the partitions' latest losses, "
                  "each at the parameters its task computed at", None),
    "rows": ("int64", "rows of the partition scanned", None),
    "compute_seconds": ("float64", "time the task spent scanning", "s"),
    "task_start": ("float64", "task start since the fit started (worker clock)", "s"),
    "task_stop": ("float64", "task end since the fit started (worker clock)", "s"),
    "worker": ("str", "worker that ran the task", None),
    "events": ("str", _EVENTS, None),
}


class UpdateRecorder:
    """Accumulates one record per update of a fit without rounds (SSP, ASP);
    :meth:`dataset` builds the ``xarray.Dataset`` (dimension ``update``)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.params: list[np.ndarray] = []

    def add(self, *, params: np.ndarray | None = None, **record) -> None:
        """One update: ``wall``, ``partition``, ``clock`` and the fields of
        ``_PER_UPDATE``; ``params``, the coefficients after it (optional)."""
        self.records.append(record)
        if params is not None:
            self.params.append(np.array(params, copy=True).ravel())

    def dataset(self, *, attrs: dict, sizes, harvest_latency=None,
                stop_time=None) -> xr.Dataset:
        """The history (``harvest_latency`` and ``stop_time`` do not apply: nothing is
        stopped)."""
        n = len(self.records)

        def column(name, dtype):
            values = np.asarray([r[name] for r in self.records], dtype=object)
            return values.astype(str) if dtype == "str" else values.astype(dtype).reshape(n)

        part = column("partition", "int64")
        data = {"wall_time": (("update",), column("wall", "float64"),
                              {"long_name": "time since the fit started, at the update",
                               "units": "s"})}
        for k, (dtype, long_name, units) in _PER_UPDATE.items():
            a = {"long_name": long_name, **({"units": units} if units else {})}
            data[k] = (("update",), column(k, dtype), a)
        data["partition_size"] = (("update",), np.asarray(sizes, dtype="int64")[part],
                                  {"long_name": "rows in the update's partition"})
        if self.params:
            data["params"] = (("update", "param"), np.stack(self.params),
                              {"long_name": "coefficients after the update"})
        coords = {"update": np.arange(n),
                  "partition": (("update",), part, {"long_name": "the update's partition"}),
                  "clock": (("update",), column("clock", "int64"),
                            {"long_name": "the partition's updates before this one"})}
        return xr.Dataset(data, coords=coords, attrs=attrs)


def time_to_target(history: xr.Dataset, objective, target: float) -> tuple[float, int]:
    """When a fit first reached ``objective(params) <= target``.

    Parameters
    ----------
    history : xarray.Dataset
        A fit history recorded with ``record_params=True`` (rounds, or updates under SSP
        and ASP).
    objective : callable
        Maps a parameter vector to the exact objective (e.g. ``program.full_objective``).
    target : float
        The objective value to reach.

    Returns
    -------
    (seconds, round) : tuple of float and int
        Wall time since the fit started at the end of the first round (update) whose
        parameters reach the target, and that round (update); ``(nan, -1)`` if it was never
        reached.
    """
    if "params" not in history:
        raise ValueError("time_to_target needs a history recorded with record_params=True.")
    for r, params in enumerate(history.params.values):
        if objective(params) <= target:
            return float(history.wall_time.values[r]), r
    return float("nan"), -1
