"""Round overhead against the number of workers: engine BSP, A-BSP and plain Dask side by side.

One tiny partition per worker (``--rows`` rows x ``--features`` features, a fraction of a
millisecond of compute), ``--workers`` single-threaded workers, as worker processes and (with
``--kind threads`` or ``both``) as threads of the benchmark's own process, which takes the
number of processes out of the picture. For each cluster, modes alternate in blocks (the order
rotates every block): plain Dask (``client.submit`` + ``gather`` of no-op tasks on the same
chunk futures, as a coroutine on the client's loop, the way the engine's driver runs), an
engine fit under BSP, one under A-BSP (the default, ``sync="absp"``), one under A-BSP as
published (``ABSP.published()``) and one under the default without helpers
(``ABSP(helpers=False)``: its quorum of workers, grace and balanced rounds, no second wave of
tasks), ``--rounds`` rounds each plus a dropped warm-up round (``--modes`` also takes
``absp-help50``: the default with ``daskabsp.help-above`` at 50 ms). The
engine's per-round time is the difference of consecutive ``history.wall_time`` values (the
whole driver loop). Also measured: the CPU seconds of the event-loop thread that the scheduler,
the client and the engine's driver share in a LocalCluster, per round ("loop CPU"), which is the
coordination cost itself, less noisy than wall time when 64 processes share 2 cores.

With more worker processes than cores, absolute times measure the machine's oversubscription:
read every engine figure relative to plain Dask in the same block. Slopes are least-squares fits
of the median round time (and of the loop CPU) against the number of workers, per mode.
Target (issue 24): 16 worker processes, A-BSP <= 1.2x plain Dask and <= 1.1x engine BSP.
"""

from __future__ import annotations

import os
import threading
import time

import dask
import numpy as np
from _common import (
    load_note,
    local_cluster,
    logistic_data,
    parse_args,
    spread,
    summary,
    table,
    verdict,
    warm_up,
    write_json,
)
from bench_round_overhead import _plain_async
from distributed import futures_of

import daskabsp
from daskabsp import ABSP

MODES = ("plain", "bsp", "absp", "absp-paper", "absp-nohelp")
#: Engine modes: the sync model and the settings it runs with.
SYNCS = {"bsp": ("bsp", {}), "absp": ("absp", {}), "absp-paper": (ABSP.published(), {}),
         "absp-nohelp": (ABSP(helpers=False), {}),
         "absp-help50": ("absp", {"daskabsp.help-above": "50ms"})}
TARGET_PLAIN, TARGET_BSP, TARGET_WORKERS = 1.2, 1.1, 16


def add_options(p) -> None:
    p.add_argument("--workers", default="2,8,16,32,64",
                   help="comma-separated worker counts (one partition each)")
    p.add_argument("--kind", choices=("processes", "threads", "both"), default="both",
                   help="worker processes, workers as threads of this process, or both")
    p.add_argument("--blocks", type=int, default=None, help="interleaved blocks of the modes")
    p.add_argument("--rounds", type=int, default=None, help="measured rounds per block and mode")
    p.add_argument("--rows", type=int, default=2000, help="rows per partition")
    p.add_argument("--features", type=int, default=10)
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"modes to run, among plain, {', '.join(SYNCS)}")


class LoopClock:
    """CPU seconds of the event-loop thread of ``client``'s in-process scheduler (a
    LocalCluster's scheduler, client and engine driver share it), read from this thread
    without a message to the loop."""

    def __init__(self, client) -> None:
        tid = client.run_on_scheduler(threading.get_ident)
        self._clock = time.pthread_getcpuclockid(tid)

    def __call__(self) -> float:
        return time.clock_gettime(self._clock)


def _chunk_futures(A) -> list:
    by_key = {f.key: f for f in futures_of(A)}
    return [by_key[k] for k in dask.core.flatten(A.__dask_keys__())]


def plain_rounds(client, X, y, n_rounds: int) -> list[float]:
    """Per-round wall time of plain submit + gather, as a coroutine on the client's loop."""
    params = np.zeros(X.shape[1] + 1)
    return client.sync(_plain_async, client, _chunk_futures(X), _chunk_futures(y), params,
                       n_rounds)


