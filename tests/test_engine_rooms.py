"""The engine's pure rooms, property-tested without a cluster: the round plan and its
settlement, the book under resume, balancing and membership, round ids."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from daskabsp import ABSP, BSP
from daskabsp.engine.book import PartitionBook, quotas_of
from daskabsp.engine.membership import balance, reassign
from daskabsp.engine.plan import Outcome, expected_scans, plan_round, settle
from daskabsp.extension._core import PartialResult
from daskabsp.extension._protocol import RoundId

POLICIES = [BSP(), ABSP(), ABSP.published(), ABSP(helpers=False), ABSP(on_quorum="drop"),
            ABSP(quorum=2), ABSP(cursor="restart", helpers=False), ABSP(patience=3.0)]
WORKERS = ["tcp://a", "tcp://b", "tcp://c", "tcp://d"]


@st.composite
def rounds_of(draw):
    """Partition sizes, cursors, quotas, and one round's outcomes (rows within the quota,
    some covered by helpers on other workers)."""
    P = draw(st.integers(1, 6))
    sizes = draw(st.lists(st.integers(1, 50), min_size=P, max_size=P))
    quota = draw(st.one_of(st.none(), st.integers(1, 60), st.floats(0.05, 1.0)))
    quotas = quotas_of(quota, sizes)
    cursors = [draw(st.integers(0, n - 1)) for n in sizes]
    outcomes, helper_rows = [], Counter()
    for p in range(P):
        rows = draw(st.integers(0, quotas[p]))
        scanned = draw(st.integers(0, rows))
        worker = draw(st.sampled_from(WORKERS))
        outcomes.append(Outcome(rows, np.full(1, float(rows)), None, rows < quotas[p], scanned,
                                worker))
        if rows > scanned:
            helper_rows[draw(st.sampled_from(WORKERS))] += rows - scanned
    return sizes, quotas, cursors, outcomes, helper_rows


def own(rows: int, worker: str = "tcp://a", chunk_rows: int = 0) -> PartialResult:
    return PartialResult(stats=None, rows=rows, cursor=0, stopped=False, compute_seconds=0.1,
                         start=0.0, stop=0.1, worker=worker, chunk_rows=chunk_rows)


# -- the plan ----------------------------------------------------------------------------------


@given(st.sampled_from(POLICIES), st.lists(st.integers(1, 100), min_size=1, max_size=8),
       st.booleans(), st.booleans(),
       st.one_of(st.none(), st.lists(st.floats(1.0, 5.0), min_size=1, max_size=8)),
       st.booleans(), st.data())
def test_plan_follows_the_policy(policy, sizes, full, helpers, expected, wanted, data):
    """The plan is the policy's: BSP never stops; a full round is helped or runs as BSP;
    otherwise the round stops at the quorum and has a helper phase only if the program
    wants one (else it is one wave, as published, and copies are still made), with the
    grace only while most workers are expected near the least busy. In a full helped round
    a partition without a copy is not cut short once started."""
    quotas = [max(1, n // 2) for n in sizes]
    expected = None if expected is None else tuple(sorted([1.0, *expected]))
    try:
        policy.check(len(sizes))
    except ValueError:
        assume(False)
    copied = data.draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=len(sizes),
                                                     max_size=len(sizes))))
    plan = plan_round(policy, quotas, sizes, full=full, helpers=helpers,
                      expected=expected, help_wanted=wanted, copied=copied)
    if isinstance(policy, BSP):  # never stopped, every quota asked, never helped
        assert plan.quorum == 0 and plan.quotas == tuple(quotas) and not plan.helped
        assert not plan.full
        return
    within = 1 + policy.grace
    balanced = expected is not None and expected[-1] <= within and policy.grace > 0
    helped = helpers and policy.helped
    if full and (balanced or not helped):  # a full round runs as BSP: every row, no stop
        assert plan.quorum == 0 and plan.quotas == tuple(sizes) and plan.full
    elif balanced and not policy.patience:  # no straggler expected, every quota covered
        assert plan.quorum == 0 and plan.quotas == tuple(quotas) and not plan.helped
    else:  # stopped at the quorum; with helpers, they cover the quotas, full or not
        assert plan.quorum == policy.round_quorum(len(sizes))
        assert plan.helped == (helped and (full or wanted)) and plan.copies == helped
        assert plan.quotas == tuple(quotas) and plan.full == full
        assert plan.unit == policy.quorum_unit
        # patience, unless a worker is expected to straggle past it
        straggler = expected is not None and expected[-1] > 1 + policy.patience
        assert plan.patience == (0.0 if straggler else policy.patience)
        assert all(0 <= g < q for g, q in zip(plan.grace, quotas, strict=True))
        # the grace only while at least half the workers are expected within it
        near = expected is None or sum(e <= within for e in expected) >= len(expected) / 2
        for p, q in enumerate(quotas):
            kept = full and plan.helped and copied is not None and not copied[p]
            assert plan.grace[p] == (q - 1 if kept else int(policy.grace * q) * near)


def test_steady_rate_is_the_best_of_the_last_scans_so_one_slow_round_is_no_straggler():
    book = PartitionBook((100, 100), [100, 100])
    assert book.steady_rate() == [None, None]
    for secs in (8.0, 1.0, 4.0):  # partition 1 slowed by its cold start, then a busy core
        book.record([0, 0], [True, True],
                    [PartialResult(None, 100, 0, False, 1.0, 0.0, 1.0, "a", 0),
                     PartialResult(None, 100, 0, False, secs, 0.0, secs, "b", 0)],
                    probe_rows=10, chunk_target=0.01)
    assert book.rate == [100.0, 25.0]
    assert book.steady_rate() == [100.0, 100.0]
    policy = ABSP()
    plan = plan_round(policy, book.quotas, book.sizes, full=False, helpers=True,
                      expected=expected_scans(book.quotas, book.steady_rate(), ["a", "b"]))
    assert plan.quorum == 1 and plan.patience == policy.patience  # balanced: it waits
    for _ in range(3):  # slow round after round: a straggler, stopped at the quorum
        book.record([0, 0], [True, True],
                    [PartialResult(None, 100, 0, False, 1.0, 0.0, 1.0, "a", 0),
                     PartialResult(None, 100, 0, False, 4.0, 0.0, 4.0, "b", 0)],
                    probe_rows=10, chunk_target=0.01)
    plan = plan_round(policy, book.quotas, book.sizes, full=False, helpers=True,
                      expected=expected_scans(book.quotas, book.steady_rate(), ["a", "b"]))
    assert plan.quorum == 1 and plan.patience == 0.0


def test_expected_scans_are_each_worker_over_the_least_busy():
    assert expected_scans([10, 10, 10], [10.0, 10.0, 5.0], ["a", "a", "b"]) == (1.0, 1.0)
    assert expected_scans([10, 10, 10], [10.0, 2.5, 5.0], ["a", "b", "c"]) == (1.0, 2.0, 4.0)
    assert expected_scans([10, 10], [10.0, None], ["a", "b"]) is None


# -- the settlement ----------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.sampled_from(POLICIES), rounds_of())
def test_settlement_counts_within_quota_and_rows_per_worker_add_up(policy, case):
    sizes, quotas, cursors, outcomes, helper_rows = case
    s = settle(policy, cursors, sizes, outcomes, helper_rows, WORKERS)
    assert set(WORKERS) <= set(s.worker_rows)
    for p, o in enumerate(outcomes):
        kept = o.rows > 0 and (policy.keep_partial or not o.stopped)
        assert s.counted[p] == kept
    assert [ps.partition for ps in s.pieces] == [p for p, c in enumerate(s.counted) if c]
    for ps in s.pieces:
        assert ps.rows <= quotas[ps.partition] and ps.start == cursors[ps.partition]
    assert s.rows == sum(ps.rows for ps in s.pieces)
    # each worker's counted rows: its own scans and its pieces, nothing that does not count
    if policy.keep_partial:
        assert sum(s.worker_rows.values()) == s.rows
    else:  # drop: a stopped partition's scans count for nobody (no helpers under drop)
        own_counted = sum(o.scanned for o, c in zip(outcomes, s.counted, strict=True) if c)
        assert sum(s.worker_rows.values()) == own_counted + sum(helper_rows.values())


@settings(max_examples=300)
@given(st.sampled_from([p for p in POLICIES if p.cursor == "resume"]), rounds_of(),
       st.lists(st.integers(0, 5), min_size=6, max_size=6))
def test_book_resumes_after_the_counted_rows(policy, case, stale):
    """Cursor = counted rows mod size; staleness resets exactly when a partition counted."""
    sizes, quotas, cursors, outcomes, helper_rows = case
    P = len(sizes)
    book = PartitionBook(tuple(sizes), quotas, cursor=list(cursors), staleness=stale[:P])
    s = settle(policy, book.cursor, sizes, outcomes, helper_rows)
    book.record(s.cursors, s.counted, [own(o.scanned) for o in outcomes], probe_rows=256,
                chunk_target=0.002)
    for p in range(P):
        counted_rows = outcomes[p].rows if s.counted[p] else 0
        assert book.cursor[p] == (cursors[p] + counted_rows) % sizes[p]
        assert book.staleness[p] == (0 if s.counted[p] else stale[p] + 1)


def test_restart_puts_every_cursor_back_to_row_zero():
    policy = ABSP(cursor="restart", helpers=False)
    s = settle(policy, [3, 0], [10, 10], [Outcome(4, 1.0, None, True, 4, "a"),
                                          Outcome(10, 1.0, None, False, 10, "b")], {})
    assert s.cursors == (0, 0)


def test_drop_keeps_the_cursor_of_a_stopped_partition_and_counts_none_of_its_rows():
    s = settle(ABSP(on_quorum="drop"), [5, 5], [10, 10],
               [Outcome(3, 1.0, None, True, 3, "a"), Outcome(10, 1.0, None, False, 10, "b")],
               {}, ["a", "b"])
    assert s.counted == (False, True) and s.cursors == (5, 5) and s.rows == 10
    assert s.worker_rows == {"a": 0, "b": 10}


# -- balancing and membership ------------------------------------------------------------------


@st.composite
def assignments(draw):
    threads = {w: draw(st.integers(1, 3)) for w in draw(
        st.lists(st.sampled_from(WORKERS), min_size=1, max_size=4, unique=True))}
    n = draw(st.integers(1, 16))
    where = draw(st.lists(st.one_of(st.none(), st.sampled_from(WORKERS)), min_size=n,
                          max_size=n))
    return where, threads


@settings(max_examples=300)
@given(assignments())
def test_balance_places_every_partition_on_a_live_worker_within_its_share(case):
    where, threads = case
    out = balance(where, threads)
    total, n = sum(threads.values()), len(where)
    load = Counter(out)
    assert set(out) <= set(threads)
    for w, t in threads.items():
        assert load[w] <= math.ceil(n * t / total)
        # nobody left short of its fair share by more than one while another is over it
        assert load[w] >= math.floor(n * t / total) - 1 or (load[w] == 0 and n < len(threads))
    assert balance(out, threads) == out  # idempotent
    before = Counter(w for w in where if w in threads)
    for p, w in enumerate(where):
        if w in threads and before[w] <= math.ceil(n * threads[w] / total):
            assert out[p] == w  # nothing moves off a live worker within its share


@settings(max_examples=300)
@given(assignments(), st.data())
def test_reassign_moves_stranded_partitions_to_a_live_copy(case, data):
    where, threads = case
    n = len(where)
    ran_on = [w or WORKERS[0] for w in where]
    stranded = set(data.draw(st.lists(st.integers(0, n - 1), max_size=n)))
    copies = [data.draw(st.lists(st.sampled_from(WORKERS), max_size=3, unique=True))
              for _ in range(n)]
    owner, promoted = reassign(ran_on, threads, stranded, copies)
    assert set(owner) <= set(threads)  # no partition on a worker that is not live
    for p in stranded:
        live_copies = [w for w in copies[p] if w in threads]
        if live_copies:
            assert promoted[p] == owner[p] == live_copies[0]
        else:
            assert p not in promoted
    assert set(promoted) <= stranded


# -- round ids ---------------------------------------------------------------------------------


@given(st.text(alphabet="0123456789abcdef", min_size=8, max_size=8), st.integers(0, 10**5),
       st.integers(0, 3), st.integers(0, 1), st.integers(0, 8))
def test_round_id_round_trips_through_its_annotation(fit, r, attempt, phase, quorum):
    rid = RoundId(fit, r, attempt, phase)
    a = rid.annotation(quorum)
    assert RoundId.from_annotation(a) == rid and a["quorum"] == quorum
    assert rid.retry(attempt) == rid and rid.helpers().phase == 1
    others = {RoundId(fit, r, attempt + 1, phase), RoundId(fit, r + 1, attempt, phase),
              RoundId(fit, r, attempt, 1 - phase)}
    assert str(rid) not in {str(o) for o in others}
    assert rid.key_prefix("logreg").startswith(f"daskabsp-logreg-{fit}-")


# -- the helper phase's choice -----------------------------------------------------------------


@st.composite
def helped_rounds(draw):
    """A stopped round: per partition its owner, copies, quota and the rows its own scan
    covered; per worker a speed."""
    P = draw(st.integers(1, 6))
    owner = [draw(st.sampled_from(WORKERS)) for _ in range(P)]
    copies = [draw(st.lists(st.sampled_from([w for w in WORKERS if w != owner[p]]),
                            max_size=2, unique=True)) for p in range(P)]
    quotas = [draw(st.integers(1, 400)) for _ in range(P)]
    rows = [draw(st.integers(0, q)) for q in quotas]
    speed = {w: draw(st.floats(1.0, 1e4)) for w in WORKERS}
    return owner, copies, quotas, rows, speed


@settings(max_examples=300, deadline=None)
@given(helped_rounds(), st.booleans())
# rows rounded up onto a slower copy holder once made it end after the owner alone
@example((["tcp://b"], [["tcp://c"]], [2], [0],
          {"tcp://a": 1.0, "tcp://b": 9.0, "tcp://c": 4.0, "tcp://d": 1.0}), False)
# one-row leftovers shared by whole rows piled two rows on one holder (1.0 s vs 0.5 s alone)
@example((["tcp://d", "tcp://a", "tcp://b"], [["tcp://b"], [], ["tcp://a"]], [1, 1, 1],
          [0, 0, 0], {"tcp://a": 1.0, "tcp://b": 2.0, "tcp://c": 1.0, "tcp://d": 2.0}), False)
def test_helpers_never_make_a_round_wait_longer_than_its_owners_would(case, needed):
    """What a stopped partition left goes to helpers only where another worker holds a copy
    (otherwise it is counted next round, the published rule, unless the program needs every
    row now), and the planned helper phase ends no later than the owners alone would take
    on what they left."""
    from types import SimpleNamespace

    from daskabsp.engine import coverage
    from daskabsp.engine.helpers import HelperPhase

    owner, copies, quotas, rows, speed = case
    P = len(owner)
    holders = [dict.fromkeys([owner[p], *copies[p]]) for p in range(P)]
    placement = SimpleNamespace(owner=owner, holders=lambda p: holders[p])
    book = PartitionBook(tuple(quotas), list(quotas))
    owned = [own(r, owner[p]) for p, r in enumerate(rows)]
    phase = HelperPhase(P, [0.0] * P, 0.002, sum)
    los = phase.leftovers(placement, book, owned, quotas, set(), needed=needed)
    left = {p for p in range(P) if rows[p] < quotas[p]}
    expect = left if needed else {p for p in left if copies[p]}
    assert {lo.partition for lo in los} == expect
    pieces = coverage.plan(los, speed, dict.fromkeys(WORKERS, 1))
    work: dict[str, float] = {}
    for pc in pieces:
        work[pc.worker] = work.get(pc.worker, 0.0) + pc.rows / speed[pc.worker]
    alone: dict[str, float] = {}
    for lo in los:
        w = owner[lo.partition]
        alone[w] = alone.get(w, 0.0) + lo.rows / speed[w]
    if pieces:
        assert max(work.values()) <= max(alone.values()) * (1 + 1e-9) + 1e-9


def test_copies_are_spread_over_fast_workers_not_all_sent_to_the_fastest():
    """A copy goes to the worker with the most scan rate to spare once the copies it already
    holds or receives share it: the fastest first, then the next while it is more than half
    as fast, never a worker far slower while a fast one is free."""
    from daskabsp.engine.helpers import copy_targets
    from daskabsp.engine.rates import Rates

    rates = Rates(6)
    rates.speed = {"a": 10.0, "b": 9.0, "c": 1.0}
    holders = {p: {"c"} if p == 5 else set() for p in range(6)}
    assert copy_targets(range(6), holders, ["a", "b", "c"], rates) == {
        0: "a", 1: "b", 2: "a", 3: "b", 4: "a", 5: "b"}
    # copies held or on their way count: with four on "a", the next goes to "b"
    assert copy_targets([0], holders, ["a", "b"], rates, {"a": 4, "b": 3}) == {0: "b"}
    # a worker without the memory room for a copy gets none; one without a bound may
    room = {"a": 5.0, "b": 15.0}
    assert copy_targets([0, 1], holders, ["a", "b", "c"], rates, room=room,
                        nbytes=[10] * 6) == {0: "b", 1: "c"}
    assert room == {"a": 5.0, "b": 15.0}  # the caller's room is not written


@settings(max_examples=300, deadline=None)
@given(helped_rounds(), st.lists(st.sampled_from(WORKERS), max_size=4, unique=True),
       st.lists(st.floats(0.25, 4.0), min_size=6, max_size=6), st.booleans())
def test_copies_go_to_the_fastest_free_worker_up_to_the_limit(case, measured, costs, tie):
    """A copy is due once its rent paid reaches its price and its partition has fewer than
    ``replicas`` copies; it goes to the worker that does not hold it with the highest
    expected rate on the partition's rows, shared with the copies the call already sent
    there (the larger name on a tie): ``copy_targets`` ranks the workers once and picks
    what a search of every free worker would."""
    from daskabsp.engine.helpers import copies_due, copy_targets, shortfall
    from daskabsp.engine.rates import Rates

    owner, copies, quotas, rows, speed = case
    P = len(owner)
    rates = Rates(P)
    rates.speed = {w: (1.0 if tie else speed[w]) for w in measured}  # others: the median
    rates.log_cost = [math.log(c) for c in costs[:P]]
    holders = {p: dict.fromkeys([owner[p], *copies[p]]) for p in range(P)}
    short = shortfall(rows, quotas)
    paid = {p: float(p) for p in short}
    due = copies_due(short, paid, [1.5] * P, holders, 1)
    assert due == [p for p in short if p >= 2 and not copies[p]]
    got = copy_targets(due, holders, WORKERS, rates)
    load: dict = {}
    for p in due:  # in order, each earlier copy of the call sharing its worker's rate
        free = [w for w in WORKERS if w not in holders[p]]
        assert got[p] == max(free, key=lambda w, p=p: (rates.rate(w, p) / (1 + load.get(w, 0)),
                                                       w))
        load[got[p]] = load.get(got[p], 0) + 1
