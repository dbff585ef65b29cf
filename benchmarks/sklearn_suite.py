"""scikit-learn's own tests with its estimators swapped for daskabsp's (issue 41).

A user who replaces ``from sklearn.linear_model import LogisticRegression`` by ``from
daskabsp.estimators import LogisticRegression`` expects what scikit-learn's test suite checks
to keep holding. This script runs scikit-learn's installed test modules twice, each run in a
pytest subprocess of its own:

* **baseline**: as installed;
* **swapped**: the same tests with every estimator daskabsp provides (the names of
  ``daskabsp.estimators.__all__``) rebound to daskabsp's class, by this file acting as a pytest
  plugin (``-p sklearn_suite``). After collection, each test module's globals that are
  scikit-learn's class (``LogisticRegression``), module globals such as ``linear_model`` (from
  ``from sklearn import linear_model``: replaced by a copy of the module whose names are
  daskabsp's), lists, tuples and dicts of classes held in globals, and parametrised arguments
  (a class, an instance, rebuilt with its parameters at set-up, or a ``functools.partial`` of
  a class) are swapped. The whole session shares one in-process ``LocalCluster`` (2 worker
  threads), the current client every fit picks up, so no fit starts a cluster.

A test counts only if, in the swapped run, it constructed a daskabsp estimator (``__init__``
and ``fit`` of each class are instrumented to record the running test). Per estimator the
table gives the tests that pass in the baseline (and construct that estimator when swapped),
how many of them pass swapped, the ratio, and the failures grouped by cause: the exception's
type and the first line of its message, numbers and addresses normalised. Tests listed in
:data:`DOCUMENTED` fail because of a deliberate difference, documented in the estimator's
"Differences from scikit-learn" notes; they are counted apart, not silently.

Usage (from the repository root; ~N minutes for every module, see ``--sample``)::

    python benchmarks/sklearn_suite.py [--modules test_logistic,test_ridge]
        [--estimators LogisticRegression,Ridge] [--sample 3] [--json [PATH]] [--timeout 60]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import sklearn

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SKLEARN = Path(sklearn.__file__).resolve().parent

#: The test modules of issue 41, by short name, relative to scikit-learn's package.
MODULES = {
    "test_logistic": "linear_model/tests/test_logistic.py",
    "test_ridge": "linear_model/tests/test_ridge.py",
    "test_coordinate_descent": "linear_model/tests/test_coordinate_descent.py",
    "test_base": "linear_model/tests/test_base.py",
    "test_glm": "linear_model/_glm/tests/test_glm.py",
    "test_svm": "svm/tests/test_svm.py",
    "test_k_means": "cluster/tests/test_k_means.py",
    "test_pca": "decomposition/tests/test_pca.py",
}

#: Tests that fail swapped because daskabsp differs from scikit-learn on purpose: node id
#: (relative to scikit-learn's package; a trailing ``[*`` matches every parametrisation)
#: -> the reason, as stated in the estimator's "Differences from scikit-learn" notes.
DOCUMENTED: dict[str, str] = {}
_SOLVERS = "solvers: solver ignored, any solver takes an L1 part"
_REFUSED = "inputs scikit-learn refuses are taken"
_ITER = "iterations and warnings: n_iter_ counts rounds; daskabsp's ConvergenceWarning"
_VERBOSE = "verbose: a progress bar, not scikit-learn's text"
_REJECTED = "rejected: objectives the engine does not minimise"
_PRIVATE = "scikit-learn's private helpers, called with daskabsp's parameters"
_ABSP = "timing-dependent results under the default sync='absp'"
_NOT_TRUE = "scikit-learn's solver-specific warnings, not true here"
for _key, _why in {
    "linear_model/tests/test_logistic.py::test_check_solver_option": _SOLVERS,
    "linear_model/tests/test_logistic.py::test_large_sparse_matrix": _REFUSED,
    "linear_model/tests/test_logistic.py::test_max_iter": _ITER,
    "linear_model/tests/test_logistic.py::test_newton_cholesky_fallback_to_lbfgs": _NOT_TRUE,
    "linear_model/tests/test_logistic.py::test_logistic_cv_multinomial_score": _PRIVATE,
    "linear_model/tests/test_base.py::test_raises_value_error_if_positive_and_sparse":
        _REFUSED,
    "decomposition/tests/test_pca.py::test_sparse_pca_solver_error": _REFUSED,
    "svm/tests/test_svm.py::test_linearsvc_parameters": _REJECTED,
    "svm/tests/test_svm.py::test_linearsvc_crammer_singer": _REJECTED,
    "svm/tests/test_svm.py::test_crammer_singer_binary": _REJECTED,
    "svm/tests/test_svm.py::test_linearsvc": _REJECTED,
    "svm/tests/test_svm.py::test_linearsvm_liblinear_sample_weight": _REJECTED,
    "svm/tests/test_svm.py::test_linear_svm_convergence_warnings": _ITER,
    "linear_model/tests/test_coordinate_descent.py::test_elasticnet_precompute_incorrect_gram":
        _REJECTED,
    "linear_model/tests/test_coordinate_descent.py::"
    "test_elasticnet_precompute_gram_weighted_samples": _REJECTED,
    "linear_model/tests/test_coordinate_descent.py::test_elasticnet_precompute_gram":
        _REJECTED,
    "linear_model/tests/test_coordinate_descent.py::test_overridden_gram_matrix": _REJECTED,
    "linear_model/tests/test_coordinate_descent.py::test_warm_start_convergence": _ITER,
    "linear_model/tests/test_coordinate_descent.py::"
    "test_warm_start_convergence_with_regularizer_decrement": _ITER,
    "linear_model/tests/test_coordinate_descent.py::"
    "test_enet_coordinate_descent_raises_convergence": _ITER,
    "linear_model/tests/test_coordinate_descent.py::test_lasso_alpha_warning": _NOT_TRUE,
    "linear_model/_glm/tests/test_glm.py::test_tweedie_link_argument": _REJECTED,
    "linear_model/_glm/tests/test_glm.py::test_tweedie_score": _REJECTED,
    "linear_model/_glm/tests/test_glm.py::test_linalg_warning_with_newton_solver": _NOT_TRUE,
    "linear_model/tests/test_ridge.py::test_ridge_fit_intercept_sparse_sag": _NOT_TRUE,
    "linear_model/tests/test_logistic.py::test_sample_and_class_weight_equivalence_liblinear":
        _REJECTED,
    "linear_model/tests/test_logistic.py::test_logreg_l1": _REJECTED,
    "linear_model/tests/test_logistic.py::test_saga_vs_liblinear": _REJECTED,
    "linear_model/tests/test_logistic.py::test_logisticregression_liblinear_sample_weight":
        _REJECTED,
    "linear_model/tests/test_logistic.py::test_liblinear_dual_random_state": _SOLVERS,
    "linear_model/tests/test_logistic.py::test_logreg_predict_proba_multinomial": _PRIVATE,
    "linear_model/tests/test_coordinate_descent.py::test_enet_toy": _REJECTED,
    "linear_model/tests/test_coordinate_descent.py::test_enet_float_precision": _REJECTED,
    "linear_model/tests/test_ridge.py::test_n_iter": _ITER,
    "linear_model/tests/test_ridge.py::test_lbfgs_solver_error": _ITER,
    "cluster/tests/test_k_means.py::test_kmeans_verbose": _VERBOSE,
    "cluster/tests/test_k_means.py::test_kmeans_elkan_results": _ABSP,
    "cluster/tests/test_k_means.py::test_sample_weight_init": _PRIVATE,
    "cluster/tests/test_k_means.py::test_sample_weight_zero": _PRIVATE,
}.items():
    DOCUMENTED[_key] = f"{_why} (docs/user-guide/estimators.md, Differences from scikit-learn)"


# -- the plugin (loaded in the pytest subprocesses with -p sklearn_suite) ----------------------


def pytest_addoption(parser):
    g = parser.getgroup("sklearn_suite")
    g.addoption("--suite-mode", choices=("baseline", "swapped"), default=None)
    g.addoption("--suite-out", default=None, help="JSON file of per-test outcomes")
    g.addoption("--suite-sample", type=int, default=1, help="every Nth test of each module")
    g.addoption("--suite-estimators", default="", help="comma-separated names to swap")


class _State:
    mode: str | None = None
    nodeid: str | None = None
    swaps: dict = {}  # name -> (sklearn class, daskabsp class)
    by_sklearn: dict = {}  # sklearn class -> daskabsp class
    constructed: dict = defaultdict(set)
    results: dict = {}
    cluster = None
    client = None


def _ours():
    import daskabsp.estimators as est

    return {n: getattr(est, n) for n in est.__all__ if isinstance(getattr(est, n), type)
            and hasattr(getattr(est, n), "fit")}


def _sklearn_class(ours: type) -> type | None:
    return getattr(ours, "_counterpart", None)


def _record(name: str) -> None:
    if _State.nodeid is not None:
        _State.constructed[_State.nodeid].add(name)


def _instrument(names: dict) -> None:
    """Record the running test in ``__init__`` and ``fit`` of each daskabsp class."""
    for name, cls in names.items():
        for meth in ("__init__", "fit"):
            orig = cls.__dict__.get(meth)
            if orig is None:
                continue

            def wrapper(self, *a, __orig=orig, __name=name, **k):
                _record(type(self).__name__ if type(self).__name__ in names else __name)
                return __orig(self, *a, **k)

            functools.update_wrapper(wrapper, orig)
            setattr(cls, meth, wrapper)


def pytest_configure(config):
    mode = config.getoption("--suite-mode")
    if mode is None:
        return
    _State.mode = mode
    config.addinivalue_line("markers", "thread_unsafe: scikit-learn's marker")
    if mode != "swapped":
        return
    wanted = {n for n in config.getoption("--suite-estimators").split(",") if n}
    ours = _ours()
    _instrument(ours)
    _State.swaps = {n: (_sklearn_class(c), c) for n, c in ours.items()
                    if _sklearn_class(c) is not None and (not wanted or n in wanted)}
    _State.by_sklearn = {sk: c for sk, c in _State.swaps.values()}
    from distributed import Client, LocalCluster

    _State.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None)
    _State.client = Client(_State.cluster)


def pytest_unconfigure(config):
    out = config.getoption("--suite-out", None)
    if out and _State.mode is not None:
        for nodeid, r in _State.results.items():
            r["constructed"] = sorted(_State.constructed.get(nodeid, ()))
        Path(out).write_text(json.dumps(_State.results, indent=0))
    if _State.client is not None:
        _State.client.close()
        _State.cluster.close()


def _swap_value(v, *, instances: bool):
    """``v`` with scikit-learn's classes (and, if ``instances``, their instances) replaced by
    daskabsp's; ``v`` itself when nothing is swapped."""
    by = _State.by_sklearn
    if isinstance(v, type):
        return by.get(v, v)
    if isinstance(v, functools.partial) and isinstance(v.func, type) and v.func in by:
        return functools.partial(by[v.func], *v.args, **v.keywords)
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        new = [_swap_value(x, instances=instances) for x in v]
        if any(a is not b for a, b in zip(new, v, strict=True)):
            return type(v)(new) if isinstance(v, tuple) else new
        return v
    if instances and type(v) in by:
        try:
            return by[type(v)](**v.get_params(deep=False))
        except (TypeError, ValueError):
            return v
    return v


