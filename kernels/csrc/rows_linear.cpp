// plga::rows_linear — b + x Wᵀ for a few rows x [M, K] and a row-layout weight W [N, K] on the
// CPU, the product of decoding steps (M = batch rows). Built on first use by plga/kernels/native.py.
//
// Why: a decoding step streams every weight once for M ≤ 16 rows. Torch's GEMV / small GEMM
// and Inductor's generated reduction are instruction-bound well below the memory bandwidth
// (bfloat16: two conversions, a multiply and an add per element; several rows: each row of x
// re-reads W). Here each block of R rows of W is loaded once per group of up to 4 rows of x,
// and bfloat16 products use AVX512-BF16's VDPBF16PS (32 products per instruction, no
// conversion), float32 products one FMA per 16. A CPU without them (x86-64 with AVX2 and FMA
// only) runs the same blocks on 8 lanes, bfloat16 widened to float32 by a 16-bit shift (exact);
// its float32 products of more than 4 rows run the broadcast blocks instead (x transposed, each
// element of W broadcast to one lane per row of x: see bcast_linear), and so do AVX-512's where
// W streams from memory (streamed_broadcast), on 16 lanes (bcast_block512).
// The variant is chosen per call from the CPU's own flags (__builtin_cpu_supports);
// plga::avx2_only narrows it (and plga::positive_pow) to the AVX2 code (tests run both where both exist).
//
// Arithmetic contract (tested in tests/kernels/test_native.py against float64): products and
// sums in float32, the bias added in float32, one rounding to the output dtype. VDPBF16PS
// treats bfloat16 subnormal inputs as zero and rounds to nearest even (it ignores MXCSR); the
// AVX2 blocks multiply subnormals exactly.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace plga_native {
std::atomic<bool> avx2_only{false};  // the tests' switch (plga::avx2_only), read by every kernel here
bool avx512f_code();
}  // namespace plga_native

namespace {

constexpr int64_t kRows = 4;     // rows of W per block
constexpr int64_t kMaxGroup = 4;  // rows of x per pass over a block
// Software prefetch of the same columns kAhead blocks further on. The R rows of a block are read
// as R interleaved streams, which the hardware prefetcher follows poorly when a row is short
// (small: K = 256, 1 KiB rows, the block is one page): measured 0.68× the column-block GEMV in a
// decoding step without it. A prefetch past the end of W is harmless (it never faults).
constexpr int kAhead = 2;

// The blocks this CPU runs (asked once, at load), and the tests' narrowing switch.
const bool kHasAvx2Fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
const bool kHasAvx512 = __builtin_cpu_supports("avx512f");
const bool kHasAvx512Bf16 = kHasAvx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");

// Whether products in T run the AVX2 blocks (no wider ones on this CPU, or the tests' switch).
template <typename T>
bool avx2_blocks() {
  const bool wide = std::is_same<T, at::BFloat16>::value ? kHasAvx512Bf16 : kHasAvx512;
  return !wide || plga_native::avx2_only.load(std::memory_order_relaxed);
}

// ---- float32: 16 lanes, one FMA per lane ------------------------------------------------

template <int MC, int RR>
__attribute__((target("avx512f"))) void block_f32(const float* x, const float* w, float* acc_out, int64_t K) {
  __m512 acc[MC][RR];
  for (int m = 0; m < MC; ++m)
    for (int r = 0; r < RR; ++r) acc[m][r] = _mm512_setzero_ps();
  const int64_t full = K - K % 16;
  for (int64_t k = 0; k < full; k += 16) {
    __m512 wv[RR];
    for (int r = 0; r < RR; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + kAhead * RR) * K + k), _MM_HINT_T0);
      wv[r] = _mm512_loadu_ps(w + r * K + k);
    }
    for (int m = 0; m < MC; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * K + k);
      for (int r = 0; r < RR; ++r) acc[m][r] = _mm512_fmadd_ps(wv[r], xv, acc[m][r]);
    }
  }
  if (K % 16) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (K % 16)) - 1);
    __m512 wv[RR];
    for (int r = 0; r < RR; ++r) wv[r] = _mm512_maskz_loadu_ps(tail, w + r * K + full);
    for (int m = 0; m < MC; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + m * K + full);
      for (int r = 0; r < RR; ++r) acc[m][r] = _mm512_fmadd_ps(wv[r], xv, acc[m][r]);
    }
  }
  for (int m = 0; m < MC; ++m)
    for (int r = 0; r < RR; ++r) acc_out[m * kRows + r] = _mm512_reduce_add_ps(acc[m][r]);
}

