"""`specbench report`: a quick report of a tiny random pair, its files, its bad input, and the
page opened in a real browser (headless Chromium), where one can be had."""

import json
import os
import shutil
from pathlib import Path

import pytest

from specbench.cli import report
from specbench.measure import bench
from specbench.results import readings
from specbench.results.sections import SECTIONS

from conftest import assert_one_line_error, invoke

HEADINGS = [s.title for s in SECTIONS]
ARTIFACTS = Path(os.environ.get("SPECBENCH_TEST_ARTIFACTS", "test-artifacts"))


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory, model_dirs):
    """One quick report of the tiny pair (random weights), shared by the tests below."""
    out = tmp_path_factory.mktemp("report") / "r"
    mp = pytest.MonkeyPatch()
    mp.setattr(report.Battery, "repeats", property(lambda self: 1))
    mp.setattr(report.Battery, "batches", property(lambda self: [1, 2]))
    mp.setattr(report.Battery, "Ks", property(lambda self: [2, 4]))
    mp.setattr(report.Battery, "categories", property(lambda self: ["seed-turing", "refrain-1"]))
    mp.setattr(report, "SELFTEST_SAMPLES", 5000)
    mp.setattr(report.Battery, "roofline_iters", property(lambda self: 2))
    result = invoke("report", "--quick", "-o", out, "--draft", model_dirs / "d", "--target", model_dirs / "t")
    mp.undo()
    assert result.exit_code == 0, result.output
    return out


def test_the_report_writes_its_page_rows_and_plots(quick_report):
    files = {p.name for p in quick_report.iterdir()}
    assert {"index.html", "rows.json", "rows.csv", report.STATE_FILE} <= files
    assert any(name.endswith(".png") for name in files)
    rows = json.loads((quick_report / "rows.json").read_text())
    jobs = {r["report_job"] for r in rows}
    assert len(jobs) == len(rows)  # each measured once, though several sections show K = 4, T = 0
    assert all("other_load" in r and "under_load" in r for r in rows)
    html = (quick_report / "index.html").read_text()
    for heading in HEADINGS:
        assert heading in html
    assert "http://" not in html and "https://" not in html.replace("https://arxiv", "")  # nothing fetched
    state = json.loads((quick_report / report.STATE_FILE).read_text())
    assert state["sections"]["exactness"]["selftest"]["passed"] is True
    assert len(state["sections"]["roofline"]["rows"]) == 2 * (report.K_DEFAULT + 1)


def test_resume_measures_only_what_is_missing(quick_report, tmp_path, model_dirs, monkeypatch):
    copy = tmp_path / "r"
    shutil.copytree(quick_report, copy)
    rows = json.loads((copy / "rows.json").read_text())
    dropped = rows[-1]["report_job"]
    (copy / "rows.json").write_text(json.dumps(rows[:-1]))
    monkeypatch.setattr(report.Battery, "repeats", property(lambda self: 1))
    monkeypatch.setattr(report.Battery, "batches", property(lambda self: [1, 2]))
    monkeypatch.setattr(report.Battery, "Ks", property(lambda self: [2, 4]))
    monkeypatch.setattr(report.Battery, "categories", property(lambda self: ["seed-turing", "refrain-1"]))
    measured = []
    real = bench.run_benchmark
    monkeypatch.setattr(
        bench, "run_benchmark", lambda config, encoded: measured.append(config) or real(config, encoded)
    )
    pair = ("--draft", model_dirs / "d", "--target", model_dirs / "t")
    result = invoke("report", "--quick", "-o", copy, *pair, "--resume")
    assert result.exit_code == 0, result.output
    assert len(measured) == 1
    again = json.loads((copy / "rows.json").read_text())
    assert sorted(r["report_job"] for r in again) == sorted(r["report_job"] for r in rows)
    assert dropped in {r["report_job"] for r in again}


def test_report_bad_input_is_one_line_and_writes_nothing(quick_report, tmp_path, model_dirs):
    pair = ("--draft", model_dirs / "d", "--target", model_dirs / "t")
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_text("meow")
    assert_one_line_error(invoke("report", "--quick", "-o", other, *pair), "--output", "not a report")
    assert [p.name for p in other.iterdir()] == ["cat.jpg"]
    assert_one_line_error(invoke("report", "-o", quick_report, *pair, "--resume"), "--resume", "quick")
    assert_one_line_error(invoke("report", "--quick", "-o", quick_report, *pair), "--output", "--resume")
    assert_one_line_error(invoke("report", "--quick", "-o", tmp_path / "n", *pair, "--resume"), "--resume")
    assert not (tmp_path / "n").exists()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):  # root writes anywhere
            assert_one_line_error(invoke("report", "-o", locked / "r", *pair), "--output", "not writable")
    finally:
        locked.chmod(0o700)


def test_report_without_its_extra_is_one_line_naming_it(tmp_path, model_dirs, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "jinja2", None)  # as if not installed
    result = invoke("report", "-o", tmp_path / "r", "--draft", model_dirs / "d", "--target", model_dirs / "t")
    assert_one_line_error(result, "report", "report extra")
    assert not (tmp_path / "r").exists()


def test_readings_say_what_the_numbers_show():
    row = lambda K, s, **kw: {"K": K, "speedup": s, "best_K_predicted": 4, "alpha": 0.8, **kw}
    text = readings.K_sweep([row(1, 1.2), row(2, 1.5), row(4, 1.9), row(8, 1.4)])
    assert "paid at every K from 1 to 8" in text and "K = 4" in text and "as the parts predicted" in text
    text = readings.K_sweep([row(1, 0.9), row(4, 1.1)])
    assert "paid at 1 of the 2 K tried, from 1 to 4" in text
    rows = [
        {"batch": 1, "speedup": 1.8, "sd_tokens_per_s": 100.0},
        {"batch": 8, "speedup": 0.5, "sd_tokens_per_s": 300.0},
    ]
    assert "crosses 1 near B ≈" in readings.batch(rows)
    cats = [{"speedup": s, "prompt_id": f"p{i}", "alpha": 0.9} for i, s in enumerate([1.5, 0.9, 1.2])]
    assert readings.categories(cats).startswith(
        "Speculation paid on 2 of the 3 prompt categories. The most on p0"
    )


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_the_page_renders_in_headless_chromium(quick_report):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
    browser, driver_path = chromium(), shutil.which("chromedriver")
    if not browser or not driver_path:
        pytest.skip("no Chromium or chromedriver here (Debian: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,900",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        driver.get((quick_report / "index.html").resolve().as_uri())
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], errors
        widths = driver.execute_script(
            "return Array.from(document.images).map(i => [i.title, i.complete ? i.naturalWidth : 0])"
        )
        assert widths and all(w > 0 for _, w in widths), widths
        headings = [h.text for h in driver.find_elements("tag name", "h2")]
        for heading in HEADINGS:
            assert any(heading in h for h in headings), (heading, headings)
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "report.png"))
    finally:
        driver.quit()
