"""Round overhead: the wall time of one engine round with tiny compute against one round of
plain ``client.submit`` + ``client.gather`` of no-op tasks on the same chunk futures.

Setting: 4 workers x 1 thread; 4 and 8 partitions of ``--rows`` rows x ``--features`` features
(a fraction of a millisecond of compute per task); no stragglers. Issue 13's setting adds
``--many-partitions`` (1 000) partitions of ``--many-rows`` (20) rows each, with fewer blocks
and rounds (``--many-blocks``, ``--many-rounds``): a round there is dominated by Dask's cost per
task, reported as ms per partition, and the ratio of a fit's later rounds to its earlier ones
shows whether the round time grows. Three modes alternate in
blocks (the order rotates every block): an engine fit under A-BSP, an engine fit under BSP, and
the plain loop, ``--rounds`` rounds each plus one dropped warm-up round. The engine's per-round
time is the difference of consecutive ``history.wall_time`` values (so it covers the whole
driver loop: submit, wait, gather, aggregate, update, bookkeeping; the fit's one-off set-up and
tear-down are reported separately). A plain round submits one task per partition taking the
partition's X and y chunk futures and the parameter vector, returning a statistics-sized array,
and gathers them. Target: engine (A-BSP) / plain <= 1.15x. ``--page open`` runs it all with
the daskabsp dashboard page open in headless Chromium (compare with a ``--page closed`` run).
"""

from __future__ import annotations

import os
import time
import uuid

import dask
import numpy as np
from _common import (
    add_page_option,
    dashboard_page,
    load_note,
    local_cluster,
    logistic_data,
    noop,
    parse_args,
    spread,
    summary,
    table,
    verdict,
    warm_up,
    write_json,
)
from distributed import futures_of

import daskabsp

TARGET = 1.15
MODES = ("absp", "bsp", "plain", "plain-async")
BASELINES = ("plain", "plain-async")
LABELS = {"plain": "plain submit+gather (sync API)",
          "plain-async": "plain submit+gather (async, on the loop)"}


def add_options(p) -> None:
    p.add_argument("--blocks", type=int, default=None, help="blocks of (A-BSP, BSP, plain)")
    p.add_argument("--rounds", type=int, default=None, help="measured rounds per block and mode")
    p.add_argument("--rows", type=int, default=1000, help="rows per partition")
    p.add_argument("--features", type=int, default=10)
    p.add_argument("--many-partitions", type=int, default=1000,
                   help="partitions of the many-partition setting (0: leave it out)")
    p.add_argument("--many-rows", type=int, default=20,
                   help="rows per partition in the many-partition setting")
    p.add_argument("--many-blocks", type=int, default=None,
                   help="blocks of the many-partition setting")
    p.add_argument("--many-rounds", type=int, default=None,
                   help="measured rounds per block and mode in the many-partition setting")
    add_page_option(p)