// ---- bfloat16: 32 lanes as 16 pairs, VDPBF16PS -------------------------------------------

template <int MC, int RR>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void block_bf16(const at::BFloat16* x, const at::BFloat16* w,
                                                                        float* acc_out, int64_t K) {
  __m512 acc[MC][RR];
  for (int m = 0; m < MC; ++m)
    for (int r = 0; r < RR; ++r) acc[m][r] = _mm512_setzero_ps();
  const int64_t full = K - K % 32;
  for (int64_t k = 0; k < full; k += 32) {
    __m512bh wv[RR];
    for (int r = 0; r < RR; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + kAhead * RR) * K + k), _MM_HINT_T0);
      wv[r] = (__m512bh)_mm512_loadu_si512(w + r * K + k);
    }
    for (int m = 0; m < MC; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      for (int r = 0; r < RR; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv[r], xv);
    }
  }
  if (K % 32) {
    const __mmask32 tail = static_cast<__mmask32>((1ull << (K % 32)) - 1);
    __m512bh wv[RR];
    for (int r = 0; r < RR; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(tail, w + r * K + full);
    for (int m = 0; m < MC; ++m) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(tail, x + m * K + full);
      for (int r = 0; r < RR; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv[r], xv);
    }
  }
  for (int m = 0; m < MC; ++m)
    for (int r = 0; r < RR; ++r) acc_out[m * kRows + r] = _mm512_reduce_add_ps(acc[m][r]);
}

// ---- AVX2 + FMA: 8 lanes, one FMA per lane; bfloat16 widened exactly by a 16-bit shift ---------

__attribute__((target("avx2"))) inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

__attribute__((target("avx2"))) inline __m256 load8(const at::BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <typename T, int MC, int RR>
__attribute__((target("avx2,fma"))) void block_avx2(const T* x, const T* w, float* acc_out, int64_t K) {
  constexpr int64_t kLine = 64 / sizeof(T);  // elements per cache line: one prefetch each
  __m256 acc[MC][RR];
  for (int m = 0; m < MC; ++m)
    for (int r = 0; r < RR; ++r) acc[m][r] = _mm256_setzero_ps();
  const int64_t full = K - K % 8;
  for (int64_t k = 0; k < full; k += 8) {
    __m256 wv[RR];
    for (int r = 0; r < RR; ++r) {
      if (k % kLine == 0) _mm_prefetch(reinterpret_cast<const char*>(w + (r + kAhead * RR) * K + k), _MM_HINT_T0);
      wv[r] = load8(w + r * K + k);
    }
    for (int m = 0; m < MC; ++m) {
      const __m256 xv = load8(x + m * K + k);
      for (int r = 0; r < RR; ++r) acc[m][r] = _mm256_fmadd_ps(wv[r], xv, acc[m][r]);
    }
  }
  for (int m = 0; m < MC; ++m)
    for (int r = 0; r < RR; ++r) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[m][r]);
      float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
      for (int64_t k = full; k < K; ++k) sum += static_cast<float>(w[r * K + k]) * static_cast<float>(x[m * K + k]);
      acc_out[m * kRows + r] = sum;
    }
}

