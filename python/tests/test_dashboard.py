"""The web dashboard (/ui/) in a real browser: Debian's chromium, headless, driven by
Selenium through chromium-driver, against `tranche dev`.

Each test saves screenshots under `$CARGO_TARGET_DIR/dashboard-screenshots/` (or
`target/`; `TRANCHE_SCREENSHOTS` names another folder). Without chromium or
chromium-driver the tests are skipped, saying so on stderr; under CI=true they fail
instead (scripts/test.sh installs both as root).
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import tranche

from conftest import REPO, start_dev, stop_dev, tranche_bin

MISSING = None
try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:  # pragma: no cover - reported below
    MISSING = f"selenium is not installed ({e}); pip install -e 'python[test]'"


def shots_dir() -> Path:
    if os.environ.get("TRANCHE_SCREENSHOTS"):
        d = Path(os.environ["TRANCHE_SCREENSHOTS"])
    else:
        d = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "dashboard-screenshots"
    d.mkdir(parents=True, exist_ok=True)
    return d


def find_browser() -> tuple[str, str] | str:
    """(chromium, chromedriver), or why they cannot be used."""
    if MISSING:
        return MISSING
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
    )
    if not chrome or not driver:
        return (
            "chromium and chromium-driver are not installed "
            "(apt-get install chromium chromium-driver; scripts/test.sh does it as root)"
        )
    return chrome, driver


def skip_or_fail(why: str) -> None:
    msg = f"dashboard browser tests SKIPPED: {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(msg + " (CI=true: a test that cannot run fails)")
    print(f"\n*** {msg} ***", file=sys.stderr)
    # Also in the warnings summary, which pytest prints whatever its options.
    warnings.warn(msg, stacklevel=2)
    pytest.skip(msg)


def dashboard_url(dev: Any) -> str:
    """The dashboard URL `tranche dev` wrote to the file it names (an admin token in its
    fragment), checked against the URL it printed."""
    text = (Path(dev.dir).parent / "dev.err").read_text()
    m = re.search(r"Dashboard: (https://\S+/ui/) .*\n.*open the URL in (\S+),", text)
    assert m, f"tranche dev printed no dashboard URL:\n{text}"
    url = Path(m.group(2)).read_text().strip()
    assert url.startswith(m.group(1) + "#token="), url
    return url


def token_for(dev: Any, role: str, name: str) -> str:
    out = subprocess.run(
        [tranche_bin(), "token", "issue", "--ttl", "1h", "--config", dev.config_of(role, name)],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def tranche_cli(dev: Any, *args: str, config: str | None = None) -> str:
    out = subprocess.run(
        [tranche_bin(), args[0], "--config", config or dev.config, *args[1:]],
        check=True, capture_output=True, text=True, timeout=60,
    )
    return out.stdout


class Browser:
    def __init__(self, driver: Any, base: str) -> None:
        self.d = driver
        self.base = base  # https://host:port

    def open(self, token: str, page: str = "shares") -> None:
        """Loads the dashboard afresh, logged in with `token`."""
        self.d.get("about:blank")
        self.d.get(f"{self.base}/ui/#token={token}&{page}")
        self.wait_loaded(page)

    def go(self, page: str) -> None:
        self.d.execute_script("location.hash = arguments[0]", f"#/{page}")
        self.wait_loaded(page.split("/")[0])

    def wait_loaded(self, page: str, timeout: float = 15) -> float:
        """Waits until `page` has drawn once; returns how long that took."""
        t0 = time.monotonic()
        self.until(
            lambda d: d.execute_script(
                "return document.body.dataset.page === arguments[0] && !!document.body.dataset.loaded",
                page,
            ),
            timeout,
            f"the {page} page did not load",
        )
        return time.monotonic() - t0

    def until(self, cond: Callable[[Any], Any], timeout: float = 20, what: str = "") -> Any:
        def safe(d: Any) -> Any:
            try:
                return cond(d)
            except StaleElementReferenceException:
                return False
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.1).until(safe)
        except TimeoutException:
            raise AssertionError(f"timed out: {what}") from None

    def shot(self, name: str, full: bool = False) -> Path:
        """Saves a screenshot; `full`: of the whole page, not only what fits the window."""
        p = shots_dir() / f"{name}.png"
        if full:
            h = self.d.execute_script("return document.documentElement.scrollHeight")
            self.d.set_window_size(1440, max(900, min(int(h) + 140, 4000)))
            time.sleep(0.3)
        self.d.save_screenshot(str(p))
        if full:
            self.d.set_window_size(1440, 900)
        return p

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.d.get_log("browser") if e.get("level") == "SEVERE"]

    def text(self, css: str) -> str:
        return str(self.d.find_element(By.CSS_SELECTOR, css).text)


@pytest.fixture(scope="module")
def browser(dev: Any) -> Iterator[Browser]:
    yield from browser_on(dev)


def browser_on(dev: Any) -> Iterator[Browser]:
    """Headless chromium on `dev`'s dashboard, quit at the end."""
    found = find_browser()
    if isinstance(found, str):
        skip_or_fail(found)
        raise AssertionError("unreachable")
    chrome, driver = found
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--window-size=1440,900", "--disable-gpu",
              "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
              # The dev cluster's own CA is not one the browser knows.
              "--ignore-certificate-errors"):
        opts.add_argument(a)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # chromium's sandbox refuses to run as root
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)
    d.set_page_load_timeout(30)
    url = dashboard_url(dev)
    base = url.split("/ui/")[0]
    try:
        yield Browser(d, base)
    finally:
        d.quit()


