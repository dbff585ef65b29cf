"""A newcomer's first fit (issue 31): the README's first-fit block runs as pasted and prints
what the README says; an unguarded script gets one clear error where worker processes would
re-run it; the embedded cluster is what the docs say it is, and its emulated stragglers are
harvested; dask arrays made from numpy reach the workers without a large graph."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def first_fit_block() -> tuple[str, str]:
    """The README's first-fit code and the output it says the code prints."""
    section = README.split("## A first fit", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    output = re.search(r"```text\n(.*?)```", section, re.DOTALL).group(1)
    return code, output


def run_script(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    """``python first_fit.py`` in a fresh process, as a user runs the pasted block."""
    script = tmp_path / "first_fit.py"
    script.write_text(code)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env={**clean, **env}, timeout=300)


def unguarded(code: str) -> str:
    """The block with its ``if __name__ == "__main__":`` line removed and the body dedented,
    as someone who skipped that line would paste it."""
    head, body = code.split('if __name__ == "__main__":\n', 1)
    return head + textwrap.dedent(body)


@pytest.mark.slow
def test_readme_first_fit_runs_as_pasted_and_prints_what_the_readme_says(tmp_path):
    code, output = first_fit_block()
    assert 'if __name__ == "__main__":' in code
    proc = run_script(tmp_path, code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == output


@pytest.mark.slow
def test_readme_first_fit_without_the_guard_runs_on_the_default_embedded_cluster(tmp_path):
    """The default embedded workers run in the fitting process: nothing is imported again."""
    code, output = first_fit_block()
    proc = run_script(tmp_path, unguarded(code))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == output


@pytest.mark.slow
def test_without_the_guard_worker_processes_give_one_clear_error(tmp_path):
    """With worker processes (``daskabsp.embedded: processes``) an unguarded script would run
    again in every worker: the fit stops before starting any, with one error that names the
    line and says what to add, instead of Dask's pages of failed nannies."""
    code, _ = first_fit_block()
    proc = run_script(tmp_path, unguarded(code), DASK_DASKABSP__EMBEDDED="processes")
    assert proc.returncode != 0
    assert proc.stdout == ""
    err = proc.stderr
    assert err.count("Traceback (most recent call last)") == 1, err[-3000:]
    assert "daskabsp.cluster.MainGuardError" in err
    line = 1 + unguarded(code).splitlines().index(
        next(ln for ln in unguarded(code).splitlines() if "LogisticRegression().fit" in ln))
    assert f"first_fit.py, line {line}" in err
    assert 'if __name__ == "__main__":' in err
    assert "Nanny" not in err and "bootstrapping" not in err


@pytest.mark.slow
def test_with_the_guard_worker_processes_start(tmp_path):
    code, output = first_fit_block()
    proc = run_script(tmp_path, code, DASK_DASKABSP__EMBEDDED="processes")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == output


def test_unguarded_main_line_reads_the_script():
    import ast

    from daskabsp.cluster import _is_main_guard

    guard = ast.parse('if __name__ == "__main__":\n    pass').body[0].test
    assert _is_main_guard(guard)
    assert _is_main_guard(ast.parse("'__main__' == __name__").body[0].value)
    assert not _is_main_guard(ast.parse('__name__ != "__main__"').body[0].value)


@pytest.mark.slow
def test_embedded_cluster_is_what_the_docs_say_and_harvests_an_emulated_straggler(tmp_path):
    """One worker per core, one thread each, in the fitting process (getting started says
    so); an emulated straggler on it is harvested under A-BSP and waited for under BSP; the
    BLAS threads of the process are as they were once the fits end."""
    code = """
import logging, os
import numpy as np
from dask.system import CPU_COUNT
from threadpoolctl import threadpool_info
import daskabsp
from daskabsp.cluster import embedded_client
from daskabsp.estimators import LogisticRegression

logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
blas = sorted(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
client = embedded_client()
nthreads = client.nthreads()
print("WORKERS", len(nthreads) == CPU_COUNT, set(nthreads.values()) == {1},
      client.scheduler.address.startswith("inproc://"))
rng = np.random.default_rng(0)
X = rng.standard_normal((200_000, 10)); y = (X[:, 0] + rng.standard_normal(len(X)) > 0)
slow = sorted(nthreads)[0]
with daskabsp.slow_workers(client, {slow: 4.0}):
    a = LogisticRegression(sync="absp", n_partitions=2, max_iter=4, tol=0).fit(X, y)
    b = LogisticRegression(sync="bsp", n_partitions=2, max_iter=4, tol=0).fit(X, y)
ha, hb = a.history_, b.history_
part = list(ha.worker.isel(round=0).values).index(slow)
print("HARVESTED", bool(ha.harvested.isel(partition=part).any()),
      int(hb.harvested.sum()) == 0)
print("BLAS", sorted(i["num_threads"] for i in threadpool_info()
                     if i["user_api"] == "blas") == blas)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # run outside the checkout: ``-c`` puts the working directory first on sys.path,
        # and the checkout's daskabsp/ has no estimators (they install into it)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WORKERS True True True" in proc.stdout
    assert "HARVESTED True True" in proc.stdout
    assert "BLAS True" in proc.stdout
    assert "in this process" in proc.stderr  # the INFO log line says which kind started
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert "one\nworker per core, one thread each, **inside this process**" in page


def test_dask_array_from_numpy_is_placed_without_a_large_graph(client):
    """``da.from_array(X)`` holds X in its graph; the fit scatters its blocks to the workers
    instead of persisting the graph through the scheduler (Dask's warning), and fits the
    same model as from X itself."""
    from daskabsp.estimators import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60_000, 10))
    y = (X @ rng.standard_normal(10) + rng.standard_normal(len(X)) > 0).astype(int)
    Xd = da.from_array(X, chunks=(15_000, 10))
    yd = da.from_array(y, chunks=15_000)
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "100kB"}), \
            warnings.catch_warnings():
        warnings.filterwarnings("error", message="Sending large graph")
        lazy = LogisticRegression(sync="bsp").fit(Xd, yd)
    assert lazy.history_.sizes["partition"] == 4  # the dask array's chunks
    eager = LogisticRegression(sync="bsp", n_partitions=4).fit(X, y)
    # the same rows and partitions, so the same optimum; the two paths differ in the last
    # digits the solver leaves (its chunk sizes and Hessian samples follow measured timings)
    np.testing.assert_allclose(lazy.coef_, eager.coef_, rtol=1e-5, atol=1e-7)
    # a lazy computation is still computed on the cluster
    assert lazy.predict(Xd[:10] + 0).compute().shape == (10,)


def test_held_rows_read_across_blocks():
    from daskabsp.engine.partitions import in_memory_blocks

    X = np.arange(40.0).reshape(20, 2)
    (held,) = in_memory_blocks(da.from_array(X, chunks=(7, 1)))
    assert held.shape == (20, 2)
    for a, b in [(0, 7), (3, 12), (6, 20), (14, 15), (0, 20)]:
        np.testing.assert_array_equal(held[a:b], X[a:b])
    lazy = da.from_array(X, chunks=(7, 2)) * 2
    assert in_memory_blocks(lazy)[0] is lazy


def test_an_unknown_sync_names_the_public_policy_class():
    """The error for an unknown ``sync`` names ``daskabsp.Policy``, the class users import,
    and is daskabsp's ``InvalidParameterError``, which code catching scikit-learn's catches."""
    from sklearn.utils._param_validation import InvalidParameterError as SkError

    from daskabsp.estimators import InvalidParameterError, LogisticRegression

    with pytest.raises(InvalidParameterError) as info:
        LogisticRegression(sync="fastest").fit([[0.0], [1.0]], [0, 1])
    assert isinstance(info.value, SkError)
    message = str(info.value)
    assert "'daskabsp.Policy'" in message and "daskabsp.policies" not in message
    for name in ("absp", "bsp", "ssp", "asp"):
        assert f"'{name}'" in message
