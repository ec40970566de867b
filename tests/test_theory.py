import pytest

from specbench.results import theory


def test_seed_formula_at_the_seed_points():
    # seed 003: K=4, t_draft=1.8, t_target=14.1
    assert theory.speedup_from_r(0.8, 4, 1.8, 14.1) == pytest.approx(0.8 * 5 * 14.1 / (4 * 1.8 + 14.1))
    assert round(theory.speedup_from_r(0.8, 4, 1.8, 14.1), 2) == 2.65
    assert round(theory.speedup_from_r(0.62, 4, 1.8, 14.1), 2) == 2.05


def test_expected_tokens_edges():
    assert theory.expected_tokens(1.0, 4) == 5.0  # every draft accepted, plus the bonus token
    assert theory.expected_tokens(0.0, 4) == 1.0  # always the resampled token alone
    assert theory.expected_tokens(0.5, 1) == pytest.approx(1.5)  # K=1: 1 + alpha
    assert theory.expected_tokens(0.999999, 4) == pytest.approx(5.0, rel=1e-5)  # continuous at alpha -> 1


def test_leviathan_speedup_edges():
    assert theory.speedup_from_alpha(1.0, 4, 0.0) == 5.0  # free, perfect draft: K+1
    assert theory.speedup_from_alpha(0.0, 4, 0.1) == pytest.approx(1 / 1.4)  # useless draft costs K c
    assert theory.speedup_from_alpha(0.6, 1, 0.05) == pytest.approx(1.6 / 1.05)
    # the same formula as the seed's when r = E/(K+1)
    alpha, K, td, tt = 0.7, 3, 1.2, 10.0
    assert theory.speedup_from_alpha(alpha, K, td / tt) == pytest.approx(
        theory.speedup_from_r(theory.r_from_alpha(alpha, K), K, td, tt)
    )


def test_alpha_and_r_invert_each_other():
    for K in (1, 4, 8):
        for alpha in (0.0, 0.3, 0.75, 1.0):
            assert theory.alpha_from_r(theory.r_from_alpha(alpha, K), K) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError):
        theory.alpha_from_r(0.1, 4)  # below 1/(K+1)


def test_optimal_K():
    assert theory.optimal_K(0.8, 0.1) == 6  # checked by hand in test_cli
    assert theory.optimal_K(0.0, 0.1) == 1  # no acceptance: the fewest drafts
    assert theory.optimal_K(1.0, 0.0, K_max=12) == 12  # perfect free draft: as many as allowed


def test_refined_formula_reduces_to_seed_when_verify_costs_a_step():
    assert theory.refined_speedup(4.0, 4, 1.8, 14.1, 14.1) == pytest.approx(
        theory.speedup_from_r(0.8, 4, 1.8, 14.1)
    )
    assert theory.refined_speedup(4.0, 4, 1.8, 14.1, 20.0) == pytest.approx(4 * 14.1 / (7.2 + 20))


def test_parse_K_range():
    assert theory.parse_K_range("4") == [4]
    assert theory.parse_K_range("1-4") == [1, 2, 3, 4]
    assert theory.parse_K_range("1,2, 8") == [1, 2, 8]
    for bad in ("", "0", "a", "3-1", "1,,2"):
        with pytest.raises(ValueError):
            theory.parse_K_range(bad)