@pytest.fixture(scope="module")
def admin_token(dev: Any) -> str:
    return dashboard_url(dev).split("#token=")[1]


@pytest.fixture(scope="module")
def cluster(dev: Any) -> Iterator[tranche.Cluster]:
    c = tranche.Cluster.from_config(dev.config_of("admin", "admin"))
    yield c
    c.close()


def wait_status(job: Any, want: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = str(job.refresh().status)
        if s in want:
            return s
        time.sleep(0.2)
    raise AssertionError(f"job {job.id} is {job.status}, not {want}")


def test_the_dashboard_loads_every_page_without_console_errors(browser, dev, admin_token, cluster):
    # Something on each page: a job that ran (its output), and a reclaim (nlp borrows
    # vision's idle A100s, then vision takes them back).
    done = cluster.submit(share="nlp", gpus=2, name="hello", time_limit="10m",
                          command=["sh", "-c", "for i in 1 2 3 4 5; do echo step $i of 5; sleep 0.5; done"])
    assert done.wait(timeout=60) == "SUCCEEDED"
    nlp = [cluster.submit(share="nlp", gpus=4, unit="a100", name=f"nlp-{i}", time_limit="2h",
                          command=["sleep", "600"]) for i in (1, 2)]
    for j in nlp:
        wait_status(j, {"RUNNING"})
    owner = cluster.submit(share="vision", gpus=4, unit="a100", name="owner", priority=10,
                           time_limit="1h", command=["sleep", "600"])
    wait_status(owner, {"RUNNING"})
    victims = [j for j in nlp if j.refresh().data["preemptions"] > 0]
    assert len(victims) == 1, [j.data for j in nlp]
    borrower = victims[0]
    try:
        browser.open(admin_token)
        # The token left the address bar for the tab's sessionStorage.
        assert "token" not in browser.d.current_url
        assert browser.d.execute_script("return sessionStorage.getItem('tranche.token')") == admin_token
        assert "admin (admin)" in browser.text("#who")
        browser.until(lambda d: "live" == browser.text("#live"), 15, "the event stream")

        rows = browser.d.find_elements(By.CSS_SELECTOR, "#shares-now tbody tr[data-share]")
        assert {r.get_attribute("data-share") for r in rows} >= {"research", "vision", "nlp"}
        browser.until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart rect"), 10,
                      "the ledger chart has bars")
        browser.shot("shares", full=True)

        browser.go("queue")
        assert browser.d.find_elements(By.ID, "queue-front")
        browser.shot("queue")

        browser.go("nodes")
        cells = browser.d.find_elements(By.CSS_SELECTOR, ".gpu")
        assert len(cells) == 16
        owned = [c for c in cells if c.get_attribute("data-job") == str(owner.id)]
        assert len(owned) == 4 and all(c.get_attribute("data-state") == "used" for c in owned)
        browser.shot("nodes")

        browser.go("preemptions")
        browser.until(
            lambda d: any(f"job {borrower.id}" in r.text and f"job {owner.id}" in r.text
                          for r in d.find_elements(By.CSS_SELECTOR, "table tr")),
            10, "the reclaim of the borrower for the owner is listed")
        browser.shot("preemptions", full=True)

        browser.go(f"job/{done.id}")
        browser.until(lambda d: "step 5 of 5" in browser.text("#log"), 15, "the job's output")
        assert "SUCCEEDED" in browser.text("h1")
        assert browser.d.find_elements(By.CSS_SELECTOR, "#timeline rect")
        browser.shot("job", full=True)

        browser.go(f"job/{borrower.id}")
        browser.until(lambda d: f"stopped by a reclaim for job {owner.id} (vision)" in browser.text("main"), 10,
                      "the borrower's attempt names its preemptor")
        browser.shot("job-preempted", full=True)

        browser.go("report")
        assert browser.d.find_elements(By.ID, "report")
        browser.shot("report")

        errors = browser.errors()
        assert errors == [], f"console errors: {errors}"
    finally:
        for j in (*nlp, owner):
            try:
                j.cancel()
            except tranche.TrancheError:
                pass


