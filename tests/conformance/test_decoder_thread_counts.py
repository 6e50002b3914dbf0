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
