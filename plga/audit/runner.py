"""``run_audit``: measure a PLDR-LLM and write ``audit.json``, ``audit_raw.npz``, ``summary.md``, plots.

The runner only *collects raw per-instance arrays* from a model through a backend
(:mod:`plga.audit.backend`); every reported number is derived from those arrays by
:func:`plga.audit.summary.summarize`, so the summary can be re-derived from the archive, and
the verdict from the summary (:func:`plga.audit.verdict.verdict`). Definitions: ``docs/audit.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_path
from ..errors import (
    CheckpointError,
    CollapseRefusedError,
    DataFileError,
    NonFiniteError,
    UsageError,
)
from ..inputs import load_operator_arrays, sha256_file
from ..progress import bar as _steps_bar
from ..progress import progress as _bar
from ..reference.checkpoint import (
    COLLAPSED_KEY,
    config_beside,
    is_collapsed,
    load_checkpoint,
    read_safetensors,
)
from ..reference.config import PLDRConfig
from . import model as mdl
from . import stats as st
from .backend import make_backend
from .summary import coverage, jsonable, summarize
from .verdict import COLLAPSED, one_line, verdict

RAW_NAME = "audit_raw.npz"
JSON_NAME = "audit.json"
SUMMARY_NAME = "summary.md"
COLLAPSED_DIR = "collapsed"
#: Written into the collapsed folder: the verdict and the measured approximation error.
COLLAPSE_REPORT = "collapse_report.json"
#: End-of-sequence id where no tokenizer says otherwise: the released tokenizer's EOS, also
#: used for the built-in model (whose prompts never contain it).
DEFAULT_EOS_ID = 3


@dataclasses.dataclass(frozen=True)
class AuditSizes:
    """How much work each measurement does; the defaults are the published protocol.

    4 prompts × 48 greedy steps for cached vs recomputed decoding, 5 prompts × 2 seeded
    continuations of 64 sampled tokens (temperature 1, top-k 50) for the order parameter,
    pools of 32 rows and 200 attempted pairs per layer for the contraction ratio, 2 padded
    prompts and 8 block-vs-sequential contexts. :data:`QUICK` is a smoke-test size.
    Beyond the published protocol, one *context probe*: a sequence of seeded random ids as long
    as the context, whose G_LM must equal the prompts' for a collapsed verdict (the prompts
    alone reach a few dozen positions of a context of hundreds or thousands).
    """

    n_decode_prompts: int = 4
    n_decode_steps: int = 48
    n_order_prompts: int = 5
    n_order_tokens: int = 64
    order_seeds: tuple[int, int] = (100, 101)
    order_temperature: float = 1.0
    order_top_k: int = 50
    n_pool_rows: int = 32
    n_pairs: int = 200
    o1_prefix: int = 4
    o3_prompts: int = 2
    o3_pad_len: int = 4
    o4_contexts: int = 8
    o4_cand_len: int = 4
    context_probe_len: int | None = None  # tokens of the context probe: None = the whole context, 0 = none


#: ``--quick``: the same measurements at smoke-test sizes (seconds on the built-in model).
QUICK = AuditSizes(n_decode_steps=8, n_order_tokens=8, n_pool_rows=16, n_pairs=100, o4_contexts=2, o4_cand_len=3,
                   context_probe_len=128)


def _sha256_file(path: Path) -> str:
    return sha256_file(path, "checkpoint file", CheckpointError)  # regular files only, bounded


def params_sha256(params: Mapping[str, np.ndarray]) -> str:
    """sha256 over the sorted (name, dtype, shape, bytes) of every tensor (identifies in-memory weights)."""
    h = hashlib.sha256()
    for k in sorted(params):
        v = np.ascontiguousarray(params[k])
        h.update(f"{k}|{v.dtype.str}|{v.shape}|".encode())
        h.update(v.tobytes())
    return h.hexdigest()


def _interleave_perm(d: int, style: str) -> np.ndarray:
    """Coordinate permutation taking the RoPE pairs of ``style`` to interleaved (2a, 2a+1)."""
    if style == "interleaved":
        return np.arange(d)
    perm = np.empty(d, dtype=np.int64)
    perm[0::2], perm[1::2] = np.arange(d // 2), np.arange(d // 2, d)
    return perm


def _out_folder(out_dir: str | os.PathLike[str]) -> Path:
    """The output folder, refused before any work when the path exists and is not a folder."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"the output folder {out} exists and is not a folder: name another (--out)")
    return out


