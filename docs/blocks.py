"""Fill the generated blocks of the README and the docs from their sources.

A generated block is the text between ``<!-- numbers:NAME -->`` and ``<!-- /numbers:NAME -->``
in a Markdown file. Its content is made here, from:

* the benchmark results files, ``benchmarks/results/*.json`` (what the benchmarks measured;
  a missing file shows as "not yet measured", never as a number);
* the estimators' parameter declarations (``_parameter_constraints``, ``_ignored``,
  ``_rejected``) and scikit-learn's signatures;
* ``daskabsp/daskabsp.yaml`` (the configuration defaults).

So the README, the docs and the benchmarks cannot disagree: ``python docs/blocks.py`` rewrites
every block, ``python docs/blocks.py --check`` lists the blocks that differ from what the
sources give (``tests/test_docs.py`` runs it).
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: The files whose blocks are filled (every Markdown page of the docs, the two READMEs).
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
         *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "user-guide").glob("*.md"))]
BLOCK = re.compile(r"(<!-- numbers:(?P<name>[\w-]+) -->\n)(?P<body>.*?)"
                   r"(<!-- /numbers:(?P=name) -->)", re.DOTALL)

#: Benchmark targets (benchmarks/README.md), with the numbers they are judged on.
FIT_TIME_PERSISTENT_IDEAL = 1.10
FIT_TIME_TRANSIENT_SPEEDUP = 2.2
FIT_TIME_FROZEN_OF_UNFROZEN = 3.0
FIT_TIME_NO_STRAGGLER = 1.05
FIT_TIME_FACTOR = 4.0  # the persistent straggler's slowdown
FROZEN_RESUME_S = 31.0  # frozen 1 s into the fit, for 30 s


# -- results files --------------------------------------------------------------------------


def load(name: str) -> dict | None:
    """The results file ``benchmarks/results/<name>.json``, or None if it was never written."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def source_line(doc: dict, name: str) -> str:
    env = doc.get("environment", {})
    load_avg = env.get("load_average") or [float("nan")]
    return (f"*From `benchmarks/results/{name}.json`: `{doc.get('benchmark', name)}` run at "
            f"commit `{env.get('commit', '?')}` on {env.get('time', '?')[:10]}, "
            f"{env.get('cpu_count', '?')} cores, load average {load_avg[0]:.1f} when it ended.*")


def not_measured(name: str, script: str) -> str:
    return (f"*Not yet measured: `benchmarks/results/{name}.json` does not exist "
            f"(run `python benchmarks/{script}`).*")


def med(values) -> float:
    finite = [v for v in values if v is not None and v == v and v >= 0]
    return statistics.median(finite) if finite else float("nan")


def verdict(ok: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[ok]


def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def span(values: list[float], digits: int = 2, unit: str = "x") -> str:
    values = [v for v in values if v == v]
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}{unit}" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else \
        f"{lo:.{digits}f}-{hi:.{digits}f}{unit}"


# -- bench_fit_time ---------------------------------------------------------------------------


def fit_time_medians(doc: dict) -> dict[tuple[str, str, str], float]:
    return {(r["model"], r["scenario"], r["sync"]): med(r["seconds"]) for r in doc["runs"]}


def fit_time_facts(doc: dict) -> dict:
    """The ratios the targets are judged on, per model."""
    m = fit_time_medians(doc)
    runs = {(r["model"], r["scenario"], r["sync"]): r for r in doc["runs"]}
    n = doc["environment"].get("cpu_count") or 2
    models = sorted({k[0] for k in m}, key=[k[0] for k in m].index)
    facts: dict = {"models": models, "persistent_over_ideal": {}, "transient_speedup": {},
                   "persistent_speedup": {}, "none_absp_over_bsp": {}, "frozen_returned": {},
                   "frozen_bsp_returned": None}
    for model in models:
        bsp_none = m.get((model, "none", "bsp"))
        if bsp_none is not None and (model, "persistent", "absp") in m:
            ideal = bsp_none * n / (n - 1 + 1 / FIT_TIME_FACTOR)
            facts["persistent_over_ideal"][model] = m[model, "persistent", "absp"] / ideal
        for scenario, key in (("transient", "transient_speedup"),
                              ("persistent", "persistent_speedup")):
            if (model, scenario, "bsp") in m and (model, scenario, "absp") in m:
                facts[key][model] = m[model, scenario, "bsp"] / m[model, scenario, "absp"]
        if bsp_none is not None and (model, "none", "absp") in m:
            facts["none_absp_over_bsp"][model] = m[model, "none", "absp"] / bsp_none
        if (model, "frozen", "absp") in runs:
            secs = runs[model, "frozen", "absp"]["seconds"]
            facts["frozen_returned"][model] = (sum(s < FROZEN_RESUME_S for s in secs), len(secs))
        if (model, "frozen", "bsp") in runs:
            secs = runs[model, "frozen", "bsp"]["seconds"]
            facts["frozen_bsp_returned"] = (sum(s < FROZEN_RESUME_S for s in secs), len(secs))
    return facts


