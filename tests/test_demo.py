"""The straggler demo that the README's first command runs."""

from __future__ import annotations

import re

from daskabsp import ABSP
from daskabsp.lab.demo import SYNCS, main


def test_the_demo_labels_each_policy_by_what_it_is():
    """"A-BSP as published" is :meth:`ABSP.published` (no helpers, a quorum of partitions,
    no grace), not only ``helpers=False``; "A-BSP" is the default."""
    assert SYNCS["A-BSP as published"] == ABSP.published()
    assert SYNCS["A-BSP"] == ABSP()


def test_demo_prints_whole_fit_times_for_every_sync_with_and_without_straggler(capsys):
    main(["--rows", "20000", "--features", "5", "--workers", "2", "--repeats", "2"])
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if re.match(r"^(no|yes)\s", ln)]
    assert len(lines) == 6, out
    for line in lines:
        *_, seconds, rounds, speedup = line.split()
        assert float(seconds) > 0 and int(rounds) >= 1 and speedup.endswith("x")
    assert "not converged" not in out
    # the cluster is warmed up by an untimed fit before the first timed one, and says so
    assert out.index("Warming the cluster up") < out.index("Whole fit()") < out.index(lines[0])
    assert "after the warm-up" in out
    assert re.search(r"Ideal with the straggler .*: \d+\.\d\d s", out)