def _resolve_model(checkpoint: Any, seed: int, config: PLDRConfig | None = None,
                   max_seq_len: int = 1024) -> tuple[dict[str, np.ndarray], PLDRConfig, dict[str, Any]]:
    if checkpoint is None or isinstance(checkpoint, tuple):
        if config is not None:
            raise UsageError("a configuration belongs to a checkpoint file or folder; the built-in or in-memory model has its own")
    if checkpoint is None:
        config = mdl.builtin_config()
        params = mdl.random_params(config, seed)
        return params, config, {"source": "builtin", "seed": seed, "params_sha256": params_sha256(params)}
    if isinstance(checkpoint, tuple):  # (params, config) given in-process
        params, config = checkpoint
        return dict(params), config, {"source": "in-memory", "params_sha256": params_sha256(params)}
    path = Path(checkpoint)
    if is_collapsed(path):
        raise CheckpointError(f"{path} is a collapsed checkpoint (no metric learner): the audit measures the uncollapsed model")
    given = config
    params, config = load_checkpoint(path, config=given, max_seq_len=max_seq_len)
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".pth", ".json"))
    beside = config_beside(path, folder=False) if path.is_file() else None
    if given is None and beside is not None:
        files.append(beside)
    return params, config, {
        "source": str(path),
        "sha256": {p.name: _sha256_file(p) for p in files},
        "params_sha256": params_sha256(params),
    }


def _resolve_prompts(prompts: Any, tokenizer: Any, config: PLDRConfig) -> tuple[list[list[int]], list[str] | None, int]:
    """(token-id prompts, their texts or None, the end-of-sequence id of the tokenizer or :data:`DEFAULT_EOS_ID`)."""
    texts: list[str] | None = None
    ids: list[list[int]] | None = None
    if isinstance(prompts, str | os.PathLike):
        ids, texts = mdl.read_prompt_file(prompts)
    elif prompts is not None:
        prompts = list(prompts)
        if prompts and all(isinstance(p, str) for p in prompts):
            texts = prompts
        else:
            ids = [[int(t) for t in p] for p in prompts]
    elif tokenizer is not None:
        texts = list(mdl.DEFAULT_PROMPTS)
    else:
        ids = mdl.builtin_prompt_ids(config.input_vocab_size)
    if ids is None:
        if tokenizer is None:
            raise UsageError("text prompts need a tokenizer (--tokenizer PATH to a SentencePiece .model)")
    eos = DEFAULT_EOS_ID
    if tokenizer is not None:
        sp = mdl.load_tokenizer(tokenizer) if isinstance(tokenizer, str | os.PathLike) else tokenizer
        eos = int(sp.eos_id()) if int(sp.eos_id()) >= 0 else DEFAULT_EOS_ID
        if ids is None:
            ids = mdl.encode_prompts(texts or [], sp)
    return mdl.validate_prompts(ids, config), texts, eos


def _environment(backend: Any, device: str, dtype: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "backend": backend.name,
        "device": device,
        "dtype": dtype,
        "threads": os.cpu_count(),
    }
    from .. import __version__

    env["plga"] = __version__
    for dist in ("torch", "safetensors", "sentencepiece", "matplotlib"):  # installed versions, nothing imported
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = None
    return env


# --- measurements --------------------------------------------------------------------------


def _per_prompt(backend: Any, prompts: list[list[int]], config: PLDRConfig, show: bool) -> dict[str, np.ndarray]:
    """Spectra, commutant residual, DAG loss, LN scale error, twirl energies, G_LM per prompt."""
    L, H, d = config.num_layers, config.num_heads, config.depth
    perm = _interleave_perm(d, config.rope_style)
    keys: dict[str, list[Any]] = {k: [] for k in (
        "A_sv", "ALM_sv", "GLM_sv", "rowvar_ratio", "crosshead_rms", "crosshead_rel", "glm_comm_res",
        "dag_ALM", "dag_AP", "dag_GLM", "ln_rowvar_DS", "ln_direct_rel", "ln_direct_abs", "ln_proxy",
        "twirl_E_unrot", "twirl_E_rot", "G_LM", "learner_rows",
    )}
    nonfinite = 0
    omega = None
    for p in _bar(prompts, "spectra and probes", show=show):
        tokens = np.asarray([p], dtype=np.int64)
        f = backend.forward(tokens)
        probes = backend.probe(tokens)
        ded = {t: np.stack([f.deductive[li][t][0] for li in range(L)]) for t in ("A", "A_LM", "A_P", "G_LM")}  # [L, H, d, d]
        for name, t in (("A_sv", "A"), ("ALM_sv", "A_LM"), ("GLM_sv", "G_LM")):
            sv, bad = st.svdvals(ded[t])
            keys[name].append(sv)
            nonfinite += bad
        keys["rowvar_ratio"].append(st.rowvar_ratio(ded["A"]))
        ch, chr_ = st.crosshead_rms(ded["A"])
        keys["crosshead_rms"].append(ch)
        keys["crosshead_rel"].append(chr_)
        g_il = ded["G_LM"][..., perm[:, None], perm[None, :]]
        keys["glm_comm_res"].append(st.commutant_residual(g_il, config.rope_base))
        for name, t in (("dag_ALM", "A_LM"), ("dag_AP", "A_P"), ("dag_GLM", "G_LM")):
            keys[name].append(st.dag_loss(ded[t]))
        density = np.stack([pr.density[0] for pr in probes])  # [L, H, d, d]
        ln = st.ln_scale_error(density, len(p))
        for name in ("rowvar_DS", "direct_rel", "direct_abs", "proxy"):
            keys["ln_" + name].append(ln[name])
        q_pre = np.stack([pr.q_pre[0, 0] for pr in probes])[..., perm]  # head 0: [L, S, d]
        q_rot = np.stack([pr.q_rot[0, 0] for pr in probes])[..., perm]
        eu, er, omega = st.twirl_energies(q_pre, q_rot, config.rope_base)
        keys["twirl_E_unrot"].append(eu)
        keys["twirl_E_rot"].append(er)
        keys["G_LM"].append(ded["G_LM"])
        keys["learner_rows"].append(np.stack([pr.learner_input[0].reshape(H * d, d) for pr in probes]))  # [L, H·d, d]
    out = {k: np.stack(v) for k, v in keys.items()}
    out["nonfinite_matrices"] = np.array([nonfinite])
    out["twirl_omega"] = np.asarray(omega)
    return out


