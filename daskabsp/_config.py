"""Load daskabsp's defaults into ``dask.config`` under the ``daskabsp.`` namespace."""

from __future__ import annotations

import os

import dask.config
import yaml

_fn = os.path.join(os.path.dirname(__file__), "daskabsp.yaml")
with open(_fn) as f:
    defaults = yaml.safe_load(f)

dask.config.update_defaults(defaults)


def get(key: str):
    """Return the ``daskabsp.<key>`` configuration value."""
    return dask.config.get(f"daskabsp.{key}")


def seconds(key: str) -> float:
    """Return a duration configuration value in seconds."""
    return dask.utils.parse_timedelta(get(key), default="s")


def nbytes(key: str) -> int:
    """Return a size configuration value in bytes."""
    return dask.utils.parse_bytes(get(key))
