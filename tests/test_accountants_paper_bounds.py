"""The papers' closed forms: conventions and the numbers quoted in their docstrings."""
import math

import pytest

from dpclip_lab.accountants import (GaussianEvent, RDPAccountant, SampledWithoutReplacementEvent,
                                    analytic_gaussian_epsilon, get_epsilon)
from dpclip_lab.accountants import paper_bounds as pb


def test_song_thm22_convention_and_validity():
    L, T, n, d = 1.0, 100, 1000, 1e-5
    s = pb.song_thm22_sigma(L, T, n, 1.0, d)
    z = pb.song_sigma_to_noise_multiplier(s, L, n)
    assert z == pytest.approx(math.sqrt(2 * T * math.log(1 / d)) / 1.0)
    true_eps = get_epsilon(noise_multiplier=z, sample_rate=1.0, steps=T, delta=d, accountant="pld")
    assert true_eps == pytest.approx(pb.song_thm22_true_epsilon(1.0, d), rel=1e-3)
    assert true_eps < 1.0                               # conservative at ε = 1 (≈ 0.76)
    assert pb.song_thm22_true_epsilon(10.0, d) > 10.0   # violated at ε = 10 (≈ 10.52)


def test_song_ldp_factor_two():
    s = pb.song_thmD2_sigma(1.0, 10, 1.0, 1e-5)
    z = pb.song_ldp_replace_one_noise_multiplier(s, 1.0)
    true_eps = analytic_gaussian_epsilon(z / math.sqrt(10), 1e-5)
    assert true_eps > 1.5                                # about twice the claimed ε = 1


def test_abadi_family():
    z = pb.abadi_thm1_noise_multiplier(0.01, 1000, 1.0, 1e-5, c1=100.0, c2=2.0)
    assert z == pytest.approx(2.0 * 0.01 * math.sqrt(1000 * math.log(1e5)))
    with pytest.raises(ValueError, match="epsilon"):
        pb.abadi_thm1_noise_multiplier(0.01, 1000, 1.0, 1e-5, c1=0.1, c2=2.0)
    c2 = pb.abadi_implied_constant(0.01, 1000, 1.0, 1e-5)
    zc = pb.abadi_thm1_noise_multiplier(0.01, 1000, 1.0, 1e-5, c1=1e6, c2=c2)
    assert get_epsilon(noise_multiplier=zc, sample_rate=0.01, steps=1000, delta=1e-5) <= 1.0
    # Chen Thm 4 with v = c2² is the same noise, written on the average gradient
    s = pb.chen_thm4_sigma(1.0, 1000, 10000, 1.0, 1e-5, v=c2 ** 2)
    assert pb.average_sigma_to_noise_multiplier(s, 1.0, 100) == pytest.approx(zc)
    assert pb.dicesgd_thm23_sigma(1.0, 1000, 10000, 1.0, 1e-5, v=c2 ** 2) == pytest.approx(s)


def test_wang_thm11_and_remark4():
    beta, sigma = pb.wang_remark4_beta(1.0, 1000, 1000, 2.0, 1e-6)
    assert 0 < beta < 1
    assert pb.wang_thm11_conditions(sigma, 1.0, 1000, 2.0, 1e-6, beta)
    z = pb.wang_replace_one_sigma_to_noise_multiplier(sigma, 1.0)
    acc = RDPAccountant().compose(SampledWithoutReplacementEvent(1000, 1, GaussianEvent(z)), 1000)
    assert acc.get_epsilon(1e-6) <= 2.0                   # the exact accountant agrees
    with pytest.raises(ValueError, match="beta"):
        pb.wang_remark4_beta(1.0, 100, 100, 0.01, 1e-4)


def test_wang_lemma13_threshold():
    assert pb.wang_lemma13_epsilon_threshold(1000) == pytest.approx(1.5389, rel=1e-3)
    assert pb.wang_lemma13_epsilon_threshold(10 ** 6) < pb.wang_lemma13_epsilon_threshold(1000)
    with pytest.raises(ValueError, match="n"):
        pb.wang_lemma13_epsilon_threshold(10)


def test_wang_output_perturbation():
    d = pb.wang_delta_sgd(steps=1000, n=1000, eta=0.01, alpha=1.0, L=1.0, M=1.0, gamma=1e-5, R=1.0)
    assert d > 0
    s = pb.wang_output_perturbation_sigma(d, 0.5, 1e-5)
    assert s == pytest.approx(math.sqrt(2 * math.log(2.5 / 1e-5)) * d / 0.5)
    with pytest.raises(ValueError, match="C_alpha"):
        pb.wang_delta_sgd(steps=10, n=10, eta=0.1, alpha=0.5, L=1, M=1, gamma=0.1)


def test_dicesgd_constant_gap():
    s = pb.dicesgd_thm38_sigma(1.0, 1.0, 1.0, 1000, 50000, 2.0, 1e-5)
    # the proof's own RDP bound gives √2·ε + ε²/(2 log(1/δ)), not ε
    e = pb.dicesgd_proof_epsilon(s, 1000, 50000, 1.0, 1.0, 1.0, 1e-5)
    assert e == pytest.approx(math.sqrt(2) * 2.0 + 4.0 / (2 * math.log(1e5)), rel=1e-9)
    assert pb.dicesgd_alg4_sigma(1000, 50000, 2.0, 1e-5) == pytest.approx(s)
    z = pb.dicesgd_sigma_to_noise_multiplier(s, batch_size=500, C1=1.0)
    assert z == pytest.approx(s * 500)
