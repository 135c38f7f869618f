"""A real browser for the page tests: Debian's chromium driven through chromium-driver
by selenium, headless; and what the node page shows, read the way a person reads it.

`tools/install-test-deps.sh` installs chromium and chromium-driver, the ``[test]`` extras
selenium; a test without them skips with the reason (fails under NRI_RESMGR_STRICT=1).
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.requirements import require

CHROMIUM = "chromium"
DRIVER = "chromedriver"


@contextmanager
def browser(*, width: int = 1100, height: int = 800) -> Iterator[Any]:
    """A headless chromium session (a selenium ``WebDriver``), closed afterwards."""
    chromium, driver = shutil.which(CHROMIUM), shutil.which(DRIVER)
    require(
        chromium and driver,
        "Debian's chromium and chromium-driver are not installed (tools/install-test-deps.sh)",
    )
    require(importlib.util.find_spec("selenium"), "selenium is not installed ([test] extras)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.binary_location = str(chromium)
    session = webdriver.Chrome(service=Service(str(driver)), options=options)
    try:
        yield session
    finally:
        session.quit()


def shown_containers(session: Any) -> dict[str, dict[str, str]]:
    """Container id -> column class -> the text the visible picture shows for it."""
    from selenium.webdriver.common.by import By

    out: dict[str, dict[str, str]] = {}
    rows = session.find_elements(By.CSS_SELECTOR, "section.view:not(.hidden) tr[data-container]")
    for row in rows:
        cid = row.get_attribute("data-container")
        out[cid] = {
            td.get_attribute("class"): td.text
            for td in row.find_elements(By.CSS_SELECTOR, "td[class]")
        }
    return out


def shown_cpus(session: Any) -> dict[int, tuple[str, str]]:
    """CPU -> (what holds it, its owner) as the visible picture's CPU boxes say."""
    from selenium.webdriver.common.by import By

    cells = session.find_elements(By.CSS_SELECTOR, "section.view:not(.hidden) span[data-cpu]")
    return {
        int(c.get_attribute("data-cpu")): (
            c.get_attribute("data-holder"),
            c.get_attribute("data-owner"),
        )
        for c in cells
    }


def choose_step(session: Any, step: int) -> None:
    """Pick `step` in the page's step selector."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(session.find_element(By.ID, "step")).select_by_value(str(step))


def no_alert(session: Any) -> bool:
    """Whether no script raised an alert (an injected one would have)."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        _ = session.switch_to.alert
    except NoAlertPresentException:
        return True
    return False
