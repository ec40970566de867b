"""Requests served as they arrive (model/decode/open_loop.py, measure/serving.py): each request
decodes as it would alone, whenever it arrives; requests that never overlap wait for nothing; at
T = 1 the requests follow the target (chi-square) and a control that reuses one random stream does
not; goodput and the SLO as defined; the command line's load flags."""

import json
import re

import jax
import numpy as np
import pytest
from test_refill import PROMPTS, B, K, N, refill_pair

from specbench.measure import serving
from specbench.model import generate
from specbench.model.decode import drafters, open_loop
from specbench.model.decode.sampling import Warp
from specbench.results import arrivals, requests

from conftest import assert_one_line_error, invoke


@pytest.fixture(scope="module")
def models():
    return refill_pair()


def spec_slots(draft, target, warp, max_len=64, K=K):
    return open_loop.spec_slots(
        draft.params, target.params, drafters.model_drafter(draft.config), target.config, warp, max_len, K
    )


def test_poisson_arrivals_start_at_zero_and_keep_their_rate():
    at = serving.poisson_arrivals(50.0, 4001, seed=3)
    assert at[0] == 0 and (np.diff(at) > 0).all()
    assert abs(np.diff(at).mean() - 1 / 50) < 0.002  # 4,000 gaps: the mean within 10%
    np.testing.assert_array_equal(at, serving.poisson_arrivals(50.0, 4001, seed=3))


@pytest.mark.parametrize("rate", [pytest.param(200.0, marks=pytest.mark.slow), float("inf")])
def test_every_request_decodes_as_it_would_alone_whenever_it_arrives(models, rate):
    draft, target = models
    at = np.zeros(len(PROMPTS)) if rate == float("inf") else serving.poisson_arrivals(rate, len(PROMPTS), 1)
    done, _ = serving.serve(spec_slots(draft, target, Warp()), PROMPTS, at, B, N, target.config, 64, 0)
    for r, prompt in zip(done, PROMPTS):
        np.testing.assert_array_equal(r.tokens, generate.autoregressive(target, prompt, N)[0])
        t = r.times(N)
        assert 0 <= t.queued_s <= t.ttft_s <= t.e2e_s and len(t.gaps_s) == N - 1
    warp = Warp(1.0)  # at T = 1 too: the closed queue's tokens, request by request (the same keys)
    closed, _ = generate.serve(draft, target, PROMPTS, N, K, warp, 5, B, max_len=64)
    done, _ = serving.serve(spec_slots(draft, target, warp), PROMPTS, at, B, N, target.config, 64, 5)
    np.testing.assert_array_equal(np.stack([r.tokens for r in done]), closed)
    ar = open_loop.ar_slots(target.params, target.config, warp, 64)
    ar_closed, _ = generate.serve_autoregressive(target, PROMPTS, N, warp, 5, B, max_len=64)
    done, _ = serving.serve(ar, PROMPTS, at, B, N, target.config, 64, 5)
    np.testing.assert_array_equal(np.stack([r.tokens for r in done]), ar_closed)


def test_requests_that_never_overlap_are_served_as_a_lone_request_is(models):
    draft, target = models
    slots = spec_slots(draft, target, Warp())
    serving.serve(slots, PROMPTS[:2], np.zeros(2), B, N, target.config, 64, 0)  # compiles
    lone = [
        serving.serve(slots, PROMPTS[:1], np.zeros(1), B, N, target.config, 64, 0)[0][0] for _ in range(3)
    ]
    lone_ttft = float(np.median([r.times(N).ttft_s for r in lone]))
    at = np.arange(4) * 0.3  # each arrives long after the one before is done (~30 ms)
    done, _ = serving.serve(slots, [PROMPTS[0]] * 4, at, B, N, target.config, 64, 0)
    for before, r in zip(done, done[1:]):
        assert before.done < r.arrived  # never overlapped
    for r in done:
        t = r.times(N)
        assert t.queued_s < 0.02, t  # a free slot took it at once
        assert t.ttft_s < 3 * lone_ttft + 0.02, (t, lone_ttft)  # as a lone request's, within noise


@pytest.mark.slow
def test_requests_served_as_they_arrive_follow_the_target_and_a_shared_stream_does_not(small_pair):
    """χ² per position over 512 requests of one prompt arriving at 5,000/s on 4 slots, against the
    target's exact marginals; the control admits every request on one random stream."""
    from exactness import P_THRESHOLD, chi_square_p, target_marginals

    draft, target = small_pair
    prompt, warp, Q = [3, 7, 1], Warp(1.0), 512
    exact = target_marginals(target, prompt, warp, 3)
    slots = spec_slots(draft, target, warp, max_len=16, K=2)
    at = serving.poisson_arrivals(5000.0, Q, 2)
    done, _ = serving.serve(slots, [prompt] * Q, at, 4, 3, target.config, 16, 11)
    tokens = np.stack([r.tokens for r in done])
    p_values = [chi_square_p(tokens[:, i], exact[i]) for i in (1, 2)]  # the positions rounds emit
    assert min(p_values) > P_THRESHOLD, p_values
    shared = open_loop.Slots(
        slots.empty, lambda s, i, buf, n, key: slots.admit(s, i, buf, n, jax.random.PRNGKey(0)), slots.advance
    )
    done, _ = serving.serve(shared, [prompt] * Q, at, 4, 3, target.config, 16, 11)
    broken = np.stack([r.tokens for r in done])
    assert max(chi_square_p(broken[:, i], exact[i]) for i in (1, 2)) < P_THRESHOLD


