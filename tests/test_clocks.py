"""The clock book of SSP and ASP (pure): the staleness bound, leases, lost workers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp import ASP, SSP
from daskabsp.engine.clocks import ClockBook
from daskabsp.policies import as_policy

#: Actions of a random event sequence: submit the i-th ready partition, a running task's
#: result comes back, a worker is lost (its running tasks are given up on), or a result
#: comes back a second time / late (from any lease seen so far).
ACTIONS = st.lists(st.tuples(st.sampled_from(["start", "finish", "kill", "again"]),
                             st.integers(0, 50)), max_size=300)


def _run(n, bound, budget, actions, owners):
    """Play ``actions`` on a book; check the invariants after every event; return the
    book, the log of applied leases and every lease ever issued."""
    book = ClockBook(n, bound, budget)
    applied, issued = [], []
    for action, i in actions:
        if action == "start" and book.ready():
            lease = book.start(book.ready()[i % len(book.ready())])
            assert bound is None or lease.lead <= bound
            issued.append(lease)
        elif action == "finish" and book.running:
            lease = sorted(book.running.values(), key=lambda le: le.partition)[
                i % len(book.running)]
            update = book.finish(lease)
            assert update is not None and update.lease == lease
            assert update.staleness == update.applied - lease.version >= 0
            applied.append(lease)
        elif action == "kill":  # every task running on the lost worker is given up on
            lost = i % max(owners) + 1 if max(owners) else 0
            for lease in [le for le in book.running.values() if owners[le.partition] == lost]:
                assert book.give_up(lease)
        elif action == "again" and issued:
            lease = issued[i % len(issued)]
            if book.running.get(lease.partition) != lease:  # late, superseded or applied
                assert book.finish(lease) is None
                assert not book.give_up(lease)
        if bound is not None:  # no partition computes more than `bound` clocks ahead
            assert all(le.clock - book.slowest <= bound for le in book.running.values())
            assert max(book.clocks) - book.slowest <= bound + 1
        assert book.version == sum(book.clocks) == len(applied)
        assert budget is None or book.version + len(book.running) <= budget
    return book, applied, issued


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 6), bound=st.one_of(st.none(), st.integers(0, 4)),
       budget=st.one_of(st.none(), st.integers(1, 40)), actions=ACTIONS,
       owners=st.lists(st.integers(0, 3), min_size=6, max_size=6))
def test_bound_holds_and_no_update_is_lost_or_counted_twice(n, bound, budget, actions,
                                                            owners):
    """Over random sequences of submissions, results, lost workers and late or repeated
    results: the bound holds at every event, every applied update is its partition's next
    clock (none lost, none twice), and a given-up task's result is never applied."""
    book, applied, issued = _run(n, bound, budget, actions, owners[:n])
    for p in range(n):
        clocks = [le.clock for le in applied if le.partition == p]
        assert clocks == list(range(book.clocks[p]))
    given_up = {le for le in issued if le not in applied and le not in book.running.values()}
    for lease in given_up:
        assert book.finish(lease) is None


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 5), actions=ACTIONS,
       owners=st.lists(st.integers(0, 2), min_size=5, max_size=5))
def test_ssp0_applies_updates_in_bsp_order(n, actions, owners):
    """Under SSP(0) every update of clock c is applied before any of clock c + 1, and a
    task of clock c computes at parameters that include every update of clock c - 1."""
    _book, applied, _ = _run(n, 0, None, actions, owners[:n])
    clocks = [le.clock for le in applied]
    assert clocks == sorted(clocks)
    assert all(le.version >= n * le.clock for le in applied)
    assert all(le.lead == 0 for le in applied)


def test_asp_lets_a_partition_run_ahead_and_ssp_holds_it():
    asp, ssp = ClockBook(2, None), ClockBook(2, 1)
    for book in (asp, ssp):
        book.start(1)
        for _ in range(3):
            if 0 in book.ready():
                book.finish(book.start(0))
    assert asp.clocks == [3, 0]
    assert ssp.clocks == [2, 0] and list(ssp.running) == [1]
    assert ssp.ready() == []  # partition 0 is held back by the bound


def test_budget_ends_the_fit():
    """The clock loop ends when nothing runs and the book lets nothing start."""
    book = ClockBook(2, None, budget=3)
    leases = [book.start(p) for p in book.ready()]
    book.finish(leases[0])
    assert book.ready() == [0]
    book.finish(book.start(0))
    assert book.ready() == [] and list(book.running) == [1]  # the budget is spent; 1 runs
    book.finish(leases[1])
    assert book.ready() == [] and not book.running and book.clocks_run() == 2


def test_policies():
    assert as_policy("ssp") == SSP(3) and as_policy("asp") == ASP()
    assert not SSP().rounds and not ASP().rounds and as_policy("bsp").rounds
    assert SSP(0).staleness_bound == 0 and ASP().staleness_bound is None
    with pytest.raises(ValueError, match=r"The 'staleness' parameter of SSP must be an int "
                                         r"in the range \[0, inf\). Got -2 instead."):
        SSP(-2)
    with pytest.raises(ValueError, match="Got True instead"):
        SSP(True)
