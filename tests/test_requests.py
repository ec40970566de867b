"""Per-request latency (results/requests.py): every generation of every sequence a request, its
TTFT, TPOT and E2E from the times the row measured, its own speculative block, and the
percentiles the row carries."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from specbench.results import requests

from conftest import invoke


def fake_result(B=1, K=4):
    """A BenchmarkResult's fields that requests reads: 3 repeats, N = 11 tokens."""
    stats = SimpleNamespace(
        accepted_hist=np.array([1, 0, 0, 0, 2]),
        accepted_hist_per_seq=np.array([[1, 0, 0, 0, 2], [0, 3, 0, 0, 0]]) if B == 2 else None,
    )
    return SimpleNamespace(
        config=SimpleNamespace(n_tokens=11, K=K),
        stats=stats,
        batch=B,
        ar_times_s=[0.30, 0.32, 0.40],
        sd_times_s=[0.20, 0.21, 0.25],
        part_samples={"ar_start": [0.05, 0.06, 0.05], "sd_start": [0.07, 0.06, 0.08]},
    )


def test_each_request_s_times_come_from_its_repeat_and_its_block_from_its_sequence():
    recs = requests.records(fake_result(), ["p"])
    assert [(r["repeat"], r["sequence"], r["prompt_id"]) for r in recs] == [
        (0, 0, "p"),
        (1, 0, "p"),
        (2, 0, "p"),
    ]
    first = recs[0]
    assert first["sd_e2e_s"] == 0.20 and first["sd_ttft_s"] == 0.07
    assert first["sd_tpot_s"] == pytest.approx((0.20 - 0.07) / 10) and first["ar_tpot_s"] == pytest.approx(
        0.025
    )
    # 3 rounds: one rejected its first draft, two accepted all 4: (0 + 4 + 4) accepted, + 3 emitted
    assert first["rounds"] == 3 and first["acceptance_length"] == pytest.approx(11 / 3)
    assert first["draft_acceptance_rate"] == pytest.approx(8 / 12)
    assert first["accepted_per_verified"] == pytest.approx(11 / 15)  # AIPerf's (j + 1) / (l + 1)


def test_vllm_s_per_request_block_follows_its_definitions_on_a_hand_worked_round_sequence():
    """K = 4, five rounds accepting 4, 2, 0, 4 and 1 drafts: 5 steps, 20 drafts, 11 accepted."""
    hist = np.bincount([4, 2, 0, 4, 1], minlength=5)
    block = requests.vllm_block(hist, 4)
    assert block == {
        "num_spec_tokens": 4,
        "num_spec_steps": 5,
        "num_draft_tokens": 20,
        "num_accepted_draft_tokens": 11,
        "draft_acceptance_rate": pytest.approx(11 / 20),
        "mean_acceptance_length": pytest.approx(1 + 11 / 5),  # (11 accepted + 5 emitted) / 5 steps
        "acceptance_histogram": [1, 1, 1, 0, 2],
    }
    ours = requests.speculative_block(hist, 4)
    assert ours["acceptance_length"] == pytest.approx(block["mean_acceptance_length"])
    assert ours["draft_acceptance_rate"] == pytest.approx(block["draft_acceptance_rate"])
    assert ours["accepted_per_verified"] == pytest.approx((11 + 5) / (20 + 5))
    other = requests.vllm_block(np.bincount([0, 0, 4], minlength=5), 4)  # 3 steps, 4 of 12 accepted
    pooled = requests.pooled_acceptance([{"speculative_decoding": block}, {"speculative_decoding": other}])
    # AIPerf's token-weighted figures weight each step alike: 15 accepted over 8 steps and 32 drafts,
    # not the mean of the two requests' lengths (3.2 and 2.33)
    assert pooled == {
        "token_weighted_acceptance_length": pytest.approx(1 + 15 / 8),
        "overall_draft_acceptance_rate": pytest.approx(15 / 32),
    }
    idle = requests.vllm_block(np.zeros(5, int), 4)  # a sequence that ran no step: no rate
    assert idle["draft_acceptance_rate"] is None and idle["mean_acceptance_length"] is None
    (record, *_) = requests.records(fake_result(), ["p"])
    assert record["speculative_decoding"]["num_spec_steps"] == 3


def test_a_refilled_queue_s_requests_are_timed_by_the_rounds_they_spanned():
    """Q = 3 requests on 2 slots, 10 batched rounds: requests 0 and 1 begin at round 0, request 2
    when request 0 ends at round 4; each is timed as its rounds' share of the repeat's wall time."""
    res = fake_result(B=2)
    res.queue = 3
    spans = np.array([[0, 4], [0, 10], [4, 9]])
    res.stats = SimpleNamespace(
        accepted_hist=np.array([1, 0, 0, 0, 2]),
        accepted_hist_per_seq=np.array([[1, 0, 0, 0, 2], [0, 3, 0, 0, 0], [0, 0, 3, 0, 0]]),
        n_seqs=3, request_spans=spans, batch_rounds=10, n_slots=2,
    )  # fmt: skip
    res.ar_stats = SimpleNamespace(
        request_spans=np.array([[0, 10], [0, 10], [10, 20]]), batch_rounds=20, n_slots=2
    )
    recs = requests.records(res, ["a", "b", "c"])
    assert len(recs) == 9 and all(r[k] is not None for r in recs for k in r if k.endswith("_s"))
    first, third = recs[0], recs[2]  # repeat 0: SD's wall 0.20 s over 10 rounds, its start 0.07 s
    assert first["sd_queued_s"] == 0 and first["sd_ttft_s"] == pytest.approx(0.07)
    assert first["sd_e2e_s"] == pytest.approx(0.08)  # 4 rounds of 0.02 s
    assert third["sd_queued_s"] == pytest.approx(0.08) and third["sd_e2e_s"] == pytest.approx(0.18)
    assert third["sd_ttft_s"] == pytest.approx(0.08 + 0.07 / 2)  # queued, then a slot's share of a start
    assert third["sd_tpot_s"] == pytest.approx((0.18 - 0.115) / 10)
    assert recs[1]["sd_e2e_s"] == pytest.approx(0.20)  # the last to finish ends with the wall time
    got = requests.percentiles(recs)
    assert got["sd_queued_p50_s"] == pytest.approx(0.0) and got["ar_queued_p99_s"] > 0


