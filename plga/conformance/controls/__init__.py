"""The suite's controls: wrong kernels it must reject and correct alternatives it must accept.

:data:`CONTROLS` maps a name to a :class:`Control`. Negative controls are built like real
kernels — key blocks, head chunks, value tiles, a hand-written FA-2 backward, split-K, a
decoder with its own cache handling — and carry one bug each, most of them visible only past
a block boundary, for one configuration knob, with batch > 1 and padding, or as an in-place
write to an input. Positive controls are sound alternative algorithms (online softmax over
key blocks, LSE-recomputing backward, split-K combined by log-sum-exp, other head chunking and
reduction orders) that a tolerance policy must not reject. ``plga conformance --self-test``
runs them all (:mod:`plga.conformance.selftest`); ``tests/conformance/test_meta.py`` requires
every wrong one caught and no correct one rejected in ``quick`` and ``ci`` (``thorough`` with
``PLGA_SLOW=1``). They are written independently of :mod:`plga.conformance.broken`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..eager import EagerDecoder
from .chain import ChainControl
from .decoders import (
    BelowFloat64DecoderControl,
    Bf16DecoderControl,
    ChunkedPrefillFrozenA,
    CollapsedStepsPlainSdpa,
    ConstantOperatorHeadsPerThread,
    ConversationPrefixCache,
    DecoderControl,
    FeedForwardTailDropped,
    FeedForwardTileOf512,
    FirstDenseBlockOnly,
    Float64DecoderControl,
    ForwardOnlyBf16Control,
    ForwardOnlyFp16Control,
    FullLastQueryBlockDropped,
    GCacheSharedByPrompt,
    GeneratedZerosMasked,
    GramOverRealRowsOnly,
    KvgOperatorRowsPerThread,
    KvPageAliased,
    KvPowerInActivationDtype,
    KvRecomputesFromNewRows,
    KvStepPowerWithoutFloor,
    LastLayerSkippedPastTwo,
    LastResidualUnitSkipped,
    LayerNormChunksOf512,
    LoadedDecoderControl,
    LogitsOnlyBf16Control,
    LogSumExpFiniteMaskDecoder,
    NocacheIgnoresConstantG,
    PaddingIgnoredAfterPrompt,
    PaddingMaskKeptByShape,
    PositionsRoundedToBf16,
    RingKvCache,
    RingKvCacheOf1024,
    RopeTableOf768,
    RopeTableOf1024,
    RotateHalfAsInterleaved,
    RowLengthsMixed,
    SecondBestNearTie,
    SoftmaxInFloat32,
    StepMaskFromLengths,
    StepMaskTileOf8,
    StepMaskTileOf16,
    StepPositionsFromFirstRealToken,
    StepPositionsOffByOne,
    StepPositionTableOf32,
    StepPositionTableOfEight,
    TorchtuneRopeCache,
    VocabBlocksReversedPerThread,
    VocabTailBlockDropped,
    VocabTailBlockOf1024,
)
from .masks import FiniteMaskAsIdeal, FiniteMaskBackwardIdeal, LogSumExpFiniteMask
from .tiled import TiledAttention, Tiling


@dataclasses.dataclass(frozen=True)
class Control:
    """One control: ``correct`` ones must pass, the others must fail (in ``caught_by``)."""

    name: str
    description: str
    factory: Callable[[], Any]
    correct: bool = False
    caught_by: tuple[str, ...] = ()  # checks expected to fail (any one of them suffices)

    def make(self) -> Any:
        return self.factory()


def _tiled(name: str, bug: str = "", mutate: str = "", **tiling: Any) -> Callable[[], Any]:
    return lambda: TiledAttention(f"controls.{name}", Tiling(bug=bug, **tiling), mutate)


def _decoder(name: str, cls: type, mutate_state: bool = False) -> Callable[[], Any]:
    return lambda: DecoderControl(f"controls.{name}", cls, mutate_state)


def _decoder_below_float64(name: str, cls: type) -> Callable[[], Any]:
    """A decoder control declaring float32 and bfloat16 only: a bug in what float64 alone judged before."""
    def make() -> Any:
        control = DecoderControl(f"controls.{name}", cls)
        control.dtypes = ("float32", "bfloat16")
        return control

    return make


def _chain(name: str, bug: str) -> Callable[[], Any]:
    return lambda: ChainControl(f"controls.{name}", bug)


_ATT = ("attention_unmasked", "attention_causal", "attention_padding", "sentinel_g", "batched_equals_slices", "sdpa_identity",
        "attention_trained_g", "attention_mask_dominance")
_BWD = ("attention_backward",)
_FWD = ("forward_logits", "forward_collapsed", "forward_golden")
_CACHE = ("cache_modes", "collapsed_equals_kvg", "gcache_invalidated", "state_between_calls", "cache_nocache")

_LIST = [
    # correct alternative algorithms
    Control("fa2_forward_backward", "FA-2: online softmax over 64-key blocks, head chunks of 4, value tiles of 32; "
            "backward recomputes P from the saved LSE, D = rowsum(dO∘O)", _tiled("fa2_forward_backward"), correct=True),
    Control("small_blocks_reversed", "16-key blocks walked last to first, head chunks of 3, value tiles of 8",
            _tiled("small_blocks_reversed", key_block=16, head_chunk=3, value_tile=8, reverse_keys=True), correct=True),
    Control("split_k", "split-K: partial softmax per key split (32-key blocks, 3 splits) combined with the LSE",
            _tiled("split_k", key_block=32, splits=3), correct=True),
    Control("one_head_per_chunk", "one head per chunk, 128-key blocks, one value tile",
            _tiled("one_head_per_chunk", key_block=128, head_chunk=1, value_tile=256), correct=True),
    Control("lse_finite_mask_float64", "float64, softmax as exp(x − logsumexp(x)) with the finite −1e9 mask: on a row "
            "with no allowed key every weight carries u·1e9 from the log-sum-exp", lambda: LogSumExpFiniteMask(
                "controls.lse_finite_mask_float64"), correct=True),
    Control("lse_finite_mask_decoder_float64", "a float64 decoder whose attention normalizes by a log-sum-exp under the "
            "finite mask: a left-padded prompt's rows without a key carry u·1e9 into the next layer's Gram",
            lambda: Float64DecoderControl("controls.lse_finite_mask_decoder_float64", LogSumExpFiniteMaskDecoder),
            correct=True),
    Control("kv_power_bf16_kvg_float32", "bfloat16: kv recomputes the power stage in bfloat16 (as the eager baseline "
            "does), kvg keeps the prompt's float32 G_LM: the two may split a near tie differently",
            lambda: Bf16DecoderControl("controls.kv_power_bf16_kvg_float32", KvPowerInActivationDtype), correct=True),
    Control("fp16_softmax_in_float32", "a float16 decoder (forward only) whose attention weights are computed in float32, "
            "the −1e9 mask included, and rounded once: float16 overflows −1e9 to −∞",
            lambda: ForwardOnlyFp16Control("controls.fp16_softmax_in_float32", SoftmaxInFloat32), correct=True),
    Control("rope_tables_float32", "float32/bfloat16: RoPE tables built as the upstream implementation (torchtune) builds "
            "them, every step in float32: the angle's rounding grows with the position (~1e-5 at 200)",
            lambda: BelowFloat64DecoderControl("controls.rope_tables_float32", TorchtuneRopeCache), correct=True),
    # tiling bugs: visible only past a block, chunk or tile
    Control("tail_block_dropped", "the key-block loop drops the partial last block (T % 64 ≠ 0, T > 64)",
            _tiled("tail_block_dropped", "tail_block_dropped"), caught_by=_ATT),
    Control("full_last_block_dropped", "128-key blocks whose last block is sized T % 128: a whole number of blocks "
            "drops the last one (T = 256)", _tiled("full_last_block_dropped", "full_last_block_dropped", key_block=128),
            caught_by=_ATT),
    Control("running_max_not_rescaled", "the accumulator is not rescaled when the running max grows across blocks",
            _tiled("running_max_not_rescaled", "running_max_not_rescaled", key_block=16), caught_by=_ATT),
    Control("last_head_chunk_skipped", "the head-chunk loop skips the last partial chunk (H % 4 ≠ 0, H > 4)",
            _tiled("last_head_chunk_skipped", "last_head_chunk_skipped"), caught_by=_ATT),
    Control("last_value_tile_dropped", "value tiles drop the last tile when dv % 32 ≠ 0, dv > 32",
            _tiled("last_value_tile_dropped", "last_value_tile_dropped"), caught_by=_ATT),
    Control("mask_shift_in_tail", "the padding/causal mask of the partial last key block is shifted by one",
            _tiled("mask_shift_in_tail", "mask_shift_in_tail"), caught_by=_ATT),
    Control("chunk_relative_g", "head chunks index G from head 0 of the chunk (G of heads 0–3 reused)",
            _tiled("chunk_relative_g", "chunk_relative_g"), caught_by=_ATT),
    Control("split_k_plain_average", "split-K combines the splits by a plain average instead of their LSE weights",
            _tiled("split_k_plain_average", "split_k_plain_average", key_block=32, splits=3), caught_by=_ATT),
    # size-switched paths: right below a size, wrong past it
    Control("long_keys_plain_average", "from 512 keys, a flash-decoding path splits the keys into blocks and averages "
            "the splits instead of weighting them by their LSE", _tiled("long_keys_plain_average", "long_keys_plain_average"),
            caught_by=_ATT),
    Control("query_tail_dropped", "past 256 queries, the query-block loop leaves the partial last block of 256 rows at zero",
            _tiled("query_tail_dropped", "query_tail_dropped"), caught_by=_ATT),
    Control("decode_long_keys_plain_average", "a decoding step (one query) over 512 keys or more splits the keys and "
            "averages the splits instead of weighting them by their LSE (prefill right)",
            _tiled("decode_long_keys_plain_average", "decode_long_keys_plain_average"), caught_by=_ATT),
    Control("d64_long_keys_plain_average", "the head-dim-64 kernel's path for 512 keys or more averages its key splits "
            "instead of weighting them by their LSE (other head dims right)",
            _tiled("d64_long_keys_plain_average", "d64_long_keys_plain_average"), caught_by=_ATT),
    Control("whole_512_key_splits_last_dropped", "512-key splits whose last split is sized T % 512: a whole number of "
            "splits drops the last one (a 1024-token prompt)", _tiled("whole_512_key_splits_last_dropped",
                                                                      "full_last_block_dropped", key_block=512),
            caught_by=_ATT),
    Control("causal_rows_past_grid", "the causal kernel launches query rows (B·H·S) on one grid dimension of 65 535: "
            "later rows stay zero", _tiled("causal_rows_past_grid", "causal_rows_past_grid"),
            caught_by=("attention_causal", "attention_padding", "sdpa_identity", "attention_unmasked")),
    Control("batch_heads_past_grid", "(batch, head) pairs launched on one grid dimension of 65 535: later pairs stay zero",
            _tiled("batch_heads_past_grid", "batch_heads_past_grid"), caught_by=_ATT),
    Control("thread_splits_plain_average", "one key split per intra-op thread, the splits averaged instead of weighted "
            "by their LSE (exact at one thread)", _tiled("thread_splits_plain_average", "thread_splits_plain_average"),
            caught_by=("thread_counts",)),
    Control("thread_splits_tree_power_of_two", "one key split per intra-op thread, merged by a pairwise tree that drops "
            "the odd one out (exact at 1, 2 and 4 threads, wrong at 3)",
            _tiled("thread_splits_tree_power_of_two", "thread_splits_tree_power_of_two"), caught_by=("thread_counts",)),
    Control("vocab_blocks_reversed_per_thread", "the vocabulary product in one column block per intra-op thread, the "
            "blocks put back in reverse order (exact at one thread)",
            _decoder("vocab_blocks_reversed_per_thread", VocabBlocksReversedPerThread), caught_by=("decoder_thread_counts",)),
    Control("step_mask_from_lengths", "float32 and bfloat16 only: cached steps rebuild the prompt's key padding as key "
            "j < the row's count of real tokens (right padding assumed; left-padded rows attend to padding)",
            _decoder_below_float64("step_mask_from_lengths", StepMaskFromLengths),
            caught_by=("cache_modes", "gcache_invalidated", "state_between_calls", "decoder_thread_counts")),
    Control("kv_step_power_without_floor", "float32 and bfloat16 only: kv's cached steps recompute G_LM from the cached A "
            "without the 1e-9 floor of A_LM (the prompt pass and kvg keep it)",
            _decoder_below_float64("kv_step_power_without_floor", KvStepPowerWithoutFloor), caught_by=_CACHE),
    Control("g_cache_shared_by_prompt", "kvg's prompt operators kept in one table for every model, keyed by the "
            "configuration and the prompt's ids (a second model of one configuration gets the first one's G_LM)",
            _decoder("g_cache_shared_by_prompt", GCacheSharedByPrompt), caught_by=("state_between_calls",)),
    Control("kvg_operator_rows_per_thread", "kvg's cached G_LM read in one span of batch rows per intra-op thread, each "
            "span from row 0 (exact at one thread)",
            _decoder("kvg_operator_rows_per_thread", KvgOperatorRowsPerThread), caught_by=("decoder_thread_counts",)),
    Control("constant_operator_heads_per_thread", "a constant (collapsed) G read in one span of heads per intra-op thread, "
            "each span from head 0 (exact at one thread)",
            _decoder("constant_operator_heads_per_thread", ConstantOperatorHeadsPerThread), caught_by=("decoder_thread_counts",)),
    Control("mid_keys_padding_dropped", "from 512 to 1023 keys, a two-pass path is never handed the key padding mask",
            _tiled("mid_keys_padding_dropped", "mid_keys_padding_dropped"), caught_by=("attention_padding",
                                                                                      "attention_mask_dominance")),
    Control("row_chunks_tail_dropped", "query rows (B·H·S flattened) launched in chunks of 4096: the partial last chunk "
            "is never launched (its rows stay zero)", _tiled("row_chunks_tail_dropped", "row_chunks_tail_dropped"),
            caught_by=_ATT),
    Control("odd_d_last_feature_dropped", "scores summed over feature pairs: at an odd head dim the last feature is "
            "dropped", _tiled("odd_d_last_feature_dropped", "odd_d_last_feature_dropped"), caught_by=_ATT),
    Control("wide_d_second_half_dropped", "one 256-wide head-dim tile: past d = 256 the scores miss the other features",
            _tiled("wide_d_second_half_dropped", "wide_d_second_half_dropped"), caught_by=_ATT),
    Control("d128_g_transposed", "a specialised head-dim-128 path reads G transposed (Q Gᵀ Kᵀ at d = 128 only)",
            _tiled("d128_g_transposed", "d128_g_transposed"), caught_by=_ATT),
    # layout bugs: right on contiguous inputs and on most views
    Control("batch_heads_merged_by_strides", "v's batch and head dims merged without a copy, taking the batch stride as "
            "H × the head stride: wrong on a slice of a fused QKV buffer",
            _tiled("batch_heads_merged_by_strides", "batch_heads_merged_by_strides"), caught_by=("strided_inputs",)),
    Control("shared_kv_padding_dropped", "a fast path for keys and values shared by every head (stride 0) drops the key "
            "padding mask", _tiled("shared_kv_padding_dropped", "shared_kv_padding_dropped"), caught_by=("strided_inputs",)),
    # edge-value bugs
    Control("finite_mask_as_ideal", "finite_mask=True computed as the ideal mask: a fully masked row gives zeros, "
            "not the published softmax over every key", lambda: FiniteMaskAsIdeal("controls.finite_mask_as_ideal"),
            caught_by=("attention_finite_mask",)),
    Control("empty_rows_nan", "a fully padded query row gives 0/0 = NaN instead of zeros",
            _tiled("empty_rows_nan", "empty_rows_nan"), caught_by=("attention_padding",)),
    Control("causal_empty_rows_nan", "zeros only for fully padded batch rows: a query row emptied by causal ∩ left "
            "padding gives 0/0 = NaN", _tiled("causal_empty_rows_nan", "causal_empty_rows_nan"), caught_by=("attention_padding",)),
    Control("causal_empty_rows_uniform", "zeros only for fully padded batch rows: a query row emptied by causal ∩ left "
            "padding gives the mean of every value (a large finite fill)",
            _tiled("causal_empty_rows_uniform", "causal_empty_rows_uniform"), caught_by=("attention_padding",)),
    Control("scale_given_ignored", "an explicit scale is ignored (1/√d always)",
            _tiled("scale_given_ignored", "scale_given_ignored"), caught_by=_ATT),
    Control("scale_none_is_one", "scale=None is taken as 1 instead of 1/√d", _tiled("scale_none_is_one", "scale_none_is_one"),
            caught_by=_ATT),
    Control("s1_drops_padding", "the S = 1 (decoding) fast path drops the key padding mask",
            _tiled("s1_drops_padding", "s1_drops_padding"), caught_by=("attention_padding", "attention_mask_dominance")),
    Control("dv_assumed_d", "assumes dv = d: only the first min(d, dv) value columns are computed",
            _tiled("dv_assumed_d", "dv_assumed_d"), caught_by=_ATT),
    Control("causal_top_left", "the causal mask is aligned top-left (wrong for S < T)",
            _tiled("causal_top_left", "causal_top_left"), caught_by=("attention_causal", "attention_padding")),
    Control("batched_g_first_only", "a batched G [B,H,d,d] is read as G[0] for every batch element",
            _tiled("batched_g_first_only", "batched_g_first_only"), caught_by=_ATT),
    # wrong backward
    Control("dk_missing_scale", "the FA-2 backward forgets the scale in dK", _tiled("dk_missing_scale", "dk_missing_scale"),
            caught_by=_BWD),
    Control("dg_transposed", "the backward returns dGᵀ", _tiled("dg_transposed", "dg_transposed"), caught_by=_BWD),
    Control("backward_empty_rows_nan", "the FA-2 backward recomputes P = exp(s − lse) with lse = −inf on query rows "
            "with no allowed key: NaN gradients there (the forward is right)",
            _tiled("backward_empty_rows_nan", "backward_empty_rows_nan"), caught_by=_BWD),
    Control("backward_head_dim_tail_dropped", "the backward walks q G and k features in tiles of 128 counted as d // 128: "
            "past d = 128 the partial last tile of dQ, dK and dG is zero", _tiled("backward_head_dim_tail_dropped",
                                                                                 "backward_head_dim_tail_dropped"), caught_by=_BWD),
    Control("backward_query_tail_dropped", "past 256 queries, the backward's query-block loop skips the partial last "
            "block (its dQ rows zero, its share of dK, dV, dG lost)",
            _tiled("backward_query_tail_dropped", "backward_query_tail_dropped"), caught_by=_BWD),
    Control("backward_shared_kv_summed", "keys and values expanded over heads (a multi-query caller): the backward sums "
            "dK, dV over heads itself and returns the sum for every head, which autograd's expand sums again (H× too large)",
            _tiled("backward_shared_kv_summed", "backward_shared_kv_summed"), caught_by=_BWD),
    Control("backward_g_over_batch_summed", "a per-head G expanded over the batch: the backward sums dG over the batch "
            "itself, which autograd's expand sums again (B× too large)",
            _tiled("backward_g_over_batch_summed", "backward_g_over_batch_summed"), caught_by=_BWD),
    Control("backward_frozen_g_dropped", "a G that does not require grad (frozen) sends dQ down the G = None path: "
            "dQ without the factor Gᵀ", _tiled("backward_frozen_g_dropped", "backward_frozen_g_dropped"), caught_by=_BWD),
    Control("backward_needs_grad_off_by_one", "dK is computed only when v requires grad (needs_input_grad[2] for [1]): "
            "a trainable k beside a frozen v gets no gradient",
            _tiled("backward_needs_grad_off_by_one", "backward_needs_grad_off_by_one"), caught_by=_BWD),
    Control("backward_dout_as_contiguous", "the backward reads the output's gradient as if contiguous: wrong when it "
            "arrives as a view (a loss over the output read as [B, S, H, dv])",
            _tiled("backward_dout_as_contiguous", "backward_dout_as_contiguous"), caught_by=_BWD),
    Control("backward_saved_inputs_as_contiguous", "the forward honours strides, the backward reads its saved q, k, v as "
            "if contiguous (wrong for q, k, v sliced from a fused or transposed buffer)",
            _tiled("backward_saved_inputs_as_contiguous", "backward_saved_inputs_as_contiguous"), caught_by=_BWD),
    Control("finite_mask_backward_ideal", "the finite mask's forward right, its backward from the ideal mask: a row with "
            "no allowed key passes no gradient to the values it averages",
            lambda: FiniteMaskBackwardIdeal("controls.finite_mask_backward_ideal"), caught_by=_BWD),
    # in-place mutators (results right, inputs modified)
    Control("writes_qg_into_q", "writes q G back into q (then uses G = I)", _tiled("writes_qg_into_q", mutate="q"),
            caught_by=_ATT),
    Control("folds_scale_into_g", "folds the scale into G in place", _tiled("folds_scale_into_g", mutate="G"), caught_by=_ATT),
    Control("mask_edited_in_place", "clears key 0 of the padding mask in place",
            _tiled("mask_edited_in_place", mutate="mask"), caught_by=("attention_padding", "attention_mask_dominance")),
    Control("state_dict_mutated", "folds √d_model into the embedding table of the state dict in place",
            _decoder("state_dict_mutated", EagerDecoder, mutate_state=True), caught_by=_FWD + _CACHE),
    Control("chain_bias_accumulated", "accumulates a A_P into the b_a tensor of layer_weights and returns it",
            _chain("chain_bias_accumulated", "bias_accumulated"), caught_by=("operator_chain",)),
    Control("chain_storage_read_as_contiguous", "the chain reads the rotated queries' storage as if contiguous (a native "
            "kernel handed the data pointer without the strides)", _chain("chain_storage_read_as_contiguous",
                                                                         "storage_read_as_contiguous"), caught_by=("operator_chain",)),
    Control("chain_iswiglu_flushed_below_minus_30", "iSwiGLU(u) taken as 0 below u = −30 (a fast exp whose range ends "
            "there): A_LM is its 1e-9 floor alone there", _chain("chain_iswiglu_flushed_below_minus_30",
                                                                  "iswiglu_flushed_below_minus_30"), caught_by=("operator_chain",)),
    # configuration-variant bugs
    Control("rotate_half_as_interleaved", "RoPE is always interleaved (rope_style rotate_half ignored)",
            _decoder("rotate_half_as_interleaved", RotateHalfAsInterleaved), caught_by=_FWD + _CACHE),
    Control("first_dense_block_only", "only the first SwiGLU block of each residual unit is used (num_denseA > 1)",
            _decoder("first_dense_block_only", FirstDenseBlockOnly), caught_by=_FWD + _CACHE),
    Control("last_residual_unit_skipped", "the last residual unit of the metric learner is skipped (num_reslayerA > 1)",
            _decoder("last_residual_unit_skipped", LastResidualUnitSkipped), caught_by=_FWD + _CACHE),
    Control("last_layer_skipped_past_two", "runs at most two decoder layers", _decoder("last_layer_skipped_past_two",
            LastLayerSkippedPastTwo), caught_by=_FWD + _CACHE),
    Control("chain_gram_odd_feature_dropped", "the Gram over feature pairs: at an odd head dim the last feature is dropped",
            _chain("chain_gram_odd_feature_dropped", "gram_odd_feature_dropped"), caught_by=("operator_chain",)),
    Control("chain_gram_row_chunk_tail_dropped", "the Gram summed over query rows in chunks of 256: past 256 rows the "
            "partial last chunk is dropped", _chain("chain_gram_row_chunk_tail_dropped", "gram_row_chunk_tail_dropped"),
            caught_by=("operator_chain",)),
    Control("chain_gram_row_chunk512_tail_dropped", "the Gram summed over query rows in chunks of 512: past 512 rows "
            "the partial last chunk is dropped", _chain("chain_gram_row_chunk512_tail_dropped",
                                                         "gram_row_chunk512_tail_dropped"), caught_by=("operator_chain",)),
    Control("chain_gram_pooled_over_batch", "past 16 matrices (batch × heads) a batched path pools the Gram over the batch",
            _chain("chain_gram_pooled_over_batch", "gram_pooled_over_batch"), caught_by=("operator_chain",)),
    Control("chain_power_heads_mod_16", "the power stage's weights in head chunks of 16: past 16 heads, head h reads head "
            "h mod 16's W, b, P, a, b_a", _chain("chain_power_heads_mod_16", "power_heads_mod_16"), caught_by=("operator_chain",)),
    Control("chain_swiglu_width_tail_dropped", "the metric learner's SwiGLU hidden units in tiles of 64 counted as "
            "A_dff // 64: past 128 units a partial last tile is lost (the released model's A_dff is 170)",
            _chain("chain_swiglu_width_tail_dropped", "swiglu_width_tail_dropped"), caught_by=("operator_chain",)),
    Control("feed_forward_tail_dropped", "the feed-forward's hidden units in tiles of 128 counted as dff // 128: past "
            "256 units a partial last tile is never summed", _decoder("feed_forward_tail_dropped", FeedForwardTailDropped),
            caught_by=_FWD + _CACHE),
    Control("feed_forward_tile_512_tail_dropped", "the feed-forward's hidden units in tiles of 512 counted as dff // 512: "
            "past 1024 units a partial last tile is never summed (the released model's dff is 2389)",
            _decoder("feed_forward_tile_512_tail_dropped", FeedForwardTileOf512), caught_by=_FWD + _CACHE),
    Control("layer_norm_chunks_of_512", "the decoder's LayerNorms in chunks of 512 features, the chunks' statistics "
            "averaged without the between-chunk term (the released model's d_model is 896)",
            _decoder("layer_norm_chunks_of_512", LayerNormChunksOf512), caught_by=_FWD + _CACHE),
    Control("chain_first_dense_block_only", "the operator chain uses only the first SwiGLU block per unit",
            _chain("chain_first_dense_block_only", "first_dense_block_only"), caught_by=("operator_chain",)),
    # cache bugs: batch > 1, padding, positions
    Control("padding_ignored_after_prompt", "cached steps attend to the prompt's padding keys",
            _decoder("padding_ignored_after_prompt", PaddingIgnoredAfterPrompt), caught_by=_CACHE),
    Control("row_lengths_mixed", "cached steps use row 0's padding for every row",
            _decoder("row_lengths_mixed", RowLengthsMixed), caught_by=_CACHE),
    Control("step_positions_off_by_one", "cached steps rotate the new token at position T − 1",
            _decoder("step_positions_off_by_one", StepPositionsOffByOne), caught_by=_CACHE),
    Control("step_position_table_of_eight", "cached steps take their RoPE positions from a table of 8: from the 9th "
            "step on, every new token is rotated at the 8th step's position",
            _decoder("step_position_table_of_eight", StepPositionTableOfEight), caught_by=_CACHE),
    Control("step_position_table_of_32", "cached steps take their RoPE positions from a table of 32: from the 33rd step "
            "on, every new token is rotated at the 32nd step's position",
            _decoder("step_position_table_of_32", StepPositionTableOf32), caught_by=_CACHE),
    Control("kv_stale_generator", "kv mode rebuilds G_LM from a wrongly scaled cached A",
            _decoder("kv_stale_generator", KvRecomputesFromNewRows), caught_by=_CACHE),
    Control("generated_zeros_masked", "cached steps mask each generated token of id 0 as padding",
            _decoder("generated_zeros_masked", GeneratedZerosMasked), caught_by=_CACHE),
    Control("kv_page_aliased", "a paged KV cache (64-key pages) whose decoding steps write each new page over the "
            "page before it", _decoder("kv_page_aliased", KvPageAliased), caught_by=_CACHE),
    Control("second_best_near_tie", "greedy decoding takes the second-best token when it is within 0.5 of the best "
            "(the step logits right)", _decoder("second_best_near_tie", SecondBestNearTie), caught_by=_CACHE),
    Control("prefill_full_block_dropped", "the prefill's 32-row query blocks: a prompt of a whole number of blocks "
            "leaves the last 32 rows' attention at zero", _decoder("prefill_full_block_dropped", FullLastQueryBlockDropped),
            caught_by=_FWD + _CACHE),
    Control("positions_rounded_bf16", "a bfloat16 prefill (forward only) that holds the RoPE positions in bfloat16: "
            "from position 257 on they round to 8 significant bits",
            lambda: ForwardOnlyBf16Control("controls.positions_rounded_bf16", PositionsRoundedToBf16),
            caught_by=("forward_logits", "forward_collapsed")),
    # past 512: a vocabulary block, a prefill chunk, a cache of 512 keys; state on a loaded model
    Control("gram_over_real_rows_bf16", "bfloat16 (forward only, logits without G_LM): the metric learner's Gram over the "
            "prompt's real rows, the padding rows left out", lambda: LogitsOnlyBf16Control("controls.gram_over_real_rows_bf16",
                                                                                           GramOverRealRowsOnly),
            caught_by=("forward_logits", "forward_golden", "decoder_thread_counts")),
    Control("vocab_tail_block_dropped", "the vocabulary product in 512-column blocks counted as V // 512: past 512 "
            "columns the partial last block's logits stay 0", _decoder("vocab_tail_block_dropped", VocabTailBlockDropped),
            caught_by=_FWD + _CACHE),
    Control("vocab_tail_block_of_1024_dropped", "the vocabulary product in 1024-column blocks counted as V // 1024: "
            "past 2048 columns the partial last block's logits stay 0 (the released vocabulary is 32000)",
            _decoder("vocab_tail_block_of_1024_dropped", VocabTailBlockOf1024), caught_by=_FWD + _CACHE),
    Control("rope_table_of_768", "RoPE tables of 768 rows, later positions clamped to the last row (a 1024-token "
            "context)", _decoder("rope_table_of_768", RopeTableOf768), caught_by=_FWD + _CACHE),
    Control("chunked_prefill_frozen_a", "prompts past 512 tokens prefilled in 512-token chunks, the later chunks "
            "through the kv step (G_LM from the first chunk's A)", _decoder("chunked_prefill_frozen_a",
                                                                            ChunkedPrefillFrozenA), caught_by=_FWD + _CACHE),
    Control("rope_table_of_1024", "RoPE tables of 1024 rows whatever the context: positions past 1023 clamped to the "
            "last row", _decoder("rope_table_of_1024", RopeTableOf1024), caught_by=_CACHE),
    Control("ring_kv_cache_1024", "a KV cache of 1024 keys kept as a ring: past 1024 keys decoding drops the oldest",
            _decoder("ring_kv_cache_1024", RingKvCacheOf1024), caught_by=_CACHE),
    Control("ring_kv_cache_512", "a KV cache of 512 keys kept as a ring: past 512 keys decoding drops the oldest",
            _decoder("ring_kv_cache_512", RingKvCache), caught_by=_CACHE),
    Control("padding_mask_kept_by_shape", "a loaded model keeps the prompt's padding mask until the prompt's shape "
            "changes: a same-shape prompt with other padding decodes with the old mask",
            lambda: LoadedDecoderControl("controls.padding_mask_kept_by_shape", PaddingMaskKeptByShape),
            caught_by=("state_between_calls", "gcache_invalidated")),
    Control("conversation_prefix_cache", "prefix caching on a loaded model: a prompt extending the sequence it decoded "
            "last reuses that sequence's caches and prefills only the new ids",
            lambda: LoadedDecoderControl("controls.conversation_prefix_cache", ConversationPrefixCache),
            caught_by=("state_between_calls",)),
    Control("nocache_ignores_constant_g", "nocache decoding runs the learned metric learner even when constant operators "
            "are given", _decoder("nocache_ignores_constant_g", NocacheIgnoresConstantG),
            caught_by=("cache_nocache", "state_between_calls")),
    Control("step_positions_from_first_real_token", "float32/bfloat16: cached steps count a row's positions from its "
            "first real token (left-padded rows rotated too early)",
            lambda: BelowFloat64DecoderControl("controls.step_positions_from_first_real_token", StepPositionsFromFirstRealToken),
            caught_by=("collapsed_equals_kvg", "state_between_calls")),
    Control("step_mask_tile_of_8", "the decoding step in tiles of 8 rows, the padding mask indexed within the tile: rows "
            "8, 9, … use the padding of rows 0, 1, …", _decoder("step_mask_tile_of_8", StepMaskTileOf8), caught_by=_CACHE),
    Control("step_mask_tile_of_16", "the decoding step in tiles of 16 rows, the padding mask indexed within the tile: "
            "rows 16, 17, … use the padding of rows 0, 1, …", _decoder("step_mask_tile_of_16", StepMaskTileOf16),
            caught_by=_CACHE),
    Control("collapsed_steps_plain_sdpa", "collapsed decoding's cached steps attend with G = I (the constant G is "
            "forgotten after the prompt)", _decoder("collapsed_steps_plain_sdpa", CollapsedStepsPlainSdpa),
            caught_by=("collapsed_equals_kvg", "state_between_calls")),
]

#: Every control by name.
CONTROLS: Mapping[str, Control] = {c.name: c for c in _LIST}

__all__ = ["CONTROLS", "Control"]