def test_the_job_page_of_a_job_that_left_the_state_shows_it_archived(tmp_path):
    # A cluster of its own, whose controllers move ended jobs to their history store a
    # second after they end.
    short = start_dev(tmp_path, "--job-hot-s", "1")
    try:
        c = tranche.Cluster.from_config(short.config)
        job = c.submit(share="nlp", gpus=1, name="archived", command=["sh", "-c", "echo kept on n"])
        assert job.wait(timeout=60) == "SUCCEEDED"
        deadline = time.monotonic() + 60
        while not job.refresh().archived:
            assert time.monotonic() < deadline, "the job did not leave the state"
            time.sleep(0.3)
        assert job.id not in [j.id for j in c.jobs()]
        c.close()
        for b in browser_on(short):
            b.open(dashboard_url(short).split("#token=")[1])
            b.go(f"job/{job.id}")
            b.until(lambda d: "SUCCEEDED" in b.text("h1"), 15, "the job's header")
            note = b.text("[data-field=archived]")
            assert "Archived" in note and "history" in note, note
            b.until(lambda d: "kept on n" in b.text("#log"), 15, "the output the agent keeps")
            assert b.d.find_elements(By.CSS_SELECTOR, "#timeline rect")
            b.shot("job-archived", full=True)
            assert b.errors() == []
    finally:
        stop_dev(short)


def test_a_submitted_job_shows_on_queue_then_nodes_without_a_reload(browser, dev, admin_token, cluster):
    browser.open(admin_token, "queue")
    browser.d.execute_script("window.noReload = 'still here'")
    # research is RESERVE with 4 H100s: a blocker takes all of them, so the next job
    # waits in the queue until the blocker is cancelled.
    blocker = cluster.submit(share="research", gpus=4, unit="h100", name="blocker",
                             time_limit="1h", command=["sleep", "600"])
    wait_status(blocker, {"RUNNING"})
    waiter = cluster.submit(share="research", gpus=1, unit="h100", name="waiter",
                            command=["sleep", "600"])
    try:
        row = f"#queue-front tr[data-job='{waiter.id}']"
        browser.until(lambda d: d.find_elements(By.CSS_SELECTOR, row), 15,
                      "the waiting job shows on the Queue page")
        cells = browser.d.find_element(By.CSS_SELECTOR, row)
        position = cells.find_element(By.CSS_SELECTOR, "[data-field=position]").text
        assert "1 of 1 in share" in position, position
        estimate = cells.find_element(By.CSS_SELECTOR, "[data-field=estimate]").text
        # The blocker has a time limit, so the estimate is a time, not "unknown".
        assert "unknown" not in estimate and "in " in estimate, estimate
        assert "RUNNABLE" in cells.text
        browser.shot("queue-waiting", full=True)

        browser.go("nodes")
        assert not browser.d.find_elements(By.CSS_SELECTOR, f".gpu[data-job='{waiter.id}']")
        blocker.cancel()
        browser.until(lambda d: d.find_elements(By.CSS_SELECTOR, f".gpu[data-job='{waiter.id}']"),
                      30, "the job shows on the Nodes page once placed")
        browser.shot("nodes-placed")
        assert browser.d.execute_script("return window.noReload") == "still here"
        assert browser.errors() == []
    finally:
        for j in (blocker, waiter):
            try:
                j.cancel()
            except tranche.TrancheError:
                pass


def node_json(dev: Any, name: str) -> dict[str, Any]:
    rows = json.loads(tranche_cli(dev, "nodes", "--json"))
    return next(r for r in rows if r["name"] == name)


