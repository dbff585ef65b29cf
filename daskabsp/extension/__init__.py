"""daskabsp's Dask extension: the harvest signal and the partition task, laid out by the side
each piece runs on, as distributed's own shuffle extension is.

=============================  ==========  ===================================================
module                         runs on     what it holds
=============================  ==========  ===================================================
:mod:`._scheduler_plugin`      scheduler   the plugin that stops rounds at their quorum,
                                           settles them, answers the driver
:mod:`._registry`              scheduler   the plugin's book of rounds (pure)
:mod:`._liveness`              scheduler   who went silent, what waits on them (pure)
:mod:`._fits`                  scheduler   what the dashboard page shows of each fit
:mod:`._worker_plugin`         worker      the rounds' stop flags
:mod:`._core`                  worker      the partition task: a cyclic scan until stopped
:mod:`._protocol`              all         the wire: message, handler and annotation names,
                                           round ids
:mod:`._client`                driver      installing the plugins; asking the scheduler who
                                           is silent and what is stuck
=============================  ==========  ===================================================

The engine (:mod:`daskabsp.engine`) and the monitoring (:mod:`daskabsp.monitor`) use the
names exported here; nothing here imports them.
"""

from ._client import ensure_plugins, gather_answering, silent_of, stuck_of, wait_all
from ._core import (
    EXTENSION,
    SLOW_EXTENSION,
    PartialResult,
    check_finite_block,
    run_partition,
    run_pieces,
)
from ._fits import PAGE, FitBook, FitRecord, page_status
from ._protocol import (
    ANNOTATION,
    COPY_PREFIX,
    FORGET_HANDLER,
    PAGE_STATUS_HANDLER,
    PLUGIN_NAME,
    REPORT_HANDLER,
    ROUND_INFO_HANDLER,
    SETTLED_HANDLER,
    SILENT_HANDLER,
    STOP_ROUNDS_HANDLER,
    STUCK_HANDLER,
    PageStatus,
    RoundId,
    RoundTimes,
    SettledReply,
    SignalPath,
)
from ._scheduler_plugin import AbspSchedulerPlugin
from ._worker_plugin import AbspWorkerPlugin, stop_on_worker

__all__ = [
    "ANNOTATION",
    "COPY_PREFIX",
    "EXTENSION",
    "FORGET_HANDLER",
    "PAGE",
    "PAGE_STATUS_HANDLER",
    "PLUGIN_NAME",
    "REPORT_HANDLER",
    "ROUND_INFO_HANDLER",
    "SETTLED_HANDLER",
    "SILENT_HANDLER",
    "SLOW_EXTENSION",
    "STOP_ROUNDS_HANDLER",
    "STUCK_HANDLER",
    "AbspSchedulerPlugin",
    "AbspWorkerPlugin",
    "FitBook",
    "FitRecord",
    "PageStatus",
    "PartialResult",
    "RoundId",
    "RoundTimes",
    "SettledReply",
    "SignalPath",
    "check_finite_block",
    "ensure_plugins",
    "gather_answering",
    "page_status",
    "run_partition",
    "run_pieces",
    "silent_of",
    "stop_on_worker",
    "stuck_of",
    "wait_all",
]
