"""Harvest latency: how long after the first partition of a round finishes does the scheduler
see the last (partial) result, under A-BSP; and, for contrast, how long BSP waits from the first
finish to the last in the same setting.

Setting: 4 workers x 1 thread, 4 and 8 partitions of a logistic regression, three of the four
workers emulated ``--slow`` times slower (``daskabsp.slow_workers``), so every round has
stragglers still running when the fastest partition finishes. A-BSP and BSP fits alternate
(blocks of ``--rounds`` rounds each, the order swapped every block); round 0 of every fit (chunk
calibration) is dropped.

A-BSP latency is the engine's own record (``history.harvest_latency``: scheduler time of the
quorum-th ``processing -> memory`` to the round settling, i.e. the last partial result, every
other task having been reported by its worker as still queued when the stop arrived, so it
computes nothing and is not waited for). BSP's wait (first to last result) and, for A-BSP, a
cross-check (first to last result of the tasks that ran) come from an independent scheduler
plugin (``_common.FinishTimes``). Target: A-BSP median <= 10 ms.

For scale, rounds of the same shape with nothing to compute (``floor_round``) measure what Dask
alone costs between the first finish and the round settling on the same signal path: the
stop's trip, a task's return, the result's (and idle report's) trip.
"""

from __future__ import annotations

import os

import dask
import numpy as np
from _common import (
    FinishTimes,
    StopReceipts,
    chunk_homes,
    floor_first,
    floor_queued,
    floor_running,
    load_note,
    local_cluster,
    logistic_data,
    parse_args,
    round_finishes,
    spread,
    stop_receipts,
    summary,
    table,
    verdict,
    warm_up,
    workers,
    write_json,
)

import daskabsp

TARGET_MS = 10.0


def add_options(p) -> None:
    p.add_argument("--blocks", type=int, default=None, help="A-BSP/BSP fit pairs per setting")
    p.add_argument("--rounds", type=int, default=None, help="measured rounds per fit")
    p.add_argument("--rows", type=int, default=None, help="total rows")
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--slow", type=float, default=10.0, help="straggler slowdown factor")
    p.add_argument("--chunk-target", type=float, default=None,
                   help="seconds per chunk (default: the engine's daskabsp.chunk-target)")


def one_fit(client, X, y, sync, rounds, chunk_target=None):
    """Run one fit of ``rounds`` measured rounds (+ the dropped round 0); return its records."""
    res = daskabsp.fit(daskabsp.LogisticGD(), X, y, sync=sync, max_iter=rounds + 1, tol=None,
                       chunk_target=chunk_target, client=client)
    h = res.history
    fit_id = h.attrs["fit_id"]
    # Tasks the round did not wait for (reported idle; NaN start) may still have run after it
    # settled: leave their results out of the observer's span.
    waited = ~np.isnan(h.task_start.values)
    finishes = [[f for f in fs if waited[r, f["partition"]]]
                for r, fs in enumerate(round_finishes(client, fit_id, res.n_iter))][1:]
    spans = [max(f["seen"] for f in fs) - min(f["seen"] for f in fs) if fs else float("nan")
             for fs in finishes]
    engine = (h.harvest_latency.values[1:].tolist() if "harvest_latency" in h
              else [float("nan")] * len(spans))
    return {
        "fit_id": fit_id,
        "observer_s": spans,
        "engine_s": engine,
        "finishes": finishes,
        "rows": h.rows.values[1:].tolist(),
        "partition_size": h.partition_size.values.tolist(),
        "round_s": np.diff(h.wall_time.values).tolist(),
        "workers": h.worker.values[1:].tolist(),
        "idle": (~waited[1:]).tolist(),
    }


