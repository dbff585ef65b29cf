"""Plots of fit histories with matplotlib (``pip install ".[plot]"`` in daskabsp's source tree).

Importing daskabsp registers an ``absp`` accessor on ``xarray.Dataset``, so a fit history
(``res.history``, an estimator's ``history_``) plots itself:

- ``history.absp.plot_objective(ax=None, label=None)``: the objective against the time since
  the fit started;
- ``history.absp.plot_rows(ax=None)``: a round x partition heat map of the rows each partition
  processed as a share of its quota, harvested partitions marked;
- ``history.absp.plot_staleness(ax=None)`` and ``history.absp.plot_clocks(ax=None)`` (SSP and
  ASP fits): how stale the updates were, and each partition's clock against time;
- :func:`plot_objectives`: several fits on one axis (e.g. BSP against A-BSP).

matplotlib is imported only when something is plotted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: How the history's ``sync`` attribute reads in a legend.
SYNC_LABELS = {"bsp": "BSP", "absp": "A-BSP", "ssp": "SSP", "asp": "ASP"}


def _axes(ax: Axes | None) -> Axes:
    """``ax``, or the axes of a new figure."""
    if ax is not None:
        return ax
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(
            "Plotting a fit history needs matplotlib: pip install matplotlib (in "
            "daskabsp's source tree: pip install '.[plot]')."
        ) from e
    _, ax = plt.subplots()
    return ax


def _check_history(ds: xr.Dataset, needs: tuple[str, ...]) -> None:
    missing = [v for v in needs if v not in ds.variables]
    if missing:
        names = ", ".join(map(repr, missing))
        raise ValueError(
            f"This Dataset is not a daskabsp fit history: it has no {names} variable. "
            "Plot the history of a fit (daskabsp.fit(...).history, or an "
            "estimator's history_)."
        )


def fit_label(history: xr.Dataset) -> str:
    """A short name of a fit for a legend: its sync model.

    Parameters
    ----------
    history : xarray.Dataset
        A fit history.

    Returns
    -------
    str
        ``"BSP"``, ``"A-BSP"``, ``"SSP(s=3)"``, ``"ASP"``, or the history's ``sync``
        attribute as it is.
    """
    sync = str(history.attrs.get("sync", "fit"))
    label = SYNC_LABELS.get(sync, sync)
    if sync == "ssp" and "staleness_bound" in history.attrs:
        label += f"(s={history.attrs['staleness_bound']})"
    return label


@xr.register_dataset_accessor("absp")
class HistoryAccessor:
    """Plots of a daskabsp fit history, as ``history.absp.<method>``.

    Parameters
    ----------
    ds : xarray.Dataset
        A fit history (dims ``round`` and ``partition``).
    """

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def plot_objective(self, ax: Axes | None = None, *, label: str | None = None,
                       x: str = "wall_time", optimum: float | None = None,
                       **kwargs: Any) -> Axes:
        """Plot the objective of each round against the time since the fit started.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to plot (default: a new figure).
        label : str, optional
            The line's legend entry (default: the sync model, e.g. ``"A-BSP"``).
        x : {"wall_time", "round", "update"}, default="wall_time"
            Seconds since the fit started at the end of each round (update), or the
            round (update) number; ``"round"`` and ``"update"`` both mean the history's
            own order.
        optimum : float, optional
            If given, plot ``objective - optimum`` on a log scale (the distance to the
            optimum; rounds at or below it are left out).
        **kwargs
            Passed to :meth:`matplotlib.axes.Axes.plot`.

        Returns
        -------
        matplotlib.axes.Axes
            The axes, with one more line (its data: ``x`` and the objective of each round).

        Notes
        -----
        Under A-BSP a round's objective is estimated over the rows that round processed, so it
        carries sampling noise.
        """
        ds = self._ds
        if x not in ("wall_time", "round", "update"):
            raise ValueError(f"x must be 'wall_time', 'round' or 'update', got {x!r}.")
        _check_history(ds, ("objective", "wall_time"))
        ax = _axes(ax)
        order = "update" if "update" in ds.dims else "round"
        xs = np.asarray(ds[x if x == "wall_time" else order].values, dtype=float)
        ys = np.asarray(ds["objective"].values, dtype=float)
        if optimum is not None:
            ys = ys - optimum
            ys = np.where(ys > 0, ys, np.nan)
            ax.set_yscale("log")
        kwargs.setdefault("marker", ".")
        ax.plot(xs, ys, label=fit_label(ds) if label is None else label, **kwargs)
        ax.set_xlabel("time since the fit started (s)" if x == "wall_time" else order)
        ax.set_ylabel("objective" if optimum is None else "objective - optimum")
        ax.legend()
        return ax

    def plot_staleness(self, ax: Axes | None = None, *, label: str | None = None,
                       **kwargs: Any) -> Axes:
        """Plot the distribution of the updates' staleness (SSP and ASP fits).

        An update's staleness is the number of updates applied between the moment its task
        read the parameters and the moment it was applied (Zhang et al. 2016). Under
        ``SSP(0)`` it stays below the number of partitions; a straggler under ASP shows as a
        long tail.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to plot (default: a new figure); plot several fits on one axis to compare.
        label : str, optional
            The line's legend entry (default: the sync model, e.g. ``"SSP(s=3)"``).
        **kwargs
            Passed to :meth:`matplotlib.axes.Axes.step`.

        Returns
        -------
        matplotlib.axes.Axes
            The axes, with one more line: the share of the updates (y) of each staleness
            (x, from 0).
        """
        return _plot_staleness(self._ds, ax, label, **kwargs)

    def plot_clocks(self, ax: Axes | None = None, **kwargs: Any) -> Axes:
        """Plot each partition's clock (its updates so far) against the time since the fit
        started (SSP and ASP fits): the fast partitions' lines run ahead of a straggler's,
        under ``SSP(s)`` a partition starts an update at most ``s`` clocks ahead of the
        slowest, so its line can run up to ``s + 1`` clocks above the slowest one's.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to plot (default: a new figure).
        **kwargs
            Passed to :meth:`matplotlib.axes.Axes.step`.

        Returns
        -------
        matplotlib.axes.Axes
            The axes, one step line per partition (label ``"partition <p>"``).
        """
        return _plot_clocks(self._ds, ax, **kwargs)

    def plot_rows(self, ax: Axes | None = None, *, cmap: str = "viridis",
                  colorbar: bool = True) -> Axes:
        """Plot a round x partition heat map of the rows each partition's own task processed,
        as a share of the quota (the rest of a helped partition's rows were scanned by
        helpers), with the harvested partitions marked.

        Under BSP every cell is 1. Under A-BSP a straggler's row is darker: the round ended
        before it had processed its quota, and its partial statistics were harvested (marked
        ``x``; rows whose statistics the policy discarded, ``on_quorum="drop"``, are marked
        ``o``).

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to plot (default: a new figure).
        cmap : str, default="viridis"
            Colour map of the share, from 0 to 1.
        colorbar : bool, default=True
            Add a colour bar.

        Returns
        -------
        matplotlib.axes.Axes
            The axes. Its image holds the share, shape (n_partitions, n_rounds), rounds along
            x and partitions along y; its first collection (when a partition was harvested)
            the ``(round, partition)`` of each harvested partition.
        """
        ds = self._ds
        _check_history(ds, ("rows", "quota", "harvested"))
        ax = _axes(ax)
        own = ds["rows"] - ds["helped_rows"] if "helped_rows" in ds else ds["rows"]
        share = (own / ds["quota"]).transpose("partition", "round").values.astype(float)
        rounds = np.asarray(ds["round"].values)
        parts = np.asarray(ds["partition"].values)
        extent = (rounds[0] - 0.5, rounds[-1] + 0.5, parts[0] - 0.5, parts[-1] + 0.5) if (
            rounds.size and parts.size) else None
        image = ax.imshow(share, aspect="auto", origin="lower", interpolation="nearest",
                          cmap=cmap, vmin=0.0, vmax=1.0, extent=extent)
        harvested = ds["harvested"].transpose("partition", "round").values
        # Discarded: rows processed but not counted (ABSP(on_quorum="drop")); a task stopped
        # before it started processed nothing, and is marked harvested.
        dropped = harvested & (share > 0)
        if "counted" in ds:
            dropped &= ~ds["counted"].transpose("partition", "round").values
        else:
            dropped[:] = False
        marks = (  # red reads on every colour of viridis
            (harvested & ~dropped, "harvested", {"marker": "x", "color": "red"}),
            (dropped, "dropped",
             {"marker": "o", "facecolors": "none", "edgecolors": "red"}),
        )
        for mask, what, style in marks:
            if mask.any():
                p, r = np.nonzero(mask)
                ax.scatter(rounds[r], parts[p], s=24, linewidths=1.0, label=what, **style)
        if len(parts) <= 16:
            ax.set_yticks(parts)
        ax.set_xlabel("round")
        ax.set_ylabel("partition")
        if colorbar:
            ax.figure.colorbar(image, ax=ax, label="rows processed / quota")
        return ax


def _check_updates(ds: xr.Dataset) -> None:
    if "update" not in ds.dims:
        raise ValueError(
            "This history has no 'update' dimension: staleness and clocks are recorded by "
            "fits without rounds (sync='ssp' or 'asp'). Plot the rounds of a BSP or A-BSP fit "
            "with plot_rows.")
    _check_history(ds, ("staleness", "wall_time"))


def _plot_staleness(ds: xr.Dataset, ax: Axes | None, label: str | None,
                    **kwargs: Any) -> Axes:
    _check_updates(ds)
    ax = _axes(ax)
    stale = np.asarray(ds["staleness"].values, dtype=int)
    counts = np.bincount(stale) if stale.size else np.zeros(1, dtype=int)
    kwargs.setdefault("where", "mid")
    ax.step(np.arange(counts.size), counts / max(stale.size, 1),
            label=fit_label(ds) if label is None else label, **kwargs)
    ax.set_xlabel("staleness (updates applied since the task read its parameters)")
    ax.set_ylabel("share of the updates")
    ax.legend()
    return ax


def _plot_clocks(ds: xr.Dataset, ax: Axes | None, **kwargs: Any) -> Axes:
    _check_updates(ds)
    ax = _axes(ax)
    wall = np.asarray(ds["wall_time"].values, dtype=float)
    parts = np.asarray(ds["partition"].values)
    clock = np.asarray(ds["clock"].values)
    kwargs.setdefault("where", "post")
    for p in np.unique(parts):
        on = parts == p
        ax.step(np.r_[0.0, wall[on]], np.r_[0, clock[on] + 1], label=f"partition {p}",
                **kwargs)
    ax.set_xlabel("time since the fit started (s)")
    ax.set_ylabel("clock (updates of the partition)")
    if np.unique(parts).size <= 16:
        ax.legend()
    return ax


def plot_objectives(histories: Mapping[str, xr.Dataset] | Iterable[xr.Dataset],
                    ax: Axes | None = None, *, x: str = "wall_time",
                    optimum: float | None = None, **kwargs: Any) -> Axes:
    """Plot the objective of several fits on one axis, e.g. BSP against A-BSP.

    Parameters
    ----------
    histories : mapping of str to Dataset, or iterable of Dataset
        Fit histories, keyed by their legend entry (default entry: the sync model).
    ax : matplotlib.axes.Axes, optional
        Where to plot (default: a new figure).
    x : {"wall_time", "round"}, default="wall_time"
        See :meth:`HistoryAccessor.plot_objective`.
    optimum : float, optional
        See :meth:`HistoryAccessor.plot_objective`.
    **kwargs
        Passed to :meth:`matplotlib.axes.Axes.plot` for every line.

    Returns
    -------
    matplotlib.axes.Axes
        The axes, one line per history in the order given.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import daskabsp
    >>> fits = {s: daskabsp.fit(daskabsp.LogisticGD(), X, y, sync=s, max_iter=10, tol=None)
    ...         for s in ("bsp", "absp")}
    >>> ax = daskabsp.plot_objectives({s: r.history for s, r in fits.items()})
    >>> [line.get_label() for line in ax.get_lines()]
    ['bsp', 'absp']
    """
    items = (list(histories.items()) if isinstance(histories, Mapping)
             else [(None, h) for h in histories])
    if not items:
        raise ValueError("plot_objectives needs at least one fit history.")
    ax = _axes(ax)
    for label, history in items:
        history.absp.plot_objective(ax=ax, label=label, x=x, optimum=optimum, **kwargs)
    return ax
