"""What 100, 1 000 and 5 000 workers would see: the simulator at scale, with the costs
measured on this machine (``costs.json``, see ``calibrate.py``).

A cluster of ``--workers`` workers, one thread and one core each, the scheduler's event loop on
a core of its own (the driver shares it, as in a LocalCluster): no oversubscription, so
``row_contention`` (the extra cost of a row on the validation machine's shared cores) does not
apply, and a row costs the ``row_seconds`` of a scan with a core to itself. One partition per
worker, sized so that a scan at speed 1 takes ``--task-seconds``. Straggler distributions
(``daskabsp.lab.sim``): none; a persistent slow fraction (5% of the workers 4x slower
throughout); transient slowdowns (each worker 4x slower in a round with probability 5%); a
heavy tail (each worker's slowdown
each round Pareto with shape 3: the slowest of n about n^(1/3) times slower). Modes: plain Dask
(submit and gather, no engine), engine BSP, A-BSP (default: quorum of one worker, grace 0.1,
balanced rounds, helpers from copies, each copy sent where the engine's ``copy_targets``
sends it: the worker with the most scan rate to spare once its copies share it), the same
with the earlier spreading rule ("absp-spread", a what-if: the fastest of the workers holding
the fewest copies), A-BSP as published, SSP with staleness 3, ASP. Copies cross links at
``--copy-bandwidth`` MB/s (default: ``costs.json``'s, this machine's loopback; the namespace
cluster measured 11.8-12.0 MB/s through Dask at 100 Mbit/s and 119.8 MB/s raw at 1 Gbit/s,
``bench_netns_links.py``). Each
runs until ``--epochs`` times the data's rows have been counted after the first round (SSP/ASP:
after the first update), ``--seeds`` seeds.

Reported per scale and distribution: seconds per epoch, the gain over engine BSP (BSP's time
per epoch over the mode's), the median round (update) time, and the scheduler loop's busy
time per round with its share of the round: the coordination that does not shrink with more
workers. A figure of the gain and of the loop's share against workers goes to
``docs/scale.png`` (with a full run) and next to the JSON.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import numpy as np
from _common import RESULTS, load_note, parse_args, table, write_json
from _sim import load_costs

from daskabsp import ABSP, ASP, BSP, SSP
from daskabsp.lab.sim import Cluster, HeavyTail, Persistent, Stragglers, Transient, simulate

MODES = {"plain": ("plain", {}), "bsp": (BSP(), {}), "absp": (ABSP(), {}),
         "absp-spread": (ABSP(), {"spread_copies": True}), "absp-paper": (ABSP.published(), {}),
         "ssp3": (SSP(3), {}), "asp": (ASP(), {})}
DISTRIBUTIONS = {"none": Stragglers(), "persistent 5% x4": Persistent(0.05, 4.0),
                 "transient 5% x4": Transient(0.05, 4.0), "heavy tail a=3": HeavyTail(3.0)}
DOCS = Path(__file__).resolve().parents[2] / "docs"


def add_options(p) -> None:
    p.add_argument("--workers", default="100,1000,5000")
    p.add_argument("--task-seconds", type=float, default=10.0,
                   help="seconds a partition's scan takes at speed 1")
    p.add_argument("--epochs", type=float, default=5.0)
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--copy-bandwidth", type=float, default=None,
                   help="MB/s a copy crosses a link at (default: costs.json's)")


def one(mode, cluster: Cluster, costs, stragglers, epochs: float, seed: int) -> dict:
    """One simulation's figures (time per epoch after the first round or update)."""
    rounds = int(8 * epochs) + 2
    t0 = time.perf_counter()
    mode, kwargs = mode
    res = simulate(mode, cluster, costs, stragglers, rounds=rounds, epochs=epochs + 1,
                   seed=seed, **kwargs)
    clocks = isinstance(mode, (SSP, ASP))  # no global rounds: one update per partition
    after = cluster.partitions if clocks else 1
    per_epoch = res.time_per_epoch(after=after)
    n_rounds = len(res.rounds)
    if clocks:  # per clock's worth of updates: one update per partition
        n_rounds /= cluster.partitions
    loop = res.loop_busy / max(n_rounds, 1)
    rt = float(np.median(res.round_times()))
    return {"per_epoch_s": per_epoch, "round_s": rt, "loop_s_per_round": loop,
            "rounds": len(res.rounds), "sim_seconds": time.perf_counter() - t0}


