"""Draw docs/img/node-view.png, the README's picture of the node page.

Runs a shipped scenario in the simulator, writes the page of one step and photographs it
in headless chromium (Debian's chromium and chromium-driver, selenium), then stores it
as a palette PNG to keep it small::

    python3 tools/screenshot_view.py [--scenario examples/scenarios/basic-qos.yaml]
        [--step 2] [--output docs/img/node-view.png]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from nri_resmgr.simulator.run import quiet_log
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.simulator.views import run_views
from nri_resmgr.view.html import render_page

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(REPO / "examples/scenarios/basic-qos.yaml"))
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--output", default=str(REPO / "docs/img/node-view.png"))
    parser.add_argument("--size", default="860,760", help="window width,height in pixels")
    args = parser.parse_args()
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        print("screenshot_view: chromium and chromedriver are needed", file=sys.stderr)
        return 2
    _, views = run_views(load_scenario(Path(args.scenario)), log=quiet_log())
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "node.html"
        page.write_text(render_page([views[args.step]]), encoding="utf-8")
        options = webdriver.ChromeOptions()
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--window-size={args.size}",
        ):
            options.add_argument(arg)
        options.binary_location = chromium
        session = webdriver.Chrome(service=Service(driver), options=options)
        try:
            session.get(page.as_uri())
            shot = Path(tmp) / "shot.png"
            session.save_screenshot(str(shot))
        finally:
            session.quit()
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        Image.open(shot).convert("RGB").quantize(colors=64).save(out, optimize=True)
    print(f"wrote {args.output} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
