"""The Iterations view in a real browser: headless Chromium (Debian's, driven by Selenium through
its chromedriver) logs into the Airflow UI of a real ``airflow api-server``, opens Browse ->
Iterations, picks the store and the finished PageRank job, and reads the chart and the epoch
table, which must be the job's checkpoints; then the job's page from its DAG run's Iterations
tab, that run's batch highlighted. The screenshots are kept as test artifacts."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from include.checkpoints.checkpoint_log import CheckpointLog
from include.store import LocalStore
from tests.conftest import ROOT
from tests.helpers import FINISHED_JOB

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# the network is closed: without these Chromium waits on connections it will never get
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1440,1500")
ARTIFACTS = os.path.join(ROOT, "test-artifacts")


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: apt-get install chromium chromium-driver "
                    "(./run.sh setup installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
    options.add_argument(f"--user-data-dir={profile}")
    service = Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(90)
    try:
        yield driver
    finally:
        driver.quit()  # chromedriver ends the browser it started, then itself


def test_the_view_of_a_finished_pagerank_run_in_the_airflow_ui(api_server, view_stores, view_dag_runs, browser,
                                                               tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 90)
    _sign_in(browser, wait, api_server)
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Browse']"))).click()
    wait.until(EC.element_to_be_clickable((By.XPATH, "//*[@role='menuitem'][normalize-space()='Iterations']"))).click()
    wait.until(lambda d: "/plugin/iterations" in d.current_url)
    frame = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "iframe[src$='/iterations/']")))
    browser.switch_to.frame(frame)

    root = wait.until(EC.presence_of_element_located((By.NAME, "root")))
    root.clear()
    root.send_keys(view_stores.root)
    browser.find_element(By.XPATH, "//button[normalize-space()='Open']").click()
    wait.until(EC.element_to_be_clickable((By.XPATH, f"//a[@class='job'][normalize-space()='{FINISHED_JOB}']"))).click()
    wait.until(EC.presence_of_element_located((By.ID, "metric-chart")))

    log = CheckpointLog(LocalStore(view_stores.root), FINISHED_JOB)
    final = log.latest()
    manifests = [log.load(i) for i in log.checkpoint_ids() if i != final.checkpoint_id]
    expected = [(m.epoch, m.decision.metrics["l1_delta"]) for m in manifests]
    assert browser.find_element(By.ID, "job-status").text == "TERMINATED"

    # the chart: one point per epoch at its metric, lower on the chart for a smaller value
    chart = browser.find_element(By.ID, "metric-chart")
    assert chart.get_attribute("data-metric") == "l1_delta"
    points = chart.find_elements(By.CSS_SELECTOR, "circle.point")
    got = [(int(p.get_attribute("data-epoch")), float(p.get_attribute("data-value"))) for p in points]
    assert got == expected
    xs = [float(p.get_attribute("cx")) for p in points]
    ys = [float(p.get_attribute("cy")) for p in points]
    assert xs == sorted(xs) and len(set(xs)) == len(xs), "epochs left to right"
    by_value = [y for _, y in sorted(zip([v for _, v in expected], ys))]
    assert by_value == sorted(by_value, reverse=True), "a larger metric is drawn higher"

    # the table, as a reader sees it: epoch, status, metric (4 significant digits), feedback
    rows = browser.find_elements(By.CSS_SELECTOR, "table#epochs tr.epoch")
    cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    b1_last = view_stores.batches["b1"].checkpoint_id
    assert [(int(c[0]), c[1].split("\n")[0], c[2]) for c in cells] == [
        (m.epoch, "restored" if m.epoch == b1_last else "committed", m.batch_id) for m in manifests]
    for c, m in zip(cells, manifests):
        value = m.decision.metrics["l1_delta"]
        assert float(c[5]) == pytest.approx(value, rel=1e-3), (c, value)
        assert int(c[6]) == m.decision.feedback_count
        assert c[9].startswith("passed")  # the data checks' link
        assert c[4].endswith(" s"), c[4]  # the epoch's time, beside its bar of phases
    assert [o.text.split("\n")[0] for o in browser.find_elements(By.CSS_SELECTOR, "table#outputs tr.output td")][:2] \
        == ["ranks", "PUBLISHED"]

    browser.switch_to.default_content()
    _keep(browser, tmp_path, "iterations-view.png")

    # the DAG run's own tab: the same job, the run's batch highlighted
    browser.get(f"{api_server.url}/dags/iterate_pagerank/runs/b2")
    menu = "//*[(self::a or self::button) and normalize-space()='Iterations']"
    wait.until(EC.element_to_be_clickable((By.XPATH, menu))).click()
    frame = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='/iterations/runs/iterate_pagerank/b2']")))
    browser.switch_to.frame(frame)
    wait.until(EC.presence_of_element_located((By.ID, "metric-chart")))
    assert browser.find_element(By.ID, "job-id").text == FINISHED_JOB
    current = [int(r.get_attribute("data-epoch")) for r in browser.find_elements(By.CSS_SELECTOR, "table#epochs tr.current")]
    assert current == [m.epoch for m in manifests if m.batch_id == "b2"] and current
    browser.switch_to.default_content()
    _keep(browser, tmp_path, "iterations-run-tab.png")


def _sign_in(browser, wait, api_server, user: str = "viewer") -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    browser.get(api_server.url + "/")  # the Airflow UI sends an anonymous visitor to its login page
    wait.until(EC.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    browser.find_element(By.NAME, "password").send_keys(api_server.passwords[user])
    browser.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
    wait.until(lambda d: "/auth/login" not in d.current_url)


def _keep(browser, tmp_path, name: str) -> str:
    """A screenshot of the browser's window, kept in test-artifacts/ (its path)."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = tmp_path / name
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 20_000
    shutil.copy(shot, os.path.join(ARTIFACTS, name))
    return os.path.join(ARTIFACTS, name)


