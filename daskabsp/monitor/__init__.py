"""Watching a fit where users already look, all on the driver's side: the fit history (an
``xarray.Dataset``, :mod:`.history`), its plots (:mod:`.plot`), per-round callbacks and the
progress bar (:mod:`.callbacks`), and the reports that feed the dashboard page
(:mod:`.reporting`; the page itself is the scheduler preload :mod:`daskabsp.dashboard`, fed by
the scheduler plugin's book of fits).

The submodules are imported where they are used: the partition tasks and the plugins never
need xarray or matplotlib.
"""
