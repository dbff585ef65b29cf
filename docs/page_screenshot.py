"""Take docs/dashboard-page.png: the daskabsp dashboard page during an A-BSP fit.

A LocalCluster of 4 single-threaded workers, one emulated 4x slower; a short BSP fit, then an
A-BSP fit of the same problem, photographed in headless Chromium (Debian's chromium and
chromium-driver, driven by selenium) while it runs, once the page shows 60 of its rounds.

    python docs/page_screenshot.py [output.png]
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
from distributed import Client, LocalCluster
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

import daskabsp
from daskabsp.cluster import worker_addresses
from daskabsp.extension import PAGE

ROUNDS_SHOWN = 60


def main(out: Path) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((800_000, 10)) * np.geomspace(0.3, 3, 10)
    y = (X @ rng.standard_normal(10) + rng.standard_normal(len(X)) > 0).astype(float)
    with LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        slow = worker_addresses(client)[0]
        opts = Options()
        opts.binary_location = "/usr/bin/chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1400,1330", "--hide-scrollbars"):
            opts.add_argument(a)
        browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        done = threading.Event()
        try:
            browser.get(cluster.dashboard_link.rsplit("/status", 1)[0] + PAGE)
            with daskabsp.slow_workers(client, {slow: 4.0}):
                daskabsp.fit(daskabsp.LogisticGD(), X, y, sync="bsp", max_iter=15, tol=None,
                             n_partitions=8, client=client)
                fit = threading.Thread(target=lambda: daskabsp.fit(
                    daskabsp.LogisticGD(), X, y, sync="absp", max_iter=2000, tol=None,
                    n_partitions=8, client=client, callback=lambda *a: done.is_set()))
                fit.start()
                deadline = time.monotonic() + 300
                while _rounds_shown(browser) < ROUNDS_SHOWN:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the page did not show the fit's rounds")
                    time.sleep(0.2)
                browser.save_screenshot(str(out))
                done.set()
                fit.join()
        finally:
            done.set()
            browser.quit()
    print(f"wrote {out}")


def _rounds_shown(browser) -> int:
    return browser.execute_script("""
        const doc = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
        const ds = doc && doc.get_model_by_name('daskabsp-durations');
        const fits = doc && doc.get_model_by_name('daskabsp-fits');
        if (!ds || !fits || fits.data.status[0] !== 'running') return 0;
        return ds.data.round.length;
    """)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else
         Path(__file__).resolve().parent / "dashboard-page.png")
