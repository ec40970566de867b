"""The time budget: parts that add up to the wall clock, and the predictions built from them."""

import csv
import json
from pathlib import Path

import pytest

from specbench.results import theory

from conftest import assert_one_line_error, invoke


def test_tokens_per_round_from_per_position_acceptance():
    assert theory.expected_tokens_positional([0.8] * 4) == pytest.approx(theory.expected_tokens(0.8, 4))
    assert theory.expected_tokens_positional([1.0, 1.0, 1.0]) == 4.0
    # acceptance that falls with position (lookup drafts): less than one alpha predicts
    assert theory.expected_tokens_positional([0.9, 0.5, 0.2]) == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    assert (
        theory.expected_tokens_positional([0.5, float("nan"), 0.9]) == 1.5
    )  # never tested: no round got there


def test_best_K_free_drafts_and_a_flat_verify_take_the_largest_K():
    assert theory.best_K(0.6, lambda K: 0.0, lambda K: 1.0, K_max=12) == 12


def test_best_K_with_a_linear_verify_is_leviathans_optimum_with_the_slope_added_to_c():
    for alpha, c, beta in ((0.8, 0.05, 0.02), (0.6, 0.1, 0.0), (0.9, 0.02, 0.05)):
        t_target = 7.0
        best = theory.best_K(alpha, lambda K: K * c * t_target, lambda K: t_target * (1 + beta * K), K_max=32)
        assert best == theory.optimal_K(alpha, c + beta, 32)


def test_every_run_row_carries_a_budget_whose_parts_add_up_to_the_clock(env, tmp_path):
    json_path, csv_path, md_path = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.md"
    result = invoke(
        "run",
        *env,
        "--repeats",
        2,
        "-n",
        10,
        "--K",
        3,
        "--no-save",
        "--export-json",
        json_path,
        "--export-csv",
        csv_path,
        "--export-markdown",
        md_path,
    )
    assert result.exit_code == 0, result.output
    row = json.loads(json_path.read_text())[0]
    parts = ("t_ar_start_s", "t_sd_start_s", "t_ar_token_s", "t_round_s", "t_draft_s", "t_verify_s")
    assert all(row[p] > 0 for p in parts)
    assert row["ar_accounted_s"] == pytest.approx(row["t_ar_start_s"] + 9 * row["t_ar_token_s"])
    assert row["sd_accounted_s"] == pytest.approx(
        row["t_sd_start_s"] + row["batch_rounds"] * row["t_round_s"]
    )
    # the identity: parts plus residual are the measured (median) wall time, whatever the residual is
    assert row["ar_accounted_s"] + row["ar_residual_s"] == pytest.approx(row["ar_median_s"])
    assert row["sd_accounted_s"] + row["sd_residual_s"] == pytest.approx(row["sd_median_s"])
    assert row["accounted_speedup"] == pytest.approx(row["ar_accounted_s"] / row["sd_accounted_s"])
    medians = row["ar_median_s"] / row["sd_median_s"]
    assert row["measured_over_accounted"] == pytest.approx(medians / row["accounted_speedup"])
    assert 1 <= row["best_K_predicted"] <= 6
    assert "AR " in result.output and "rounds ×" in result.output and "residual" in result.output
    header = next(csv.reader(csv_path.open()))
    for field in (
        "accounted_speedup",
        "measured_over_accounted",
        "ar_residual_s",
        "sd_residual_s",
        "tokens_per_round_positional",
        "best_K_predicted",
        "measured_over_accounted_err",
    ):
        assert field in header and field in row
    assert row["measured_over_accounted_err"] >= 0 and "measured / accounted" in result.output
    assert "accounted_speedup" in md_path.read_text().splitlines()[0]


def test_a_draft_that_is_the_target_predicts_K_plus_1_tokens_per_round(env, model_dirs, tmp_path):
    out = tmp_path / "r.json"
    target = str(model_dirs / "t")
    result = invoke(
        "run",
        "--draft",
        target,
        "--target",
        target,
        "--repeats",
        1,
        "-n",
        17,
        "--K",
        3,
        "--no-save",
        "--export-json",
        out,
    )
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text())[0]
    assert row["alpha"] == 1.0 and row["tokens_per_round_positional"] == 4.0 == row["tokens_per_round_iid"]