// ---- float32, more than kMaxGroup rows of x (AVX2, or W past the caches): W broadcast ------
//
// Past 4 rows the dot-product blocks above pass over each block of W once per group of 4 rows,
// hold 16 accumulators and 4 rows of W in AVX2's 16 registers (the compiler spills), then
// reduce every accumulator across its lanes. Here x is transposed once per call to xT [K, 8·L]
// (lane m holds row m; up to 16 rows per chunk, unused lanes zero) and each element of W is
// broadcast to every lane: acc[r] += W[n + r, k] · xT[k] holds the products of row n + r of W
// with every row of x at once. One pass over W per 16 rows of x and no horizontal sums; each
// output is one float32 FMA chain over k. Measured on an AVX2-only AMD EPYC against the blocks
// above, 32000 × 256 (the vocabulary of `small`): 8 rows 2.6 → 1.4 ms, 16 rows 4.1 → 2.2 ms; 5
// rows about equal where W stays in cache; at 2–4 rows the blocks above are faster (idle lanes).
//
// With AVX-512 the dot-product blocks pass over a block of W once per group of 4 rows of x, the
// second pass from L1; where W is cached that is the faster way at up to 8 rows (AMD EPYC with
// AVX-512, 2 threads, 8 rows: 896 × 896 102 against 118 µs broadcast, 256 × 683 29 against 40 µs).
// Where W streams from memory (kStreamedBytes) the broadcast blocks' single ordered pass is faster
// while their working set stays in L1 — xT of 8 lanes and a block of 8 rows of W, 64·K bytes — and,
// at any K, past 8 rows, where the dot blocks pass 3–4 times. Timed with the two choices
// interleaved in one process, dot blocks against broadcast: 32000 × 256 at 6 / 8 / 16 rows
// 1.76–1.86 / 1.81–1.84 / 2.36–2.58 ms against 1.22–1.23 / 1.11–1.17 / 1.64–1.72 ms; 24000 × 256 at
// 8 rows 0.88–1.42 against 0.74–0.97 ms; 32000 × 896 (64·K = 56 KiB) at 8 rows equal (5.96–6.13
// against 6.13–6.17 ms), at 16 rows 7.69–8.20 against 6.08–6.27 ms; 8000 × 512 (64·K = 32 KiB,
// cached) at 8 rows 0.44–0.52 against 0.46–0.58 ms. Past 8 rows the broadcast blocks were also
// equal or faster over most cached weights (2688 × 896 at 16 rows: 0.51–0.60 against 0.44–0.48 ms)
// but not all (256 × 688: 39–46 against 57–64 µs); those keep the dot blocks. (These figures,
// and the bound of 8 rows they set, were the 8-lane broadcast blocks'; AVX-512 now runs the
// 16-lane ones, bcast_block512, and the bound is 6 rows, as follows.)
// The 16-lane blocks read a streamed W at the memory's rate for any M ≤ 8 (AMD EPYC Zen 5, 2
// threads: 1.5–1.7 ms per 110 MiB), while the dot blocks' second group of rows costs more as it
// fills; so at 7 and 8 rows they take a streamed W at every K. Dot blocks against broadcast, in
// one process, W of 20 / 40 / 110 MiB: 8 rows, K = 896: 286 / 744 / 2700 against 264 / 523 / 1680
// µs; K = 2048: 316 / 932 / 3090 against 275 / 539 / 1529; K = 512 equal (249 / 524 / 1798 against
// 253 / 525 / 1708); 7 rows 1.04–1.09× (K = 512) to 1.15–1.74× (K = 896, 2048). At 5 and 6 rows
// the dot blocks stay, faster at K = 512 (5 rows 0.69–0.86×, 6 rows 0.85–0.91×) and at 5 rows
// below ~100 MiB; cached weights keep them too (8 rows, 1–9 MiB: 0.87–1.27×, no clear side).
constexpr int64_t kStreamedBytes = int64_t{16} << 20;  // a float32 W at least this large streams from memory
constexpr int64_t kL1Bytes = int64_t{32} << 10;