def block_fit_time() -> str:
    doc = load("bench_fit_time")
    if doc is None:
        return not_measured("bench_fit_time", "bench_fit_time.py")
    m = fit_time_medians(doc)
    rounds = {(r["model"], r["scenario"], r["sync"]): sorted({x for x in r["rounds"] if x >= 0})
              for r in doc["runs"]}
    syncs = ["bsp", "absp", "absp-paper", "dask-ml"]
    lines = [source_line(doc, "bench_fit_time"), "",
             "Median seconds of `est.fit(X, y)` (rounds in brackets); BSP/A-BSP is BSP's median "
             "over the default A-BSP's.", "",
             "| model | scenario | BSP | A-BSP (helpers) | A-BSP as published | dask-ml | "
             "BSP / A-BSP |", "|---|---|---|---|---|---|---|"]
    keys = sorted({(k[0], k[1]) for k in m}, key=[(k[0], k[1]) for k in m].index)
    for model, scenario in keys:
        cells = []
        for sync in syncs:
            t = m.get((model, scenario, sync))
            r = rounds.get((model, scenario, sync), [])
            cells.append("" if t is None else fmt(t) + (
                f" ({'/'.join(map(str, r))})" if r else ""))
        ratio = (m[model, scenario, "bsp"] / m[model, scenario, "absp"]
                 if (model, scenario, "bsp") in m and (model, scenario, "absp") in m else None)
        lines.append(f"| {model} | {scenario} | " + " | ".join(cells)
                     + f" | {'' if ratio is None else fmt(ratio)} |")
    return "\n".join(lines)


# -- bench_solvers ----------------------------------------------------------------------------


def solver_medians(doc: dict) -> dict[str, dict[str, float]]:
    return {res["case"]: {name: med(t) for name, t in res["times"].items()}
            for res in doc["results"]}


def block_solvers() -> str:
    doc = load("bench_solvers")
    if doc is None:
        return not_measured("bench_solvers", "bench_solvers.py")
    lines = [source_line(doc, "bench_solvers"), "",
             "Median seconds of the whole `fit()`; the last column is scikit-learn's time over "
             "daskabsp A-BSP's (above 1: daskabsp is faster).", "",
             "| case | scikit-learn | daskabsp BSP | daskabsp A-BSP | fastest dask-ml | "
             "scikit-learn / A-BSP |", "|---|---|---|---|---|---|"]
    for case, t in solver_medians(doc).items():
        dml = {k: v for k, v in t.items() if k.startswith("dask-ml")}
        best = min(dml.items(), key=lambda kv: kv[1]) if dml else None
        sk, bsp, absp = (t.get(k, float("nan")) for k in
                         ("scikit-learn", "daskabsp BSP", "daskabsp A-BSP"))
        lines.append(f"| {case} | {fmt(sk)} | {fmt(bsp)} | {fmt(absp)} | "
                     + ("-" if best is None else f"{fmt(best[1])} ({best[0][8:]})")
                     + f" | {fmt(sk / absp)} |")
    return "\n".join(lines)


def solver_ratios(doc: dict) -> dict[str, float]:
    """scikit-learn's time over daskabsp A-BSP's, per case."""
    return {case: t.get("scikit-learn", float("nan")) / t.get("daskabsp A-BSP", float("nan"))
            for case, t in solver_medians(doc).items()}


