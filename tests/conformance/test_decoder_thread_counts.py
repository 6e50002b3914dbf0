"""``decoder_thread_counts``: the decoder judged at several intra-op threads. Every other decoder
check runs at one thread, where the project's packed float64 products (float32 ones too where
the native kernel is not built) are one column block; at N threads they are N blocks
(:func:`plga.kernels.packed.packed_parts`; the native kernel splits its rows per thread instead). A fault in how the blocks
are joined passes every one-thread check and fails this one (negative control below); the
project's kernels pass it in every dtype (tests/conformance/test_meta.py runs the whole quick
profile), as the suite's own control with the same fault fails it (``vocab_blocks_reversed_per_thread``)."""

import pytest

torch = pytest.importorskip("torch")

from plga.conformance import check_kernel, resolve_impl  # noqa: E402
from plga.conformance.checks import thread_counts  # noqa: E402
from plga.kernels import model  # noqa: E402


def _blocks_joined_in_reverse(original):
    def packed_linear(x, w, b, width, **kw):  # w [P, K, N/P], b [P, 1, N/P]: one block per thread
        if w.ndim == 3 and w.shape[0] > 1:
            return original(x, w.flip(0), b.flip(0), width, **kw)
        return original(x, w, b, width, **kw)

    return packed_linear


def test_a_wrong_join_of_the_per_thread_blocks_fails_only_at_several_threads(monkeypatch):
    assert min(thread_counts()) >= 2
    monkeypatch.setattr(model, "packed_linear", _blocks_joined_in_reverse(model.packed_linear))
    report = check_kernel(resolve_impl("kernels"), dtypes=("float64",), profile="quick", shrink=False,
                          checks=["forward_logits", "cache_modes", "decoder_thread_counts"])
    assert report.failed_checks() == {"decoder_thread_counts"}, report.summary()


def test_the_check_restores_the_thread_count(monkeypatch):
    before = torch.get_num_threads()
    report = check_kernel(resolve_impl("reference"), dtypes=("float64",), profile="quick", shrink=False,
                          checks=["decoder_thread_counts"])
    assert report.passed and torch.get_num_threads() == before


@pytest.mark.parametrize("control", ["kvg_operator_rows_per_thread", "constant_operator_heads_per_thread"])
def test_a_split_wrong_in_one_mode_only_fails_at_several_threads(monkeypatch, control):
    """A decoder whose per-thread split is wrong only in kvg (the cached G_LM's batch rows) or
    only under a constant G (its heads) — an outside audit's two kernels — fails the check, which
    decodes each case in one of the declared modes in turn, collapsed with a random G and its
    forward logits judged too. Negative control: the check as it was, kv decoding alone, passes
    both."""
    from plga.conformance import checks
    from plga.conformance.controls import CONTROLS

    impl = CONTROLS[control].make()
    report = check_kernel(impl, dtypes=("float64",), profile="quick", shrink=False, checks=["decoder_thread_counts"])
    assert report.failed_checks() == {"decoder_thread_counts"}, report.summary()
    monkeypatch.setattr(checks, "generation_modes", lambda adapter: ("kv",))
    report = check_kernel(impl, dtypes=("float64",), profile="quick", shrink=False, checks=["decoder_thread_counts"])
    assert report.passed, report.summary()


def test_every_declared_mode_takes_its_turn():
    """Consecutive seeds (the boundary cases') cycle through the declared modes; collapsed only
    with a KV cache; no mode where none is declared."""
    from plga.conformance.checks import generation_modes, mode_in_turn

    class Declares:
        def __init__(self, *caps):
            self.caps = set(caps)

        def provides(self, cap):
            return cap in self.caps

    every = generation_modes(Declares("cache_kv", "cache_kvg", "cache_nocache", "collapsed"))
    assert every == ("kv", "kvg", "nocache", "collapsed")
    assert {mode_in_turn(every, s) for s in range(100, 104)} == set(every)
    assert generation_modes(Declares("cache_nocache", "collapsed")) == ("nocache",)
    assert mode_in_turn(generation_modes(Declares("forward")), 7) is None