def test_a_batch_s_sequences_share_their_repeat_s_times_and_keep_their_own_blocks():
    recs = requests.records(fake_result(B=2), ["a", "b"])
    assert len(recs) == 6 and [r["prompt_id"] for r in recs[:2]] == ["a", "b"]
    assert recs[0]["sd_e2e_s"] == recs[1]["sd_e2e_s"] and recs[0]["rounds"] == 3 and recs[1]["rounds"] == 3
    assert recs[1]["acceptance_length"] == pytest.approx(2.0)  # one accepted draft a round


def test_percentiles_are_numpy_s_over_the_requests_and_a_missing_start_is_left_out():
    res = fake_result()
    recs = requests.records(res, ["p"])
    got = requests.percentiles(recs)
    assert got["sd_e2e_p50_s"] == pytest.approx(np.percentile(res.sd_times_s, 50))
    assert got["ar_ttft_p95_s"] == pytest.approx(np.percentile([0.05, 0.06, 0.05], 95))
    assert got["sd_tpot_p99_s"] == pytest.approx(np.percentile([r["sd_tpot_s"] for r in recs], 99))
    res.part_samples["sd_start"] = [0.07]  # a start sampled once: the other requests have no TTFT
    got = requests.percentiles(requests.records(res, ["p"]))
    assert got["sd_ttft_p99_s"] == pytest.approx(0.07) and got["sd_e2e_p99_s"] is not None


def test_a_run_row_carries_every_request_and_its_percentiles(env, tmp_path):
    out = tmp_path / "row.json"
    result = invoke("run", *env, "--batch", 2, "--repeats", 2, "-n", 8, "--export-json", out, "--no-save")
    assert result.exit_code == 0, result.output
    assert "per request (4 requests), p50: TTFT AR" in result.output
    row = json.loads(out.read_text())[0]
    recs = row["requests"]
    assert len(recs) == 4 and {r["prompt_id"] for r in recs} == set(row["batch_prompt_ids"])
    assert row["sd_e2e_p50_s"] == pytest.approx(np.median(row["sd_times_s"]))
    assert all(r["sd_ttft_s"] <= r["sd_e2e_s"] and r["rounds"] >= 1 for r in recs)
    # a sequence's rounds give its N - 1 tokens after the first (the last round may overshoot, cut)
    assert all(r["rounds"] * r["acceptance_length"] >= row["n_tokens"] - 1 for r in recs)


def test_the_report_s_reading_pools_the_suite_s_requests_and_its_plot_draws_both(tmp_path):
    from specbench.results import plot

    res = fake_result()
    rows = [{"requests": requests.records(res, [p]), "draft": "d", "target": "t"} for p in ("a", "b")]
    text = requests.reading(rows)
    assert "the suite's 6 requests" in text and "at or below AR's" in text
    for r in rows[0]["requests"]:
        r["sd_tpot_s"] = 1.0  # SD slower than AR on some requests: its p95 rises above AR's
    assert "above AR's" in requests.reading(rows)
    assert "no per-request records" in requests.reading([{"prompt_id": "old"}])
    plot.plot_requests(rows, str(tmp_path / "tpot.png"))
    assert (tmp_path / "tpot.png").stat().st_size > 1000


def test_itl_times_each_token_s_arrival_and_a_round_s_tokens_arrive_together(env, tmp_path):
    from conftest import assert_one_line_error

    out = tmp_path / "row.json"
    result = invoke("run", *env, "--itl", "--repeats", 2, "-n", 10, "--export-json", out, "--no-save")
    assert result.exit_code == 0, result.output
    assert "gaps between tokens AR" in result.output
    row = json.loads(out.read_text())[0]
    for r in row["requests"]:
        assert len(r["ar_gaps_s"]) == len(r["sd_gaps_s"]) == 9 and min(r["ar_gaps_s"]) > 0
        # SD's tokens come a round at a time: as many non-zero gaps as rounds after the first token's
        assert sum(g > 0 for g in r["sd_gaps_s"]) <= r["rounds"]
    assert row["sd_itl_p50_s"] is not None and row["ar_itl_p99_s"] >= row["ar_itl_p50_s"] > 0
    assert_one_line_error(invoke("run", *env, "--itl", "--batch", 2, "--dry-run"), "--itl", "--batch 1")