// Whether AVX-512's float32 product of M > kMaxGroup rows runs the broadcast blocks.
bool streamed_broadcast(int64_t M, int64_t N, int64_t K) {
  return N * K * 4 >= kStreamedBytes && (M > 6 || 64 * K < kL1Bytes);
}

constexpr int64_t kChunk = 16;  // rows of x per broadcast pass: two vectors of 8 lanes
constexpr int64_t kSpan = 24;   // rows of W per parallel task unit: whole blocks for RR = 8 and 6

template <int L, int RR>
__attribute__((target("avx2,fma"), always_inline)) inline void bcast_step(const float* xT, const float* w, int64_t K,
                                                                          int64_t k, __m256 (&acc)[RR][L]) {
  __m256 xv[L];
#pragma GCC unroll 2
  for (int l = 0; l < L; ++l) xv[l] = _mm256_loadu_ps(xT + k * L * 8 + l * 8);
#pragma GCC unroll 8
  for (int r = 0; r < RR; ++r) {
    const __m256 wb = _mm256_broadcast_ss(w + r * K + k);
#pragma GCC unroll 2
    for (int l = 0; l < L; ++l) acc[r][l] = _mm256_fmadd_ps(wb, xv[l], acc[r][l]);
  }
}

// Rows [0, RR) of w against every lane of xT → tile[r * kChunk + m]. `next` is the block after
// this one, prefetched a sixteenth at a time (RR streams of short rows defeat the hardware's).
template <int L, int RR>
__attribute__((target("avx2,fma"))) void bcast_block(const float* xT, const float* w, const float* next, float* tile,
                                                     int64_t K) {
  __m256 acc[RR][L];
#pragma GCC unroll 8
  for (int r = 0; r < RR; ++r)
#pragma GCC unroll 2
    for (int l = 0; l < L; ++l) acc[r][l] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
#pragma GCC unroll 8
    for (int j = 0; j < RR; ++j) _mm_prefetch(reinterpret_cast<const char*>(next + (k / 16 * RR + j) * 16), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int u = 0; u < 16; ++u) bcast_step<L, RR>(xT, w, K, k + u, acc);
  }
  for (; k < K; ++k) bcast_step<L, RR>(xT, w, K, k, acc);
#pragma GCC unroll 8
  for (int r = 0; r < RR; ++r)
#pragma GCC unroll 2
    for (int l = 0; l < L; ++l) _mm256_storeu_ps(tile + r * kChunk + l * 8, acc[r][l]);
}

// The same blocks on AVX-512's 16 lanes, where one FMA made 8 products on the 8-lane blocks above.
// Paired (at most 8 rows of x): lane 2m + j holds row m at column 2p + j of xP [⌈K/2⌉, 16], and
// the pair W[n, 2p], W[n, 2p + 1], adjacent in memory, is broadcast as one 64-bit element
// (VBROADCASTSD: a load, no shuffle), so each output is two FMA chains, even and odd columns,
// added when the block ends; an odd K's last column is broadcast to the even lanes only. Not
// paired (9–16 rows): lane m holds row m of xT [K, 16], each element of W broadcast to 16 lanes.
// Half the FMAs and broadcasts of the 8-lane blocks for the same products. AMD EPYC with AVX-512
// (Zen 5), 2 threads, alternating with the 8-lane blocks in one process, W warm in the caches:
// 32000 × 256 at 5 / 8 / 9 / 16 rows 413 / 379 / 686 / 768 µs against 685 / 632 / 1062 / 1101 µs
// (8 rows now as fast as 1 and 4); 32000 × 257 at 8 / 16 rows 1.38 / 1.53× faster; 4683 × 897 at
// 9 / 16 rows 1.54 / 1.68×; 32000 × 896 at 16 rows 1.40×. Where W comes from DRAM both run at its
// speed: equal with the caches flushed between calls, and a captured `small` kv step at batch 8
// (its vocabulary product 0.8–1.0 ms either way) unchanged on that machine.
// Columns k, k + 1 (paired) or column k of rows [0, RR) of w against every lane of xT, into acc.
template <bool Paired, int RR>
__attribute__((target("avx512f"), always_inline)) inline void bcast_step512(const float* xT, const float* w, int64_t K,
                                                                            int64_t k, __m512 (&acc)[RR]) {
  const __m512 xv = _mm512_loadu_ps(xT + (Paired ? k / 2 : k) * 16);
#pragma GCC unroll 8
  for (int r = 0; r < RR; ++r) {
    __m512 wb;
    if constexpr (Paired) {
      double pair;
      std::memcpy(&pair, w + r * K + k, sizeof pair);
      wb = _mm512_castpd_ps(_mm512_set1_pd(pair));
    } else {
      wb = _mm512_set1_ps(w[r * K + k]);
    }
    acc[r] = _mm512_fmadd_ps(wb, xv, acc[r]);
  }
}