def _essence(log: str) -> str:
    """The lines of a ``dags test`` log that say what went wrong (its tail is the scheduler's)."""
    keep = [line for line in log.splitlines()
            if any(w in line for w in ("[error", "ERROR", "FAILED", "Error:", "failed", "exit "))
            and "unrunnable tasks" not in line]
    return "\n".join(keep)[-6000:]


def test_the_view_shows_how_a_real_dag_job_recovered(api_server, airflow_env, browser, tmp_path):
    """Three ``airflow dags test`` runs of the PageRank DAG write one job: the first is killed
    (SIGKILL, the whole process) with epoch 1 planned; it is marked failed, as a person would;
    the second runs with a data check no epoch can pass and stops at epoch 1; the third
    resumes and finishes. On the job's page, opened from the third run's Iterations tab, epoch
    1 lists its three attempts: the killed one and the refused one, each with why, the task and
    try that ran it and the attempt that committed instead, and the committed one; each
    committed epoch has its phases; the refused attempt's checks name the failed expectation;
    the batches are the DAG runs by their Airflow ids, linked to them."""
    import json
    import urllib.error
    import urllib.parse

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.helpers import graph_with_dangling, write_edges

    edges = write_edges(tmp_path / "edges.csv", graph_with_dangling(20, 0.15, seed=11))
    root, out = str(tmp_path / "store"), str(tmp_path / "out")
    conf = {"job_id": "pr-recovery", "input_path": edges, "checkpoint_root": root, "output_path": out,
            "max_epochs": 4, "tolerance": 0, "num_partitions": 2, "continuation": False, "retain_last": 10}
    env = {**api_server.env, **{k: airflow_env[k] for k in ("ITERATIONS_SPARK_CONNECT_PORT",
                                                            "ITERATIONS_SPARK_CONNECT_DIR")}}

    def runs() -> set[str]:
        try:
            return {r["dag_run_id"] for r in api_server.runs("iterate_pagerank")}
        except urllib.error.HTTPError as e:  # the DAG is not in this server's database before its first run
            if e.code != 404:
                raise
            return set()

    def run(conf: dict, **extra: str) -> tuple[str, str]:
        known = runs()
        done = api_server.cli("dags", "test", "iterate_pagerank", "--conf", json.dumps(conf), env={**env, **extra},
                              timeout=600)
        [new] = [r for r in api_server.runs("iterate_pagerank") if r["dag_run_id"] not in known]
        return new["dag_run_id"], done.stdout + done.stderr + f"\n(exit {done.returncode})"

    killed, log = run(conf, ITERATIONS_FAILPOINTS="head.after_plan@epoch=1=kill")
    assert "(exit -9)" in log, _essence(log)
    api_server._request("PATCH", f"/api/v2/dags/iterate_pagerank/dagRuns/{urllib.parse.quote(killed)}",
                        {"state": "failed"})
    impossible = {"name": "impossible_delta", "type": "expect_column_values_to_be_between",
                  "kwargs": {"column": "l1_delta", "max_value": -1}}
    refused, log = run({**conf, "checks": {"expectations": [impossible]}})
    assert "FAILED  run.impossible_delta" in log and "state=failed" in log, _essence(log)
    finished, log = run(conf)
    assert "state=success" in log, _essence(log)

    wait = WebDriverWait(browser, 90)
    _sign_in(browser, wait, api_server)
    browser.get(f"{api_server.url}/dags/iterate_pagerank/runs/{urllib.parse.quote(finished, safe='')}")
    menu = "//*[(self::a or self::button) and normalize-space()='Iterations']"
    wait.until(EC.element_to_be_clickable((By.XPATH, menu))).click()
    frame = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='/iterations/runs/iterate_pagerank/']")))
    browser.switch_to.frame(frame)
    wait.until(EC.presence_of_element_located((By.ID, "metric-chart")))
    assert browser.find_element(By.ID, "job-id").text == "pr-recovery"
    assert browser.find_element(By.ID, "job-status").text == "TERMINATED"

    row = browser.find_element(By.CSS_SELECTOR, "table#epochs tr.epoch[data-epoch='1']")
    attempts = {a.get_attribute("data-status"): a for a in row.find_elements(By.CSS_SELECTOR, ".attempt")}
    texts = [a.text for a in row.find_elements(By.CSS_SELECTOR, ".attempt")]
    assert len(texts) == 3 and sorted(attempts) == ["aborted", "committed"], texts
    won = attempts["committed"].get_attribute("data-attempt")
    killed_text = next(t for t in texts if "killed" in t)
    refused_text = next(t for t in texts if "data checks failed" in t)
    assert "its task was killed, lost or timed out before the attempt ended" in killed_text
    assert "try 1" in killed_text and f"superseded by {won}" in killed_text, killed_text
    assert "aborted" in refused_text and f"superseded by {won}" in refused_text, refused_text
    checks = row.find_element(By.XPATH, "./td[10]").text
    assert "failed" in checks and "failed run.impossible_delta" in checks, checks

    for e in range(4):  # every committed epoch: a bar of its phases, the step among them
        bar = browser.find_elements(By.CSS_SELECTOR, f"tr.epoch[data-epoch='{e}'] svg.phases rect[data-phase='step']")
        assert bar and float(bar[0].get_attribute("data-seconds")) > 0, e
    shown = [r.get_attribute("data-run-id") for r in browser.find_elements(By.CSS_SELECTOR, "table#batches tr[data-batch]")]
    assert shown == [killed, refused, finished], "each batch by its DAG run's id, exactly"
    assert row.find_element(By.XPATH, "./td[3]").text == finished
    browser.switch_to.default_content()
    _keep(browser, tmp_path, "iterations-recovery.png")

    # the run's link: in the UI's frame, Airflow's sandbox keeps a frame from navigating the
    # window; the view opened in a tab of its own follows it to the run's page
    browser.switch_to.frame(browser.find_element(By.CSS_SELECTOR, "iframe[src*='/iterations/']"))
    href = browser.find_element(By.CSS_SELECTOR, f"table#batches tr[data-run-id='{killed}'] a.run").get_attribute("href")
    assert urllib.parse.unquote(href) == f"{api_server.url}/dags/iterate_pagerank/runs/{killed}", href
    browser.switch_to.default_content()
    browser.get(f"{api_server.url}/iterations/jobs/pr-recovery?{urllib.parse.urlencode({'root': root})}")
    link = wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, f"table#batches tr[data-run-id='{killed}'] a.run")))
    # in a 1440 px window the epoch table (three attempts in a row) fits, without scrolling
    widths = browser.execute_script(
        "const f = document.getElementById('epochs-frame'); return [document.documentElement.scrollWidth, "
        "window.innerWidth, f.scrollWidth, f.clientWidth]")
    columns = browser.execute_script(
        "return [...document.querySelectorAll('table#epochs tr:first-child th')].map(t => [t.textContent, "
        "Math.round(t.getBoundingClientRect().width)])")
    assert widths[0] <= widths[1] and widths[2] <= widths[3], f"{widths} {columns}"
    link.click()
    wait.until(lambda d: urllib.parse.unquote(d.current_url).endswith(f"/dags/iterate_pagerank/runs/{killed}"))