def block_solvers_summary() -> str:
    doc = load("bench_solvers")
    if doc is None:
        return not_measured("bench_solvers", "bench_solvers.py")
    ratios = solver_ratios(doc)
    kind = {res["case"]: "sparse" if res["nnz"] < 0.5 * res["shape"][0] * res["shape"][1]
            else "dense" for res in doc["results"]}
    parts = [f"{case} ({kind[case]}, {res['shape'][0]} x {res['shape'][1]}) {fmt(ratios[case])}x"
             for case, res in ((r["case"], r) for r in doc["results"])]
    return (f"{source_line(doc, 'bench_solvers')}\n\nscikit-learn's time in one process (both "
            "cores) over daskabsp A-BSP's on the same machine, whole `fit()` from in-memory "
            "data, placement included (above 1: daskabsp was faster): " + "; ".join(parts)
            + ".")


# -- the targets of benchmarks/README.md ------------------------------------------------------


def _target_rows() -> list[tuple[str, str, str, bool | None]]:
    """(benchmark, target, measured, met) for every target of benchmarks/README.md."""
    rows: list[tuple[str, str, str, bool | None]] = []
    doc = load("harvest_latency")
    for p in ("4", "8"):
        s = doc["settings"].get(p) if doc else None
        ms = s["absp_harvest_latency_s"]["median"] * 1e3 if s else None
        rows.append(("harvest_latency", f"{p} partitions: median harvest latency <= 10 ms",
                     "not measured" if ms is None else f"{ms:.1f} ms",
                     None if ms is None else ms <= doc.get("target_ms", 10)))
    doc = load("round_overhead")
    for p in ("4", "8"):
        s = doc["settings"].get(p) if doc else None
        if s is None:
            rows.append(("round_overhead", f"{p} partitions: A-BSP round / plain <= 1.15x",
                         "not measured", None))
            continue
        worst = max(s["ratio_absp_over_plain"]["median"],
                    s["ratio_absp_over_plain-async"]["median"])
        rows.append(("round_overhead", f"{p} partitions: A-BSP round / plain <= 1.15x "
                     "(the faster baseline)", f"{worst:.2f}x", worst <= doc["target"]))
    doc = load("time_to_target")
    rows.append(("time_to_target", "A-BSP >= 2.4x faster than BSP with a 4x straggler",
                 "not measured" if doc is None else
                 f"{doc['speedup_bsp_over_absp']['median']:.2f}x",
                 None if doc is None else doc["target_met"]["speedup"]))
    rows.append(("time_to_target", "without a straggler A-BSP <= 1.05x BSP's time",
                 "not measured" if doc is None else
                 f"{doc['absp_over_bsp_no_straggler']['median']:.2f}x",
                 None if doc is None else doc["target_met"]["no_straggler"]))
    doc = load("estimators")
    labels = [("with the straggler", "A-BSP >= 2x ahead of every dask-ml solver with a 4x "
               "straggler"), ("without a straggler", "A-BSP not behind dask-ml without a "
                              "straggler")]
    for key, target in labels:
        found = None
        for v in (doc or {}).get("verdicts", []):
            hit = re.match(rf"A-BSP vs fastest dask-ml solver {key}: ([\d.]+|nan)x .*: "
                           r"(MET|MISSED)", v)
            if hit:
                found = (f"{float(hit.group(1)):.2f}x", hit.group(2) == "MET")
        rows.append(("estimators", target, found[0] if found else "not measured",
                     found[1] if found else None))
    doc = load("bench_fit_time")
    facts = fit_time_facts(doc) if doc else None
    if facts:
        per = facts["persistent_over_ideal"]
        rows.append(("bench_fit_time", "persistent 4x straggler: A-BSP within 1.10x of the "
                     "ideal, every model", ", ".join(f"{k} {v:.2f}x" for k, v in per.items()),
                     bool(per) and all(v <= FIT_TIME_PERSISTENT_IDEAL for v in per.values())))
        tr = facts["transient_speedup"]
        rows.append(("bench_fit_time", "transient straggler: A-BSP >= 2.2x faster than BSP",
                     ", ".join(f"{k} {v:.2f}x" for k, v in tr.items()),
                     bool(tr) and all(v >= FIT_TIME_TRANSIENT_SPEEDUP for v in tr.values())))
        fr = facts["frozen_returned"]
        rows.append(("bench_fit_time", "frozen worker: every A-BSP fit returns before the "
                     "worker is resumed", ", ".join(f"{k} {a}/{b}" for k, (a, b) in fr.items()),
                     bool(fr) and all(a == b for a, b in fr.values())))
        rows.append(("bench_fit_time", "frozen worker: within 3x of the unfrozen time",
                     "not in the results file (the script prints it but does not record the "
                     "unfrozen fits)", None))
        no = facts["none_absp_over_bsp"]
        rows.append(("bench_fit_time", "no straggler: A-BSP <= 1.05x BSP, every model",
                     ", ".join(f"{k} {v:.2f}x" for k, v in no.items()),
                     bool(no) and all(v <= FIT_TIME_NO_STRAGGLER for v in no.values())))
    else:
        for target in ("persistent 4x straggler: A-BSP within 1.10x of the ideal",
                       "transient straggler: A-BSP >= 2.2x faster than BSP",
                       "frozen worker: returns before the resume, within 3x of unfrozen",
                       "no straggler: A-BSP <= 1.05x BSP"):
            rows.append(("bench_fit_time", target, "not measured", None))
    doc = load("bench_solvers")
    if doc:
        checks: dict[str, list[bool]] = {}
        for res in doc["results"]:
            for k, v in res["checks"].items():
                checks.setdefault(re.sub(r"^daskabsp (A-BSP|BSP) ", "", k), []).append(v)
        for k, vs in checks.items():
            rows.append(("bench_solvers", k, f"{sum(vs)} of {len(vs)} fits/cases", all(vs)))
    else:
        rows.append(("bench_solvers", "scikit-learn's objective, 1.5x its time, 2x dask-ml, "
                     "A-BSP <= 1.05x BSP", "not measured", None))
    doc = load("scan_throughput")
    for f in ("dense", "csr"):
        s = (doc or {}).get("formats", {}).get(f)
        r = s["ratio_calibrated"]["median"] if s else None
        rows.append(("scan_throughput", f"{f}: calibrated scan >= 0.8x vectorised throughput",
                     "not measured" if r is None else f"{r:.2f}x",
                     None if r is None else r >= doc["target"]))
    return rows


