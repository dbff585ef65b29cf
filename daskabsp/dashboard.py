"""The daskabsp page of the Dask dashboard (``/individual-daskabsp``), and its registration.

Importing this module adds the page to ``distributed.dashboard.scheduler.applications``, the
pages a scheduler's Bokeh server is built with, if bokeh is installed at a version distributed
accepts (``pip install ".[dashboard]"`` in daskabsp's source tree); otherwise importing it does
nothing. A scheduler takes its pages from that dict once, when it starts, after importing its
preload modules, so this module is a scheduler preload::

    dask scheduler --preload daskabsp.dashboard

or, for schedulers that others start (dask-jobqueue, Kubernetes), the config
``distributed.scheduler.preload: [daskabsp.dashboard]``. ``import daskabsp`` makes it a default
preload of the schedulers started later in the same process (a ``LocalCluster``, the embedded
cluster).

The page shows the fits the scheduler plugin has been told about
(:class:`daskabsp.extension.FitBook`), the last one by default: per round and partition the share
of its quota each partition processed (harvested ones marked), each worker's speed, each round's
duration next to what BSP would have waited, the objective against wall time and the harvest
latency. It refreshes once a second while open, and only redraws when the scheduler's record of the
fits has changed.
"""

from __future__ import annotations

import html
import logging
import math
import time

import numpy as np

from .extension import PAGE, FitBook, FitRecord

logger = logging.getLogger(__name__)

#: Refresh period of an open page, in milliseconds.
REFRESH_MS = 1000

#: Names of the page's data sources (what a browser test reads from the Bokeh document).
SOURCES = ("fits", "heatmap", "harvested", "speed", "durations", "objective", "latency")


def _book(scheduler) -> FitBook | None:
    plugin = scheduler.plugins.get("daskabsp")
    return getattr(plugin, "book", None)


def _short(worker: str) -> str:
    return worker.split("://", 1)[-1]


#: Columns of the page's data sources.
_COLUMNS = {
    "fits": ("fit", "program", "sync", "status", "rounds", "objective", "partitions",
             "started"),
    "heatmap": ("round", "partition", "share", "rows", "quota", "worker", "harvested"),
    "harvested": ("round", "partition"),
    "speed": ("worker", "speed"),
    "durations": ("round", "duration", "bsp_wait"),
    "objective": ("round", "wall", "objective"),
    "latency": ("round", "latency_ms"),
}
_TOOLS = "pan,wheel_zoom,box_zoom,reset"


def _heatmap_figure(src):
    from bokeh.models import BasicTicker, ColorBar, HoverTool
    from bokeh.palettes import Viridis256
    from bokeh.plotting import figure
    from bokeh.transform import linear_cmap

    heat = figure(title="Share of its quota each partition processed (x: harvested)",
                  height=300, sizing_mode="stretch_width", tools=_TOOLS,
                  x_axis_label="round", y_axis_label="partition")
    cmap = linear_cmap("share", Viridis256, low=0.0, high=1.0)
    cells = heat.rect(x="round", y="partition", width=1, height=1, source=src["heatmap"],
                      fill_color=cmap, line_color=None)
    heat.scatter(x="round", y="partition", source=src["harvested"], marker="x", size=7,
                 line_color="#ff3b30", line_width=1.5)
    heat.add_layout(ColorBar(color_mapper=cmap["transform"], width=10, title="share"),
                    "right")
    heat.add_tools(HoverTool(renderers=[cells], tooltips=[
        ("round", "@round"), ("partition", "@partition"), ("rows", "@rows of @quota"),
        ("share", "@share{0.00}"), ("worker", "@worker"), ("harvested", "@harvested")]))
    heat.grid.visible = False
    heat.xaxis.ticker = BasicTicker(min_interval=1)
    heat.yaxis.ticker = BasicTicker(min_interval=1)
    return heat


def _speed_figure(src):
    from bokeh.models import FactorRange, HoverTool, NumeralTickFormatter
    from bokeh.plotting import figure

    factors = FactorRange(factors=[])
    speed = figure(title="Worker speed (rows per compute second, smoothed)", height=260,
                   sizing_mode="stretch_width", y_range=factors, tools="",
                   x_axis_label="rows / s")
    speed.hbar(y="worker", right="speed", height=0.7, source=src["speed"], color="#1f77b4")
    speed.add_tools(HoverTool(tooltips=[("worker", "@worker"), ("speed", "@speed{0,0}")]))
    speed.x_range.start = 0
    speed.xaxis.formatter = NumeralTickFormatter(format="0.0a")
    return speed, factors