def test_plot_draws_the_budget_and_refuses_rows_without_one(env, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.json"
    assert (
        invoke("run", *env, "--repeats", 1, "-n", 6, "--K", 2, "--no-save", "--export-json", out).exit_code
        == 0
    )
    result = invoke("plot", out, "--budget", "-o", tmp_path / "b.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    older = Path(__file__).resolve().parent.parent / "results" / "recorded" / "cpu-sweep-random-pair.json"
    assert_one_line_error(
        invoke("plot", older, "--budget", "-o", tmp_path / "c.png"), "--budget", "time budget"
    )


def test_a_cold_timer_times_only_its_repeats_each_from_a_finished_state():
    from specbench.measure import timing

    events = []

    class State:  # a pytree leaf that logs when it is waited for, and each loop call
        def __init__(self, i):
            self.i = i

        def block_until_ready(self):
            events.append(("ready", self.i))
            return self

    def loop(state):
        events.append(("loop", state.i))
        return State(state.i + 1)

    samples = timing.seconds_per_iter(loop, State(0), iters=4, repeats=3, warm=False)
    assert len(samples) == 3 and (samples >= 0).all()
    # the start state is finished before the first clock read, and no untimed call runs first
    assert events[0] == ("ready", 0)
    assert [e for e in events if e[0] == "loop"] == [("loop", 0), ("loop", 1), ("loop", 2)]
    events.clear()
    timing.seconds_per_iter(loop, State(0), iters=4, repeats=3, warm=True)
    assert [e for e in events if e[0] == "loop"] == [("loop", i) for i in range(4)]  # one untimed first


def test_the_spread_of_measured_over_accounted_resamples_each_wall_with_its_own_repeats_parts():
    from types import SimpleNamespace

    import numpy as np

    from specbench.results import budget

    rng = np.random.default_rng(1)
    N, rounds, R = 40, 9, 15
    token, t_round = rng.uniform(2, 3, R), rng.uniform(7, 11, R)  # a host whose speed moves
    parts = {"ar_start": [5.0] * R, "ar_token": list(token), "sd_start": [6.0] * R, "round": list(t_round)}
    res = lambda ar, sd, parts=parts: SimpleNamespace(
        ar_times_s=list(ar),
        sd_times_s=list(sd),
        part_samples=parts,
        config=SimpleNamespace(n_tokens=N),
        stats=SimpleNamespace(rounds_run=rounds),
    )
    ar, sd = 5.0 + (N - 1) * token, 6.0 + rounds * t_round
    # every wall time equal to its own repeat's parts: the ratio is 1 in every resample
    assert budget.measured_over_accounted_err(res(ar, sd)) == pytest.approx(0.0, abs=1e-12)
    # walls that do not follow their parts: a spread
    assert budget.measured_over_accounted_err(res(ar * rng.uniform(0.8, 1.2, R), sd)) > 0.01
    one = {k: v[:1] for k, v in parts.items()}
    assert budget.measured_over_accounted_err(res(ar[:1], sd[:1], one)) is None


def budget_row(ar_residual: float, sd_residual: float, ratio: float) -> dict:
    return {
        "ar_median_s": 0.1,
        "sd_median_s": 0.05,
        "ar_residual_s": ar_residual,
        "sd_residual_s": sd_residual,
        "measured_over_accounted": ratio,
        "measured_over_accounted_err": 0.03,
        "repeats": 5,
        "other_load": 0.01,
    }


def test_an_account_that_closes_says_nothing_and_one_that_does_not_names_its_gap():
    from specbench.cli.views.render import budget_warning
    from specbench.results.budget import budget_gap, closes

    closing = budget_row(0.004, -0.003, 1.03)
    assert closes(closing) is True and budget_gap(closing) is None and budget_warning(closing) is None
    sd_open = budget_row(0.004, 0.008, 1.02)  # SD's residual: 16% of its wall time
    assert closes(sd_open) is False and budget_gap(sd_open) == "SD's residual is +16% of its wall time"
    ratio_open = budget_row(0.0, 0.0, 1.14)
    assert budget_gap(ratio_open) == "measured / accounted 1.14"
    line = budget_warning(sd_open)
    assert "does not close: SD's residual is +16%" in line and "± 0.03 at 5 repeats" in line
    assert closes({"speedup": 1.0}) is None  # a row with no budget (a peer's) neither closes nor fails


def test_a_generation_slowed_on_purpose_opens_the_account_the_run_warns_and_the_row_says_so(env, monkeypatch):
    import time

    from specbench.model import generate

    real = generate.autoregressive
    monkeypatch.setattr(generate, "autoregressive", lambda *a, **k: (time.sleep(0.15), real(*a, **k))[1])
    result = invoke("run", *env, "-n", 8, "--repeats", 2, "--no-save", "--export-json", "r.json")
    assert result.exit_code == 0, result.output
    (row,) = json.load(open("r.json"))
    assert row["budget_closed"] is False and row["ar_residual_s"] > 0.1
    assert "the time account does not close: AR's residual is +" in result.output.replace("\n", " ")
