"""The driver's side of the dashboard page: report each fit to the scheduler plugin.

A fit sends three kinds of report (:class:`daskabsp.extension.FitBook` keeps them): ``start``,
one ``round`` per round with the numbers the driver holds after the round anyway (rows, quota,
compute seconds, harvested flags and worker per partition, the objective) and ``end``. Nothing
is added to the partition tasks. Reports go out in order through one sender task per fit, which
batches whatever queued up while its previous call was in flight, so the fit never waits for
them.

A fit on a scheduler that does not serve the page sends nothing and says once, at INFO, where
to get it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..extension import PAGE, PAGE_STATUS_HANDLER, REPORT_HANDLER

logger = logging.getLogger(__name__)

#: Where the docs say how to get the page.
DOCS = ("docs/user-guide/monitoring.md, and docs/deployment.md, section The scheduler "
        "preload")

_status: dict[str, dict[str, bool] | None] = {}  # client id -> page status of its scheduler
_said: set[str] = set()  # INFO messages already logged by this process
_senders: set[asyncio.Task] = set()  # sender tasks still running (kept from garbage collection)


def _say_once(msg: str, *args: Any) -> None:
    if msg not in _said:
        _said.add(msg)
        logger.info(msg, *args)


async def page_status(client) -> dict[str, bool] | None:
    """Whether ``client``'s scheduler serves the daskabsp page (asked once per client); None
    if its scheduler plugin does not answer."""
    if client.id not in _status:
        try:
            _status[client.id] = await getattr(client.scheduler, PAGE_STATUS_HANDLER)()
        except Exception as e:  # daskabsp missing or older on the scheduler
            logger.debug("daskabsp: no page status from the scheduler: %r", e)
            _status[client.id] = None
    return _status[client.id]


def page_link(client) -> str | None:
    """The URL of the daskabsp page on ``client``'s dashboard, if the client knows one."""
    try:
        link = client.dashboard_link
    except Exception:  # no dashboard, or a link template that cannot be filled
        return None
    if not link:
        return None
    base = link[: -len("/status")] if link.endswith("/status") else link.rstrip("/")
    return base + PAGE


async def open_reporter(client, fit: str, scheduler_plugin: bool) -> FitReporter | None:
    """A reporter for ``fit`` if its scheduler serves the page; else say once where to get it.

    Parameters
    ----------
    client : distributed.Client
        The fit's client (the fit runs on its event loop).
    fit : str
        The fit's id.
    scheduler_plugin : bool
        Whether daskabsp's scheduler plugin runs (see :func:`daskabsp.extension.ensure_plugins`):
        the page's data come from it.
    """
    if not scheduler_plugin:
        _say_once("daskabsp: fits show on the dashboard page only when daskabsp's scheduler "
                  "plugin runs (daskabsp installed on the scheduler, daskabsp.signal = "
                  "'scheduler'); see %s.", DOCS)
        return None
    status = await page_status(client)
    if status is None:
        _say_once("daskabsp: the scheduler's daskabsp does not report a dashboard page "
                  "(older than the fitting process's?); see %s.", DOCS)
        return None
    if not status["page"]:
        if not status["bokeh"]:
            _say_once("daskabsp: the scheduler has no bokeh, so its dashboard has no daskabsp "
                      "page; install bokeh where the scheduler runs (daskabsp's extra: pip "
                      "install '.[dashboard]' in its source tree; %s).", DOCS)
        elif not status["dashboard"]:
            _say_once("daskabsp: the scheduler runs without a dashboard, so there is no "
                      "daskabsp page to watch the fits on (%s).", DOCS)
        else:
            _say_once("daskabsp: this scheduler's dashboard has no daskabsp page: it was "
                      "started without the daskabsp.dashboard preload (before `import "
                      "daskabsp` in its process, or with preloads of its own). Start it with "
                      "`dask scheduler --preload daskabsp.dashboard`, or add daskabsp.dashboard "
                      "to the distributed.scheduler.preload config; see %s.", DOCS)
        return None
    link = page_link(client)
    if link:
        _say_once("daskabsp: watch the fits at %s", link)
    return FitReporter(client, fit)


class FitReporter:
    """Sends one fit's reports to the scheduler plugin, in order, without making the fit wait.

    Parameters
    ----------
    client : distributed.Client
        The fit's client; create the reporter on its event loop.
    fit : str
        The fit's id.
    """

    def __init__(self, client, fit: str) -> None:
        self.client = client
        self.fit = fit
        self._queue: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.ensure_future(self._send_loop())
        _senders.add(self._task)
        self._task.add_done_callback(_senders.discard)

    def start(self, *, program: str, sync: str, n_partitions: int) -> None:
        """Report that the fit started."""
        self._put(kind="start", client=self.client.id, program=program, sync=sync,
                  n_partitions=n_partitions)

    def round(self, *, round: int, wall: float, objective: float, rows, quota, compute,
              harvested, worker, scanned=None) -> None:
        """Report one round (plain lists, one entry per partition; ``scanned``: the rows each
        partition's own task scanned, in its ``compute`` seconds, when helpers scanned
        others of its ``rows``)."""
        self._put(kind="round", round=round, wall=wall, objective=objective, rows=rows,
                  quota=quota, compute=compute, harvested=harvested, worker=worker,
                  scanned=scanned)

    def end(self, status: str) -> None:
        """Report that the fit ended (``status`` says how); the sender stops once it is out."""
        self._put(kind="end", status=status)
        self._closing = True

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait, at most ``timeout`` seconds, until the sender has sent the end report."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout)

    def _put(self, **event: Any) -> None:
        self._queue.append(event)
        self._wake.set()

    async def _send_loop(self) -> None:
        handler = getattr(self.client.scheduler, REPORT_HANDLER)
        while True:
            await self._wake.wait()
            self._wake.clear()
            events, self._queue = self._queue, []
            if events:
                try:
                    await handler(fit=self.fit, events=events)
                except Exception as e:  # the page misses these; the fit goes on
                    logger.debug("daskabsp: fit report to the scheduler failed: %r", e)
            if self._closing and not self._queue:
                return