def _durations_figure(src):
    from bokeh.models import Legend, LegendItem
    from bokeh.plotting import figure

    dur = figure(title="Round duration, and what BSP would have waited", height=260,
                 sizing_mode="stretch_width", tools=_TOOLS, x_axis_label="round",
                 y_axis_label="s")
    took = [dur.line(x="round", y="duration", source=src["durations"], color="#1f77b4"),
            dur.scatter(x="round", y="duration", source=src["durations"], color="#1f77b4",
                        size=4)]
    bsp = dur.line(x="round", y="bsp_wait", source=src["durations"], color="#d62728",
                   line_dash="dashed")
    dur.add_layout(Legend(orientation="horizontal", items=[
        LegendItem(label="round (measured)", renderers=took),
        LegendItem(label="BSP: slowest partition's compute at its full quota",
                   renderers=[bsp])]), "below")
    dur.y_range.start = 0
    return dur


def _objective_figure(src):
    from bokeh.plotting import figure

    obj = figure(title="Objective", height=260, sizing_mode="stretch_width", tools=_TOOLS,
                 x_axis_label="wall time since the fit started (s)")
    obj.line(x="wall", y="objective", source=src["objective"], color="#2ca02c")
    obj.scatter(x="wall", y="objective", source=src["objective"], color="#2ca02c", size=4)
    return obj


def _latency_figure(src):
    from bokeh.plotting import figure

    lat = figure(title="Harvest latency (quorum reached to round settled)", height=260,
                 sizing_mode="stretch_width", tools=_TOOLS, x_axis_label="round",
                 y_axis_label="ms")
    lat.scatter(x="round", y="latency_ms", source=src["latency"], color="#9467bd", size=5)
    lat.y_range.start = 0
    return lat