def run(args, costs) -> dict:
    seeds = args.seeds or (1 if args.quick else 3)
    rows = max(1, int(args.task_seconds / costs.row_seconds))
    out: dict = {}
    for n in [int(w) for w in args.workers.split(",")]:
        cluster = Cluster(n, rows)
        for dname, dist in DISTRIBUTIONS.items():
            for mname, mode in MODES.items():
                got = [one(mode, cluster, costs, dist, args.epochs, s) for s in range(seeds)]
                out[f"{n}|{dname}|{mname}"] = {k: float(np.median([g[k] for g in got]))
                                               for k in got[0]}
            print(f"# {n} workers, {dname}: {time.strftime('%T')}", flush=True)
    return out


def report(out: dict, ns: list[int]) -> list[list]:
    rows = []
    for n in ns:
        for dname in DISTRIBUTIONS:
            bsp = out[f"{n}|{dname}|bsp"]["per_epoch_s"]
            for mname in MODES:
                r = out[f"{n}|{dname}|{mname}"]
                rows.append([f"{n} workers, {dname}, {mname}", f"{r['per_epoch_s']:.2f}",
                             f"{bsp / r['per_epoch_s']:.2f}", f"{r['round_s']:.2f}",
                             f"{r['loop_s_per_round'] * 1e3:.0f}",
                             f"{r['loop_s_per_round'] / r['round_s']:.0%}"
                             if mname not in ("ssp3", "asp") else ""])
    return rows


def figure(out: dict, ns: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DISTRIBUTIONS), figsize=(4 * len(DISTRIBUTIONS), 3.4),
                             sharey=True)
    for ax, dname in zip(axes, DISTRIBUTIONS, strict=True):
        for mname in MODES:
            if mname == "bsp":
                continue
            gain = [out[f"{n}|{dname}|bsp"]["per_epoch_s"] / out[f"{n}|{dname}|{mname}"][
                "per_epoch_s"] for n in ns]
            ax.plot(ns, gain, marker="o", label=mname)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(dname)
        ax.set_xlabel("workers")
    axes[0].set_ylabel("gain over engine BSP (time per epoch)")
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    load0 = os.getloadavg()[0]
    costs = load_costs()
    if args.copy_bandwidth is not None:
        costs = dataclasses.replace(costs, copy_bandwidth=args.copy_bandwidth * 1e6)
    ns = [int(w) for w in args.workers.split(",")]
    out = run(args, costs)
    print(f"Simulated: one partition per worker, a scan of {args.task_seconds:g} s at speed 1, "
          f"{args.epochs:g} epochs after the first round; costs from benchmarks/sim/costs.json, "
          f"copies at {costs.copy_bandwidth / 1e6:.1f} MB/s")
    print(table(["workers, stragglers, mode", "s/epoch", "gain vs BSP", "round s",
                 "loop ms/round", "loop share"], report(out, ns)))
    print("gain: engine BSP's time per epoch / the mode's. round: median round time (SSP/ASP: "
          "one partition's update, read to applied). loop: the scheduler's event loop busy "
          "per round (SSP/ASP: per clock's worth of updates), and its share of the round.")
    RESULTS.mkdir(parents=True, exist_ok=True)
    png = RESULTS / ("sim_scale-quick.png" if args.quick else "sim_scale.png")
    figure(out, ns, png)
    if not args.quick:
        figure(out, ns, DOCS / "scale.png")
    print(load_note(load0))
    print(f"wrote {write_json('sim_scale', args, {'results': out})} and {png}")


if __name__ == "__main__":
    main()
