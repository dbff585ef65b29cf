"""The engine's core: the driver's side of a fit, one concern per room (all run in the
fitting process; the pure rooms use no Dask and no I/O).

======================  ========================================================================
room                    what it owns
======================  ========================================================================
:mod:`.run`             one fit from start to end: the link, the placement, the policy's loop,
                        the record
:mod:`.context`         what a loop is given (a narrow, frozen view of the fit) and the
                        interface every loop offers the fit
:mod:`.loop`            the round loop of BSP and A-BSP, a short pipeline over the rooms
:mod:`.clock_loop`      the loop of SSP and ASP: one update per partition result
:mod:`.plan`            what a round asks (quorum, quotas, full, helped) and what its results
                        count for (settlement): the sync model's decisions, pure
:mod:`.book`            per partition: cursor, chunk size, staleness (pure)
:mod:`.clocks`          the clock book of SSP and ASP: clocks, leases, the staleness bound (pure)
:mod:`.membership`      the workers, their threads, who went silent; re-balancing (pure core)
:mod:`.placement`       where rows live: partitions, owners, copies, re-placement (the one
                        writer of them)
:mod:`.partitions`      placing rows on the cluster: row chunks, scatter, persist, copies
:mod:`.link`            the cluster: submit, stop, collect, forget, timings; the stop path
:mod:`.helpers`         the helper phase: leftovers scanned from copies in the same round
:mod:`.coverage`        which rows a helped round covers: leftovers shared out, pieces merged
                        (pure)
:mod:`.rates`           measured worker speeds and row costs; when a copy pays (pure)
:mod:`.observe`         one record per round, fanned out to history, dashboard, callbacks
:mod:`.journal`         what the engine did on its own, noted until the round's record takes it
:mod:`.queries`         what a fit asks of the scheduler: threads, silent workers, round log
:mod:`.caller`          a fit's coroutine run for a synchronous caller (callbacks, Ctrl-C)
======================  ========================================================================

The public entry points are :func:`daskabsp.fit` and :func:`daskabsp.place`.
"""
