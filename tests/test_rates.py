"""Property tests of the scan-rate bookkeeping: worker speeds against partition costs, and the
rent that decides when a partition's copy pays."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp.engine.coverage import Leftover, plan
from daskabsp.engine.rates import Rates


@dataclass
class Scan:
    worker: str
    rows: int
    compute_seconds: float


def scan(worker: str, rows: int, speed: float, cost: float) -> Scan:
    """A noise-free scan: ``rows`` rows of cost ``cost`` on a worker of speed ``speed``."""
    return Scan(worker, rows, rows * cost / speed)


positive = st.floats(0.05, 20.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(positive, min_size=2, max_size=5), st.lists(positive, min_size=2, max_size=5))
def test_a_helped_round_tells_worker_speed_from_partition_cost(speeds, costs):
    """Worker ``i`` owns partition ``i``; after one round in which each worker also scans a
    piece of the next worker's partition, the learnt costs and speeds have the true ratios,
    whatever mix of slow workers and costly partitions made the owners' rates."""
    n = min(len(speeds), len(costs))
    speeds, costs = speeds[:n], costs[:n]
    names = [f"w{i}" for i in range(n)]
    rates = Rates(n)
    own = [scan(names[i], 1000, speeds[i], costs[i]) for i in range(n)]
    rates.observe(own)
    assert [rates.own[p] for p in range(n)] == pytest.approx(
        [speeds[i] / costs[i] for i in range(n)])
    pieces = [((i + 1) % n, scan(names[i], 500, speeds[i], costs[(i + 1) % n]))
              for i in range(n)]
    rates.observe_pieces(own, pieces)
    rates.observe(own)  # the next round's own scans, with the costs now learnt
    for p in range(n):
        assert rates.cost(p) / rates.cost(0) == pytest.approx(costs[p] / costs[0])
        assert rates.worker_speed(names[p]) / rates.worker_speed(names[0]) == pytest.approx(
            speeds[p] / speeds[0])
        for w in range(n):  # so every worker's rate on every partition is right
            assert rates.rate(names[w], p) / rates.rate(names[0], 0) == pytest.approx(
                (speeds[w] / costs[p]) / (speeds[0] / costs[0]))


def test_before_any_cross_scan_the_gap_is_split_between_worker_and_partition():
    """Worker b's partition scans 4x slower than a's: until a worker scans both, b is taken
    to be 2x slower and its partition 2x costlier (the geometric middle of the two
    explanations), so a helper on a is expected to scan b's rows 2x faster than b."""
    rates = Rates(2)
    rates.observe([scan("a", 1000, 4.0, 1.0), scan("b", 1000, 1.0, 1.0)])
    assert rates.cost(1) / rates.cost(0) == pytest.approx(2.0)
    assert rates.worker_speed("a") / rates.worker_speed("b") == pytest.approx(2.0)
    assert rates.rate("a", 1) / rates.rate("b", 1) == pytest.approx(2.0)
    assert rates.worker_speed("new") == pytest.approx(
        (rates.worker_speed("a") + rates.worker_speed("b")) / 2)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.1, 10.0), st.floats(1.0, 16.0), st.integers(1, 10_000))
def test_rent_is_the_owners_lone_time_beyond_a_shared_finish(own_speed, factor, left):
    """A slow owner's leftover, alone: ``left / own``; shared with a worker ``factor`` times as
    fast: ``left / (own + helper)``; each round charges the difference, and the rent adds up
    over rounds. A partition whose owner is blocked (silent, or other work holds its
    threads) pays infinite rent; one whose owner merely scanned nothing this round (its event
    loop busy receiving a copy) pays for its lone time at its last measured speed."""
    rates = Rates(2)
    rates.observe([scan("a", 1000, own_speed * factor, 1.0), scan("b", 1000, own_speed, 1.0)])
    own, helper = rates.own[1], rates.rate("a", 1)
    per_round = left / own - left / (own + helper)
    paid = [rates.charge({1: left}, ["a", "b"], ["a", "b"])[1] for _ in range(3)]
    assert paid == pytest.approx([per_round, 2 * per_round, 3 * per_round])
    slack = per_round / 2  # an excess within the slack is noise, beyond it rent
    assert rates.charge({1: left}, ["a", "b"], ["a", "b"], slack=slack)[1] == pytest.approx(
        3.5 * per_round)
    rates.observe([scan("a", 1000, 1.0, 1.0), Scan("b", 0, 0.0)])
    before = rates.rent[1]
    after = rates.charge({1: left}, ["a", "b"], ["a", "b"])[1]
    assert math.isfinite(after) and after >= before
    assert math.isinf(rates.charge({1: left}, ["a", "b"], ["a"], blocked={"b"})[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5_000), min_size=2, max_size=12), st.floats(0.5, 2.0))
def test_owners_that_finish_together_pay_no_rent(lefts, skew):
    """Equally fast workers, each with its own partitions' leftovers: when both need the same
    time alone there is nothing to gain from copies, and no partition pays rent; the one
    with more left pays, in proportion to the excess."""
    n = len(lefts)
    owner = ["a" if p % 2 == 0 else "b" for p in range(n)]
    rates = Rates(n)
    rates.observe([scan(owner[p], 1000, 1.0, 1.0) for p in range(n)])
    even = {p: 100 for p in range(n - n % 2)}
    assert all(v == pytest.approx(0.0) for v in rates.charge(even, owner, ["a", "b"]).values())
    left = {p: lefts[p] * (skew if owner[p] == "a" else 1.0) for p in range(n)}
    left = {p: int(v) for p, v in left.items()}
    before = list(rates.rent)
    rates.charge(left, owner, ["a", "b"])
    alone = {w: sum(left[p] for p in range(n) if owner[p] == w) for w in "ab"}
    horizon = sum(alone.values()) / 2
    for w in "ab":
        assert sum(rates.rent[p] - before[p] for p in range(n) if owner[p] == w) == (
            pytest.approx(max(alone[w] - horizon, 0.0) / rates.worker_speed(w), abs=1e-9))


def test_plan_gives_a_costly_partitions_rows_by_time_not_by_count():
    """Two equally fast workers; ``a`` alone holds partition 0 (cost 1, 300 rows), both hold
    partition 1 (cost 3, 300 rows): 1 200 units of work, 600 each, so ``b`` takes 200 rows of
    partition 1 and ``a`` the other 100 after its own 300."""
    los = [Leftover(0, 0, 300, 1000, ("a",)), Leftover(1, 0, 300, 1000, ("a", "b"))]
    pieces = plan(los, {"a": 1.0, "b": 1.0}, {"a": 1, "b": 1}, cost={0: 1.0, 1: 3.0})
    work = {"a": 0.0, "b": 0.0}
    for pc in pieces:
        work[pc.worker] += pc.rows * (3.0 if pc.partition == 1 else 1.0)
    assert work == {"a": 600.0, "b": 600.0}
