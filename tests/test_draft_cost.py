"""A drafter's cost shape (specbench/draft_cost.py): a chain drafts K tokens in K draft steps, a
one-pass drafter (PARD, DFlash) in one step over K rows, lookup and the dial for nothing. The theory,
the best K, the prediction for another device and the rows price each as its shape says; tested
on recorded step times t(n), n = 1..16, against the formulas written out here."""

import json
from pathlib import Path

import pytest

from specbench.draft_cost import DraftCost, flat
from specbench.results import predict as pr
from specbench.results import theory

from conftest import invoke

RECORDED = Path(__file__).resolve().parent.parent / "results" / "recorded"
CURVE = RECORDED / "drafters" / "cpu-roofline-tiny-target-K15.json"  # t(n) of one model, n = 1..16


@pytest.fixture(scope="module")
def curves():
    rows = json.loads(CURVE.read_text())
    target = pr.curve_from_roofline(rows, "tiny-target")
    # the same recorded t(n) drafts, 1/8 of its time: a draft an eighth of the target's step
    draft = pr.StepCurve("draft", {n: t / 8 for n, t in target.times.items()})
    assert all(target.measured(n) for n in range(1, 17))
    return draft, target


def test_each_shape_costs_what_its_formula_says():
    t_d = {n: 0.001 * (1 + 0.05 * n) for n in range(1, 10)}.get
    for K in range(1, 9):
        assert DraftCost.SEQUENTIAL.seconds(K, t_d) == pytest.approx(K * t_d(1))
        assert DraftCost.ONE_PASS.seconds(K, t_d) == pytest.approx(t_d(K))
        assert DraftCost.FREE.seconds(K, t_d) == 0.0


@pytest.mark.parametrize("alpha", [0.3, 0.7, 0.9])
def test_the_round_and_the_speedup_of_a_one_pass_drafter_differ_from_a_chain_s_as_the_formulas_say(
    curves, alpha
):
    draft, target = curves
    one_pass = pr.StepCurve("draft", draft.times, DraftCost.ONE_PASS)
    for K in range(1, 9):
        chain, single = pr.predict([alpha], draft, target, K), pr.predict([alpha], one_pass, target, K)
        assert chain.t_round_s == pytest.approx(K * draft.at(1) + target.at(K + 1))
        assert single.t_round_s == pytest.approx(draft.at(K) + target.at(K + 1))
        assert chain.t_round_s - single.t_round_s == pytest.approx(K * draft.at(1) - draft.at(K))
        E = theory.expected_tokens(alpha, K)
        assert single.speedup == pytest.approx(E * target.at(1) / (draft.at(K) + target.at(K + 1)))
        assert single.tokens_per_round == chain.tokens_per_round == pytest.approx(E)
    free = pr.predict([alpha], pr.FREE, target, 4)
    assert free.t_round_s == pytest.approx(target.at(5))


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.95])
def test_best_K_of_a_one_pass_drafter_is_the_argmax_of_its_own_rounds(curves, alpha):
    """best_K against a brute force over the same recorded t(n): the two shapes' optima are each
    their own formula's, and a one-pass drafter never wants fewer drafts than a chain."""
    draft, target = curves
    verify = lambda K: target.at(K + 1)
    best = {}
    for cost in (DraftCost.SEQUENTIAL, DraftCost.ONE_PASS):
        drafting = lambda K, cost=cost: cost.seconds(K, draft.at)
        by_hand = max(
            range(1, 16), key=lambda K: theory.expected_tokens(alpha, K) / (drafting(K) + verify(K))
        )
        best[cost] = theory.best_K(alpha, drafting, verify, 15)
        assert best[cost] == by_hand
        curve = pr.StepCurve("draft", draft.times, cost)
        assert pr.best(pr.predictions([alpha], curve, target, range(1, 16))).K == by_hand
    assert best[DraftCost.ONE_PASS] >= best[DraftCost.SEQUENTIAL]