def _swap_module(mod: types.ModuleType) -> None:
    by_name = {n: ours for n, (_, ours) in _State.swaps.items()}
    g = vars(mod)
    for name, value in list(g.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            if value.__name__.startswith("sklearn") and any(
                    getattr(value, n, None) is sk for n, (sk, _) in _State.swaps.items()):
                copy = types.ModuleType(value.__name__, value.__doc__)
                vars(copy).update(vars(value))
                vars(copy).update({n: c for n, c in by_name.items()
                                   if getattr(value, n, None) is _State.swaps[n][0]})
                g[name] = copy
            continue
        if isinstance(value, dict):
            for k, v in list(value.items()):
                new = _swap_value(v, instances=False)
                if new is not v:
                    value[k] = new
            continue
        new = _swap_value(value, instances=False)
        if new is not value:
            if isinstance(value, list):
                value[:] = new
            else:
                g[name] = new


def pytest_collection_modifyitems(session, config, items):
    if _State.mode is None:
        return
    n = max(1, config.getoption("--suite-sample"))
    if n > 1:
        kept, seen = [], Counter()
        for item in items:
            key = item.nodeid.split("::")[0]
            if seen[key] % n == 0:
                kept.append(item)
            seen[key] += 1
        config.hook.pytest_deselected(items=[i for i in items if i not in set(kept)])
        items[:] = kept
    if _State.mode != "swapped":
        return
    done = set()
    for item in items:
        mod = getattr(item, "module", None)
        if mod is not None and id(mod) not in done:
            done.add(id(mod))
            _swap_module(mod)
        _swap_params(item, instances=False)


def _swap_params(item, *, instances: bool) -> None:
    """Rebind the test's parametrised values to daskabsp's (classes; with ``instances``,
    estimator instances too)."""
    spec = getattr(item, "callspec", None)
    if spec is not None:
        for k, v in list(spec.params.items()):
            new = _swap_value(v, instances=instances)
            if new is not v:
                spec.params[k] = new


def _nodeid(item) -> str:
    """The node id relative to scikit-learn's package (the same from any directory)."""
    path = Path(str(item.path)).resolve()
    try:
        rel = path.relative_to(SKLEARN).as_posix()
    except ValueError:
        rel = item.nodeid.split("::")[0]
    return "::".join([rel, *item.nodeid.split("::")[1:]])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _State.mode is None:
        return (yield)
    _State.nodeid = _nodeid(item)
    t0 = time.perf_counter()
    try:
        return (yield)
    finally:
        r = _State.results.setdefault(_State.nodeid, {"outcome": "passed"})
        r["seconds"] = round(time.perf_counter() - t0, 3)
        _State.nodeid = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if _State.mode == "swapped":  # instances rebuilt here, so they count for this test
        _swap_params(item, instances=True)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if _State.mode is None:
        return report
    r = _State.results.setdefault(_nodeid(item), {"outcome": "passed"})
    if report.skipped and not hasattr(report, "wasxfail"):
        if r["outcome"] == "passed":
            r["outcome"] = "skipped"
    elif hasattr(report, "wasxfail"):
        r["outcome"] = "xfailed" if report.skipped else "xpassed"
    elif report.failed:
        r["outcome"] = "failed"
        r.setdefault("cause", _cause(call.excinfo, call.when))
    return report


def _cause(excinfo, when: str) -> str:
    if excinfo is None:
        return f"{when}: (no exception)"
    e = excinfo.value
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    if excinfo.type.__name__ == "Failed" and first.startswith("DID NOT"):
        first = first.split("...")[0]
    name = excinfo.type.__name__
    return f"{name}: {normalise(first)}" + ("" if when == "call" else f" [{when}]")


_NORMALISE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"(?<![A-Za-z_\d.])[-+]?\d+(\.\d*)?([eE][-+]?\d+)?(?![A-Za-z_])"), "N"),
    (re.compile(r"array\(\[.*"), "array([…"),
    (re.compile(r"\s+"), " "),
]