def floor_round(client, addrs: list[str], n_partitions: int, r: int) -> float:
    """One round of Dask's floor for the harvest: the same shape as an engine round (one task
    per partition, partition ``p`` on worker ``p % 4``, the engine's plugins stopping the round
    at the first finish and settling it) but with nothing to compute: the first task returns
    after 30 ms, the others in flight block on the stop flag and return the moment it is set,
    and queued ones are reported idle by their workers (if one runs, it returns at once).
    Returns first finish -> round settled, on the scheduler, as the engine records it."""
    fid = "floor"
    prefix = f"daskabsp-floor-{fid}-{r:05d}"
    rid = f"{fid}:{r}"
    tasks = []
    for p in range(n_partitions):
        w = addrs[p % len(addrs)]
        if p == 0:
            fn = floor_first
        elif p < len(addrs) or p % len(addrs) == 0:  # in flight (the fast worker's second
            fn = floor_running                       # partition starts as the first ends)
        else:
            fn = floor_queued
        args = (rid, 0.03) if fn is floor_first else (rid,)
        tasks.append((fn, args, (prefix, p), w))
    with dask.annotate(daskabsp={"fit": fid, "round": str(r), "quorum": 1}):
        futs = [client.submit(fn, *a, key=k, workers=[w], pure=False) for fn, a, k, w in tasks]
    idle = dict(client.sync(client.scheduler.daskabsp_settled, round=rid) or ())
    got = client.gather([f for f in futs if f.key not in idle])
    if min(got) < 0:
        raise RuntimeError(f"a floor task did not see its round's stop: {got}")
    del futs
    info = client.sync(client.scheduler.daskabsp_round_info, fit=fid)[rid]
    return info["last_time"] - info["quorum_time"]


def prepare(client, args, n_rows: int, settings) -> tuple[list[str], dict, dict]:
    """Set a fresh cluster up for the measurements: the engine imported and its plugins
    installed, the observer registered, one data set per partition count. Returns the worker
    addresses, ``{n_partitions: (X, y)}`` and the slowdowns (every worker but the first)."""
    warm_up(client)
    client.register_plugin(FinishTimes())
    addrs = workers(client)
    data = {P: logistic_data(client, n_rows, args.features, P, args.seed) for P in settings}
    one_fit(client, *data[settings[0]], "absp", 0)  # installs the engine's plugins
    return addrs, data, {a: args.slow for a in addrs[1:]}