class LoopMarks(daskabsp.RoundCallback):
    """Reads the loop thread's CPU clock at the end of each round (in the caller's thread:
    the loop only hands the call over, and the fit's clock leaves the callback out)."""

    def __init__(self, clock: LoopClock | None) -> None:
        self.clock = clock
        self.marks: list[float] = []

    def on_round_end(self, info) -> None:
        if self.clock is not None:
            self.marks.append(self.clock())


def engine_fit(client, X, y, mode: str, n_rounds: int, clock: LoopClock | None = None):
    """An engine fit of ``n_rounds`` rounds under ``mode``: its history, and the loop CPU of
    each round after the first (empty without ``clock``)."""
    sync, settings = SYNCS[mode]
    marks = LoopMarks(clock)
    with dask.config.set(settings):
        h = daskabsp.fit(daskabsp.LogisticGD(), X, y, sync=sync, max_iter=n_rounds,
                         tol=None, client=client, callback=marks).history
    return h, np.diff(marks.marks).tolist()


def engine_rounds(client, X, y, mode: str, n_rounds: int) -> list[float]:
    """Per-round wall time of an engine fit under ``mode``."""
    return np.diff(engine_fit(client, X, y, mode, n_rounds)[0].wall_time.values,
                   prepend=0.0).tolist()


def run_mode(client, clock: LoopClock, data, mode: str, n_rounds: int) -> tuple:
    """One block of ``mode``: per-round wall times (warm-up dropped), the loop's median CPU
    per round and the share of rounds that ran helpers."""
    if mode == "plain":
        c0 = clock()
        t = plain_rounds(client, *data, n_rounds + 1)
        return t[1:], (clock() - c0) / (n_rounds + 1), 0.0
    h, cpu = engine_fit(client, *data, mode, n_rounds + 1, clock)
    helped = float((h.helped_rows.values[1:].sum(axis=1) > 0).mean())
    return np.diff(h.wall_time.values).tolist(), float(np.median(cpu)), helped


def measure(kind: str, n: int, args, modes, blocks: int, rounds: int) -> dict:
    """All blocks of all modes on one cluster of ``n`` workers."""
    per_round = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    helped = {m: [] for m in modes}
    with local_cluster(n, 1, args.event_loop, processes=kind == "processes") as client:
        warm_up(client)
        clock = LoopClock(client)
        data = logistic_data(client, n * args.rows, args.features, n, args.seed)
        for b in range(blocks):
            k = b % len(modes)
            for mode in modes[k:] + modes[:k]:
                t, c, hp = run_mode(client, clock, data, mode, rounds)
                per_round[mode].append(t)
                cpu[mode].append(c)
                helped[mode].append(hp)
    return {"per_round_s": per_round, "loop_cpu_s": cpu, "helped_share": helped}


def ratios(res: dict, mode: str, base: str) -> dict:
    """Per block, median round of ``mode`` over median round of ``base``; summarised."""
    pr = res["per_round_s"]
    return summary([np.median(a) / np.median(b) for a, b in zip(pr[mode], pr[base],
                                                                  strict=True)])


