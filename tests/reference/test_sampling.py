"""The one sampler specification (plga.reference.sampling), checked against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plga.errors import InputError, NonFiniteError
from plga.reference.sampling import sample_next, sampling_distribution


def _kept_by_hand(row: np.ndarray, temperature: float, top_k: int, top_p: float) -> tuple[list[int], np.ndarray]:
    """The kept tokens (best first) and their renormalized probabilities, by a plain loop."""
    x = row / temperature
    order = sorted(range(len(x)), key=lambda i: (-x[i], i))
    if top_k:
        order = order[:top_k]
    p = np.exp(x[order] - x[order[0]])
    p = p / p.sum()
    kept, total = [], 0.0
    for i, pi in zip(order, p, strict=True):
        kept.append(i)
        total += pi
        if total >= top_p * (1 - 1e-12):
            break
    q = p[: len(kept)]
    return kept, q / q.sum()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.5]),
    top_k=st.sampled_from([0, 1, 2, 5, 40]),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.1, 1e-6]),
    ties=st.booleans(),
)
def test_distribution_matches_a_hand_computation(seed, temperature, top_k, top_p, ties):
    logits = np.random.default_rng(seed).normal(size=(3, 23)) * 2
    if ties:
        logits = np.round(logits)  # many equal logits: ties break by lower id
    probs, ids = sampling_distribution(logits, temperature, top_k, top_p)
    for b in range(3):
        kept, q = _kept_by_hand(logits[b], temperature, top_k, top_p)
        assert ids[b, : len(kept)].tolist() == kept
        np.testing.assert_allclose(probs[b, : len(kept)], q, rtol=1e-12, atol=1e-15)
        assert np.all(probs[b, len(kept):] == 0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), top_k=st.sampled_from([0, 1, 3, 50, 400]), top_p=st.sampled_from([1.0, 0.9, 0.3]),
       spread=st.sampled_from([1.0, 8.0]), ties=st.booleans())
def test_a_long_row_ranks_and_keeps_like_the_full_sort(seed, top_k, top_p, spread, ties):
    """Top-k of a vocabulary-sized row takes the partition path (k · 8 < V), a nucleus without
    top-k a ranked prefix (peaked rows: short; flat rows: long); with rounded logits many tokens
    tie, and the lower ids among them must come first."""
    logits = np.random.default_rng(seed).normal(size=(2, 4000)) * spread
    if ties:
        logits = np.round(logits)
    probs, ids = sampling_distribution(logits, 1.0, top_k, top_p)
    assert ids.shape == probs.shape and (top_k == 0 or ids.shape[1] == top_k)
    for b in range(2):
        kept, q = _kept_by_hand(logits[b], 1.0, top_k, top_p)
        full = np.argsort(-logits[b], kind="stable")[: ids.shape[1]]  # every ranked id, not only the kept ones
        assert ids[b].tolist() == full.tolist()
        np.testing.assert_allclose(probs[b, : len(kept)], q, rtol=1e-12, atol=1e-15)
        assert np.all(probs[b, len(kept):] == 0)


def _tied_ranking() -> list[int]:
    logits = np.zeros((1, 1000))
    logits[0, [900, 5, 700]] = 2.0  # the best three, in id order 5, 700, 900
    logits[0, [999, 3, 640, 12]] = 1.0  # tied at the 4th and 5th places: ids 3 and 12 are kept
    return sampling_distribution(logits, 1.0, 5)[1][0].tolist()


def test_a_tie_at_the_k_th_value_keeps_the_lower_ids():
    assert _tied_ranking() == [5, 700, 900, 3, 12]


def test_negative_control_ties_ranked_by_higher_id_are_caught(monkeypatch):
    """A ranker that breaks ties the wrong way (higher id first) must fail the tie check."""
    import plga.reference.sampling as sampling

    def higher_id_first(x, keep):
        ids = np.stack([(len(r) - 1 - np.argsort(-r[::-1], kind="stable"))[:keep] for r in x])
        return np.take_along_axis(x, ids, axis=-1), ids

    monkeypatch.setattr(sampling, "_best_ranked", higher_id_first)
    assert _tied_ranking() == [900, 700, 5, 999, 640]


class _FixedUniforms:
    """Stands in for the decoding's Generator: returns given uniforms."""

    def __init__(self, u: list[float]) -> None:
        self.u = u

    def random(self, n: int) -> np.ndarray:
        out, self.u = np.array(self.u[:n]), self.u[n:]
        return out


def test_inverse_cdf_picks_the_first_token_whose_cumulative_mass_exceeds_u():
    logits = np.log(np.array([[0.1, 0.5, 0.3, 0.1]]))  # ranked: 1 (0.5), 2 (0.3), 0 (0.1), 3 (0.1)
    picks = [int(sample_next(logits, _FixedUniforms([u]), 1.0)[0]) for u in (0.0, 0.49, 0.5, 0.79, 0.8, 0.95)]
    assert picks == [1, 1, 2, 2, 0, 3]
    # top_p = 0.7: tokens 1 and 2 kept (0.5 < 0.7 ≤ 0.8), renormalized to 0.625 / 0.375
    assert int(sample_next(logits, _FixedUniforms([0.62]), 1.0, 0, 0.7)[0]) == 1
    assert int(sample_next(logits, _FixedUniforms([0.63]), 1.0, 0, 0.7)[0]) == 2
    assert int(sample_next(logits, _FixedUniforms([0.999]), 1.0, 0, 0.7)[0]) == 2  # never a dropped token


def test_seeded_frequencies_follow_the_kept_distribution_and_greedy_limits():
    logits = np.random.default_rng(0).normal(size=(1, 50))
    probs, ids = sampling_distribution(logits, 1.0, 3, 1.0)
    rng = np.random.default_rng(3)
    draws = np.array([sample_next(logits, rng, 1.0, 3)[0] for _ in range(3000)])
    for r in range(3):
        assert abs(np.mean(draws == ids[0, r]) - probs[0, r]) < 0.04
    assert set(draws.tolist()) <= set(ids[0, :3].tolist())
    a = [sample_next(logits, np.random.default_rng(7), 0.8, 10, 0.9) for _ in range(3)]
    assert all(np.array_equal(a[0], x) for x in a)
    greedy = np.argmax(logits, -1)
    assert np.array_equal(sample_next(logits, np.random.default_rng(1), 1.0, top_k=1), greedy)
    assert np.array_equal(sample_next(logits, np.random.default_rng(1), 1.0, top_p=1e-9), greedy)


def test_bad_arguments_are_input_errors():
    logits = np.zeros((1, 4))
    with pytest.raises(InputError, match="pass a seed"):
        sample_next(logits, None, 1.0)
    with pytest.raises(InputError):
        sample_next(logits, np.random.default_rng(0), -1.0)
    with pytest.raises(NonFiniteError):
        sample_next(np.array([[0.0, np.nan]]), np.random.default_rng(0), 1.0)
