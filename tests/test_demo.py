"""The straggler demo that the README's first command runs."""

from __future__ import annotations

import re

from daskabsp.lab.demo import main


def test_demo_prints_whole_fit_times_for_every_sync_with_and_without_straggler(capsys):
    main(["--rows", "20000", "--features", "5", "--workers", "2"])
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if re.match(r"^(no|yes)\s", ln)]
    assert len(lines) == 6, out
    for line in lines:
        *_, seconds, rounds, speedup = line.split()
        assert float(seconds) > 0 and int(rounds) >= 1 and speedup.endswith("x")
    assert "not converged" not in out
    assert re.search(r"Ideal with the straggler .*: \d+\.\d\d s", out)