def _contraction(backend: Any, rows: np.ndarray, sizes: AuditSizes, seed: int, show: bool) -> dict[str, np.ndarray]:
    """Empirical pairwise ratios ‖φ(r) − φ(r′)‖/‖r − r′‖ of each layer's row map φ, within and across prompts."""
    rng = np.random.default_rng([seed, 311])
    P, L, R, d = rows.shape
    within, within_l, cross, cross_l = [], [], [], []
    n_pool = min(sizes.n_pool_rows, R)
    for layer in _bar(range(L), "contraction", show=show):
        pick = np.stack([rng.choice(R, size=n_pool, replace=False) for _ in range(P)])  # [P, n_pool]
        pool = rows[np.arange(P)[:, None], layer, pick].reshape(P * n_pool, d)
        phi = backend.row_map(layer, pool)
        pp = rng.integers(0, P, size=sizes.n_pairs)
        i = rng.integers(0, n_pool, size=sizes.n_pairs)
        j = rng.integers(0, n_pool, size=sizes.n_pairs)
        keep = i != j
        wpairs = np.stack([pp * n_pool + i, pp * n_pool + j], axis=1)[keep]
        w = st.pairwise_ratios(pool, phi, wpairs)
        pa = rng.integers(0, P, size=sizes.n_pairs)
        pb = rng.integers(0, P, size=sizes.n_pairs)
        ia = rng.integers(0, n_pool, size=sizes.n_pairs)
        ib = rng.integers(0, n_pool, size=sizes.n_pairs)
        keep = pa != pb
        cpairs = np.stack([pa * n_pool + ia, pb * n_pool + ib], axis=1)[keep]
        c = st.pairwise_ratios(pool, phi, cpairs)
        within.append(w), within_l.append(np.full(len(w), layer)), cross.append(c), cross_l.append(np.full(len(c), layer))
    return {
        "pair_within": np.concatenate(within), "pair_within_layer": np.concatenate(within_l),
        "pair_cross": np.concatenate(cross), "pair_cross_layer": np.concatenate(cross_l),
        "pair_attempted": np.array([sizes.n_pairs * L, sizes.n_pairs * L, L]),
    }


def _until_eos(tokens: np.ndarray, start: int, eos: int) -> np.ndarray:
    """``tokens`` [1, S] cut after the first ``eos`` at or after ``start`` (kept), as a stopping loop ends."""
    hits = np.flatnonzero(tokens[0, start:] == eos)
    return tokens[:, : start + int(hits[0]) + 1] if hits.size else tokens


def _scored(backend: Any, tokens: np.ndarray, **kw: Any) -> Any:
    """``backend.forward`` on a prompt and its continuation [1, S] without cache, every position a
    real token: the audit's prompts hold no padding (ids ≥ 1), and a generated id 0 is a key
    that cached decoding attends to, so the recomputation must attend to it too (the published
    no-cache loop masks it as padding, which would change the logits for a reason unrelated to G)."""
    tokens = np.asarray(tokens)
    return backend.forward(tokens, key_padding=np.zeros(tokens.shape, dtype=bool), **kw)