template <bool Paired, int RR>
__attribute__((target("avx512f"))) void bcast_block512(const float* xT, const float* w, const float* next, float* tile,
                                                       int64_t K) {
  __m512 acc[RR];
#pragma GCC unroll 8
  for (int r = 0; r < RR; ++r) acc[r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
#pragma GCC unroll 8
    for (int j = 0; j < RR; ++j) _mm_prefetch(reinterpret_cast<const char*>(next + (k / 16 * RR + j) * 16), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int u = 0; u < 16; u += Paired ? 2 : 1) bcast_step512<Paired, RR>(xT, w, K, k + u, acc);
  }
  for (; k + (Paired ? 2 : 1) <= K; k += Paired ? 2 : 1) bcast_step512<Paired, RR>(xT, w, K, k, acc);
  if (Paired && k < K) {  // the odd column: W's even lanes only (xP's odd lanes are zero there)
    const __m512 xv = _mm512_loadu_ps(xT + k / 2 * 16);
#pragma GCC unroll 8
    for (int r = 0; r < RR; ++r) acc[r] = _mm512_fmadd_ps(_mm512_maskz_mov_ps(0x5555, _mm512_set1_ps(w[r * K + k])), xv, acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < RR; ++r) {
    if constexpr (Paired) {  // lane 2m + 1 added to lane 2m, the sums of rows 0..7 packed into 8 lanes
      const __m512 sum = _mm512_add_ps(acc[r], _mm512_permute_ps(acc[r], 0xB1));
      _mm256_storeu_ps(tile + r * kChunk, _mm512_castps512_ps256(_mm512_maskz_compress_ps(0x5555, sum)));
    } else {
      _mm512_storeu_ps(tile + r * kChunk, acc[r]);
    }
  }
}

// One block of RR rows of W on the variant V: 8 lanes (L = 1), 2 × 8 lanes (L = 2), or AVX-512's
// paired and 16-lane blocks.
enum class Lanes { k8, k8x2, k16Paired, k16 };

template <Lanes V, int RR>
void lanes_block(const float* xT, const float* w, const float* next, float* tile, int64_t K) {
  if constexpr (V == Lanes::k8) bcast_block<1, RR>(xT, w, next, tile, K);
  else if constexpr (V == Lanes::k8x2) bcast_block<2, RR>(xT, w, next, tile, K);
  else bcast_block512<V == Lanes::k16Paired, RR>(xT, w, next, tile, K);
}

// Rows [n0, n1) of W against one chunk of mc rows of x (xT), written to out [mc, N].
template <Lanes V, int RR>
void bcast_range(const float* xT, const float* w, const float* b, float* out, int64_t mc, int64_t N, int64_t K,
                 int64_t n0, int64_t n1) {
  alignas(32) float tile[RR * kChunk];
  int64_t n = n0;
  for (; n + RR <= n1; n += RR) {
    lanes_block<V, RR>(xT, w + n * K, w + (n + RR) * K, tile, K);
    for (int64_t m = 0; m < mc; ++m)
      for (int r = 0; r < RR; ++r) out[m * N + n + r] = tile[r * kChunk + m] + b[n + r];
  }
  for (; n < n1; ++n) {  // the remainder rows, one at a time
    lanes_block<V, 1>(xT, w + n * K, w + (n + 1) * K, tile, K);
    for (int64_t m = 0; m < mc; ++m) out[m * N + n] = tile[m] + b[n];
  }
}

// b + x Wᵀ → out [M, N] for float32 x [M, K] (M > kMaxGroup) on the broadcast blocks: AVX-512's
// where the CPU has it (the tests' switch aside), else the 8-lane ones.
void bcast_linear(const float* x, const float* w, const float* b, float* out, int64_t M, int64_t N, int64_t K) {
  const bool wide = !avx2_blocks<float>();
  const int64_t chunks = (M + kChunk - 1) / kChunk, stride = (K + 1) * kChunk;
  std::vector<float> xT(static_cast<size_t>(chunks * stride), 0.0f);  // chunk c at c · stride, unused lanes zero
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t m0 = c * kChunk, mc = std::min(kChunk, M - m0);
    float* dst = xT.data() + c * stride;
    for (int64_t m = 0; m < mc; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const float v = x[(m0 + m) * K + k];
        if (!wide) dst[k * (mc > 8 ? 16 : 8) + m] = v;  // [K, 8·L]: lane m
        else if (mc > 8) dst[k * 16 + m] = v;            // [K, 16]: lane m
        else dst[k / 2 * 16 + 2 * m + k % 2] = v;        // [⌈K/2⌉, 16]: lane 2m + k mod 2
      }
  }
  const int64_t spans = (N + kSpan - 1) / kSpan;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kSpan * K));  // ≥ 64 KiB of W per task
  at::parallel_for(0, spans, grain, [&](int64_t s0, int64_t s1) {
    const int64_t n0 = s0 * kSpan, n1 = std::min(N, s1 * kSpan);
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t m0 = c * kChunk, mc = std::min(kChunk, M - m0);
      const float* xt = xT.data() + c * stride;
      float* o = out + m0 * N;
      if (wide && mc > 8) bcast_range<Lanes::k16, 8>(xt, w, b, o, mc, N, K, n0, n1);
      else if (wide) bcast_range<Lanes::k16Paired, 8>(xt, w, b, o, mc, N, K, n0, n1);
      else if (mc > 8) bcast_range<Lanes::k8x2, 6>(xt, w, b, o, mc, N, K, n0, n1);
      else bcast_range<Lanes::k8, 8>(xt, w, b, o, mc, N, K, n0, n1);
    }
  });
}

