"""Scan throughput: the runtime's chunked, stoppable scan over one partition
(``daskabsp.extension.run_partition`` outside a worker, default chunk target) against one
vectorised numpy pass computing the same statistics (``LogisticGD.accumulate`` over the whole
partition at once).

Both run in this process with BLAS limited to one thread, as on a Dask worker (the nanny sets
``OMP_NUM_THREADS=1``), interleaved repeat by repeat. Two scan variants: "calibrating"
(``chunk_rows=None``: a probe chunk measures the speed, as in a fit's first round) and
"calibrated" (the chunk size the driver passes from the second round on). Dense float64, and
CSR. Throughput ratio = vectorised time / scan time; target >= 0.8.
"""

from __future__ import annotations

import os
import time

import numpy as np
import scipy.sparse as sp
from _common import load_note, parse_args, spread, summary, table, verdict, write_json
from threadpoolctl import threadpool_limits

import daskabsp
from daskabsp import config
from daskabsp.extension._core import run_partition

TARGET = 0.8


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--rows", type=int, default=None, help="rows of the partition")
    p.add_argument("--features", type=int, default=100, help="dense features")
    p.add_argument("--csr-features", type=int, default=2000)
    p.add_argument("--density", type=float, default=0.01, help="CSR density")


def partitions(args, rng):
    n = args.rows or (50_000 if args.quick else 200_000)
    dense = rng.standard_normal((n, args.features))
    csr = sp.random(n, args.csr_features, density=args.density, format="csr",
                    random_state=np.random.RandomState(args.seed), dtype=np.float64)
    y = (rng.random(n) < 0.5).astype(np.float64)
    return {"dense": dense, "csr": csr}, y


def vectorised(program, params, X, y):
    acc = program.new_stats(params)
    t0 = time.perf_counter()
    program.accumulate(acc, params, X, y, None)
    return time.perf_counter() - t0, acc


def scan(program, params, X, y, chunk_rows):
    t0 = time.perf_counter()
    res = run_partition(program, params, X, y, None, round_id="bench", cursor=0,
                                 quota=X.shape[0], chunk_rows=chunk_rows)
    return time.perf_counter() - t0, res


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (5 if args.quick else 30)
    rng = np.random.default_rng(args.seed)
    data, y = partitions(args, rng)
    program = daskabsp.LogisticGD()
    target_s = config.seconds("chunk-target")
    rows, out = [], {"formats": {}}
    met = True
    with threadpool_limits(1):
        for fmt, X in data.items():
            params = rng.standard_normal(X.shape[1] + 1) * 0.05
            _, ref = vectorised(program, params, X, y)  # warm-up, and the reference statistics
            _, first = scan(program, params, X, y, None)
            calibrated = max(1, int(first.rows * target_s / first.compute_seconds))
            t = {"vectorised": [], "calibrating": [], "calibrated": []}
            chunks = []
            for i in range(repeats):
                order = ("vectorised", "calibrating", "calibrated")
                for name in order[i % 3:] + order[:i % 3]:
                    if name == "vectorised":
                        dt, acc = vectorised(program, params, X, y)
                    else:
                        dt, res = scan(program, params, X, y,
                                       None if name == "calibrating" else calibrated)
                        acc = res.stats
                        chunks.append(res.chunk_rows)
                        assert res.rows == X.shape[0] and not res.stopped
                    np.testing.assert_allclose(acc, ref, rtol=1e-9, atol=1e-9)
                    t[name].append(dt)
            nbytes = (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes if sp.issparse(X)
                      else X.nbytes)
            res_fmt = {"shape": X.shape, "nbytes": nbytes, "times_s": t,
                       "chunk_rows_seen": [int(min(chunks)), int(max(chunks))],
                       "calibrated_chunk_rows": calibrated}
            v = summary(t["vectorised"])
            rows.append([f"{fmt} {X.shape[0]}x{X.shape[1]}, vectorised", v["n"],
                         f"{v['median'] * 1e3:.1f}", f"{nbytes / v['median'] / 1e9:.2f}", "",
                         "", ""])
            for name in ("calibrating", "calibrated"):
                s = summary(t[name])
                ratio = summary([a / b for a, b in zip(t["vectorised"], t[name], strict=True)])
                ok = ratio["median"] >= TARGET
                met &= ok
                crow = (f"{calibrated}" if name == "calibrated" else
                        f"probe+~{int(np.median(chunks))}")
                rows.append([f"{fmt} {X.shape[0]}x{X.shape[1]}, scan {name}", s["n"],
                             f"{s['median'] * 1e3:.1f}", f"{nbytes / s['median'] / 1e9:.2f}",
                             crow, spread(ratio), verdict(ok)])
                res_fmt[f"ratio_{name}"] = ratio
            out["formats"][fmt] = res_fmt
    print(f"Scan throughput: one partition, 1 BLAS thread, chunk target "
          f"{target_s * 1e3:g} ms, {repeats} interleaved repeats")
    print(table(["variant", "repeats", "median ms", "GB/s", "chunk rows",
                 "scan/vectorised speed [IQR]", f"target >={TARGET:g}x"], rows))
    print("ratio = throughput of the scan / throughput of one vectorised pass (per repeat), "
          "median [IQR].")
    out.update(repeats=repeats, chunk_target_s=target_s, target=TARGET, target_met=met)
    print(load_note(load0))
    print(f"wrote {write_json('scan_throughput', args, out)}")


if __name__ == "__main__":
    main()