def block_targets() -> str:
    rows = _target_rows()
    met = sum(r[3] is True for r in rows)
    missed = sum(r[3] is False for r in rows)
    lines = [f"{met} targets met, {missed} missed, {len(rows) - met - missed} not measured. "
             "Each row reads `benchmarks/results/<benchmark>.json`; the commit and load "
             "average of each run are in the tables below and in the file.", "",
             "| benchmark | target | measured | verdict |", "|---|---|---|---|"]
    lines += [f"| `{b}` | {t} | {'—' if m == 'not measured' else m} | {verdict(ok)} |"
              for b, t, m, ok in rows]
    return "\n".join(lines)


# -- the headline (README, when it helps) -----------------------------------------------------


def block_headline() -> str:
    doc = load("bench_fit_time")
    if doc is None:
        return not_measured("bench_fit_time", "bench_fit_time.py")
    f = fit_time_facts(doc)
    fr = f["frozen_returned"]
    returned = sum(a for a, _ in fr.values())
    total = sum(b for _, b in fr.values())
    bsp_frozen = f["frozen_bsp_returned"]
    n = doc["environment"].get("cpu_count") or 2
    text = [
        source_line(doc, "bench_fit_time"),
        "",
        f"Measured on {n} worker processes ({n} cores), whole `est.fit(X, y)` at default "
        f"parameters for {len(f['models'])} models (`bench_fit_time.py`):",
        "",
        "* one worker 4x slower throughout: A-BSP fits took "
        f"{span(list(f['persistent_over_ideal'].values()))} the ideal time (what the "
        "remaining capacity allows), BSP/A-BSP "
        f"{span(list(f['persistent_speedup'].values()))};",
        "* a random worker 4x slower each round: BSP/A-BSP "
        f"{span(list(f['transient_speedup'].values()))};",
        f"* a worker frozen for 30 s: {returned} of {total} A-BSP fits returned while it was "
        "frozen" + ("" if bsp_frozen is None else
                    f", {bsp_frozen[0]} of {bsp_frozen[1]} BSP fits did") + ";",
        f"* no straggler: A-BSP took {span(list(f['none_absp_over_bsp'].values()))} BSP's time.",
    ]
    return "\n".join(text)


# -- from the code: parameters, configuration -------------------------------------------------


#: What the constraints alone do not say: values allowed by the constraints but rejected
#: with the other parameters (``_check_param_combinations``).
ACCEPTED = {("LogisticRegression", "l1_ratio"): "`0` or `None`"}


