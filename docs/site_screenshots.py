"""Photograph pages of the built documentation in headless Chromium: ``docs/screenshots/``.

Build the site first (``sphinx-build -W -b html docs docs/_build/html``), then::

    python docs/site_screenshots.py [docs/_build/html]

It needs Debian's ``chromium`` and ``chromium-driver`` (selenium drives them; the test extras
install selenium). Each page is loaded from the files, at 1400 px wide, and photographed
whole (its full height, up to ``MAX_HEIGHT``), or, for an address with an anchor, the
``ANCHOR_HEIGHT`` pixels from the anchor down.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

HERE = Path(__file__).resolve().parent
#: screenshot name: page of the built site
PAGES = {
    "front-page": "index.html",
    "api-logistic-regression": "api/generated/daskabsp.estimators.LogisticRegression.html",
    "api-logistic-regression-methods": "api/generated/daskabsp.estimators.LogisticRegression"
                                       ".html#daskabsp.estimators.LogisticRegression.fit",
    "api-index": "api/index.html",
    "gallery": "examples/index.html",
}
WIDTH = 1400
MAX_HEIGHT = 4000
ANCHOR_HEIGHT = 1600


def browser(profile: str) -> webdriver.Chrome:
    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run",
              "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={WIDTH},1000"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def main(site: Path, out: Path = HERE / "screenshots") -> list[Path]:
    out.mkdir(exist_ok=True)
    shots = []
    with tempfile.TemporaryDirectory(prefix="daskabsp-chromium-") as profile:
        b = browser(profile)
        try:
            for name, page in PAGES.items():
                page, _, anchor = page.partition("#")
                b.set_window_size(WIDTH, ANCHOR_HEIGHT if anchor else 1000)
                b.get((site / page).resolve().as_uri() + (f"#{anchor}" if anchor else ""))
                if not anchor:
                    height, chrome = b.execute_script(
                        "return [document.documentElement.scrollHeight,"
                        " window.outerHeight - window.innerHeight]")
                    # the window's own bars take their height from the page's view (143 px
                    # of every page's bottom were cut)
                    b.set_window_size(WIDTH, min(int(height) + int(chrome), MAX_HEIGHT))
                path = out / f"{name}.png"
                b.save_screenshot(str(path))
                shots.append(path)
        finally:
            b.quit()
    return shots


if __name__ == "__main__":
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "_build" / "html"
    for p in main(site):
        print(p)
