"""The plugins on every distributed version daskabsp supports: the oldest that pyproject.toml
admits, and the one installed. They reach into distributed's scheduler and worker (stream
handlers, ``worker_plugins``, the worker's task states, the stealing log), which change
between releases; each version runs in a process of its own with a real LocalCluster."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import distributed
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _oldest() -> str:
    """The oldest distributed version pyproject.toml admits."""
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'"distributed>=([0-9.]+)"', text).group(1)


_SCRIPT = textwrap.dedent("""
    import numpy as np, distributed
    from distributed import Client, LocalCluster
    from daskabsp import ABSP, LogisticGD, fit, slow_workers
    from daskabsp.cluster import worker_addresses
    from daskabsp.extension import ensure_plugins

    if __name__ == "__main__":
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cl, Client(cl) as c:
            rng = np.random.default_rng(0)
            X = rng.normal(size=(40000, 5)); y = (X[:, 0] > 0).astype(float)
            slow = worker_addresses(c)[0]
            with slow_workers(c, {slow: 8.0}):
                res = fit(LogisticGD(), X, y, sync=ABSP(helpers=False), max_iter=3,
                          tol=None, n_partitions=2)
            h = res.history
            print("VERSION", distributed.__version__, *sorted(set(c.run(
                lambda: distributed.__version__).values())))
            print("PATH", c.sync(ensure_plugins, c).name)
            # the slow worker's partition is harvested (in which of the rounds depends on
            # the cold start and on when its speed is known), the other one never
            slow_part = [p for p in range(2) if slow in h.worker.isel(partition=p).values]
            print("HARVESTED", int(h.harvested.sum() > 0),
                  sorted(int(p) for p in range(2) if h.harvested.isel(partition=p).any()) ==
                  slow_part)
    """)


def _target(version: str) -> pathlib.Path:
    """dask and distributed at ``version``, installed once into a cache folder."""
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    target = cache / "daskabsp-tests" / f"distributed-{version}"
    if not (target / "distributed").is_dir():
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
             str(target), f"dask=={version}", f"distributed=={version}"],
            capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"could not install distributed {version}: {proc.stderr[-500:]}")
    return target


@pytest.mark.slow
@pytest.mark.parametrize("version", ["oldest", "installed"])
def test_plugins_install_and_harvest(version, tmp_path):
    env = dict(os.environ)
    want = distributed.__version__
    if version == "oldest":
        want = _oldest()
        # the older dask and distributed shadow the installed ones, here and in the workers
        env["PYTHONPATH"] = os.pathsep.join([str(_target(want)),
                                             env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    script = tmp_path / "plugins_on_version.py"
    script.write_text(_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert out["VERSION"].split() == [want, want]  # client and workers
    assert out["PATH"] == "SCHEDULER"
    assert out["HARVESTED"] == "1 True"