// ---- one block of rows of W against every row of x -----------------------------------------

template <typename T, int RR>
void group(const T* x, const T* w, float* acc, int64_t K, int64_t mc) {
  auto run = [&](auto mc_tag) {
    constexpr int MC = decltype(mc_tag)::value;
    if (avx2_blocks<T>()) block_avx2<T, MC, RR>(x, w, acc, K);
    else if constexpr (std::is_same<T, at::BFloat16>::value) block_bf16<MC, RR>(x, w, acc, K);
    else block_f32<MC, RR>(x, w, acc, K);
  };
  switch (mc) {
    case 1: run(std::integral_constant<int, 1>{}); break;
    case 2: run(std::integral_constant<int, 2>{}); break;
    case 3: run(std::integral_constant<int, 3>{}); break;
    default: run(std::integral_constant<int, 4>{}); break;
  }
}

// Rows [n0, n1) of W against every row of x. On the AVX2 blocks one row of x also runs the blocks
// of 4 rows of W: with one row of W at a time, each output was a single FMA chain, bound by the
// FMA's latency (8 elements per 4–5 cycles, about 13 GB/s of bfloat16 on two cores of an AVX2-only
// AMD EPYC); four independent chains read 37–45 GB/s from cache (2688 × 896 bfloat16: 0.33–0.39 →
// 0.11–0.13 ms). The AVX-512 blocks keep one row of W per pass at one row of x, read in order. On
// an AMD EPYC with AVX-512, 4 rows of W made a bfloat16 product alone, its W warm in L3, faster
// (2688 × 896: 59–64 → 50–51 µs), but captured bfloat16 steps, whose weights stream from memory,
// slower (interleaved in one process: paper-110m kvg 4.4 → 6.1 ms, small kv 0.9 → 1.35 ms); float32
// products alone gained nothing.
template <typename T>
void rows_range(const T* x, const T* w, const T* b, T* out, int64_t M, int64_t N, int64_t K, int64_t n0, int64_t n1) {
  const bool four_rows = M > 1 || avx2_blocks<T>();
  float acc[kMaxGroup * kRows];
  for (int64_t n = n0; n < n1; n += kRows) {
    const int64_t rows = std::min(kRows, n1 - n);
    for (int64_t m0 = 0; m0 < M; m0 += kMaxGroup) {
      const int64_t mc = std::min(kMaxGroup, M - m0);
      if (rows == kRows && four_rows) {
        group<T, kRows>(x + m0 * K, w + n * K, acc, K, mc);
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          group<T, 1>(x + m0 * K, w + (n + r) * K, acc + r, K, mc);  // writes acc[m * kRows + r]
        }
      }
      for (int64_t m = 0; m < mc; ++m)
        for (int64_t r = 0; r < rows; ++r)
          out[(m0 + m) * N + n + r] = static_cast<T>(acc[m * kRows + r] + static_cast<float>(b[n + r]));
    }
  }
}

