"""Event loop: harvest latency and Dask's floor under uvloop and tornado, side by side.

Same setting as ``bench_harvest_latency.py`` (4 workers x 1 thread, three workers emulated
``--slow`` times slower, 4 and 8 partitions, A-BSP fits of ``--rounds`` rounds, plus rounds of
the same shape that compute nothing). The event loop is fixed when a cluster starts, so each
block starts one cluster per loop, in alternating order, and the ratio is taken per block.
"""

from __future__ import annotations

import os

from _common import load_note, local_cluster, parse_args, spread, summary, table, write_json
from bench_harvest_latency import floor_round, one_fit, prepare

import daskabsp

LOOPS = ("tornado", "uvloop")


def add_options(p) -> None:
    p.add_argument("--blocks", type=int, default=None, help="cluster pairs")
    p.add_argument("--fits", type=int, default=2, help="A-BSP fits per setting and cluster")
    p.add_argument("--rounds", type=int, default=8, help="measured rounds per fit")
    p.add_argument("--rows", type=int, default=None, help="total rows")
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--slow", type=float, default=10.0, help="straggler slowdown factor")


def one_block(loop: str, args, n_rows: int, settings) -> dict:
    """Start a cluster running ``loop``; return its latencies per setting (seconds)."""
    out = {}
    with local_cluster(4, 1, loop) as client:
        addrs, data, slow = prepare(client, args, n_rows, settings)
        n_floor = 0
        with daskabsp.slow_workers(client, slow):
            for P in settings:
                lat = [v for _ in range(args.fits)
                       for v in one_fit(client, *data[P], "absp", args.rounds)["engine_s"]]
                floor = []
                for _ in range(args.fits * args.rounds):
                    floor.append(floor_round(client, addrs, P, n_floor))
                    n_floor += 1
                out[P] = {"absp": lat, "floor": floor}
    return out


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    load0 = os.getloadavg()[0]
    blocks = args.blocks or (1 if args.quick else 4)
    n_rows = args.rows or (200_000 if args.quick else 800_000)
    settings = (4, 8)
    runs = {loop: [] for loop in LOOPS}
    for b in range(blocks):
        for loop in (LOOPS if b % 2 == 0 else LOOPS[::-1]):
            runs[loop].append(one_block(loop, args, n_rows, settings))

    rows, out = [], {"settings": {}}
    for P in settings:
        for what in ("absp", "floor"):
            s = {loop: summary([v for blk in runs[loop] for v in blk[P][what]]) for loop in LOOPS}
            ratio = summary([
                summary(t[P][what])["median"] / summary(u[P][what])["median"]
                for t, u in zip(runs["tornado"], runs["uvloop"], strict=True)])
            label = "A-BSP harvest" if what == "absp" else "Dask floor"
            rows.append([f"{P} partitions, {label}", s["tornado"]["n"],
                         f"{s['tornado']['median'] * 1e3:.1f}", f"{s['tornado']['p90'] * 1e3:.1f}",
                         f"{s['uvloop']['median'] * 1e3:.1f}", f"{s['uvloop']['p90'] * 1e3:.1f}",
                         spread(ratio)])
            out["settings"][f"{P}-{what}"] = {"tornado_s": s["tornado"], "uvloop_s": s["uvloop"],
                                             "ratio_tornado_over_uvloop": ratio}
    print(f"Event loop: first finish -> last result on the scheduler (ms); 4 workers x 1 "
          f"thread, 3 workers {args.slow:g}x slower, {n_rows} rows x {args.features} features, "
          f"{blocks} cluster pairs x {args.fits} fits x {args.rounds} rounds per setting")
    print(table(["setting", "rounds", "tornado med", "tornado p90", "uvloop med", "uvloop p90",
                 "tornado/uvloop, per block [IQR]"], rows))
    out.update(n_rows=n_rows, blocks=blocks, runs=runs)
    print(load_note(load0))
    print(f"wrote {write_json('event_loop', args, out)}")


if __name__ == "__main__":
    main()
