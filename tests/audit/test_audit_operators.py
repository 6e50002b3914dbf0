"""The constant-operator audit on the real trained G_LM of PLDR-LLM-v51-110M-1.

Every pinned number is computed here by an independent, straightforward NumPy computation
(loops, the real 2×2-block form of the RoPE commutant) — not by calling the code under test —
and checked against the facts in ``tests/data/README.md`` and docs/spec.md §3.9, §5.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from plga.audit import audit_operators
from plga.audit.cli import add_audit_arguments, audit_main
from plga.datafiles import data_dir

DATA = data_dir()
G_FILE = DATA / "upstream" / "pldrv51_110m_1_G_LM.npz"

pytestmark = pytest.mark.skipif(not G_FILE.is_file(), reason=f"real G_LM absent: {G_FILE} (PLGA_SHARED_DATA points at a folder without it)")

#: docs/spec.md §3.9, §5 table.
MEDIAN_S2_S1 = [0.000471, 0.000126, 0.743, 0.708, 0.956]
MEDIAN_FRO = [128.838, 124.955, 168.182, 97.161, 69.777]
G000 = [1.5284355e-05, 1.1058786e-05, -0.13543952, -0.11069454, -0.076917574]
RANGES = [(-48.55, 37.67), (-54.28, 64.63), (-82.55, 74.45), (-33.85, 41.12), (-26.90, 26.63)]


@pytest.fixture(scope="module")
def g():
    with np.load(G_FILE) as z:
        return z["G_LM"]


@pytest.fixture(scope="module")
def audit(g):
    return audit_operators(g)


def _independent(g):
    """Straightforward per-head computations: the oracle for the pins."""
    L, H, d, _ = g.shape
    res, rank, s21, cond, fro, sym = (np.zeros((L, H)) for _ in range(6))
    for li in range(L):
        for h in range(H):
            m = g[li, h].astype(np.float64)
            # projection onto the commutant of all RoPE rotations (distinct frequencies):
            # block-diagonal 2×2 blocks of the form [[a, −b], [b, a]]
            proj = np.zeros_like(m)
            for j in range(d // 2):
                blk = m[2 * j : 2 * j + 2, 2 * j : 2 * j + 2]
                a, b = (blk[0, 0] + blk[1, 1]) / 2, (blk[1, 0] - blk[0, 1]) / 2
                proj[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[a, -b], [b, a]]
            res[li, h] = np.linalg.norm(m - proj) / np.linalg.norm(m)
            s = np.linalg.svd(m, compute_uv=False)
            rank[li, h] = sum(1 for x in s if x > 64 * 2.0**-23 * s[0])
            s21[li, h], cond[li, h] = s[1] / s[0], s[0] / s[-1]
            fro[li, h] = math.sqrt(float(np.sum(m * m)))
            sym[li, h] = np.linalg.norm(m - m.T) / np.linalg.norm(m)
    return res, rank, s21, cond, fro, sym


def test_matches_independent_computation(g, audit):
    res, rank, s21, cond, fro, sym = _independent(g)
    ph = audit["per_head"]
    np.testing.assert_allclose(ph["commutant_residual"], res, rtol=1e-10)
    assert np.array_equal(np.asarray(ph["numrank"]), rank)
    np.testing.assert_allclose(ph["s2_over_s1"], s21, rtol=1e-9)
    np.testing.assert_allclose(ph["condition_number"], cond, rtol=1e-6)
    np.testing.assert_allclose(ph["frobenius"], fro, rtol=1e-12)
    np.testing.assert_allclose(ph["symmetry_defect"], sym, rtol=1e-10)


def test_pins_the_published_facts(audit):
    med = audit["per_layer_median"]
    for li in range(5):
        assert med[li]["s2_over_s1"] == pytest.approx(MEDIAN_S2_S1[li], rel=2e-3), li
        assert med[li]["frobenius"] == pytest.approx(MEDIAN_FRO[li], abs=1e-3), li
        assert med[li]["G00_head0"] == pytest.approx(G000[li], rel=1e-6), li
        assert med[li]["entry_min"] == pytest.approx(RANGES[li][0], abs=0.006)
        assert med[li]["entry_max"] == pytest.approx(RANGES[li][1], abs=0.006)
        assert med[li]["symmetry_defect"] > 0.1, "far from symmetric"
    # median condition number ≈ 1e10 in layers 0–1, ≈ 1e5–1e8 in layers 2–4 (data/README.md)
    assert all(5e9 < med[li]["condition_number"] < 5e10 for li in (0, 1))
    assert all(5e4 < med[li]["condition_number"] < 5e8 for li in (2, 3, 4))
    # relative RoPE commutator 0.2–1.2: per-layer medians of ‖GR(p) − R(p)G‖_F/‖G‖_F at p = 64
    assert all(0.2 <= med[li]["rope_commutator_rel_p64"] <= 1.2 for li in range(5))
    # it does not commute: the commutant residual is far from 0 in every head
    assert audit["overall"]["commutant_residual"]["min"] > 0.35


def test_pinned_numbers(audit):
    """Numbers computed once with the independent oracle above (so a regression shows up)."""
    o = audit["overall"]
    assert o["commutant_residual"]["min"] == pytest.approx(0.391784923973002, rel=1e-9)
    assert o["commutant_residual"]["median"] == pytest.approx(0.9403378148834037, rel=1e-9)
    assert o["commutant_residual"]["max"] == pytest.approx(0.9973326371341276, rel=1e-9)
    assert [r["numrank_hist"].get("64", 0) for r in audit["per_layer_median"]] == [1, 0, 0, 1, 10]
    ranks = np.asarray(audit["per_head"]["numrank"])
    assert [int(np.median(ranks[li])) for li in range(5)] == [16, 6, 29, 56, 64]
    assert o["numrank"]["min"] == 2 and o["numrank"]["max"] == 64


def test_cli_operators(tmp_path, capsys):
    import argparse

    parser = add_audit_arguments(argparse.ArgumentParser())
    rc = audit_main(parser.parse_args(["--operators", str(G_FILE), "--out", str(tmp_path), "--no-plots"]))
    assert rc == 0
    rec = json.loads((tmp_path / "operators_audit.json").read_text())
    assert rec["operators"]["G_LM"]["shape"] == [5, 14, 64, 64]
    assert (tmp_path / "operators_summary.md").read_text().startswith("# Constant-operator audit")
