"""daskabsp's settings: defaults loaded into ``dask.config`` under ``daskabsp.``.

Set them as any Dask setting (``dask.config.set({"daskabsp.chunk-target": "5ms"})``, a YAML
file, ``DASK_DASKABSP__CHUNK_TARGET``); read them with :func:`get`, :func:`seconds` and
:func:`nbytes`. ``daskabsp.yaml`` lists them with what each does.
"""

from __future__ import annotations

import os

import dask.config
import distributed.config  # noqa: F401  (distributed's defaults go in before the preload below)
import yaml

_fn = os.path.join(os.path.dirname(__file__), "daskabsp.yaml")
with open(_fn) as f:
    defaults = yaml.safe_load(f)

dask.config.update_defaults(defaults)

#: The scheduler preload that adds daskabsp's page to the dashboard (:mod:`daskabsp.dashboard`).
DASHBOARD_PRELOAD = "daskabsp.dashboard"

# A scheduler imports its preload modules before it builds its dashboard, whose pages it takes
# once from ``distributed.dashboard.scheduler.applications`` (``Scheduler.__init__``). With this
# default, schedulers started in this process after ``import daskabsp`` (a LocalCluster's, the
# embedded cluster's, dask-jobqueue's) serve the page. Preloads the user configured win (add
# daskabsp.dashboard to them). Adding the page to that dict right here instead would load bokeh
# into every process that imports daskabsp, each worker included: 0.4 s and 16 MiB measured.
dask.config.update_defaults({"distributed": {"scheduler": {"preload": [DASHBOARD_PRELOAD]}}})


def get(key: str):
    """Return the ``daskabsp.<key>`` configuration value.

    Parameters
    ----------
    key : str
        The setting's name without the ``daskabsp.`` prefix, e.g. ``"chunk-target"``.

    Returns
    -------
    object
        The value as configured (a string such as ``"2ms"`` for durations and sizes).

    Examples
    --------
    >>> import dask
    >>> from daskabsp import config
    >>> config.get("chunk-target")
    '2ms'
    >>> with dask.config.set({"daskabsp.chunk-target": "5ms"}):
    ...     config.get("chunk-target")
    '5ms'
    """
    return dask.config.get(f"daskabsp.{key}")


def seconds(key: str) -> float:
    """Return a duration configuration value in seconds.

    Parameters
    ----------
    key : str
        The setting's name without the ``daskabsp.`` prefix, e.g. ``"chunk-target"``.

    Returns
    -------
    float
        The duration in seconds (a bare number is taken as seconds).

    Examples
    --------
    >>> from daskabsp import config
    >>> config.seconds("chunk-target")
    0.002
    """
    return dask.utils.parse_timedelta(get(key), default="s")


def nbytes(key: str) -> int:
    """Return a size configuration value in bytes.

    Parameters
    ----------
    key : str
        The setting's name without the ``daskabsp.`` prefix, e.g. ``"inline-params"``.

    Returns
    -------
    int
        The size in bytes.

    Examples
    --------
    >>> from daskabsp import config
    >>> config.nbytes("copy-rate")
    209715200
    """
    return dask.utils.parse_bytes(get(key))


def copy_memory() -> float | None:
    """Return ``daskabsp.copy-memory``: the most training data a worker may hold in a fit
    with helpers, as a multiple of the most any worker holds of the fit's own partitions.

    Returns
    -------
    float or None
        The multiple (at least 1), or None for no bound but Dask's spill threshold.

    Raises
    ------
    ValueError
        If the setting is neither None nor a number of at least 1.

    Examples
    --------
    >>> import dask
    >>> from daskabsp import config
    >>> config.copy_memory() is None
    True
    >>> with dask.config.set({"daskabsp.copy-memory": 1.25}):
    ...     config.copy_memory()
    1.25
    """
    value = get("copy-memory")
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        out = float("nan")
    if not out >= 1.0:
        raise ValueError("The 'daskabsp.copy-memory' setting must be None or a number >= 1 "
                         "(the most a worker may hold, as a multiple of the most any worker "
                         f"holds of the fit's own partitions). Got {value!r} instead.")
    return out