def test_an_operator_drains_and_resumes_from_the_nodes_page(browser, dev):
    # A user sees the nodes but no drain buttons.
    browser.open(token_for(dev, "user", dev.user), "nodes")
    assert browser.d.find_elements(By.CSS_SELECTOR, ".node[data-node=n4]")
    assert not browser.d.find_elements(By.CSS_SELECTOR, "button[data-action]")

    browser.open(token_for(dev, "operator", "ops"), "nodes")
    assert "ops (operator)" in browser.text("#who")
    try:
        browser.d.find_element(By.CSS_SELECTOR, "button[data-action=drain][data-node=n4]").click()
        form = browser.until(lambda d: d.find_element(By.CSS_SELECTOR, "form.drainform[data-node=n4]"),
                             10, "the drain form")
        form.find_element(By.CSS_SELECTOR, "input[data-field=reason]").send_keys("swap a fan")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        browser.until(
            lambda d: d.find_element(By.CSS_SELECTOR, ".node[data-node=n4]").get_attribute("data-state")
            in ("DRAINING", "DRAINED"), 15, "n4 shows drained")
        assert "swap a fan" in browser.text(".node[data-node=n4] [data-field=reason]")
        browser.shot("nodes-drained")
        n4 = node_json(dev, "n4")
        assert n4["drain"] == "swap a fan" and n4["state"] in ("draining", "drained"), n4
        text = tranche_cli(dev, "nodes", "--reasons")
        assert re.search(r"^n4\s+drain(ing|ed)\s+swap a fan$", text, re.M), text

        browser.d.find_element(By.CSS_SELECTOR, "button[data-action=resume][data-node=n4]").click()
        browser.until(
            lambda d: d.find_element(By.CSS_SELECTOR, ".node[data-node=n4]").get_attribute("data-state")
            not in ("DRAINING", "DRAINED"), 15, "n4 back in service")
        assert node_json(dev, "n4")["drain"] is None
        assert browser.errors() == []
    finally:
        if node_json(dev, "n4")["drain"] is not None:
            tranche_cli(dev, "resume", "n4", config=dev.config_of("operator", "ops"))


def local(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M:%S")


def test_the_report_page_totals_equal_tranche_report_json(browser, dev, admin_token, cluster, tmp_path):
    job = cluster.submit(share="vision", gpus=2, unit="a100", command=["sleep", "1"])
    assert job.wait(timeout=60) == "SUCCEEDED"
    browser.open(admin_token, "report")
    for by in ("share", "user"):
        if by != "share":
            from selenium.webdriver.support.ui import Select
            Select(browser.d.find_element(By.ID, "report-by")).select_by_value(by)
            browser.d.find_element(By.CSS_SELECTOR, "form.controls button[type=submit]").click()
            browser.until(lambda d: d.find_element(By.ID, "report").get_attribute("data-by") == by,
                          10, f"the report by {by}")
        t = browser.d.find_element(By.ID, "report")
        frm, to = int(t.get_attribute("data-from")), int(t.get_attribute("data-to"))
        page: dict[str, dict[str, float]] = {}
        for tr in t.find_elements(By.CSS_SELECTOR, "tbody tr[data-key]"):
            page[tr.get_attribute("data-key")] = {
                c.get_attribute("data-field"): float(c.get_attribute("data-value"))
                for c in tr.find_elements(By.CSS_SELECTOR, "td[data-value]")
            }
        cli = json.loads(tranche_cli(dev, "report", "--json", "--by", by,
                                     "--since", local(frm), "--until", local(to)))
        assert (cli["from"], cli["to"]) == (frm, to)
        want = {f"{r[by]}/{r['unit']}": r["gpu_hours"] for r in cli["rows"]}
        assert set(page) == set(want), (page, want)
        for key, figures in want.items():
            for k, v in figures.items():
                # The same hours read a moment apart: equal but for an entry between.
                assert abs(page[key][k] - v) < 1e-3, (by, key, k, page[key][k], v)
        assert want[f"{'vision' if by == 'share' else 'admin'}/a100"]["used"] > 0
        browser.shot(f"report-by-{by}", full=True)

    # The CSV holds the same rows, at full precision.
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.d.execute_cdp_cmd("Browser.setDownloadBehavior",
                              {"behavior": "allow", "downloadPath": str(downloads)})
    browser.d.find_element(By.ID, "report-csv").click()
    # Done when no partial download is left and the file has its bytes (the file may be
    # there, empty, a moment before its content).
    def downloaded(_d: object) -> list[Path]:
        if any(downloads.glob("*.crdownload")):
            return []
        return [p for p in downloads.glob("*.csv") if p.stat().st_size > 0]

    csvs = browser.until(downloaded, 15, "the CSV download")
    rows = list(csv.DictReader(csvs[0].read_text().splitlines()))
    assert {f"{r['user']}/{r['unit']}": float(r["used_gpu_hours"]) for r in rows} == {
        k: v["used"] for k, v in page.items()}
    assert browser.errors() == []


def test_the_shares_page_shows_the_groups_of_shares(browser, dev, admin_token, cluster, tmp_path):
    # An admin puts vision and nlp in a group (nested quotas) through the HTTP API.
    policy = tmp_path / "groups.toml"
    policy.write_text(
        '[[groups]]\nname = "ml"\nqueue = "q"\nshares = ["vision", "nlp"]\n'
        'capacity_limits = [ { unit = "a100", max = 8 } ]\nstrategy = "LEND_AND_BORROW"\n'
        'borrow_limit = -1\n')
    cluster.apply(policy, dry_run=False)
    try:
        assert [g["name"] for g in cluster.groups()] == ["ml"]
        browser.open(admin_token)
        rows = browser.until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#groups-now tbody tr[data-group]"), 15,
            "the groups table")
        assert [r.get_attribute("data-group") for r in rows] == ["ml"]
        cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
        assert cells[:4] == ["ml", "LEND_AND_BORROW", "a100", "8"], cells
        assert cells[5:] == ["none", "vision, nlp"], cells
        browser.shot("groups")
    finally:
        # The session's other tests see the dev cluster's shares stand alone again.
        cluster.delete_group("ml")
    assert cluster.groups() == []
    with pytest.raises(tranche.NotFound):
        cluster.delete_group("ml")