def slope(ns: list[int], values: list[float]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``values`` against ``ns``."""
    if len(ns) < 2:
        return float("nan"), float("nan")
    s, c = np.polyfit(np.asarray(ns, float), np.asarray(values, float), 1)
    return float(s), float(c)


def report(kind: str, results: dict[int, dict], modes) -> tuple[list, dict, bool | None]:
    """Table rows of one kind of worker, the fitted slopes, and the target's verdict."""
    rows, medians, cpus, met = [], {m: [] for m in modes}, {m: [] for m in modes}, None
    ns = sorted(results)
    for n in ns:
        res = results[n]
        for m in modes:
            pooled = summary([v for t in res["per_round_s"][m] for v in t])
            c = summary(res["loop_cpu_s"][m])
            medians[m].append(pooled["median"] * 1e3)
            cpus[m].append(c["median"] * 1e3)
            row = [f"{kind} {n:>2} workers, {m}", pooled["n"], f"{pooled['median'] * 1e3:.1f}",
                   f"{pooled['p90'] * 1e3:.1f}", f"{c['median'] * 1e3:.1f}",
                   f"{np.mean(res['helped_share'][m]):.0%}" if m != "plain" else ""]
            if m == "plain":
                rows.append([*row, "", "", ""])
                continue
            rp = ratios(res, m, "plain")
            rb = ratios(res, m, "bsp") if m != "bsp" and "bsp" in modes else None
            mark = ""
            if kind == "processes" and n == TARGET_WORKERS and m.startswith("absp") and rb:
                ok = rp["median"] <= TARGET_PLAIN and rb["median"] <= TARGET_BSP
                mark = verdict(ok) if m == "absp" else f"({verdict(ok).lower()})"
                if m == "absp":
                    met = ok
            rows.append([*row, spread(rp), spread(rb) if rb else "", mark])
    fits = {m: {"round_ms_per_worker": slope(ns, medians[m]),
                "loop_cpu_ms_per_worker": slope(ns, cpus[m])} for m in modes}
    return rows, fits, met


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    load0 = os.getloadavg()[0]
    blocks = args.blocks or (2 if args.quick else 4)
    rounds = args.rounds or (5 if args.quick else 30)
    ns = [int(n) for n in args.workers.split(",")]
    modes = tuple(m for m in args.modes.split(",") if m)
    kinds = ("processes", "threads") if args.kind == "both" else (args.kind,)
    out: dict = {"rows_per_partition": args.rows, "n_features": args.features,
                 "blocks": blocks, "rounds": rounds, "kinds": {}}
    all_rows, slopes, met = [], {}, None
    for kind in kinds:
        results = {}
        for n in ns:
            t0 = time.perf_counter()
            results[n] = measure(kind, n, args, modes, blocks, rounds)
            print(f"# {kind} {n} workers: {time.perf_counter() - t0:.0f} s", flush=True)
        rows, fits, m = report(kind, results, modes)
        met = m if m is not None else met
        all_rows += rows
        slopes[kind] = fits
        out["kinds"][kind] = {"results": {str(n): r for n, r in results.items()}, "slopes": fits}

    print(f"Round overhead against workers: one partition of {args.rows} rows x "
          f"{args.features} features per single-threaded worker, {blocks} interleaved blocks "
          f"x {rounds} rounds per mode")
    print(table(["workers, mode", "rounds", "median ms", "p90 ms", "loop CPU ms/round",
                 "helped", "/plain [IQR]", "/bsp [IQR]",
                 f"<= {TARGET_PLAIN:g}x plain, {TARGET_BSP:g}x bsp"], all_rows))
    print("Fitted slope of the median round against workers (ms per added worker), and "
          "intercept:")
    print(table(["kind, mode", "wall ms/worker", "wall intercept ms", "loop CPU ms/worker",
                 "loop CPU intercept ms"],
                [[f"{k} {m}", f"{f['round_ms_per_worker'][0]:.2f}",
                  f"{f['round_ms_per_worker'][1]:.1f}", f"{f['loop_cpu_ms_per_worker'][0]:.3f}",
                  f"{f['loop_cpu_ms_per_worker'][1]:.2f}"]
                 for k, fits in slopes.items() for m, f in fits.items()]))
    print("ratios: per block, median engine round / median plain (or BSP) round of the same "
          "block; median [IQR] over blocks. loop CPU: CPU time of the event-loop thread "
          "shared by the scheduler, the client and the engine's driver, per round (engine: "
          "the median of its rounds, read by a round callback). helped: share of rounds "
          "whose leftovers helpers scanned (a second wave of tasks). The target is judged "
          "for the default A-BSP; the other A-BSP variants' verdicts are in parentheses. "
          "With more worker processes than the 2 cores, absolute times measure "
          "oversubscription: compare modes within a row group.")
    out.update(target_met=met, workers=ns)
    print(load_note(load0))
    print(f"wrote {write_json('scale', args, out)}")


if __name__ == "__main__":
    main()