class FitsPage:
    """The models of one browser session's page; :meth:`update` redraws what changed.

    Parameters
    ----------
    scheduler : distributed.Scheduler
        The scheduler whose daskabsp plugin holds the fits.
    """

    def __init__(self, scheduler) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import ColumnDataSource, DataTable, Div, Select, TableColumn

        self.scheduler = scheduler
        self._shown: tuple | None = None
        self._fit: str | None = None  # the fit on display
        self._pinned: str | None = None  # the fit the user chose (None: follow the newest)
        self.sources = {k: ColumnDataSource({c: [] for c in cols}, name=f"daskabsp-{k}")
                        for k, cols in _COLUMNS.items()}
        src = self.sources
        self.title = Div(text="", name="daskabsp-title", sizing_mode="stretch_width")
        self.select = Select(title="Fit", options=[], value="", name="daskabsp-select",
                             width=420)
        self.select.on_change("value", self._chosen)
        self.table = DataTable(
            source=src["fits"], height=130, sizing_mode="stretch_width", index_position=None,
            columns=[TableColumn(field=f, title=t) for f, t in (
                ("fit", "fit"), ("program", "program"), ("sync", "sync"),
                ("status", "status"), ("rounds", "rounds"), ("partitions", "partitions"),
                ("objective", "objective"), ("started", "started"))],
        )
        speed, self.speed_range = _speed_figure(src)
        self.root = column(
            self.title, row(self.select, sizing_mode="stretch_width"), self.table,
            _heatmap_figure(src), row(_durations_figure(src), speed,
                                      sizing_mode="stretch_width"),
            row(_objective_figure(src), _latency_figure(src), sizing_mode="stretch_width"),
            sizing_mode="stretch_width",
        )

    def _chosen(self, attr: str, old: str, new: str) -> None:
        if new and new != self._fit:
            self._pinned = new
            self.update()

    def update(self) -> None:
        """Redraw if the scheduler's record of the fits (or the chosen fit) changed."""
        book = _book(self.scheduler)
        key = (id(book), book.version if book is not None else -1, self._pinned)
        if key == self._shown:
            return
        self._shown = key
        fits = list(book.fits.values()) if book is not None else []
        if self._pinned is not None and all(f.fit != self._pinned for f in fits):
            self._pinned = None
        running = [f for f in fits if f.status == "running"]
        rec = next((f for f in fits if f.fit == self._pinned), None) or \
            (running or fits or [None])[-1]
        self._fit = rec.fit if rec is not None else None
        self._draw_fits(fits)
        self._draw_fit(rec)

    def _draw_fits(self, fits: list[FitRecord]) -> None:
        newest = fits[::-1]
        self.sources["fits"].data = dict(
            fit=[f.fit for f in newest], program=[f.program for f in newest],
            sync=[f.sync for f in newest], status=[f.status for f in newest],
            rounds=[f.n_rounds for f in newest],
            objective=[f"{f.objective:.6g}" for f in newest],
            partitions=[f.n_partitions for f in newest],
            started=[time.strftime("%H:%M:%S", time.localtime(f.started)) for f in newest],
        )
        # Bokeh 3.9's table redraws on new data only when its row count changed (its view's
        # indices are compared, not the data): any change of the table model redraws it.
        self.table.tags = [self._shown[1]] if self._shown else []
        self.select.options = [(f.fit, f"{f.fit}  {f.program} ({f.sync}, {f.status})")
                               for f in newest]
        self.select.value = self._fit or ""

    def _draw_fit(self, rec: FitRecord | None) -> None:
        src = self.sources
        if rec is None:
            self.title.text = ("<b>daskabsp</b>: no fit has reported to this scheduler yet. "
                               "Fits show here while they run.")
            for k in SOURCES[1:]:
                src[k].data = {c: [] for c in src[k].data}
            self.speed_range.factors = []
            return
        rounds = list(rec.rounds)
        P = rec.n_partitions
        rnd = np.repeat(np.array([rr.round for rr in rounds], dtype=np.int64), P)
        part = np.tile(np.arange(P, dtype=np.int64), len(rounds))
        rows = _cat([rr.rows for rr in rounds], np.int64)
        quota = _cat([rr.quota for rr in rounds], np.int64)
        harvested = _cat([rr.harvested for rr in rounds], bool)
        names = np.array([_short(w) for w in rec.workers] or [""], dtype=object)
        src["heatmap"].data = dict(
            round=rnd, partition=part,
            share=np.where(quota > 0, rows / np.maximum(quota, 1), 1.0),
            rows=rows, quota=quota,
            worker=names[_cat([rr.worker for rr in rounds], np.int64)],
            harvested=np.where(harvested, "yes", "no"),
        )
        src["harvested"].data = dict(round=rnd[harvested], partition=part[harvested])
        workers = sorted(rec.speed)
        self.speed_range.factors = [_short(w) for w in workers]
        src["speed"].data = dict(worker=[_short(w) for w in workers],
                                 speed=[rec.speed[w] for w in workers])
        src["durations"].data = dict(round=[rr.round for rr in rounds],
                                     duration=[rr.duration for rr in rounds],
                                     bsp_wait=[rr.bsp_wait for rr in rounds])
        src["objective"].data = dict(round=[rr.round for rr in rounds],
                                     wall=[rr.wall for rr in rounds],
                                     objective=[rr.objective for rr in rounds])
        src["latency"].data = dict(round=[r for r, _ in rec.latency],
                                   latency_ms=[s * 1e3 for _, s in rec.latency])
        took = sum(rr.duration for rr in rounds)
        bsp = sum(rr.bsp_wait for rr in rounds)
        lat = sorted(s for _, s in rec.latency)
        med = f"{lat[len(lat) // 2] * 1e3:.1f} ms" if lat else "n/a"
        shown = f"last {len(rounds)} of " if len(rounds) < rec.n_rounds else ""
        self.title.text = (
            f"<b>daskabsp</b> fit <b>{html.escape(rec.fit)}</b>: {html.escape(rec.program)}, "
            f"{html.escape(rec.sync)}, {rec.n_partitions} partitions, "
            f"<b>{html.escape(rec.status)}</b>, {rec.n_rounds} rounds. "
            f"Over the {shown}rounds shown: rounds took {took:.2f} s; the slowest partition "
            f"at its full quota, {bsp:.2f} s of compute; median harvest latency {med}; "
            f"objective {_fmt(rec.objective)}."
        )


def _cat(arrays: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)


def _fmt(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.6g}"


def fits_doc(scheduler, extra, doc) -> None:
    """Build the page for one browser session (a ``distributed`` dashboard doc function)."""
    from distributed.dashboard.components import add_periodic_callback
    from distributed.dashboard.components.scheduler import BOKEH_THEME

    page = FitsPage(scheduler)
    page.update()
    add_periodic_callback(doc, page, REFRESH_MS)
    doc.title = "Dask: daskabsp"
    doc.add_root(page.root)
    doc.theme = BOKEH_THEME


def register() -> bool:
    """Add the page to the pages schedulers started from now on serve; False without bokeh.

    Returns
    -------
    bool
        Whether the page is registered (bokeh, at a version distributed accepts, imports).
    """
    try:
        from distributed.dashboard import scheduler as dashboard
    except ImportError as e:  # no bokeh, or one distributed does not accept
        logger.debug("daskabsp: no dashboard page: %s", e)
        return False
    dashboard.applications.setdefault(PAGE, fits_doc)
    return True


#: Whether importing this module added the page (False: bokeh is missing or unusable).
registered = register()