at::Tensor rows_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && b.dim() == 1, "plga::rows_linear: expected x [M, K], w [N, K], b [N]");
  TORCH_CHECK(x.size(1) == w.size(1) && b.size(0) == w.size(0), "plga::rows_linear: x [M, K], w [N, K], b [N] disagree: ",
              x.sizes(), " ", w.sizes(), " ", b.sizes());
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "plga::rows_linear: float32 or bfloat16, got ", dtype);
  TORCH_CHECK(w.scalar_type() == dtype && b.scalar_type() == dtype, "plga::rows_linear: x, w and b must share one dtype");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu() && b.device().is_cpu(), "plga::rows_linear: CPU tensors only");
  TORCH_CHECK(kHasAvx2Fma, "plga::rows_linear: needs a CPU with AVX2 and FMA");
  const auto xc = x.contiguous();
  const auto wc = w.contiguous();
  const auto bc = b.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
  auto out = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return out;
  const int64_t blocks = (N + kRows - 1) / kRows;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kRows * K));  // ≥ 64 KiB of W per task
  AT_DISPATCH_SWITCH(dtype, "plga::rows_linear",
    AT_DISPATCH_CASE(at::kFloat, [&] {
      const float *xp = xc.data_ptr<float>(), *wp = wc.data_ptr<float>(), *bp = bc.data_ptr<float>();
      float* op = out.data_ptr<float>();
      if (M > kMaxGroup && (avx2_blocks<float>() || streamed_broadcast(M, N, K))) {
        bcast_linear(xp, wp, bp, op, M, N, K);
        return;
      }
      at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
        rows_range<float>(xp, wp, bp, op, M, N, K, b0 * kRows, std::min(N, b1 * kRows));
      });
    })
    AT_DISPATCH_CASE(at::kBFloat16, [&] {
      const at::BFloat16 *xp = xc.data_ptr<at::BFloat16>(), *wp = wc.data_ptr<at::BFloat16>(), *bp = bc.data_ptr<at::BFloat16>();
      at::BFloat16* op = out.data_ptr<at::BFloat16>();
      at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
        rows_range<at::BFloat16>(xp, wp, bp, op, M, N, K, b0 * kRows, std::min(N, b1 * kRows));
      });
    }));
  return out;
}