def test_goodput_counts_the_requests_that_met_every_bound_over_the_runs_seconds():
    recs = [  # hand-worked: AR meets both bounds twice, SD three times
        {"ar_ttft_s": 0.5, "ar_tpot_s": 0.04, "sd_ttft_s": 0.6, "sd_tpot_s": 0.03},
        {"ar_ttft_s": 1.5, "ar_tpot_s": 0.04, "sd_ttft_s": 0.9, "sd_tpot_s": 0.02},
        {"ar_ttft_s": 0.2, "ar_tpot_s": 0.06, "sd_ttft_s": 0.3, "sd_tpot_s": 0.05},
        {"ar_ttft_s": 0.9, "ar_tpot_s": 0.01, "sd_ttft_s": 2.0, "sd_tpot_s": 0.01},
    ]
    slo = requests.parse_slo("ttft=1s, tpot=50ms")
    assert slo == {"ttft": 1.0, "tpot": 0.05}
    out = requests.goodput(recs, slo, serving.Served([], [], [1.0, 1.0], [0.5, 1.5]))
    assert out["ar_slo_attainment"] == 0.5 and out["sd_slo_attainment"] == 0.75
    assert out["ar_goodput_rps"] == 1.0 and out["sd_goodput_rps"] == 1.5 and out["ar_served_rps"] == 2.0
    assert requests.goodput(recs, {}, serving.Served([], [], [2.0], [2.0]))["sd_slo_attainment"] == 1.0
    for bad, said in (
        ("ttft", "a time"),
        ("speed=1s", "not one of"),
        ("ttft=-1s", "positive"),
        ("", "at least"),
    ):
        with pytest.raises(ValueError, match=said):
            requests.parse_slo(bad)


def test_the_rate_at_which_sd_stops_paying_is_read_from_the_curve():
    row = lambda rate, sd, ar: {"request_rate": rate, "sd_tpot_p50_s": sd, "ar_tpot_p50_s": ar, "draft": "d"}
    rows = [row(1.0, 0.01, 0.02), row(2.0, 0.015, 0.02), row(4.0, 0.03, 0.025), row(8.0, 0.05, 0.03)]
    assert arrivals.stop_lines(rows) == ["SD stops paying at 4 requests/s (it paid up to 2), by TPOT p50"]
    assert "pays at every rate" in arrivals.stop_lines(rows[:2])[0]
    assert arrivals.stop_lines(rows[:1] + [{"draft": "d"}]) == []  # one rate: no curve


def test_run_serves_requests_at_a_rate_and_its_row_says_so(env, tmp_path):
    out = tmp_path / "row.json"
    args = ("run", "--batch", "2", "--refill", "--queue", "4", "-n", "6", "--repeats", "1", "--no-save")
    result = invoke(*args, "--request-rate", "50", "--slo", "ttft=2s,tpot=500ms", "--export-json", out)
    assert result.exit_code == 0, result.output
    assert "under load: requests arriving at 50/s" in result.output
    (row,) = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))
    assert row["request_rate"] == 50 and row["slo"] == "ttft=2s,tpot=0.5s" and row["identical"] is True
    assert row["sd_slo_attainment"] == 1.0 and row["sd_goodput_rps"] > 0
    assert all(r["sd_queued_s"] is not None and r["sd_ttft_s"] >= r["sd_queued_s"] for r in row["requests"])
    plain = invoke(*args, "--request-rate", "inf", "--export-json", tmp_path / "closed.json")
    (closed,) = json.loads((tmp_path / "closed.json").read_text())
    assert plain.exit_code == 0 and closed["request_rate"] is None and closed["sd_goodput_rps"] is None
    assert closed["sd_token_ids"] == row["sd_token_ids"]
    assert_one_line_error(invoke("run", "--request-rate", "5", "--dry-run"), "--request-rate", "--refill")
    assert_one_line_error(invoke(*args[:6], "--slo", "ttft=1s", "--dry-run"), "--slo", "--request-rate")
    assert_one_line_error(invoke(*args[:6], "--request-rate", "1,2", "--dry-run"), "--request-rate", "sweep")
    assert_one_line_error(invoke(*args[:6], "--request-rate", "0", "--dry-run"), "--request-rate", "positive")
    assert_one_line_error(invoke(*args[:6], "--request-rate", "1", "--slo", "ttft", "--dry-run"), "--slo")


@pytest.mark.slow
def test_sweep_serves_each_rate_and_says_where_sd_stops_paying(env, tmp_path):
    out = tmp_path / "sweep.json"
    args = ("sweep", "--batch", "2", "--refill", "--queue", "4", "-n", "4", "--K", "2", "--repeats", "1")
    result = invoke(*args, "--request-rate", "40,400,inf", "--output", out)
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert [r["request_rate"] for r in rows] == [40, 400, None]
    assert re.search(r"SD (pays at every rate|stops paying at) .* by TPOT p50", result.output), result.output
    again = invoke(*args, "--request-rate", "40,400,inf", "--output", out, "--resume")
    assert again.exit_code == 0 and "3 already in" in again.output, again.output  # the rates key the rows
