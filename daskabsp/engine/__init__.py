"""The engine's core, one concern per room.

======================  ========================================================================
room                    what it owns
======================  ========================================================================
:mod:`.plan`            what a round asks (quorum, quotas, full, helped) and what its results
                        count for (settlement): the sync model's decisions, pure
:mod:`.membership`      the workers, their threads, who went silent; re-balancing (pure core)
:mod:`.placement`       where rows live: partitions, owners, copies, re-placement
:mod:`.link`            the cluster: submit, stop, collect, forget, timings; the stop path
:mod:`.helpers`         the helper phase: leftovers scanned from copies in the same round
:mod:`.observe`         one record per round, fanned out to history, dashboard, callbacks
:mod:`.loop`            the round loop of BSP and A-BSP, a short pipeline over the rooms
:mod:`.run`             one fit from start to end
======================  ========================================================================

The public entry points are :func:`daskabsp.fit` and :func:`daskabsp.place`.
"""