def describe(constraints: list) -> str:
    """The values a parameter accepts, in a stable order (scikit-learn's own string of a
    set of options follows the set's hash order)."""
    from sklearn.utils._param_validation import Hidden, Interval, Options

    parts = []
    for c in constraints:
        if isinstance(c, Hidden):
            continue
        if isinstance(c, Options):
            parts.append(", ".join(f"`{o!r}`" for o in sorted(c.options, key=str)))
        elif c is None:
            parts.append("`None`")
        elif isinstance(c, Interval):
            parts.append(str(c))
        elif c is bool or c == "boolean":
            parts.append("a bool")
        elif c is callable:
            parts.append("a callable")
        elif isinstance(c, str):
            parts.append({"random_state": "an int, a RandomState or `None`",
                          "array-like": "an array-like"}.get(c, c))
        elif isinstance(c, type):
            parts.append(f"a {c.__name__}" if c.__module__ == "builtins" else
                         f"a `{c.__module__.split('.')[0]}.{c.__name__}`")
        else:
            parts.append(str(c))
    return "; ".join(parts)


def block_parameters() -> str:
    from sklearn.cluster import KMeans as SkKMeans
    from sklearn.linear_model import LogisticRegression as SkLogisticRegression
    from sklearn.linear_model import Ridge as SkRidge
    from sklearn.svm import LinearSVC as SkLinearSVC

    from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression, Ridge

    out = []
    for ours, theirs in ((LogisticRegression, SkLogisticRegression), (LinearSVC, SkLinearSVC),
                         (Ridge, SkRidge), (KMeans, SkKMeans)):
        sk = inspect.signature(theirs).parameters
        out += [f"**{ours.__name__}** (scikit-learn's `{theirs.__name__}`)", "",
                "| parameter | default | status |", "|---|---|---|"]
        for name, p in sk.items():
            accepted = ACCEPTED.get((ours.__name__, name)) or describe(
                ours._parameter_constraints[name])
            if name in ours._ignored:
                status = f"**ignored** ({accepted}): {ours._ignored[name]}"
            elif name in ours._rejected:
                status = f"**supported**: {accepted}. Other values **rejected**: " \
                         f"{ours._rejected[name]}"
            else:
                status = f"**supported**: {accepted}"
            out.append(f"| `{name}` | `{p.default!r}` | {status} |")
        out.append("")
    return "\n".join(out).rstrip()


def block_config() -> str:
    lines = (ROOT / "daskabsp" / "daskabsp.yaml").read_text().splitlines()
    rows, comment, stack = [], [], []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("# ").strip())
            continue
        if not stripped:
            continue
        indent = (len(line) - len(line.lstrip())) // 2
        key, _, value = stripped.partition(":")
        stack = [*stack[:indent], key]
        if value.strip():
            rows.append((".".join(stack), value.strip(), " ".join(comment)))
        comment = []
    out = ["| key | default | meaning |", "|---|---|---|"]
    out += [f"| `{k}` | `{v}` | {c.replace('|', '/')} |" for k, v, c in rows]
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "headline": block_headline,
    "targets": block_targets,
    "fit-time": block_fit_time,
    "solvers": block_solvers,
    "solvers-summary": block_solvers_summary,
    "parameters": block_parameters,
    "config": block_config,
}


def render(text: str, cache: dict[str, str]) -> str:
    def fill(m: re.Match) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise KeyError(f"no generator for block {name!r}")
        if name not in cache:
            cache[name] = GENERATORS[name]().rstrip() + "\n"
        return m.group(1) + cache[name] + m.group(4)

    return BLOCK.sub(fill, text)


def stale_blocks(pages=PAGES) -> list[str]:
    """``file: block`` for every block whose text differs from what its sources give."""
    cache: dict[str, str] = {}
    stale = []
    for page in pages:
        text = page.read_text()
        new = render(text, cache)
        if new != text:
            old_blocks = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
            new_blocks = {m.group("name"): m.group("body") for m in BLOCK.finditer(new)}
            where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            stale += [f"{where}: {n}" for n in new_blocks if new_blocks[n] != old_blocks.get(n)]
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="list the blocks that differ from their sources; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_blocks()
        for s in stale:
            print(f"stale: {s}")
        return 1 if stale else 0
    cache: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text()
        new = render(text, cache)
        if new != text:
            page.write_text(new)
            print(f"updated {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