// ---- plga::rows_argmax: the greedy choice of a decoding step -------------------------------
//
// torch.argmax over the vocabulary runs at about 1 ns an element on the CPU (eager and Inductor's
// index-carrying reduction alike): 0.27 ms of a `small` captured step at batch 8. Here a row is
// read twice from cache: its maximum (and whether it holds a NaN), then the first index equal
// to it — torch.argmax's answer exactly: the first maximal index, or the first NaN where the row
// has one (NaN counts as the largest value).

template <typename T>
__attribute__((target("avx2"))) int64_t argmax_row(const T* p, int64_t n) {
  const int64_t full = n - n % 8;
  float best = -std::numeric_limits<float>::infinity();
  bool nan = false;
  if (full) {
    __m256 vmax = _mm256_set1_ps(best), vnan = _mm256_setzero_ps();
    for (int64_t i = 0; i < full; i += 8) {
      const __m256 v = load8(p + i);
      vmax = _mm256_max_ps(vmax, v);
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    for (float f : lanes) best = std::max(best, f);
    nan = _mm256_movemask_ps(vnan) != 0;
  }
  for (int64_t i = full; i < n; ++i) {
    const float f = static_cast<float>(p[i]);
    nan = nan || std::isnan(f);
    best = std::max(best, f);
  }
  if (nan) {
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(static_cast<float>(p[i]))) return i;
  }
  const __m256 vbest = _mm256_set1_ps(best);
  for (int64_t i = 0; i < full; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(load8(p + i), vbest, _CMP_EQ_OQ));
    if (mask) return i + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (int64_t i = full; i < n; ++i)
    if (static_cast<float>(p[i]) == best) return i;
  return 0;  // unreachable: some element equals the maximum
}

at::Tensor rows_argmax(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "plga::rows_argmax: expected x [M, N], got ", x.sizes());
  TORCH_CHECK(x.size(1) > 0, "plga::rows_argmax: rows of length 0 have no argmax");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "plga::rows_argmax: float32 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.device().is_cpu(), "plga::rows_argmax: CPU tensors only");
  TORCH_CHECK(kHasAvx2Fma, "plga::rows_argmax: needs a CPU with AVX2 and FMA");
  const auto xc = x.contiguous();
  const int64_t M = xc.size(0), N = xc.size(1);
  auto out = at::empty({M}, x.options().dtype(at::kLong));
  int64_t* op = out.data_ptr<int64_t>();
  const int64_t grain = std::max<int64_t>(1, 65536 / N);  // ≥ 64 Ki elements (~15 µs) per task
  AT_DISPATCH_SWITCH(xc.scalar_type(), "plga::rows_argmax",
    AT_DISPATCH_CASE(at::kFloat, [&] {
      const float* xp = xc.data_ptr<float>();
      at::parallel_for(0, M, grain, [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) op[m] = argmax_row(xp + m * N, N);
      });
    })
    AT_DISPATCH_CASE(at::kBFloat16, [&] {
      const at::BFloat16* xp = xc.data_ptr<at::BFloat16>();
      at::parallel_for(0, M, grain, [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) op[m] = argmax_row(xp + m * N, N);
      });
    }));
  return out;
}

// Tests only: run every kernel of this library on its AVX2 code even where AVX-512 code exists
// (on = true), or the widest again; returns the previous setting.
bool set_avx2_only(bool on) { return plga_native::avx2_only.exchange(on); }

}  // namespace

// Whether plga::positive_pow runs its AVX-512F code: the same test as rows_linear's float32 blocks.
bool plga_native::avx512f_code() { return !avx2_blocks<float>(); }

// The schemas of rows_linear and rows_argmax are defined in Python (plga/kernels/native.py, with
// the shape functions torch.compile needs); this library adds their CPU kernels and the tests' switch.
TORCH_LIBRARY_IMPL(plga, CPU, m) {
  m.impl("rows_linear", &rows_linear);
  m.impl("rows_argmax", &rows_argmax);
}
TORCH_LIBRARY_FRAGMENT(plga, m) { m.def("avx2_only(bool on) -> bool", &set_avx2_only); }