def breakdown(fit: dict, receipts: dict) -> list[tuple[float, float, float]]:
    """Per round, the harvest latency split at the round's last result: first finish (on the
    scheduler) -> stop message received by that task's worker -> the task's compute end ->
    its result seen by the scheduler."""
    out = []
    for r, fs in enumerate(fit["finishes"], start=1):
        if not fs:
            continue
        first = min(f["seen"] for f in fs)
        last = max(fs, key=lambda f: f["seen"])
        got = receipts.get((last["worker"], f"{fit['fit_id']}:{r}"))
        if got is None or last["stop"] is None:
            continue
        out.append((got - first, last["stop"] - got, last["seen"] - last["stop"]))
    return out


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    load0 = os.getloadavg()[0]
    blocks = args.blocks or (2 if args.quick else 6)
    rounds = args.rounds or (5 if args.quick else 8)
    n_rows = args.rows or (200_000 if args.quick else 800_000)
    settings = (4, 8)

    with local_cluster(4, 1, args.event_loop) as client:
        addrs, data, slow = prepare(client, args, n_rows, settings)
        client.register_plugin(StopReceipts())
        homes = {P: chunk_homes(client, data[P][0]) for P in settings}
        fast = addrs[0]
        fits = {(P, s): [] for P in settings for s in ("absp", "bsp")}
        floor = {P: [] for P in settings}
        n_floor = 0
        with daskabsp.slow_workers(client, slow):
            for b in range(blocks):
                for P in settings:
                    order = ("absp", "bsp") if b % 2 == 0 else ("bsp", "absp")
                    for sync in order:
                        fits[P, sync].append(one_fit(client, *data[P], sync, rounds,
                                                     args.chunk_target))
                    for _ in range(rounds):
                        floor[P].append(floor_round(client, addrs, P, n_floor))
                        n_floor += 1
        receipts = stop_receipts(client)

    rows, out = [], {"settings": {}}
    met = True
    for P in settings:
        a_fits, b_fits = fits[P, "absp"], fits[P, "bsp"]
        lat = [v for f in a_fits for v in f["engine_s"]]
        lat_obs = [v for f in a_fits for v in f["observer_s"]]
        wait_bsp = [v for f in b_fits for v in f["observer_s"]]
        # Paired ratios: round i of the A-BSP fit and round i of the BSP fit of the same block.
        ratios = [bw / al for fa, fb in zip(a_fits, b_fits, strict=True)
                  for al, bw in zip(fa["engine_s"], fb["observer_s"], strict=True) if al > 0]
        slow_rows = [r / n for f in a_fits
                     for rr, ran_on in zip(f["rows"], f["workers"], strict=True)
                     for r, w, n in zip(rr, ran_on, f["partition_size"], strict=True)
                     if w != fast]
        straggler_frac = float(np.mean(slow_rows)) if slow_rows else 0.0
        s_lat, s_obs, s_bsp, s_ratio, s_floor = (
            summary(v) for v in (lat, lat_obs, wait_bsp, ratios, floor[P]))
        parts = [summary(v) for v in zip(*[b for f in a_fits for b in breakdown(f, receipts)],
                                         strict=True)]
        ok = s_lat["median"] * 1e3 <= TARGET_MS
        met &= ok
        rows.append([f"{P} partitions", s_lat["n"], f"{s_lat['median'] * 1e3:.1f}",
                     f"{s_lat['p90'] * 1e3:.1f}", f"{s_obs['median'] * 1e3:.1f}",
                     f"{s_floor['median'] * 1e3:.1f} [{s_floor['p90'] * 1e3:.1f}]",
                     *(f"{b['median'] * 1e3:.1f}" for b in parts),
                     f"{s_bsp['median'] * 1e3:.0f}", f"{s_bsp['p90'] * 1e3:.0f}",
                     spread(s_ratio, fmt="{:.0f}"), f"{straggler_frac:.1%}", verdict(ok)])
        out["settings"][str(P)] = {
            "absp_harvest_latency_s": s_lat, "absp_observer_latency_s": s_obs,
            "absp_breakdown_s": dict(zip(("stop_delivery", "to_task_end", "result_delivery"),
                                         parts, strict=True)),
            "dask_floor_s": s_floor, "bsp_wait_s": s_bsp,
            "ratio_bsp_wait_over_absp_latency": s_ratio,
            "straggler_rows_fraction_mean": straggler_frac,
            "chunk_homes": homes[P], "fits": {"absp": a_fits, "bsp": b_fits},
        }

    headers = ["setting", "rounds", "A-BSP med ms", "A-BSP p90 ms", "observer med ms",
               "Dask floor med [p90] ms",
               "stop->worker", "->task end", "->scheduler",
               "BSP wait med ms", "BSP p90 ms", "BSP/A-BSP [IQR]", "straggler rows",
               f"target med<={TARGET_MS:g}ms"]
    print(f"Harvest latency: first finish -> round settled on the scheduler; 4 workers x 1 "
          f"thread, 3 workers {args.slow:g}x slower, {n_rows} rows x {args.features} features, "
          f"{blocks} A-BSP/BSP fit pairs x {rounds} rounds per setting, {args.event_loop} "
          "event loop")
    print(table(headers, rows))
    print("A-BSP: engine's history.harvest_latency (first finish -> round settled); observer:"
          " an independent scheduler plugin, first -> last result of the tasks the round waited"
          " for; Dask floor: rounds of the same shape whose tasks compute nothing (in-flight"
          " tasks block on the stop flag and return when it is set, queued ones are reported"
          " idle), interleaved with the fits: what Dask's messaging alone costs;"
          " the next three columns split A-BSP's latency at the round's last result (medians):"
          " first finish -> stop received by that worker -> task compute end -> result seen by"
          " the scheduler. straggler rows: mean fraction of its partition a slowed partition "
          "processed per A-BSP round.")
    out.update(fast_worker=fast, slow_workers=slow, n_rows=n_rows, n_features=args.features,
               blocks=blocks, rounds=rounds, target_ms=TARGET_MS, target_met=met)
    print(load_note(load0))
    print(f"wrote {write_json('harvest_latency', args, out)}")


if __name__ == "__main__":
    main()
