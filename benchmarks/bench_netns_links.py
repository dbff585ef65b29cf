"""Namespace cluster links: what a transfer achieves at each configured rate, raw and
through Dask.

One namespace cluster (``daskabsp.lab.netcluster``, root needed: the scheduler and 2 workers each
in a network namespace of its own, the driver on the same bridge), every link set to each
rate in turn (``--rates``, interleaved per repeat), and per rate:

* raw TCP, one stream, nothing of Dask (``NetnsCluster.measure_throughput``): worker 0 to
  worker 1, driver to worker 0, worker 0 to driver;
* Dask: ``client.scatter`` of a random array from the driver to worker 0; a task on worker 1
  that takes the array held by worker 0 (the wall time of the task, and worker 1's own timing
  of the fetch from its ``transfer_incoming_log``); ``client.gather`` of it back to the driver.

MB/s are 10**6 bytes per second; a rate of 100 Mbit/s carries at most 12.5 MB/s, of which TCP
over Ethernet-sized packets leaves about 95% for data.
"""

from __future__ import annotations

import os
import time

import numpy as np
from _common import load_note, parse_args, spread, summary, table, write_json
from distributed import Client, wait

from daskabsp.lab.netcluster import netns_cluster, parse_rate


def add_options(p) -> None:
    p.add_argument("--rates", default="100mbit,1gbit,none",
                   help="link rates to compare (comma-separated; 'none': not shaped)")
    p.add_argument("--mbytes", type=float, default=None,
                   help="MB per transfer (default 80, --quick 20)")
    p.add_argument("--repeats", type=int, default=None, help="default 3, --quick 1")


def _random(nbytes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def _nbytes(a: np.ndarray) -> int:
    return int(a.nbytes)


def _last_fetch(dask_worker) -> dict:
    return dict(dask_worker.transfer_incoming_log[-1])


def measure(nc, client: Client, nbytes: int, seed: int) -> dict[str, float]:
    """Bytes per second of each path, at the rates the links have now."""
    w0, w1 = nc.worker_addresses[:2]
    out = {
        "raw worker 0 -> worker 1": nc.measure_throughput("worker-0", "worker-1", nbytes),
        "raw driver -> worker 0": nc.measure_throughput("driver", "worker-0", nbytes),
        "raw worker 0 -> driver": nc.measure_throughput("worker-0", "driver", nbytes),
    }
    data = _random(nbytes, seed)
    t0 = time.perf_counter()
    fut = client.scatter(data, workers=[w0], direct=True, hash=False)
    wait(fut)
    out["dask scatter driver -> worker 0"] = nbytes / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    client.submit(_nbytes, fut, workers=[w1], pure=False).result()
    out["dask task on worker 1 (wall)"] = nbytes / (time.perf_counter() - t0)
    fetch = client.run(_last_fetch, workers=[w1])[w1]
    out["dask fetch worker 0 -> worker 1 (worker's log)"] = fetch["total"] / fetch["duration"]
    t0 = time.perf_counter()
    client.gather(fut, direct=True)
    out["dask gather worker -> driver"] = nbytes / (time.perf_counter() - t0)
    client.cancel(fut)
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    rates = [None if r == "none" else r for r in args.rates.split(",")]
    bits = {r: parse_rate(r) for r in rates}
    nbytes = int((args.mbytes or (20 if args.quick else 80)) * 1e6)
    repeats = args.repeats or (1 if args.quick else 3)
    got: dict[str | None, list[dict[str, float]]] = {r: [] for r in rates}
    with netns_cluster(2, rates[0]) as nc, Client(nc.scheduler_address) as client:
        client.run(_nbytes, np.zeros(1))  # the task function's first call is not timed
        for rep in range(repeats):
            for rate in (rates if rep % 2 == 0 else rates[::-1]):
                for host in nc.hosts:
                    nc.set_rate(host, rate)
                got[rate].append(measure(nc, client, nbytes, rep))
                print(f"-- {rate or 'unshaped'} repeat {rep} done", flush=True)
    paths = list(got[rates[0]][0])
    rows = []
    for path in paths:
        row = [path]
        for r in rates:
            s = summary([g[path] for g in got[r]])
            row.append(spread(s, 1e-6, "{:.1f}"))
            if bits[r]:
                row.append(f"{s['median'] / (bits[r] / 8):.2f}")
        rows.append(row)
    headers = ["path"]
    for r in rates:
        headers.append(f"{r or 'unshaped'} MB/s")
        if bits[r]:
            headers.append(f"/ {bits[r] / 8e6:g} MB/s")
    print(f"\nNamespace cluster links: {nbytes / 1e6:g} MB per transfer, {repeats} interleaved "
          "repeats, every link at the rate both ways; MB/s median [IQR]; '/ X MB/s': measured "
          "over the configured rate")
    print(table(headers, rows))
    print(load_note(load0))
    raw = {str(r): got[r] for r in rates}
    print(f"results: {write_json('bench_netns_links', args, {'nbytes': nbytes, 'runs': raw})}")


if __name__ == "__main__":
    main()