def _order_parameter(backend: Any, prompts: list[list[int]], config: PLDRConfig, sizes: AuditSizes, eos: int, show: bool) -> tuple[dict[str, np.ndarray], list[Any]]:
    """Order parameter of A, A_LM, A_P, G_LM between two seeded sampled continuations.

    Each continuation samples up to ``n_order_tokens`` tokens and stops after the
    end-of-sequence id ``eos`` (sampling is sequential, so cutting a longer draw there gives
    the stopping loop's tokens); both sequences are then re-scored without cache.
    """
    names = {"A": "A", "ALM": "A_LM", "AP": "A_P", "GLM": "G_LM"}
    out = {f"op_{t}_{n}": [] for t in names for n in ("rms", "signed")}
    out["op_GLM_head_rms"] = []  # [prompts, L, H]: one order parameter per operator
    records = []
    sel = prompts[: sizes.n_order_prompts]
    for pi, p in enumerate(_bar(sel, "order parameter", show=show)):
        n = min(sizes.n_order_tokens, config.max_seq_len - len(p))
        ded = []
        for seed in sizes.order_seeds:
            toks, _ = backend.generate(np.asarray([p]), n, "kv", temperature=sizes.order_temperature, top_k=sizes.order_top_k, seed=seed)
            toks = _until_eos(toks, len(p), eos)
            f = _scored(backend, toks)  # re-scored without cache
            ded.append(f.deductive)
            cont = [int(t) for t in toks[0, len(p):]]
            records.append({"prompt": pi, "seed": seed, "tokens": cont, "stopped_at_eos": bool(cont and cont[-1] == eos),
                            "rep_stats": st.rep_stats(cont)})
        out["op_GLM_head_rms"].append([[st.order_pair(ded[0][li]["G_LM"][0][h], ded[1][li]["G_LM"][0][h])[0]
                                        for h in range(config.num_heads)] for li in range(config.num_layers)])
        for t, key in names.items():
            pairs = [st.order_pair(ded[0][li][key][0], ded[1][li][key][0]) for li in range(config.num_layers)]
            out[f"op_{t}_rms"].append([r for r, _ in pairs])
            out[f"op_{t}_signed"].append([s for _, s in pairs])
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}, records


def _decode(backend: Any, prompts: list[list[int]], config: PLDRConfig, sizes: AuditSizes, show: bool) -> tuple[dict[str, np.ndarray], list[list[int]]]:
    """Greedy KV/G-cached decoding vs recomputation without cache: ε_G, Δlogit, margin, argmax per step.

    Each prompt decodes ``n_decode_steps`` tokens or as many as its context leaves, so prompts
    may take different numbers of steps (:func:`_ragged`)."""
    L = config.num_layers
    eg, eh, ea, dl, mg, ac, au, same, conts = [], [], [], [], [], [], [], [], []
    sel = prompts[: sizes.n_decode_prompts]
    steps = _steps_bar(sum(min(sizes.n_decode_steps, config.max_seq_len - len(p)) for p in sel), "cached vs recomputed decoding", show=show)
    for p in sel:
        T = min(sizes.n_decode_steps, config.max_seq_len - len(p))
        prompt = np.asarray([p])
        toks, step_logits = backend.generate(prompt, T, "kvg")
        toks_kv, _ = backend.generate(prompt, T, "kv")
        g_prompt = np.stack([backend.forward(prompt).deductive[li]["G_LM"][0] for li in range(L)])  # [L, H, d, d]
        eg_p, eh_p, ea_p, lu = [], [], [], []
        for t in range(T):
            f = _scored(backend, toks[:, : len(p) + t], last_only=True)
            g_u = np.stack([f.deductive[li]["G_LM"][0] for li in range(L)])
            rel, amax = st.eps_g(g_u, g_prompt)
            eg_p.append(rel), eh_p.append(st.eps_g_per_operator(g_u, g_prompt)), ea_p.append(amax), lu.append(f.logits[0, -1])
            steps.update(1)
        lc = step_logits[0]
        lu = np.stack(lu)
        eg.append(eg_p), eh.append(eh_p), ea.append(ea_p)
        dl.append(st.dlogit(lc, lu)), mg.append(st.top2_margin(lc))
        ac.append(np.argmax(lc, axis=-1)), au.append(np.argmax(lu, axis=-1))
        same.append(bool(np.array_equal(toks, toks_kv)))
        conts.append([int(t) for t in toks[0, len(p):]])
    steps.close()
    n_steps = [len(a) for a in ac]
    return {
        "decode_T": np.asarray(n_steps),
        "epsG_steps": _ragged(eg, np.nan), "epsG_head_steps": _ragged(eh, np.nan), "epsG_absmax_steps": _ragged(ea, np.nan),
        "dlogit_steps": _ragged(dl, np.nan), "margin_steps": _ragged(mg, np.nan),
        "argmax_cached": _ragged(ac, -1), "argmax_uncached": _ragged(au, -1),
        "kv_kvg_same": np.asarray(same),
    }, conts


