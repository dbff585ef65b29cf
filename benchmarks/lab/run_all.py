"""Run the lab experiments one after the other (each in its own process and cluster),
passing the options on: ``python benchmarks/lab/run_all.py [--quick] [--seed N]``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPERIMENTS = ["lab_sources.py", "lab_spread.py", "lab_models.py", "lab_ablations.py",
               "lab_limit.py"]


def main() -> int:
    failed = []
    for script in EXPERIMENTS:
        print(f"\n=== {script} {' '.join(sys.argv[1:])}", flush=True)
        if subprocess.call([sys.executable, str(HERE / script), *sys.argv[1:]]) != 0:
            failed.append(script)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
