"""Where a round's coordination time goes: a profile of the event-loop thread that the
scheduler, the client and the engine's driver share in a LocalCluster.

One partition of ``--rows`` rows per single-threaded worker (``--workers`` worker processes),
a warm-up fit, then ``--rounds`` rounds of each ``--modes`` mode under ``cProfile`` enabled on
that thread only (the workers are other processes). Prints, per mode, the loop thread's CPU
per round, its share by package (daskabsp, distributed, tornado/asyncio, the rest), and the
daskabsp functions with the most time per round (own time, and cumulative). A diagnostic,
not a benchmark: cProfile inflates every call, so compare modes with each other.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import time
from pathlib import Path

from _common import local_cluster, logistic_data, parse_args, table, warm_up
from bench_scale import engine_rounds, plain_rounds


def start_profile(dask_scheduler=None) -> float:
    """Start profiling the loop thread (kept on the scheduler: this function is pickled by
    value when this script runs as ``__main__``, module globals with it)."""
    prof = dask_scheduler.daskabsp_profile = cProfile.Profile()
    prof.enable()
    return time.thread_time()


def stop_profile(dask_scheduler=None) -> tuple[float, dict]:
    """Stop the loop thread's profile; ``(cpu seconds, {(file, line, func): (calls, own,
    cumulative)})``."""
    prof = dask_scheduler.daskabsp_profile
    del dask_scheduler.daskabsp_profile
    prof.disable()
    stats = pstats.Stats(prof).stats
    return time.thread_time(), {f"{k[0]}:{k[1]}:{k[2]}": (v[1], v[2], v[3])
                                for k, v in stats.items()}


def _package(path: str) -> str:
    for name in ("daskabsp", "distributed", "tornado", "asyncio", "msgpack", "dask"):
        if f"/{name}/" in path:
            return name
    return "other"


def add_options(p) -> None:
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--features", type=int, default=10)
    p.add_argument("--modes", default="plain,bsp,absp")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--dump", default=None, help="folder to write each mode's stats to (JSON)")


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    n, rounds = args.workers, args.rounds
    with local_cluster(n, 1, args.event_loop) as client:
        warm_up(client)
        data = logistic_data(client, n * args.rows, args.features, n, args.seed)
        for mode in args.modes.split(","):  # warm-up: imports, first fits
            _run(client, data, mode, 3)
        for mode in args.modes.split(","):
            c0 = client.run_on_scheduler(start_profile)
            t0 = time.perf_counter()
            _run(client, data, mode, rounds)
            wall = time.perf_counter() - t0
            c1, stats = client.run_on_scheduler(stop_profile)
            _print(mode, n, rounds, wall, c1 - c0, stats, args.top)
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                (Path(args.dump) / f"{mode}-{n}.json").write_text(json.dumps(
                    {"rounds": rounds, "wall": wall, "cpu": c1 - c0, "stats": stats}))


def _run(client, data, mode: str, rounds: int) -> None:
    if mode == "plain":
        plain_rounds(client, *data, rounds)
    else:
        engine_rounds(client, *data, mode, rounds)


def _print(mode, n, rounds, wall, cpu, stats, top) -> None:
    by_pkg: dict[str, float] = {}
    for k, (_calls, own, _cum) in stats.items():
        by_pkg[_package(k)] = by_pkg.get(_package(k), 0.0) + own
    total = sum(by_pkg.values()) or 1.0
    print(f"\n== {mode}, {n} workers, {rounds} rounds: wall {wall / rounds * 1e3:.1f} ms/round,"
          f" loop CPU {cpu / rounds * 1e3:.1f} ms/round (profiled)")
    print("  own time by package: " + ", ".join(
        f"{p} {v / rounds * 1e3:.1f} ms ({v / total:.0%})"
        for p, v in sorted(by_pkg.items(), key=lambda kv: -kv[1])))
    ours = [(k, v) for k, v in stats.items() if "/daskabsp/" in k]
    for label, idx in (("cumulative", 2), ("own", 1)):
        rows = sorted(ours, key=lambda kv: -kv[1][idx])[:top]
        print(table([f"daskabsp, by {label} time", "calls/round", "own ms/round",
                     "cum ms/round"],
                    [[k.split("/daskabsp/")[-1], f"{v[0] / rounds:.1f}",
                      f"{v[1] / rounds * 1e3:.2f}", f"{v[2] / rounds * 1e3:.2f}"]
                     for k, v in rows]))
    rows = sorted(stats.items(), key=lambda kv: -kv[1][1])[:top]
    print(table(["all, by own time", "calls/round", "own ms/round", "cum ms/round"],
                [[k.split("site-packages/")[-1][-70:], f"{v[0] / rounds:.1f}",
                  f"{v[1] / rounds * 1e3:.2f}", f"{v[2] / rounds * 1e3:.2f}"]
                 for k, v in rows]))


if __name__ == "__main__":
    main()
