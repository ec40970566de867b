"""`specbench predict` (results/predict.py): Leviathan's closed form where t(n) is flat, a run's own
refined theory from its own step times, t(n) modelled from a device's roofs, and the command's
one-line refusals."""

import json
from pathlib import Path

import numpy as np
import pytest

from specbench.results import predict as pr
from specbench.results import theory

from conftest import assert_one_line_error, invoke

RECORDED = Path(__file__).resolve().parent.parent / "results" / "recorded"


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
def test_a_flat_step_curve_gives_leviathan_s_closed_form(alpha):
    c = 0.12
    target = pr.StepCurve("t", {n: 1.0 for n in range(1, 10)})
    draft = pr.StepCurve("d", {1: c})
    for K in range(1, 9):
        p = pr.predict([alpha], draft, target, K)
        assert p.speedup == pytest.approx(theory.speedup_from_alpha(alpha, K, c), rel=1e-12)
        assert p.tokens_per_round == pytest.approx(theory.expected_tokens(alpha, K))
    assert pr.best(pr.predictions([alpha], draft, target, range(1, 9))).K == theory.optimal_K(alpha, c, 8)


def test_a_run_s_own_step_times_give_its_refined_theory_line():
    """Fed a run's own acceptance per position and its step timers as t(n), predict gives the
    run's refined speedup: tokens per round x t_target / (K t_draft + t_verify)."""
    rows = json.loads((RECORDED / "cpu-run-bundled-T1-cpu-1.json").read_text())
    row = next(r for r in rows if r.get("implementation", "specbench") == "specbench")
    K = row["K"]
    target = pr.StepCurve("t", {1: row["t_target_s"], K + 1: row["t_verify_s"]})
    draft = pr.StepCurve("d", {1: row["t_draft_s"]})
    p = pr.predict(pr.acceptance_of(row), draft, target, K)
    assert not p.extrapolated
    assert p.tokens_per_round == pytest.approx(row["tokens_per_round"], rel=1e-9)
    assert p.speedup == pytest.approx(row["refined_speedup"], rel=1e-9)
    with_overhead = pr.predict(pr.acceptance_of(row), draft, target, K, overhead_s=row["t_overhead_s"])
    assert with_overhead.t_round_s == pytest.approx(row["t_round_s"], rel=1e-9)


def test_the_communication_term_is_paid_by_every_target_step_and_free_drafting_costs_nothing():
    target = pr.StepCurve("t", {1: 1.0, 2: 1.1, 3: 1.2})
    p = pr.predict([0.5, 0.5], pr.FREE, target, 2)
    comm = pr.predict([0.5, 0.5], pr.FREE, target, 2, comm_s=0.5)
    assert p.speedup == pytest.approx(1.75 * 1.0 / 1.2)
    assert comm.speedup == pytest.approx(1.75 * 1.5 / 1.7)  # AR's steps pay it too: the gain shrinks less
    far = pr.predict([0.5, 0.5], pr.FREE, target, 4)
    assert far.extrapolated and target.at(5) == pytest.approx(1.4)  # the line through the last two
    assert pr.acceptance_at([0.9, 0.7], 4) == [0.9, 0.7, 0.7, 0.7]


def test_a_device_is_modelled_from_the_roofline_s_bytes_and_flops():
    rows = [
        {"model": "m", "n_tokens_per_step": n, "bytes_per_step": 2e9, "flops_per_step": n * 1e11}
        | {"t_step_s": 9.0}
        for n in (1, 2, 8)
    ]
    curve = pr.curve_from_device(rows, "m", gbps=1000.0, gflops=50_000.0, fixed_s=1e-5)
    assert curve.at(1) == pytest.approx(1e-5 + 2e-3)  # memory-bound
    assert curve.at(8) == pytest.approx(1e-5 + 16e-3)  # compute-bound: 8e11 / 5e13
    measured = pr.curve_from_roofline(rows + [dict(rows[0], t_step_s=7.0), dict(rows[0], t_step_s=8.0)], "m")
    assert measured.times[1] == 8.0  # the median of its samples
    with pytest.raises(ValueError, match="no roofline row of x"):
        pr.curve_from_roofline(rows, "x")


def test_predict_reads_a_run_and_a_report_and_prints_its_table(tmp_path):
    report = RECORDED / "gpu-h100" / "report-random-1558M-124M-bf16-quick"
    rows = json.loads((report / "rows.json").read_text())
    dial = next(i for i, r in enumerate(rows) if r.get("drafter") == "dial" and r["acceptance"] == 1.0)
    run = ("--run", report / "rows.json", "--row", dial)
    result = invoke("predict", *run, "--roofline", report, "--K", "1-4")
    assert result.exit_code == 0, result.output
    assert "draft free" in result.output and "predicted ÷ measured" in result.output
    ratio = float(result.output.split("predicted ÷ measured")[1].split()[0])
    assert 0.8 < ratio < 1.25  # the dial at a = 1 on the H100: t(n) and the acceptance explain it
    speedups = [float(line.split("│")[5]) for line in result.output.splitlines() if line.startswith("│ ")]
    assert len(speedups) == 4 and np.all(np.diff(speedups) > 0)  # every draft accepted: more K, more speed


@pytest.mark.parametrize(
    "args, flag, fragment",
    [
        ([], "--run/--alpha", "exactly one"),
        (["--alpha", "0.5", "--run", "x.json"], "--run/--alpha", "exactly one"),
        (["--run", "missing.json"], "--run", "cannot read"),
        (["--alpha", "0.5"], "--target-model", "name the target"),
        (["--alpha", "0.5", "--target-model", "nope"], "--roofline", "no roofline row of nope"),
        (["--alpha", "0.5", "--target-model", "tiny-target", "--device", "1,2"], "--device", "three numbers"),
        (["--alpha", "1.5"], "--alpha", "1.5"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(args, flag, fragment):
    roofline = RECORDED / "cpu-roofline-bundled-kernels.json"
    assert_one_line_error(invoke("predict", "--roofline", roofline, *args), flag, fragment)
