"""daskabsp: iterative machine learning on Dask that does not wait for stragglers.

The engine runs an iterative program (:mod:`daskabsp.programs`) as one Dask task per data
partition per round, under a synchronisation policy: :class:`BSP` waits for every partition;
:class:`ABSP` ends the round when the fastest partition finishes and harvests the partial work
of the others.
"""

from . import config  # loads the daskabsp.* config defaults
from .callbacks import FitInfo, ProgressBar, RoundCallback, RoundInfo
from .cluster import close_embedded, get_client
from .driver import FitResult, fit
from .plot import plot_objectives  # also registers the history accessor Dataset.absp
from .plugins import AbspSchedulerPlugin, AbspWorkerPlugin
from .policies import ABSP, BSP, SYNC_NAMES, Policy, as_policy
from .programs import LogisticGD, Program
from .runtime import PartialResult, run_partition
from .stragglers import SlowWorkers, slow_workers

__version__ = "0.1.0"

__all__ = [
    "ABSP",
    "BSP",
    "SYNC_NAMES",
    "AbspSchedulerPlugin",
    "AbspWorkerPlugin",
    "FitInfo",
    "FitResult",
    "LogisticGD",
    "PartialResult",
    "Policy",
    "Program",
    "ProgressBar",
    "RoundCallback",
    "RoundInfo",
    "SlowWorkers",
    "as_policy",
    "close_embedded",
    "config",
    "fit",
    "get_client",
    "plot_objectives",
    "run_partition",
    "slow_workers",
]