def normalise(message: str, width: int = 110) -> str:
    """A message with its numbers, addresses and array contents replaced, so that one cause
    is one group."""
    for pattern, repl in _NORMALISE:
        message = pattern.sub(repl, message)
    return message[:width]


# -- the driver --------------------------------------------------------------------------------


def run_pytest(mode: str, paths: list[str], out: Path, *, timeout: float = 60,
               sample: int = 1, estimators: list[str] | None = None,
               select: str | None = None, quiet: bool = False) -> dict:
    """Run scikit-learn's tests at ``paths`` (files or node ids) in a pytest subprocess in
    ``mode`` ("baseline" or "swapped"); return ``{node id: {"outcome", "constructed",
    "cause", "seconds"}}`` (also written to ``out``) with the run's wall time under
    ``"__seconds__"``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-m", "pytest", "-p", "sklearn_suite", "-p", "no:cacheprovider",
           "-q", "-o", "addopts=", "-o", "timeout_method=signal", f"--timeout={timeout}",
           f"--rootdir={SKLEARN}", "--tb=no", "--no-header", "-rN",
           f"--suite-mode={mode}", f"--suite-out={out}", f"--suite-sample={sample}",
           f"--suite-estimators={','.join(estimators or [])}",
           *(["-k", select] if select else []), *paths]
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    seconds = time.perf_counter() - t0
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    if not quiet:
        print(f"  {mode}: {tail[0]} ({seconds:.0f} s)", flush=True)
    if not out.exists():
        print(proc.stdout[-5000:])
        raise RuntimeError(f"the {mode} run wrote no results (exit code {proc.returncode})")
    return {**json.loads(out.read_text()), "__seconds__": seconds}


def documented_reason(nodeid: str) -> str | None:
    """The reason :data:`DOCUMENTED` gives for ``nodeid`` (a key without parameters covers
    every parametrisation of the test)."""
    for key, reason in DOCUMENTED.items():
        if nodeid == key or ("[" not in key and nodeid.startswith(key + "[")):
            return reason
    return None


def analyse(baseline: dict, swapped: dict, estimators: list[str] | None) -> dict:
    """Per estimator: the tests passing in the baseline that construct it when swapped, how
    many pass swapped, and the swapped failures by cause."""
    per: dict = defaultdict(lambda: {"baseline": 0, "swapped": 0, "documented": 0,
                                     "causes": Counter(), "failed": []})
    uncounted = Counter()
    for nodeid, s in swapped.items():
        b = baseline.get(nodeid)
        if b is None or b["outcome"] != "passed":
            continue
        names = [n for n in s.get("constructed", []) if not estimators or n in estimators]
        if not names:
            if s["outcome"] != "passed":
                uncounted[s.get("cause", s["outcome"])] += 1
            continue
        for name in names:
            e = per[name]
            e["baseline"] += 1
            if s["outcome"] == "passed":
                e["swapped"] += 1
                continue
            reason = documented_reason(nodeid)
            if reason is not None:
                e["documented"] += 1
                continue
            cause = s.get("cause", s["outcome"])
            e["causes"][cause] += 1
            e["failed"].append({"test": nodeid, "cause": cause})
    return {"per_estimator": dict(per), "uncounted_failures": dict(uncounted)}


def report(result: dict) -> str:
    per = result["per_estimator"]
    rows, lines = [], []
    tb = ts = td = 0
    for name in sorted(per):
        e = per[name]
        tb, ts, td = tb + e["baseline"], ts + e["swapped"], td + e["documented"]
        ratio = e["swapped"] / e["baseline"] if e["baseline"] else float("nan")
        ratio_doc = (e["swapped"] + e["documented"]) / e["baseline"] if e["baseline"] else 0
        rows.append([name, e["baseline"], e["swapped"], f"{ratio:.1%}", e["documented"],
                     f"{ratio_doc:.1%}", sum(e["causes"].values())])
    rows.append(["total", tb, ts, f"{ts / tb:.1%}" if tb else "-", td,
                 f"{(ts + td) / tb:.1%}" if tb else "-", tb - ts - td])
    from _common import table

    lines.append(table(["estimator", "baseline", "swapped", "ratio", "documented",
                        "ratio+doc", "failing"], rows))
    for name in sorted(per):
        causes = per[name]["causes"]
        if not causes:
            continue
        lines.append(f"\n{name}: failures by cause")
        for cause, n in causes.most_common():
            lines.append(f"  {n:4d}  {cause}")
    if result["uncounted_failures"]:
        n = sum(result["uncounted_failures"].values())
        lines.append(f"\n(not counted: {n} swapped failures of tests that constructed no "
                     "daskabsp estimator)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modules", type=lambda s: s.split(","), default=list(MODULES),
                   help=f"comma-separated, among {', '.join(MODULES)} (default: all)")
    p.add_argument("--estimators", type=lambda s: s.split(","), default=None,
                   help="comma-separated daskabsp estimator names to swap (default: all)")
    p.add_argument("--sample", type=int, default=1, help="run every Nth test of each module")
    p.add_argument("-k", dest="select", default=None,
                   help="pytest's -k expression, to run some tests only")
    p.add_argument("--timeout", type=float, default=60, help="seconds per test")
    p.add_argument("--json", nargs="?", const=RESULTS / "sklearn_suite.json", type=Path,
                   default=None, help="write the results (default path: %(const)s)")
    p.add_argument("--baseline-from", type=Path, default=None,
                   help="reuse the baseline run's per-test JSON (from --keep) instead of "
                        "running it again: it does not depend on daskabsp")
    p.add_argument("--swapped-from", type=Path, default=None,
                   help="reuse a swapped run's per-test JSON (from --keep): only analyse")
    p.add_argument("--keep", type=Path, default=None,
                   help="directory for the raw per-test JSON of both runs")
    args = p.parse_args(argv)
    unknown = set(args.modules) - set(MODULES)
    if unknown:
        p.error(f"unknown modules {sorted(unknown)}; choose among {list(MODULES)}")
    paths = [str(SKLEARN / MODULES[m]) for m in args.modules]
    print(f"scikit-learn {sklearn.__version__}: {', '.join(args.modules)}"
          f"{f', every {args.sample}th test' if args.sample > 1 else ''}", flush=True)
    raw, seconds = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        keep = args.keep or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        for mode, path in (("baseline", args.baseline_from), ("swapped", args.swapped_from)):
            if path is not None:
                raw[mode] = json.loads(path.read_text())
                seconds[mode] = None
                print(f"  {mode}: from {path}", flush=True)
        for mode in ("baseline", "swapped"):
            if mode in raw:
                continue
            raw[mode] = run_pytest(mode, paths, keep / f"{mode}.json", timeout=args.timeout,
                                   sample=args.sample, estimators=args.estimators,
                                   select=args.select)
            seconds[mode] = raw[mode].pop("__seconds__")
    result = analyse(raw["baseline"], raw["swapped"], args.estimators)
    print(report(result))
    if args.json:
        sys.path.insert(0, str(HERE))
        from _common import environment

        per = {n: {**e, "causes": dict(e["causes"].most_common())}
               for n, e in result["per_estimator"].items()}
        doc = {"benchmark": "sklearn_suite", "sklearn": sklearn.__version__,
               "modules": args.modules, "sample": args.sample, "timeout": args.timeout,
               "seconds": seconds, "environment": environment(),
               "per_estimator": per, "uncounted_failures": result["uncounted_failures"],
               "documented": DOCUMENTED}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
