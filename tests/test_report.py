"""`specbench report`: a quick report of a tiny random pair, its files, its bad input, and the
page opened in a real browser (headless Chromium), where one can be had."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from specbench.cli.commands import report
from specbench.measure import bench
from specbench.results import readings
from specbench.results.sections import SECTIONS

from conftest import assert_one_line_error, invoke

HEADINGS = [s.title for s in SECTIONS]
ARTIFACTS = Path(os.environ.get("SPECBENCH_TEST_ARTIFACTS", "test-artifacts"))


def small_battery(mp):
    """The quick battery made smaller still (1 repeat, 2 prompts, K 2 and 4, B 1 and 2), its batch
    section whole: distinct prompts, one prompt repeated, and the slots refilled."""
    mp.setattr(report.Battery, "repeats", property(lambda self: 1))
    mp.setattr(report.Battery, "batches", property(lambda self: [1, 2]))
    mp.setattr(report.Battery, "Ks", property(lambda self: [2, 4]))
    mp.setattr(report.Battery, "categories", property(lambda self: ["seed-turing", "refrain-1"]))
    mp.setattr(report.Battery, "repeated_prompt", property(lambda self: True))
    mp.setattr(report.Battery, "refilled", property(lambda self: True))


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory, model_dirs):
    """One quick report of the tiny pair (random weights), shared by the tests below."""
    out = tmp_path_factory.mktemp("report") / "r"
    mp = pytest.MonkeyPatch()
    small_battery(mp)
    mp.setattr(report, "SELFTEST_SAMPLES", 5000)
    mp.setattr(report.Battery, "roofline_iters", property(lambda self: 2))
    result = invoke("report", "--quick", "-o", out, "--draft", model_dirs / "d", "--target", model_dirs / "t")
    mp.undo()
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
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
    roofline = state["sections"]["roofline"]["rows"]
    assert len(roofline) == 2 * (report.K_DEFAULT + 1) and all(r["dtype"] == "float32" for r in roofline)
    # the headline covers the prompt suite, by category, with each prompt's repetition and histogram
    assert 'id="headline"' in html and "Over 2 prompts (K = 4, T = 0)" in html
    assert "By category (Spec-Bench" in html and "Accepted drafts per round" in html
    # the batch section: distinct prompts, and one prompt repeated as the upper bound
    batches = {(r["batch"], r.get("batch_prompts")) for r in rows if r["report_job"].endswith("-b2")}
    assert batches == {(2, 2), (2, 1)}
    assert "With distinct prompts" in html and "With one prompt repeated" in html


@pytest.mark.slow
def test_a_finished_report_without_its_page_gets_its_page_back_unmeasured(
    quick_report, tmp_path, model_dirs, monkeypatch
):
    copy = tmp_path / "r"
    shutil.copytree(quick_report, copy)
    (copy / "index.html").unlink()
    rows = (copy / "rows.json").read_bytes()
    small_battery(monkeypatch)
    monkeypatch.setattr(bench, "run_benchmark", lambda *a: pytest.fail("a finished report was measured"))
    pair = ("--draft", model_dirs / "d", "--target", model_dirs / "t")
    result = invoke("report", "--quick", "-o", copy, *pair, "--resume")
    assert result.exit_code == 0, result.output
    assert "has no index.html: the page is made again" in " ".join(result.output.split())
    assert (copy / "index.html").is_file() and (copy / "rows.json").read_bytes() == rows
    # a plot that cannot be saved (a full disk) is one line naming it, and what is kept
    (copy / "index.html").unlink()
    from specbench.results import plot

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(copy / "K-speedup.png"))

    monkeypatch.setattr(plot, "_save", full)
    result = invoke("report", "--quick", "-o", copy, *pair, "--resume")
    last = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert (
        last.startswith("error: ") and "K-speedup.png could not be written (No space left on device)" in last
    )
    kept = len(json.loads(rows))
    assert f"{kept} rows kept in {copy}; run again with --resume -o {copy}" in last


@pytest.mark.slow
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


@pytest.mark.slow
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
    pair = ["--draft", model_dirs / "d", "--target", model_dirs / "t"]
    dry = invoke("report", "-o", tmp_path / "r", "--quick", "--dry-run", *pair)  # a plan needs no page
    assert dry.exit_code == 0 and "note: the report itself needs the report extra (jinja2" in dry.output
    assert not (tmp_path / "r").exists()


def test_readings_say_what_the_numbers_show():
    row = lambda K, s, **kw: {"K": K, "speedup": s, "best_K_predicted": 4, "alpha": 0.8, **kw}
    text = readings.K_sweep([row(1, 1.2), row(2, 1.5), row(4, 1.9), row(8, 1.4)])
    assert "paid at every K from 1 to 8" in text and "K = 4" in text and "as the parts predicted" in text
    text = readings.K_sweep([row(1, 0.9), row(4, 1.1)])
    assert "paid at 1 of the 2 K tried, from 1 to 4" in text
    batch = lambda B, s, tps, n, idle: {
        **{"K": 4, "batch": B, "speedup": s, "sd_tokens_per_s": tps, "batch_prompts": n},
        **{"idle_fraction": idle, "refined_speedup": s, "ar_tokens_per_s": tps / s},
    }
    rows = [batch(1, 1.8, 100.0, 1, 0.0), batch(8, 0.5, 300.0, 8, 0.3)]
    assert "crosses 1 near B ≈" in readings.batch(rows) and "30% of the largest batch's" in readings.batch(
        rows
    )
    both = [*rows, batch(8, 1.2, 500.0, 1, 0.0)]
    text = readings.batch(both)
    assert "With distinct prompts" in text and "With one prompt repeated" in text
    assert "idle slots decide the crossover" in text
    cat = lambda pid, s, rep: {"speedup": s, "prompt_id": pid, "alpha": 0.9, "repetition": rep, "K": 4}
    cats = [cat("narrative-1", 1.5, 0.9), cat("narrative-2", 0.7, 0.0), cat("fairy-1", 1.2, 0.1)]
    text = readings.categories([{**c, "temperature": 0} for c in cats])
    assert text.startswith("Speculation paid on 2 of the 3 prompts. The most on narrative-1")
    assert "On narrative-1 the text SD wrote repeats itself" in text
    headline = readings.suite([{**c, "temperature": 0} for c in cats])
    assert (
        headline.startswith("Over 3 prompts (K = 4, T = 0)") and "on average, from 0.70× to 1.50×" in headline
    )
    assert "by category from 1.10× (narrative) to 1.20× (fairy-tale)" in headline
    assert "ran 1.13× faster than autoregressive" in headline
    slower = readings.suite([{**c, "speedup": c["speedup"] * 0.5, "temperature": 0} for c in cats])
    assert "ran slower than (0.57× the speed of) autoregressive" in slower and "faster" not in slower
    table = readings.category_table(cats)
    assert table["rows"][-1][:5] == ["all", "3", "1.13×", "0.70×", "1.50×"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
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
    # Chromium's sockets live under TMPDIR, and a socket's path may not pass 107 bytes: a long
    # TMPDIR would keep it from starting, so it gets a short one of its own (removed after)
    short = tempfile.mkdtemp(prefix="sb-", dir="/tmp")
    options.add_argument(f"--user-data-dir={short}/profile")
    service = webdriver.ChromeService(executable_path=driver_path, env={**os.environ, "TMPDIR": short})
    driver = webdriver.Chrome(options=options, service=service)
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
        for width in (1400, 420):  # no table runs past the text column: wide ones scroll inside it
            driver.set_window_size(width, 900)
            column = driver.execute_script("return document.body.getBoundingClientRect().right")
            past = driver.execute_script(
                "return Array.from(document.querySelectorAll('table'))"
                ".filter(t => t.closest('.wide') === null"
                " || t.closest('.wide').getBoundingClientRect().right > arguments[0] + 1).length",
                column,
            )
            page = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert past == 0 and page <= 0, (width, past, page)
    finally:
        driver.quit()
        shutil.rmtree(short, ignore_errors=True)