def test_without_a_token_the_page_asks_for_one_and_refuses_a_bad_one(browser):
    browser.d.get("about:blank")
    browser.d.get(f"{browser.base}/ui/#/nodes")
    browser.d.execute_script("sessionStorage.clear(); location.reload()")
    field = browser.until(lambda d: d.find_element(By.ID, "token"), 10, "the login form")
    assert not browser.d.find_elements(By.CSS_SELECTOR, ".node")
    field.send_keys("tranche1.not.a.token")
    browser.d.find_element(By.CSS_SELECTOR, ".login button[type=submit]").click()
    browser.until(lambda d: "The token was refused" in browser.text("main"), 10,
                  "the refusal is shown")
    assert browser.d.find_elements(By.ID, "token")
    assert browser.d.execute_script("return sessionStorage.getItem('tranche.token')") is None


@pytest.mark.skipif(os.environ.get("TRANCHE_DASHBOARD_BENCH") != "1",
                    reason="the 10,000-job benchmark runs with TRANCHE_DASHBOARD_BENCH=1")
def test_benchmark_first_loads_with_10000_jobs(tmp_path):
    """Not a timed test: prints (and saves as JSON beside the screenshots) how long each
    page's first load takes, from navigation to first drawing, with 10,000 jobs in the
    state (an array of 10,000 one-GPU tasks: 16 run, the rest wait)."""
    from conftest import start_dev, stop_dev

    found = find_browser()
    if isinstance(found, str):
        skip_or_fail(found)
    d = start_dev(tmp_path)
    try:
        out = tranche_cli(d, "submit", "--share", "nlp", "--gpus", "1", "--time", "1h",
                          "--array", "0-9999", "--parsable", "--", "sleep", "3600",
                          config=d.config_of("admin", "admin"))
        array = out.strip().split(";")[0]
        c = tranche.Cluster.from_config(d.config_of("admin", "admin"))
        page = c.request("GET", "/api/v1/jobs", params={"limit": 1000})
        n = len(page["jobs"])
        while page.get("next_after"):
            page = c.request("GET", "/api/v1/jobs", params={"limit": 1000, "after": page["next_after"]})
            n += len(page["jobs"])
        assert n >= 10000, n
        url = dashboard_url(d)
        chrome, driver = found  # type: ignore[misc]
        opts = webdriver.ChromeOptions()
        opts.binary_location = chrome
        for a in ("--headless=new", "--window-size=1440,900", "--ignore-certificate-errors"):
            opts.add_argument(a)
        if os.geteuid() == 0:
            opts.add_argument("--no-sandbox")
        drv = webdriver.Chrome(service=Service(driver), options=opts)
        b = Browser(drv, url.split("/ui/")[0])
        times: dict[str, list[int]] = {}
        try:
            b.open(url.split("#token=")[1])
            pages = ["shares", "queue", "nodes", "preemptions", "report", f"job/{array}_5000"]
            for _ in range(3):
                for p in pages:
                    drv.get("about:blank")
                    drv.get(f"{b.base}/ui/#/{p}")
                    b.wait_loaded(p.split("/")[0], timeout=30)
                    ms = int(drv.execute_script("return document.body.dataset.firstMs"))
                    times.setdefault(p.split("/")[0], []).append(ms)
            b.shot("bench-queue-10000")
        finally:
            drv.quit()
        best = {p: min(v) for p, v in times.items()}
        (shots_dir() / "bench-10000.json").write_text(json.dumps({"jobs": n, "ms": times}, indent=1))
        print(f"\nfirst load with {n} jobs (ms, best of 3): {best}", file=sys.stderr)
        assert all(v for v in best.values())
    finally:
        stop_dev(d)
