"""daskabsp: iterative machine learning on Dask that does not wait for stragglers.

The engine runs an iterative program (:mod:`daskabsp.programs`) as one Dask task per data
partition per round, under a synchronisation policy: :class:`BSP` waits for every partition;
:class:`ABSP` (the default) ends a round when the fastest worker has finished its partitions
once a worker is known to straggle, and harvests the partial work of the others, while a
balanced round is not cut; ``ABSP.published()`` ends every round when the fastest partition
finishes, as the paper does; :class:`SSP` and :class:`ASP` have no rounds: each partition's
update is applied as it arrives.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from . import config  # loads the daskabsp.* config defaults

# Run in place from a source checkout (a script in its root puts the source daskabsp/ first on
# sys.path), the estimators, which pyproject.toml installs as daskabsp.estimators, sit beside
# the package: they are found there too, as an installed copy finds its own.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(os.path.dirname(__file__), "estimators")) and \
        os.path.isfile(os.path.join(_CHECKOUT, "estimators", "__init__.py")):
    __path__.append(_CHECKOUT)

# The public names are imported on first use: a worker that unpickles the worker plugin (or a
# partition task) imports only what that needs, not scikit-learn and xarray, which would hold
# its event loop, and its heartbeats, for a second or more.
_LAZY = {
    "FitInfo": "monitor.callbacks", "ProgressBar": "monitor.callbacks",
    "RoundCallback": "monitor.callbacks", "RoundInfo": "monitor.callbacks",
    "close_embedded": "cluster", "get_client": "cluster", "FitResult": "fitting",
    "PlacedData": "fitting", "fit": "fitting", "fit_async": "fitting", "place": "fitting",
    "place_async": "fitting", "plot_objectives": "monitor.plot", "ABSP": "policies",
    "BSP": "policies", "SSP": "policies", "ASP": "policies", "SYNC_NAMES": "policies",
    "Policy": "policies", "as_policy": "policies", "LogisticGD": "programs",
    "Program": "programs", "SlowWorkers": "lab.stragglers", "slow_workers": "lab.stragglers",
    "compute_answering": "answering", "answering_workers": "answering",
    "stuck_keys": "answering", "in_memory_rows": "engine.partitions",
}

if TYPE_CHECKING:
    from .answering import answering_workers, compute_answering, stuck_keys
    from .cluster import close_embedded, get_client
    from .engine.partitions import in_memory_rows
    from .fitting import FitResult, PlacedData, fit, fit_async, place, place_async
    from .lab.stragglers import SlowWorkers, slow_workers
    from .monitor.callbacks import FitInfo, ProgressBar, RoundCallback, RoundInfo
    from .monitor.plot import plot_objectives
    from .policies import ABSP, ASP, BSP, SSP, SYNC_NAMES, Policy, as_policy
    from .programs import LogisticGD, Program


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _installed_version() -> str:
    """The installed distribution's version (pyproject.toml's, not a copy of it here)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("daskabsp")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__ = _installed_version()

__all__ = [
    "ABSP",
    "ASP",
    "BSP",
    "SSP",
    "SYNC_NAMES",
    "FitInfo",
    "FitResult",
    "LogisticGD",
    "PlacedData",
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
    "fit_async",
    "get_client",
    "in_memory_rows",
    "place",
    "place_async",
    "plot_objectives",
    "slow_workers",
    "stuck_keys",
]
