"""What the simulator's scripts share: the import path, the measured costs on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from daskabsp.lab.sim import Costs

HERE = Path(__file__).resolve().parent

#: The cost model measured on this machine by calibrate.py (committed: the scale runs and the
#: docs use it without re-measuring).
COSTS = HERE / "costs.json"


def save_costs(costs: Costs, extra: dict, path: Path = COSTS) -> Path:
    """Write ``costs`` (and what they were measured from) as JSON."""
    path.write_text(json.dumps({"costs": dataclasses.asdict(costs), **extra}, indent=1))
    return path


def load_costs(path: Path = COSTS) -> Costs:
    """The costs calibrate.py measured (its defaults if it has not run)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run benchmarks/sim/calibrate.py first")
    return Costs(**json.loads(path.read_text())["costs"])
