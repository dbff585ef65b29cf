"""The scheduler plugin's round registry and liveness rules, without a scheduler: random
sequences of what a round's tasks can do."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskabsp.extension import _liveness as liveness
from daskabsp.extension._protocol import RoundId
from daskabsp.extension._registry import RoundRegistry

EVENTS = ("finished", "erred", "forgotten", "idle", "moved")


@st.composite
def histories(draw):
    """A few rounds of a few tasks each, and a random interleaving of their events (every
    task ends forgotten, as every key eventually does)."""
    n_rounds = draw(st.integers(1, 3))
    rounds = []
    for r in range(n_rounds):
        n = draw(st.integers(1, 5))
        quorum = draw(st.integers(0, n))
        rounds.append((RoundId("f1", r), quorum, [(f"k{r}", i) for i in range(n)]))
    events = []
    for _, _, keys in rounds:
        for key in keys:
            evs = draw(st.lists(st.sampled_from(EVENTS), max_size=3))
            events += [(key, e) for e in evs] + [(key, "forgotten")]
    order = draw(st.permutations(range(len(events))))
    # each key's own events stay in order (a key is forgotten last)
    by_key: dict = {}
    for i in order:
        by_key.setdefault(events[i][0], []).append(i)
    seq, pos = [], {k: 0 for k in by_key}
    own = {k: sorted(v) for k, v in by_key.items()}
    for i in order:
        key = events[i][0]
        seq.append(events[own[key][pos[key]]])
        pos[key] += 1
    return rounds, seq


@settings(max_examples=400)
@given(histories(), st.sampled_from(["partitions", "workers"]))
def test_a_round_settles_exactly_when_every_key_is_done_and_stops_once(case, unit):
    rounds, seq = case
    settled: list[str] = []
    reg = RoundRegistry(on_settle=lambda r: settled.append(r.rid))
    where: dict = {}
    for rid, quorum, keys in rounds:
        for i, key in enumerate(keys):
            reg.announce(key, rid.annotation(quorum, unit), client="c")
            where[key] = f"w{i % 2}"
            reg.processing(key, where[key])
    stops: dict[str, int] = {}
    done: set = set()
    finished: dict[str, int] = {}
    done_workers: dict[str, set] = {}
    for key, event in seq:
        r = reg.round_of(key)
        if event == "finished" and key not in done:
            stop = reg.finished(key)
            done.add(key)
            finished[r.rid] = finished.get(r.rid, 0) + 1
            if not any(where[k] == where[key] for k in r.keys if k not in done):
                done_workers.setdefault(r.rid, set()).add(where[key])
            if stop is not None:
                stops[stop.rid] = stops.get(stop.rid, 0) + 1
                count = finished[r.rid] if unit == "partitions" else len(
                    done_workers[r.rid])
                assert stop.quorum and count >= stop.quorum
        elif event == "erred" and key not in done:
            reg.erred(key)
            done.add(key)
        elif event == "idle" and r is not None:  # its worker reports it idle
            reg.reported_idle(r.rid, where[key], [key], False, where.get)
            done.add(key)
        elif event == "moved":  # stolen: an idle report from the old worker no longer counts
            old = where[key]
            where[key] = old + "'"
            if r is not None:
                reg.processing(key, where[key])
                reg.reported_idle(r.rid, old, [key], False, where.get)
        elif event == "forgotten":
            reg.forgotten(key)
            done.add(key)
        for rid, _, keys in rounds:
            live = reg.rounds.get(str(rid))
            if live is not None:  # open exactly while a key is not done
                assert live.settled == all(k in done for k in keys)
    for rid, quorum, _keys in rounds:
        count = (finished.get(str(rid), 0) if unit == "partitions"
                 else len(done_workers.get(str(rid), ())))
        assert stops.get(str(rid), 0) == (1 if quorum and count >= quorum else 0)
        assert settled.count(str(rid)) >= 1  # its waiters are told
    assert reg.rounds == {} and reg.key_round == {}  # nothing left behind
    assert {rid for rid, *_ in reg.log} == {str(rid) for rid, _, _ in rounds}


def test_a_quorum_of_workers_stops_when_a_worker_has_finished_all_it_was_given():
    """Three partitions on a, one on b: under a quorum of one worker, a's first finish does
    not stop the round (two of a's are still open), b's finish does."""
    reg = RoundRegistry()
    rid = RoundId("f", 0)
    for i, w in enumerate("aaab"):
        reg.announce(i, rid.annotation(1, "workers"), "c")
        reg.processing(i, w)
    assert reg.finished(0) is None
    reg.processing(1, "b")  # stolen by b: b now has two open
    assert reg.finished(3) is None  # b still holds 1
    stop = reg.finished(1)
    assert stop is not None and stop.done_workers == {"b"}
    assert reg.finished(2) is None  # one stop per round


def test_a_quorum_of_partitions_stops_at_the_first_finish():
    reg = RoundRegistry()
    for i, w in enumerate("aab"):
        reg.announce(i, RoundId("f", 0).annotation(1), "c")
        reg.processing(i, w)
    assert reg.finished(0) is not None


@given(st.floats(0.01, 10.0), st.floats(0.0, 100.0), st.floats(0.0, 100.0),
       st.booleans())
def test_with_patience_the_quorum_sets_a_deadline_and_only_an_open_round_expires(
        patience, took, later, all_done):
    """A round with patience is not stopped at its quorum: its deadline is the quorum's
    time (from the announcement) times the patience after the quorum; at the deadline it is
    stopped, once, only if a task is still open."""
    now = [1000.0]
    reg = RoundRegistry(clock=lambda: now[0])
    rid = RoundId("f", 0)
    for i, w in enumerate("ab"):
        reg.announce(i, rid.annotation(1, "partitions", patience), "c")
        reg.processing(i, w)
    now[0] += took
    assert reg.finished(0) is None  # no stop at the quorum
    r = reg.rounds[str(rid)]
    assert r.deadline == pytest.approx(1000.0 + took + patience * took) and not r.stopped
    now[0] += later
    if all_done:
        assert reg.finished(1) is None and reg.expire(str(rid)) is None  # settled: no stop
        assert not r.stopped
    else:
        stop = reg.expire(str(rid))
        assert stop is r and r.stopped and r.t_quorum == now[0]
        assert reg.expire(str(rid)) is None  # once
        assert reg.finished(1) is None


def test_forgetting_a_fit_drops_its_log_and_keeps_running_rounds_out_of_it():
    reg = RoundRegistry()
    a, b = RoundId("fa", 0), RoundId("fb", 0)
    reg.announce("x", a.annotation(1), "c")
    reg.announce("y", b.annotation(1), "c")
    reg.finished("x")
    reg.forgotten("x")
    assert set(reg.times("fa")) == {str(a)}
    reg.forget_fit("fa")
    assert reg.times("fa") == {}
    reg.forget_fit("fb")  # still running: not logged when it retires
    reg.finished("y")
    reg.forgotten("y")
    assert reg.times("fb") == {} and not reg.log


def test_a_client_that_leaves_takes_its_rounds_along():
    reg = RoundRegistry()
    reg.announce("x", RoundId("f", 0).annotation(1), "gone")
    reg.announce("y", RoundId("g", 0).annotation(1), "stays")
    assert [r.rid for r in reg.remove_client("gone")] == ["f:0"]
    assert set(reg.rounds) == {"g:0"} and set(reg.key_round) == {"y"}


@given(st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 100), min_size=1),
       st.floats(0, 100), st.floats(0.1, 50))
def test_silent_workers_are_those_quiet_for_long_but_never_all(last_seen, now, seconds):
    quiet = liveness.silent(last_seen, now + 100, seconds)
    floor = max(seconds, liveness.MISSED_HEARTBEATS * 0.5)  # up to 10 workers: 0.5 s beats
    expected = {w for w, t in last_seen.items() if now + 100 - t > floor}
    assert quiet == (set() if expected == set(last_seen) else expected)


def test_a_round_gives_up_on_silent_workers_only_when_all_its_open_tasks_are_stuck():
    present = {"w1", "w2"}
    assert liveness.given_up(["a", "b"], {"a": "w1"}, present) == []
    assert liveness.given_up(["a", "b"], {}, present) == []
    assert sorted(liveness.given_up(["a", "b"], {"a": "w1", "b": "w2"}, present)) == [
        ("a", "w1"), ("b", "w2")]


def test_a_task_bound_to_a_worker_that_left_is_given_up_at_once():
    """A task strictly bound to a worker that left can never run: the round gives up on it
    without waiting for the others (they may still be running)."""
    assert liveness.given_up(["a", "b", "c"], {"a": "gone", "b": "w1"}, {"w1", "w2"}) == [
        ("a", "gone")]


def _task(key, state, **kw):
    return SimpleNamespace(key=key, state=state, who_has=kw.get("who_has"),
                           processing_on=kw.get("on"), dependencies=kw.get("deps", ()),
                           worker_restrictions=kw.get("only"),
                           loose_restrictions=kw.get("loose", False))


def test_waiting_on_follows_dependencies_to_data_only_quiet_workers_hold():
    data = _task("d", "memory", who_has={"w1"})
    shared = _task("s", "memory", who_has={"w1", "w2"})
    waiting = _task("t", "waiting", deps=(shared, data))
    running = _task("r", "processing", on="w1")
    elsewhere = _task("e", "processing", on="w2", deps=(shared,))
    found = liveness.waiting_on([waiting, running, elsewhere, shared], {"w1"})
    assert found == {"t": "w1", "r": "w1"}
    assert liveness.waiting_on([waiting], set()) == {}


def test_waiting_on_names_tasks_waiting_for_copies_bound_to_a_worker_that_left():
    """The hang of issue 33: a helper task waits for copies whose re-run is strictly bound
    to a worker that died (``no-worker`` forever)."""
    copy = _task("copy", "no-worker", only={"dead"})
    loose = _task("loose", "no-worker", only={"dead"}, loose=True)
    alive = _task("alive", "no-worker", only={"dead", "w2"})
    helper = _task("help", "waiting", deps=(copy,))
    other = _task("other", "waiting", deps=(loose, alive))
    found = liveness.waiting_on([helper, other, copy], set(), present={"w1", "w2"})
    assert found == {"help": "dead", "copy": "dead"}
    assert liveness.stranded(copy, {"w1"}) == "dead"
    assert liveness.stranded(copy, {"dead"}) is None
    assert liveness.waiting_on([helper], set()) == {}  # nothing said of who is present


def test_a_worker_that_left_holds_no_open_task_of_a_round():
    reg = RoundRegistry()
    for i, w in enumerate("aab"):
        reg.announce(("k", i), RoundId("f", 0).annotation(1), "c")
        reg.processing(("k", i), w)
    reg.left("a")
    r = reg.rounds["f:0"]
    assert r.on == {("k", 2): "b"} and r.load["a"] == 0 and len(r.open) == 3
    reg.processing(("k", 0), "b")  # placed again
    assert r.on[("k", 0)] == "b" and r.load["b"] == 2


def test_forgetting_a_fit_names_the_workers_its_tasks_went_to():
    reg = RoundRegistry()
    for i, w in enumerate("abab"):
        reg.announce(("k", i), RoundId("f", i // 2).annotation(1), "c")
        reg.processing(("k", i), w)
    reg.announce("z", RoundId("g", 0).annotation(1), "c")
    reg.processing("z", "c")
    assert reg.forget_fit("f") == {"a", "b"}
    assert reg.forget_fit("f") == set()
    assert reg.forget_fit("g") == {"c"}


def test_the_round_log_is_bounded_oldest_fits_first():
    reg = RoundRegistry()
    reg.log.maxlen = 5
    for fit in ("f1", "f2", "f3"):
        for r in range(2):
            reg.announce((fit, r), RoundId(fit, r).annotation(0), "c")
            reg.forgotten((fit, r))
    assert len(reg.log) == 4 and reg.times("f1") == {}
    assert set(reg.times("f3")) == {"f3:0", "f3:1"}


def test_judging_a_few_workers_does_not_scan_the_cluster():
    """Whether a worker is silent is asked of it alone; the rule that nobody is silent when
    nobody was heard from stops at the first worker heard from."""
    asked: list = []
    # 0-2 quiet (Dask spaces 10 000 workers' heartbeats ~50 s apart), the rest live
    last = {w: (0.0 if w < 3 else 1000.0) for w in range(10_000)}

    def last_seen(w):
        asked.append(w)
        return last[w]

    quiet = liveness.Quiet(last, last_seen, now=1000.0, seconds=3.0)
    assert [w for w in (0, 1, 2, 3, 9_999) if w in quiet] == [0, 1, 2]
    assert len(asked) < 20
    nobody = liveness.Quiet(last, lambda w: 0.0, now=1000.0, seconds=3.0)
    assert 0 not in nobody and None not in nobody