def test_the_closed_forms_price_one_pass_drafting_as_one_step():
    for K in (1, 4, 8):
        E = theory.expected_tokens(0.8, K)
        assert theory.speedup_from_alpha(0.8, K, 0.1, DraftCost.ONE_PASS) == pytest.approx(E / 1.1)
        assert theory.speedup_from_alpha(0.8, K, 0.1, DraftCost.FREE) == pytest.approx(E)
        assert theory.speedup_from_alpha(0.8, K, 0.1) == pytest.approx(E / (0.1 * K + 1))
        r = E / (K + 1)
        assert theory.speedup_from_r(r, K, 1.0, 10.0, DraftCost.ONE_PASS) == pytest.approx(E * 10 / 11)
    assert flat(0.3)(7) == 0.3


def test_theory_shows_what_a_one_pass_drafter_changes_in_the_optimal_K():
    args = ["theory", "--K", "4", "--t-draft", "1", "--t-target", "10", "--alpha", "0.8", "--t-verify", "12"]
    result = invoke(*args, "--draft-cost", "one-pass")
    assert result.exit_code == 0, result.output
    # t_verify(K) = 10 + 0.5 K; one pass of 1 whatever K, against K steps of 1
    verify = lambda K: 10 + 0.5 * K
    rate = lambda K, drafting: theory.expected_tokens(0.8, K) / (drafting + verify(K))
    one_pass = max(range(1, 17), key=lambda K: rate(K, 1.0))
    chain = max(range(1, 17), key=lambda K: rate(K, K))
    assert f"one-pass drafting (t_verify linear in K): {one_pass} " in result.output
    assert f"optimal K for alpha=0.8, c=0.1000 (t_verify linear in K): {chain} " in result.output
    assert one_pass > chain
    plain = invoke(*args[:-2])  # without --t-verify a one-pass drafter's speedup only grows
    assert "optimal K for alpha=0.8, c=0.1000 (t_verify = t_target): 6 (speedup" in plain.output
    rising = invoke(*args[:-2], "--draft-cost", "one-pass")
    assert "give --t-verify" in rising.output


def test_predict_reads_the_cost_shape_from_the_row_or_the_flag(tmp_path):
    from specbench.cli.asked.file_options import Predict
    from specbench.cli.commands import predict as predicting

    roofline = RECORDED / "cpu-roofline-bundled-kernels.json"
    row = {"K": 4, "drafter": "model", "draft": "tiny-draft", "target": "tiny-target", "speedup": 2.0}
    row |= {"per_position_acceptance": [0.9, 0.8, 0.8, 0.7], "draft_cost": "one-pass", "kernels": "cpu"}
    (tmp_path / "run.json").write_text(json.dumps([row]))
    o = Predict(str(roofline), str(tmp_path / "run.json"), Ks=(4,))
    (single,), _, draft, target, *_ = predicting.predict(o)
    assert draft.cost is DraftCost.ONE_PASS
    assert single.t_round_s == pytest.approx(draft.at(4) + target.at(5))
    (chain,), *_ = predicting.predict(Predict(str(roofline), str(tmp_path / "run.json"), Ks=(4,),
                                              draft_cost=DraftCost.SEQUENTIAL))  # fmt: skip
    assert chain.t_round_s == pytest.approx(4 * draft.at(1) + target.at(5))
    pard = row | {"drafter": "pard", "draft_pass_rows": 8}  # PARD's pass: K + 1 real rows and K - 1 masks
    (tmp_path / "pard.json").write_text(json.dumps([pard]))
    (one,), _, draft, target, *_ = predicting.predict(
        Predict(str(roofline), str(tmp_path / "pard.json"), Ks=(4,))
    )
    assert draft.rows_per_draft == 2 and one.t_round_s == pytest.approx(draft.at(8) + target.at(5))
    old = row | {"drafter": "lookup"}
    del old["draft_cost"]  # a row written before rows recorded it: lookup drafted free
    (tmp_path / "old.json").write_text(json.dumps([old]))
    (free,), _, draft, *_ = predicting.predict(Predict(str(roofline), str(tmp_path / "old.json"), Ks=(4,)))
    assert draft is pr.FREE and free.t_round_s == pytest.approx(target.at(5))
    result = invoke("predict", "--roofline", roofline, "--alpha", "0.8", "--target-model", "tiny-target",
                    "--draft-model", "tiny-draft", "--draft-cost", "one-pass")  # fmt: skip
    assert result.exit_code == 0, result.output
