"""daskabsp: iterative machine learning on Dask that does not wait for stragglers.

The engine runs an iterative program (:mod:`daskabsp.programs`) as one Dask task per data
partition per round, under a synchronisation policy: :class:`BSP` waits for every partition;
:class:`ABSP` ends the round when the fastest partition finishes and harvests the partial work
of the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import config  # loads the daskabsp.* config defaults

# The public names are imported on first use: a worker that unpickles the worker plugin (or a
# partition task) imports only what that needs, not scikit-learn and xarray, which would hold
# its event loop, and its heartbeats, for a second or more.
_LAZY = {
    "FitInfo": "callbacks", "ProgressBar": "callbacks", "RoundCallback": "callbacks",
    "RoundInfo": "callbacks", "close_embedded": "cluster", "get_client": "cluster",
    "FitResult": "driver", "fit": "driver", "plot_objectives": "plot",
    "AbspSchedulerPlugin": "plugins", "AbspWorkerPlugin": "plugins", "ABSP": "policies",
    "BSP": "policies", "SYNC_NAMES": "policies", "Policy": "policies",
    "as_policy": "policies", "LogisticGD": "programs", "Program": "programs",
    "PartialResult": "runtime", "run_partition": "runtime", "SlowWorkers": "stragglers",
    "slow_workers": "stragglers", "compute_answering": "answering",
    "answering_workers": "answering", "stuck_keys": "answering",
}

if TYPE_CHECKING:
    from .answering import answering_workers, compute_answering, stuck_keys
    from .callbacks import FitInfo, ProgressBar, RoundCallback, RoundInfo
    from .cluster import close_embedded, get_client
    from .driver import FitResult, fit
    from .plot import plot_objectives
    from .plugins import AbspSchedulerPlugin, AbspWorkerPlugin
    from .policies import ABSP, BSP, SYNC_NAMES, Policy, as_policy
    from .programs import LogisticGD, Program
    from .runtime import PartialResult, run_partition
    from .stragglers import SlowWorkers, slow_workers


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "answering_workers",
    "as_policy",
    "close_embedded",
    "compute_answering",
    "config",
    "fit",
    "get_client",
    "plot_objectives",
    "run_partition",
    "slow_workers",
    "stuck_keys",
]