def _ragged(rows: list[Any], fill: float) -> np.ndarray:
    """Per-prompt step arrays [T_p, ...] as one array [P, max T_p, ...], the steps a prompt did
    not take set to ``fill`` (a prompt near the end of the context has fewer steps: ``decode_T``
    holds each prompt's count)."""
    rows = [np.asarray(r) for r in rows]
    t_max = max(len(r) for r in rows)
    dtype = np.result_type(*rows, np.asarray(fill))
    out = np.full((len(rows), t_max, *rows[0].shape[1:]), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _context_probe(backend: Any, config: PLDRConfig, sizes: AuditSizes, seed: int) -> dict[str, np.ndarray]:
    """G_LM [1, L, H, d, d] of one sequence of seeded random ids [4, V) as long as the context
    (``sizes.context_probe_len`` tokens, at most ``max_seq_len``); empty when disabled. A probe
    that overflows is recorded as NaN, which makes its deviation, and so the verdict, undecided."""
    n = config.max_seq_len if sizes.context_probe_len is None else min(sizes.context_probe_len, config.max_seq_len)
    if n <= 0:
        return {}
    ids = np.random.default_rng([seed, 505]).integers(4, config.input_vocab_size, size=(1, n))
    shape = (1, config.num_layers, config.num_heads, config.depth, config.depth)
    try:
        f = backend.forward(ids, last_only=True)
        g = np.stack([f.deductive[li]["G_LM"][0] for li in range(config.num_layers)])[None]  # [1, L, H, d, d]
    except NonFiniteError:
        g = np.full(shape, np.nan)
    return {"context_probe_G": g, "context_probe_ids": ids}


def _padding_probe(backend: Any, prompts: list[list[int]], config: PLDRConfig, sizes: AuditSizes, show: bool) -> dict[str, np.ndarray]:
    """G_LM [P, 2, L, H, d, d] of every prompt padded with ``sizes.o3_pad_len`` ids 0 on the right
    (index 0) and on the left (index 1), as far as the context allows. G_LM is built over every
    query row, padding included, so a padded batch can meet another operator than its prompts;
    a collapse must hold there too. A padded forward that overflows is recorded as NaN."""
    shape = (config.num_layers, config.num_heads, config.depth, config.depth)
    out = []
    for p in _bar(prompts, "padding probe", show=show):
        pad = [0] * min(sizes.o3_pad_len, config.max_seq_len - len(p))
        sides = []
        for row in (p + pad, pad + p):
            try:
                f = backend.forward(np.asarray([row]), last_only=True)
                sides.append(np.stack([f.deductive[li]["G_LM"][0] for li in range(config.num_layers)]))  # [L, H, d, d]
            except NonFiniteError:
                sides.append(np.full(shape, np.nan))
        out.append(np.stack(sides))
    return {"padding_probe_G": np.stack(out)}


def _online(backend: Any, prompts: list[list[int]], config: PLDRConfig, sizes: AuditSizes, seed: int, show: bool) -> dict[str, np.ndarray]:
    """Online-contract probes O1 (suffix change), O2 (repeat call), O3 (padding), O4 (block vs sequential)."""
    V, L = config.input_vocab_size, config.num_layers
    out: dict[str, Any] = {}
    p0 = prompts[0]
    k = min(sizes.o1_prefix, max(1, len(p0) // 2))
    suffix = np.asarray(p0[k : 2 * k] if len(p0) >= 2 * k else p0[k:] or [p0[-1]])
    changed = (suffix - 1 + 1) % (V - 1) + 1  # every suffix id changes, never to 0
    a = np.asarray([p0[:k] + suffix.tolist()])
    b = np.asarray([p0[:k] + changed.tolist()])
    fa, fb = backend.forward(a), backend.forward(b)
    out["o1_logits_a"], out["o1_logits_b"] = fa.logits[0, :k], fb.logits[0, :k]
    out["o1_glm_a"] = np.stack([fa.deductive[li]["G_LM"][0] for li in range(L)])
    out["o1_glm_b"] = np.stack([fb.deductive[li]["G_LM"][0] for li in range(L)])
    r1, r2 = backend.forward(np.asarray([p0])), backend.forward(np.asarray([p0]))
    out["o2_logits_a"], out["o2_logits_b"] = r1.logits[0], r2.logits[0]
    fra, frb, ga, gb = [], [], [], []
    for p in _bar(prompts[: sizes.o3_prompts], "padding probe", show=show):
        pad = min(sizes.o3_pad_len, config.max_seq_len - len(p))
        f0 = backend.forward(np.asarray([p]))
        f1 = backend.forward(np.asarray([p + [0] * pad]))
        fra.append(f0.logits[0, len(p) - 1]), frb.append(f1.logits[0, len(p) - 1])
        ga.append(f0.deductive[L - 1]["G_LM"][0]), gb.append(f1.deductive[L - 1]["G_LM"][0])
    out.update(o3_final_row_a=np.stack(fra), o3_final_row_b=np.stack(frb), o3_glm_a=np.stack(ga), o3_glm_b=np.stack(gb))
    out["o3_pad_len"] = np.array([sizes.o3_pad_len])
    rng = np.random.default_rng([seed, 404])
    seq, blk, cand, clen = [], [], [], []
    for x in _bar(prompts[: sizes.o4_contexts], "block vs sequential", show=show):
        m = min(sizes.o4_cand_len, config.max_seq_len - len(x) - 1)
        base = backend.forward(np.asarray([x]), last_only=True).logits[0, -1]
        greedy, _ = backend.generate(np.asarray([x]), m, "kv")
        runner_up = int(np.argsort(-base, kind="stable")[1])
        cands = [greedy[0, len(x):].tolist(), rng.integers(4, V, size=m).tolist(), [runner_up]]
        for y in cands:
            c = len(clen)
            clen.append(len(y))
            for i in range(len(y)):
                lp = st.log_softmax(_scored(backend, np.asarray([x + y[:i]]), last_only=True).logits[0, -1])
                seq.append(lp[y[i]])
            rows = st.log_softmax(_scored(backend, np.asarray([(x + y)[:-1]])).logits[0])
            blk.extend(rows[len(x) - 1 + i, y[i]] for i in range(len(y)))
            cand.extend([c] * len(y))
    out.update(o4_seq=np.asarray(seq), o4_blk=np.asarray(blk), o4_cand=np.asarray(cand), o4_cand_len=np.asarray(clen))
    return out


def _collapse(backend: Any, params: Mapping[str, np.ndarray], config: PLDRConfig, g_lm: np.ndarray, prompts: list[list[int]], sizes: AuditSizes, folder: Path, device: str, dtype: str, show: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Constant operator = mean G_LM over the prompts; write the collapsed checkpoint; measure its error.

    The checkpoint is the project's one collapsed format, written by
    :func:`plga.audit.collapsed.write_collapsed` and read back by the audit's backend kind
    (``PLDRModel.from_pretrained`` or :func:`plga.reference.checkpoint.load_collapsed`).
    Measured per prompt: the *approximation error* of the collapsed model against the
    original (both uncached, teacher-forced on the original's greedy tokens: max Δlogit and
    argmax agreement), and a *file check* (the checkpoint read back decodes exactly as
    KV/G-cached decoding with the in-memory mean G; it tests the file, not the model).
    """
    from .backend import load_collapsed_backend
    from .collapsed import FORMAT_NAME, write_collapsed

    mean, spread = st.spread(g_lm, axis=0)  # mean [L, H, d, d], spread [L, H]
    store = np.asarray(params["decoder.embedding.weight"]).dtype
    store = np.dtype(np.float32) if store == np.float16 else store  # the checkpoint's dtype (kernels widen fp16)
    g_const = mean.astype(store)
    write_collapsed(params, config, g_const, folder)
    cback = load_collapsed_backend(backend.name, folder, device=device, dtype=dtype)
    g64 = [np.asarray(g, dtype=np.float64) for g in g_const]
    eq, dls, agree, dlm = [], [], [], []
    for p in _bar(prompts[: sizes.n_decode_prompts], "collapsed model error", show=show):
        T = min(sizes.n_decode_steps, config.max_seq_len - len(p))
        prompt = np.asarray([p])
        t_kvg, l_kvg = backend.generate(prompt, T, "collapsed", constant_g=g64)
        t_col, l_col = cback.generate(prompt, T, "collapsed")  # the checkpoint's stored G
        eq.append(bool(np.array_equal(t_kvg, t_col)))
        dls.append(st.dlogit(l_kvg[0], l_col[0]))
        t_model, _ = backend.generate(prompt, T, "kv")
        lm = _scored(backend, t_model[:, :-1]).logits[0, len(p) - 1 :]
        lc = _scored(cback, t_model[:, :-1]).logits[0, len(p) - 1 :]
        dlm.append(st.dlogit(lm, lc))
        agree.append(np.argmax(lm, -1) == np.argmax(lc, -1))
    raw = {
        "collapse_G": np.stack(g64), "collapse_spread": spread,
        "collapse_tokens_equal": np.asarray(eq), "collapse_dlogit": np.asarray(dls),
        "collapse_vs_model_dlogit": np.asarray(dlm), "collapse_vs_model_agree": np.asarray(agree),
    }
    meta = {
        "folder": str(folder), "format": FORMAT_NAME, "G_key": COLLAPSED_KEY,
        "writer": "plga.reference.checkpoint.save_safetensors",
        "reader": "plga.kernels.PLDRModel.from_pretrained" if cback.name == "torch" else "plga.reference.checkpoint.load_collapsed",
        "G_dtype": str(store), "n_prompts_averaged": int(g_lm.shape[0]),
    }
    return raw, meta


def _collapse_report(summary: Mapping[str, Any], v: Mapping[str, Any], forced: bool) -> dict[str, Any]:
    """``collapsed/collapse_report.json``: what the constant operator is and how far the collapsed model is from the original."""
    c = summary["collapse"]
    return jsonable({
        "verdict": v["verdict"], "forced": forced, "verdict_reasons": v["reasons"],
        "constant_operator": "mean of G_LM over the audit's prompts",
        "approximation_error": {
            "G_spread_rel_max": c["G_spread_rel"]["max"],
            "max_dlogit_vs_model": c["vs_model"]["max_dlogit"],
            "argmax_agreement_vs_model": c["vs_model"]["argmax_agree_frac"],
            "label": c["vs_model"]["label"],
        },
        "definitions": "docs/audit.md of plga (section 'The collapsed checkpoint')",
    })


# --- the command -----------------------------------------------------------------------------


def run_audit(
    checkpoint: Any = None,
    prompts: Any = None,
    tokenizer: Any = None,
    out_dir: str | os.PathLike[str] = "audit_out",
    collapse: bool = False,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float64",
    backend: str = "auto",
    n_decode_steps: int | None = None,
    progress: bool = True,
    sizes: AuditSizes | None = None,
    plots: bool = True,
    force: bool = False,
    config: PLDRConfig | None = None,
    max_seq_len: int = 1024,
) -> dict[str, Any]:
    """Audit a PLDR-LLM; write ``audit.json``, ``audit_raw.npz``, ``summary.md`` and plots to ``out_dir``.

    ``checkpoint``: a ``.pth``/safetensors path or model folder, a ``(params, config)`` pair, or
    None for the built-in small model (seeded random weights). ``prompts``: token-id lists,
    strings (need ``tokenizer``, a SentencePiece ``.model`` path), or a prompt file (.npy,
    .json, text); None for the default set. ``sizes``: the published protocol by default.
    ``config``: the configuration of a checkpoint file or folder (default: its ``config.json``,
    else inferred from the tensor shapes with the context ``max_seq_len``).
    ``collapse``: also write ``out_dir/collapsed`` — only when the verdict is "collapsed",
    unless ``force``; otherwise the audit is written and :class:`plga.errors.CollapseRefusedError` raised.
    Returns the audit record (the JSON content); its ``verdict`` comes first.
    """
    t0 = time.perf_counter()
    sizes = sizes or AuditSizes()
    if n_decode_steps is not None:
        if n_decode_steps < 1:
            raise UsageError(f"n_decode_steps must be ≥ 1, got {n_decode_steps}")
        sizes = dataclasses.replace(sizes, n_decode_steps=n_decode_steps)
    if dtype not in ("float64", "float32"):
        raise UsageError(f"dtype must be float64 or float32, got {dtype!r}")
    out = _out_folder(out_dir)
    params, config, model_meta = _resolve_model(checkpoint, seed, config, max_seq_len)
    prompt_ids, texts, eos = _resolve_prompts(prompts, tokenizer, config)
    be = make_backend(backend, params, config, device=device, dtype=dtype)
    timings: dict[str, float] = {}

    def timed(name: str, fn: Any, *a: Any) -> Any:
        t = time.perf_counter()
        r = fn(*a)
        timings[name] = round(time.perf_counter() - t, 3)
        return r

    raw = timed("per_prompt", _per_prompt, be, prompt_ids, config, progress)
    rows = raw.pop("learner_rows")
    raw.update(timed("contraction", _contraction, be, rows, sizes, seed, progress))
    op, continuations = timed("order_parameter", _order_parameter, be, prompt_ids, config, sizes, eos, progress)
    raw.update(op)
    dec_raw, greedy = timed("decode", _decode, be, prompt_ids, config, sizes, progress)
    raw.update(dec_raw)
    raw.update(timed("online", _online, be, prompt_ids, config, sizes, seed, progress))
    raw.update(timed("context_probe", _context_probe, be, config, sizes, seed))
    raw.update(timed("padding_probe", _padding_probe, be, prompt_ids, config, sizes, progress))
    v = verdict(summarize(raw))
    refused = collapse and v["verdict"] != COLLAPSED and not force
    collapse_meta: dict[str, Any] | None = None
    if collapse and not refused:
        c_raw, collapse_meta = timed("collapse", _collapse, be, params, config, raw["G_LM"], prompt_ids, sizes, out / COLLAPSED_DIR, device, dtype, progress)
        raw.update(c_raw)
    summary = summarize(raw)
    if collapse_meta is not None:
        folder = out / COLLAPSED_DIR
        with atomic_path(folder / COLLAPSE_REPORT) as tmp:
            tmp.write_text(json.dumps(_collapse_report(summary, v, forced=v["verdict"] != COLLAPSED), indent=1))
        collapse_meta["report"] = COLLAPSE_REPORT
        collapse_meta["sha256"] = {f.name: _sha256_file(f) for f in sorted(folder.iterdir()) if not f.name.startswith(".")}
        # the digest of the tensors alone (names, dtypes, shapes, bytes), independent of the file layout
        collapse_meta["tensors_sha256"] = params_sha256(read_safetensors(folder / "model.safetensors"))
    elif refused:
        collapse_meta = {"refused": True, "reason": f"verdict {v['verdict']!r}; --force writes it anyway"}
    buf = io.BytesIO()
    np.savez(buf, **raw)
    raw_bytes = buf.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / RAW_NAME) as tmp:
        tmp.write_bytes(raw_bytes)
    record: dict[str, Any] = {
        "verdict": v,
        "plga_audit_version": 2,
        "environment": _environment(be, device, dtype),
        "model": {**model_meta, "config": config.to_upstream()},
        "seeds": {"seed": seed, "order_parameter": list(sizes.order_seeds), "builtin_prompts": 1234},
        "sizes": dataclasses.asdict(sizes),
        "prompts": {"token_ids": prompt_ids, "texts": texts, "lengths": [len(p) for p in prompt_ids], "eos_id": eos,
                    "tokenizer": str(tokenizer) if isinstance(tokenizer, str | os.PathLike) else None},
        "stochastic_continuations": continuations,
        "decode_continuations": greedy,
        "coverage": coverage(prompt_ids, continuations, greedy, raw, config),
        "raw_records": {"file": RAW_NAME, "sha256": hashlib.sha256(raw_bytes).hexdigest(), "keys": sorted(raw)},
        "summary": jsonable(summary),
        "collapse": collapse_meta,
    }
    if plots:
        record["plots"] = timed("plots", _plots, raw, out)
    timings["total"] = round(time.perf_counter() - t0, 3)
    record["timings_s"] = timings
    record = jsonable(record)
    with atomic_path(out / JSON_NAME) as tmp:
        tmp.write_text(json.dumps(record, indent=1))
    from .report import summary_markdown

    with atomic_path(out / SUMMARY_NAME) as tmp:
        tmp.write_text(summary_markdown(record))
    if refused:
        raise CollapseRefusedError(
            f"refusing --collapse: the model is {one_line(v)}; the audit is in {out}/; "
            "--force writes the collapsed checkpoint anyway and records its approximation error", record)
    return record


def _plots(raw: Mapping[str, np.ndarray], out: Path) -> list[str]:
    from .figures import write_plots

    return write_plots(raw, out)


def audit_operators(g: Any, base: float = 10000.0, positions: Sequence[int] = (1, 8, 64, 1023)) -> dict[str, Any]:
    """Audit constant operators G [L, H, d, d] (e.g. the trained G_LM of PLDR-LLM-v51-110M-1).

    Per layer and head: commutant residual, relative RoPE commutator at ``positions``,
    numerical rank (64·eps_f32 rule), s₂/s₁, condition number s₁/s_min, symmetry defect
    ‖G − Gᵀ‖/‖G‖, ‖G‖_F, entry range and G[0, 0]. Per layer: medians of these.
    Interleaved RoPE pairs are assumed.
    """
    g = np.asarray(g, dtype=np.float64)
    if g.ndim == 3:
        g = g[None]
    if g.ndim != 4 or g.shape[-1] != g.shape[-2]:
        raise DataFileError(f"operators must have shape [layers, heads, d, d], got {g.shape}")
    if g.shape[-1] % 2:
        raise DataFileError(f"operators of size d = {g.shape[-1]}: RoPE rotates coordinate pairs, so d must be even")
    sv, bad = st.svdvals(g)
    per = {
        "commutant_residual": st.commutant_residual(g, base),
        "numrank": st.numrank(sv),
        "s2_over_s1": st.s2_over_s1(sv),
        "condition_number": st.condition_number(sv),
        "symmetry_defect": st.symmetry_defect(g),
        "frobenius": st.frobenius(g),
        "entry_min": g.min(axis=(-2, -1)),
        "entry_max": g.max(axis=(-2, -1)),
        "G00": g[..., 0, 0],
    }
    for p in positions:
        per[f"rope_commutator_rel_p{p}"] = st.rope_commutator_rel(g, p, base)
    per_layer = []
    for li in range(g.shape[0]):
        rec: dict[str, Any] = {k: float(np.median(v[li])) for k, v in per.items() if k not in ("entry_min", "entry_max", "G00", "numrank")}
        rec["numrank_hist"] = st.rank_histogram(per["numrank"][li])
        rec["entry_min"], rec["entry_max"] = float(per["entry_min"][li].min()), float(per["entry_max"][li].max())
        rec["G00_head0"] = float(g[li, 0, 0, 0])
        per_layer.append(rec)
    return {
        "shape": list(g.shape),
        "nonfinite_matrices": bad,
        "per_layer_median": per_layer,
        "per_head": {k: v.tolist() for k, v in per.items()},
        "overall": {k: st.min_median_max(v) for k, v in per.items() if k not in ("G00",)},
        "label": "medians over heads per layer; commutant residual = |G - Pi_comm G|_F/|G|_F in the complex RoPE eigenbasis",
    }


def run_operator_audit(path: str | os.PathLike[str], out_dir: str | os.PathLike[str], key: str | None = None, plots: bool = True) -> dict[str, Any]:
    """``plga audit --operators FILE.npz``: audit every [L, H, d, d] array (or ``key``) of the file."""
    path, out = Path(path), _out_folder(out_dir)
    arrays = load_operator_arrays(path, key)  # regular files only; shapes and sizes checked before reading
    for name, a in arrays.items():  # as a model's G_LM: non-finite operators have no spectrum or structure to audit
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        if bad:
            raise DataFileError(f"operator file {path}: array {name!r} holds {bad} non-finite values (NaN or ±inf); "
                                "an operator audit needs finite operators")
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "plga_audit_version": 1, "kind": "operators", "source": str(path), "sha256": _sha256_file(path),
        "environment": {"python": platform.python_version(), "numpy": np.__version__},
        "operators": {k: audit_operators(v) for k, v in arrays.items()},
    }
    if plots:
        from .figures import write_operator_plots

        record["plots"] = write_operator_plots(arrays, out)
    with atomic_path(out / "operators_audit.json") as tmp:
        tmp.write_text(json.dumps(jsonable(record), indent=1))
    from .report import operators_markdown

    with atomic_path(out / "operators_summary.md") as tmp:
        tmp.write_text(operators_markdown(record))
    return jsonable(record)
