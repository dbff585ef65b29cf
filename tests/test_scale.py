"""Issue 24's engine-side measurements on a real cluster: what a wave of tasks costs."""

from __future__ import annotations

import uuid

import numpy as np

from daskabsp import LogisticGD
from daskabsp.engine.link import Link, ScanTask
from daskabsp.extension._protocol import RoundId


async def _one_round(client, workers):
    program = LogisticGD()
    link = await Link.open(client, uuid.uuid4().hex[:8], program)
    rng = np.random.default_rng(0)
    tasks = []
    for p, w in enumerate(workers[:2]):
        X = rng.standard_normal((2000, 3))
        y = (X[:, 0] > 0).astype(float)
        data = await client.scatter([X, y], workers=[w], hash=False)
        tasks.append(ScanTask(p, (*data, None), w, 0, 0, 2000, None))
    assert link.wave_overhead is None
    rid = RoundId(link.fit_id, 0)
    futs = link.submit_round(rid, 1, np.zeros(4), tasks, 0.002)
    got = await link.collect(futs, rid, [0, 0], quorum=1, settle=True)
    await link.forget()
    return link.wave_overhead, got


def test_a_wave_of_tasks_is_timed_beyond_its_longest_scan(client, workers):
    overhead, got = client.sync(_one_round, client, workers)
    assert overhead is not None and overhead > 0
    assert len(got.results) == 2 and got.results[0].rows + got.results[1].rows > 0