def _growth(per_block: list[list[float]]) -> dict:
    """Per fit (block), the median of its later half of rounds over the median of its
    earlier half: about 1 when nothing grows from round to round."""
    return summary([float(np.median(t[len(t) // 2:]) / np.median(t[:len(t) // 2]))
                    for t in per_block if len(t) >= 2])


def _chunk_futures(A) -> list:
    by_key = {f.key: f for f in futures_of(A)}
    return [by_key[k] for k in dask.core.flatten(A.__dask_keys__())]


def plain_rounds(client, X, y, n_rounds: int) -> list[float]:
    """Per-round wall time of plain submit + gather (synchronous client API) on the chunk
    futures of ``X``, ``y``: what a user's own loop would do."""
    xs, ys = _chunk_futures(X), _chunk_futures(y)
    params = np.zeros(X.shape[1] + 1)
    uid = uuid.uuid4().hex[:8]
    times = []
    for r in range(n_rounds):
        t0 = time.perf_counter()
        futs = [client.submit(noop, xs[p], ys[p], params, key=(f"plain-noop-{uid}-{r:05d}", p))
                for p in range(len(xs))]
        client.gather(futs)
        del futs
        times.append(time.perf_counter() - t0)
    return times


async def _plain_async(client, xs, ys, params, n_rounds: int) -> list[float]:
    uid = uuid.uuid4().hex[:8]
    times = []
    for r in range(n_rounds):
        t0 = time.perf_counter()
        futs = [client.submit(noop, xs[p], ys[p], params, key=(f"plain-noop-{uid}-{r:05d}", p))
                for p in range(len(xs))]
        await client.gather(futs)
        del futs
        times.append(time.perf_counter() - t0)
    return times


def plain_async_rounds(client, X, y, n_rounds: int) -> list[float]:
    """The same loop run as a coroutine on the client's event loop, as the engine's driver
    runs: no thread hand-off per call, the cheapest round Dask offers."""
    params = np.zeros(X.shape[1] + 1)
    return client.sync(_plain_async, client, _chunk_futures(X), _chunk_futures(y), params,
                       n_rounds)


def engine_rounds(client, X, y, sync: str, n_rounds: int) -> tuple[list[float], float]:
    """Per-round wall time of an engine fit, and the fit's time outside its rounds."""
    t0 = time.perf_counter()
    res = daskabsp.fit(daskabsp.LogisticGD(), X, y, sync=sync, max_iter=n_rounds, tol=None,
                       client=client)
    total = time.perf_counter() - t0
    wall = res.history.wall_time.values
    return np.diff(wall, prepend=0.0).tolist(), total - float(wall[-1])


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    load0 = os.getloadavg()[0]
    blocks = args.blocks or (3 if args.quick else 12)
    rounds = args.rounds or (8 if args.quick else 20)
    # (partitions, rows per partition, blocks, rounds per block and mode)
    settings = [(4, args.rows, blocks, rounds), (8, args.rows, blocks, rounds)]
    if args.many_partitions:
        settings.append((args.many_partitions, args.many_rows,
                         args.many_blocks or (1 if args.quick else 3),
                         args.many_rounds or (3 if args.quick else 4)))
    Ps = [P for P, *_ in settings]
    per_round = {(P, m): [] for P in Ps for m in MODES}  # list of per-block lists
    setup = {(P, m): [] for P in Ps for m in ("absp", "bsp")}

    with local_cluster(4, 1, args.event_loop) as client, dashboard_page(client, args.page):
        warm_up(client)
        data = {P: logistic_data(client, P * n, args.features, P, args.seed)
                for P, n, _b, _r in settings}
        for b in range(max(sb for _P, _n, sb, _r in settings)):
            for P, _n, setting_blocks, setting_rounds in settings:
                if b >= setting_blocks:
                    continue
                k = b % len(MODES)
                for mode in MODES[k:] + MODES[:k]:
                    if mode == "plain":
                        t = plain_rounds(client, *data[P], setting_rounds + 1)
                    elif mode == "plain-async":
                        t = plain_async_rounds(client, *data[P], setting_rounds + 1)
                    else:
                        t, extra = engine_rounds(client, *data[P], mode, setting_rounds + 1)
                        setup[P, mode].append(extra)
                    per_round[P, mode].append(t[1:])

    rows, out = [], {"settings": {}}
    met = True
    for P, n_rows, setting_blocks, setting_rounds in settings:
        med = {m: [float(np.median(t)) for t in per_round[P, m]] for m in MODES}
        res = {"rows_per_partition": n_rows, "blocks": setting_blocks,
               "rounds": setting_rounds,
               "per_round_s": {m: per_round[P, m] for m in MODES},
               "fit_setup_teardown_s": {m: setup[P, m] for m in ("absp", "bsp")}}
        for m in MODES:
            pooled = summary([v for t in per_round[P, m] for v in t])
            res[f"{m}_round_s"] = pooled
            res[f"{m}_growth_late_over_early"] = _growth(per_round[P, m])
            row = [f"{P} partitions x {n_rows} rows, {LABELS.get(m, 'engine ' + m.upper())}",
                   pooled["n"], f"{pooled['median'] * 1e3:.1f}",
                   f"{pooled['p90'] * 1e3:.1f}", f"{pooled['median'] * 1e3 / P:.3f}",
                   spread(res[f"{m}_growth_late_over_early"])]
            if m in BASELINES:
                rows.append([*row, "", "", "", ""])
                continue
            ratios = {}
            for base in BASELINES:
                ratios[base] = summary([e / p for e, p in zip(med[m], med[base], strict=True)])
                res[f"ratio_{m}_over_{base}"] = ratios[base]
            # The target is judged against the faster (stricter) baseline, at the partition
            # counts it was set for (issue 13's setting reports, it has no target).
            ok = max(r["median"] for r in ratios.values()) <= TARGET
            judged = m == "absp" and P in (4, 8)
            if judged:
                met &= ok
            rows.append([*row, f"{summary(setup[P, m])['median'] * 1e3:.0f}",
                         spread(ratios["plain"]), spread(ratios["plain-async"]),
                         verdict(ok) if judged else "(info)"])
        out["settings"][str(P)] = res

    print(f"Round overhead: tiny compute ({args.rows} rows x {args.features} features per "
          f"partition; {args.many_rows} rows in the {args.many_partitions}-partition setting), "
          f"4 workers x 1 thread, {blocks} interleaved blocks x {rounds} rounds "
          + (f"({settings[-1][2]} x {settings[-1][3]} with {args.many_partitions} partitions)"
             if args.many_partitions else "") + f", dashboard page {args.page}")
    print(table(["mode", "rounds", "median ms", "p90 ms", "ms/partition",
                 "late/early [IQR]", "fit set-up ms", "/plain sync [IQR]",
                 "/plain async [IQR]", f"target <={TARGET:g}x"], rows))
    print("ratios: per block, median engine round / median plain round of the same block; "
          "median [IQR] over blocks; the target is judged against the faster baseline, for 4 "
          "and 8 partitions. ms/partition: median round / partitions. late/early: per fit, "
          "median of its second half of rounds / first half (about 1: nothing grows per "
          "round). fit set-up: fit wall time outside its rounds (plugin and placement checks, "
          "history).")
    out.update(page=args.page, rows_per_partition=args.rows, n_features=args.features,
               blocks=blocks, rounds=rounds, target=TARGET, target_met=met)
    print(load_note(load0))
    print(f"wrote {write_json('round_overhead', args, out)}")


if __name__ == "__main__":
    main()
