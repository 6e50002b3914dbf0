"""reference/online.py: the online-contract predicates on Python decoders."""

from __future__ import annotations

from plga.reference import online as ol


def test_lean_names_table():
    assert set(ol.LEAN_NAMES) == {"onlineOut", "PrefixConsistent", "LengthPreserving", "PrefixConsistentShaped",
                                  "RowLocal", "rowMapDecoder", "globalSumDecoder"}


def test_global_sum_decoder_fails_prefix_consistency_with_witness():
    assert ol.global_sum_decoder([0, 1]) == [1, 2]
    assert not ol.prefix_consistent(ol.global_sum_decoder, [[0, 1]])
    assert ol.length_preserving(ol.global_sum_decoder, [[0, 1], [], [3]])


def test_row_map_decoder_contract():
    F = ol.row_map_decoder(sum)
    xs = [[], [1], [1, 2, 3], [5, 0, 2]]
    assert F([1, 2, 3]) == [1, 3, 6]
    assert ol.prefix_consistent_shaped(F, xs)
    assert ol.row_local(F, [([1, 2, 3], [1, 2, 9])])
    assert ol.online_out(F, [1, 2, 3], 2) == 3 and ol.online_out(F, [1, 2], 0) is None


def test_const_nil_is_consistent_but_not_shaped():
    assert ol.prefix_consistent(lambda x: [], [[0], [1, 2]])
    assert not ol.prefix_consistent_shaped(lambda x: [], [[0]])
