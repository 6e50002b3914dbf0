// plga::positive_pow — y = x ** p elementwise in float32, p broadcast over x's leading axes (p's
// shape is a suffix of x's): A_P = A_LM^{⊙P} of the power stage (Lean `PLGA.powerStage`, paper
// eq. 5), recomputed at every `kv` decoding step. Built with rows_linear.cpp (plga/kernels/native.py).
//
// Why: torch.pow of two float32 tensors runs Sleef's powf (1-ulp, double-float arithmetic),
// eagerly and inside Inductor's fused loop alike: 16–22 cycles an element on an AMD EPYC with
// AVX2, two thirds of the power stage at `small`, batch 8 — the part of a `kv` step that grows
// with the batch. This takes 6–8 (a division instead was faster than a reciprocal estimate with
// two Newton steps). On an Intel Xeon with AVX-512, [8, 4, 64, 64] (131 072 elements, 2 threads,
// medians of 9 alternating rounds): 0.114 ms on 8 lanes, 0.168 ms on 4, 0.204 ms for torch.pow.
//
// How: for a positive normal finite x and a finite p, in double precision on 8 lanes (AVX-512F)
// or 4 (AVX2; the same operations lane for lane, so the same bits), with kChains groups in
// flight (each polynomial is one dependent chain of FMAs):
//   x = m 2^e with m in [√½, √2] (exact, from the float's bits);
//   log m = 2s Σ_{k≤6} s^{2k}/(2k+1), s = (m−1)/(m+1), |s| ≤ 0.1716: relative error ≤ 1.4e-12;
//   t = p (e ln2 + log m), clamped to [−150, 150] (beyond it the float result is 0 or ∞ anyway);
//   e^t = 2^n e^r, n = round(t / ln2), r = t − n ln2 (Cody–Waite), |r| ≤ 0.3466, e^r by its
//   Taylor series to degree 8: relative error ≤ 2.9e-10;
// and one rounding to float32: |t| ≤ 104 wherever the result is a nonzero finite float, so the
// double result is within 4.5e-10 relative of xᵖ and the float within 0.51 ulp (0.5 for the
// rounding; Sleef's bound is 1 ulp). Every other lane (x ≤ 0, subnormal, ∞ or NaN; p ±∞ or NaN)
// takes std::pow, whose special values are the C standard's, as torch.pow's are.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

namespace plga_native {
bool avx512f_code();  // defined in rows_linear.cpp: the CPU has AVX-512F and the tests' switch is off
}  // namespace plga_native

namespace {

const bool kHasAvx2Fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");

constexpr int kChains = 4;                // groups of 4 doubles per polynomial pass
constexpr int64_t kStep = 2 * kChains * 4;  // floats per pass: 2 passes over kChains groups

// Σ_{k≤6} z^k/(2k+1), highest first.
constexpr double kInvOdd[7] = {1.0 / 13, 1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1.0};
// Σ_{k≤8} r^k/k!, highest first.
constexpr double kInvFact[9] = {1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1.0, 1.0};
constexpr double kLn2 = 6.93147180559945309417e-01;
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // n·kLn2Hi is exact for |n| < 2^20
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;

// xᵖ for kChains groups: x = m 2^e (m, e, p as doubles); results as doubles.
__attribute__((target("avx2,fma"), always_inline)) inline void pow_groups(const __m256d* m, const __m256d* e,
                                                                          const __m256d* p, __m256d* y) {
  const __m256d one = _mm256_set1_pd(1.0);
  __m256d s[kChains], z[kChains], q[kChains], t[kChains], n[kChains], r[kChains];
  for (int c = 0; c < kChains; ++c) {
    s[c] = _mm256_div_pd(_mm256_sub_pd(m[c], one), _mm256_add_pd(m[c], one));
    z[c] = _mm256_mul_pd(s[c], s[c]);
    q[c] = _mm256_set1_pd(kInvOdd[0]);
  }
  for (int k = 1; k < 7; ++k)
    for (int c = 0; c < kChains; ++c) q[c] = _mm256_fmadd_pd(q[c], z[c], _mm256_set1_pd(kInvOdd[k]));
  for (int c = 0; c < kChains; ++c) {
    const __m256d log_x = _mm256_fmadd_pd(e[c], _mm256_set1_pd(kLn2), _mm256_mul_pd(_mm256_add_pd(s[c], s[c]), q[c]));
    t[c] = _mm256_min_pd(_mm256_max_pd(_mm256_mul_pd(p[c], log_x), _mm256_set1_pd(-150.0)), _mm256_set1_pd(150.0));
    n[c] = _mm256_round_pd(_mm256_mul_pd(t[c], _mm256_set1_pd(kInvLn2)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[c] = _mm256_fnmadd_pd(n[c], _mm256_set1_pd(kLn2Lo), _mm256_fnmadd_pd(n[c], _mm256_set1_pd(kLn2Hi), t[c]));
    q[c] = _mm256_set1_pd(kInvFact[0]);
  }
  for (int k = 1; k < 9; ++k)
    for (int c = 0; c < kChains; ++c) q[c] = _mm256_fmadd_pd(q[c], r[c], _mm256_set1_pd(kInvFact[k]));
  for (int c = 0; c < kChains; ++c) {
    const __m256i biased = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n[c])), _mm256_set1_epi64x(1023));
    y[c] = _mm256_mul_pd(q[c], _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52)));  // e^r · 2^n
  }
}

// The lanes of a pass outside the polynomial's domain (x ≤ 0, subnormal, ∞ or NaN; p ±∞ or NaN),
// recomputed by std::pow.
void redo_special(const float* x, const float* p, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    if (!(x[j] >= FLT_MIN && x[j] < INFINITY && std::fabs(p[j]) < INFINITY)) y[j] = std::pow(x[j], p[j]);
}

// y[i] = x[i] ** p[i] for one full pass of kStep floats.
__attribute__((target("avx2,fma"))) void pow_pass(const float* x, const float* p, float* y) {
  const __m256i mantissa = _mm256_set1_epi32(0x007fffff), one_bits = _mm256_set1_epi32(0x3f800000);
  __m256d m[2 * kChains], e[2 * kChains], pd[2 * kChains], yd[2 * kChains];
  int fast = 0xff;
  for (int v = 0; v < kChains; ++v) {
    const __m256 xv = _mm256_loadu_ps(x + 8 * v), pv = _mm256_loadu_ps(p + 8 * v);
    const __m256 x_ok = _mm256_and_ps(_mm256_cmp_ps(xv, _mm256_set1_ps(FLT_MIN), _CMP_GE_OQ),
                                      _mm256_cmp_ps(xv, _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
    const __m256 p_ok = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), pv), _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
    fast &= _mm256_movemask_ps(_mm256_and_ps(x_ok, p_ok));
    const __m256i bits = _mm256_castps_si256(xv);
    __m256i ev = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127));
    __m256 mv = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, mantissa), one_bits));  // [1, 2)
    const __m256 high = _mm256_cmp_ps(mv, _mm256_set1_ps(static_cast<float>(M_SQRT2)), _CMP_GT_OQ);
    mv = _mm256_blendv_ps(mv, _mm256_mul_ps(mv, _mm256_set1_ps(0.5f)), high);  // [√½, √2]
    ev = _mm256_sub_epi32(ev, _mm256_castps_si256(high));  // a true mask is −1
    m[2 * v] = _mm256_cvtps_pd(_mm256_castps256_ps128(mv));
    m[2 * v + 1] = _mm256_cvtps_pd(_mm256_extractf128_ps(mv, 1));
    e[2 * v] = _mm256_cvtepi32_pd(_mm256_castsi256_si128(ev));
    e[2 * v + 1] = _mm256_cvtepi32_pd(_mm256_extracti128_si256(ev, 1));
    pd[2 * v] = _mm256_cvtps_pd(_mm256_castps256_ps128(pv));
    pd[2 * v + 1] = _mm256_cvtps_pd(_mm256_extractf128_ps(pv, 1));
  }
  pow_groups(m, e, pd, yd);
  pow_groups(m + kChains, e + kChains, pd + kChains, yd + kChains);
  for (int v = 0; v < kChains; ++v)
    _mm256_storeu_ps(y + 8 * v, _mm256_set_m128(_mm256_cvtpd_ps(yd[2 * v + 1]), _mm256_cvtpd_ps(yd[2 * v])));
  if (fast != 0xff) redo_special(x, p, y, kStep);
}

// The same arithmetic on 8 double lanes (AVX-512F): lane for lane the operations above, so the
// same bits, in half the instructions per element.
constexpr int64_t kStep512 = 2 * kChains * 8;  // floats per AVX-512 pass

__attribute__((target("avx512f"), always_inline)) inline void pow_groups512(const __m512d* m, const __m512d* e,
                                                                           const __m512d* p, __m512d* y) {
  const __m512d one = _mm512_set1_pd(1.0);
  __m512d s[kChains], z[kChains], q[kChains], t[kChains], n[kChains], r[kChains];
  for (int c = 0; c < kChains; ++c) {
    s[c] = _mm512_div_pd(_mm512_sub_pd(m[c], one), _mm512_add_pd(m[c], one));
    z[c] = _mm512_mul_pd(s[c], s[c]);
    q[c] = _mm512_set1_pd(kInvOdd[0]);
  }
  for (int k = 1; k < 7; ++k)
    for (int c = 0; c < kChains; ++c) q[c] = _mm512_fmadd_pd(q[c], z[c], _mm512_set1_pd(kInvOdd[k]));
  for (int c = 0; c < kChains; ++c) {
    const __m512d log_x = _mm512_fmadd_pd(e[c], _mm512_set1_pd(kLn2), _mm512_mul_pd(_mm512_add_pd(s[c], s[c]), q[c]));
    t[c] = _mm512_min_pd(_mm512_max_pd(_mm512_mul_pd(p[c], log_x), _mm512_set1_pd(-150.0)), _mm512_set1_pd(150.0));
    n[c] = _mm512_roundscale_pd(_mm512_mul_pd(t[c], _mm512_set1_pd(kInvLn2)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[c] = _mm512_fnmadd_pd(n[c], _mm512_set1_pd(kLn2Lo), _mm512_fnmadd_pd(n[c], _mm512_set1_pd(kLn2Hi), t[c]));
    q[c] = _mm512_set1_pd(kInvFact[0]);
  }
  for (int k = 1; k < 9; ++k)
    for (int c = 0; c < kChains; ++c) q[c] = _mm512_fmadd_pd(q[c], r[c], _mm512_set1_pd(kInvFact[k]));
  for (int c = 0; c < kChains; ++c) {
    const __m512i biased = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(n[c])), _mm512_set1_epi64(1023));
    y[c] = _mm512_mul_pd(q[c], _mm512_castsi512_pd(_mm512_slli_epi64(biased, 52)));  // e^r · 2^n
  }
}

__attribute__((target("avx512f"))) void pow_pass512(const float* x, const float* p, float* y) {
  const __m512i mantissa = _mm512_set1_epi32(0x007fffff), one_bits = _mm512_set1_epi32(0x3f800000);
  __m512d m[2 * kChains], e[2 * kChains], pd[2 * kChains], yd[2 * kChains];
  __mmask16 fast = 0xffff;
  for (int v = 0; v < kChains; ++v) {
    const __m512 xv = _mm512_loadu_ps(x + 16 * v), pv = _mm512_loadu_ps(p + 16 * v);
    const __mmask16 x_ok = _mm512_cmp_ps_mask(xv, _mm512_set1_ps(FLT_MIN), _CMP_GE_OQ) &
                           _mm512_cmp_ps_mask(xv, _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
    const __mmask16 p_ok = _mm512_cmp_ps_mask(_mm512_abs_ps(pv), _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
    fast &= x_ok & p_ok;
    const __m512i bits = _mm512_castps_si512(xv);
    __m512i ev = _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(127));
    __m512 mv = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(bits, mantissa), one_bits));  // [1, 2)
    const __mmask16 high = _mm512_cmp_ps_mask(mv, _mm512_set1_ps(static_cast<float>(M_SQRT2)), _CMP_GT_OQ);
    mv = _mm512_mask_mul_ps(mv, high, mv, _mm512_set1_ps(0.5f));  // [√½, √2]
    ev = _mm512_mask_sub_epi32(ev, high, ev, _mm512_set1_epi32(-1));
    const __m256 mlo = _mm512_castps512_ps256(mv), mhi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(mv), 1));
    const __m256 plo = _mm512_castps512_ps256(pv), phi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pv), 1));
    m[2 * v] = _mm512_cvtps_pd(mlo);
    m[2 * v + 1] = _mm512_cvtps_pd(mhi);
    e[2 * v] = _mm512_cvtepi32_pd(_mm512_castsi512_si256(ev));
    e[2 * v + 1] = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(ev, 1));
    pd[2 * v] = _mm512_cvtps_pd(plo);
    pd[2 * v + 1] = _mm512_cvtps_pd(phi);
  }
  pow_groups512(m, e, pd, yd);
  pow_groups512(m + kChains, e + kChains, pd + kChains, yd + kChains);
  for (int v = 0; v < kChains; ++v) {
    _mm256_storeu_ps(y + 16 * v, _mm512_cvtpd_ps(yd[2 * v]));
    _mm256_storeu_ps(y + 16 * v + 8, _mm512_cvtpd_ps(yd[2 * v + 1]));
  }
  if (fast != 0xffff) redo_special(x, p, y, kStep512);
}

// y = x ** p over n elements; a short tail runs the same pass on a padded copy.
void pow_span(const float* x, const float* p, float* y, int64_t n) {
  int64_t i = 0;
  if (plga_native::avx512f_code())
    for (; i + kStep512 <= n; i += kStep512) pow_pass512(x + i, p + i, y + i);
  for (; i + kStep <= n; i += kStep) pow_pass(x + i, p + i, y + i);
  if (i < n) {
    float xt[kStep], pt[kStep], yt[kStep];
    std::fill(xt, xt + kStep, 1.0f);
    std::fill(pt, pt + kStep, 1.0f);
    std::copy(x + i, x + n, xt);
    std::copy(p + i, p + n, pt);
    pow_pass(xt, pt, yt);
    std::copy(yt, yt + (n - i), y + i);
  }
}

at::Tensor positive_pow(const at::Tensor& x, const at::Tensor& p) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && p.scalar_type() == at::kFloat,
              "plga::positive_pow: float32 only, got ", x.scalar_type(), " and ", p.scalar_type());
  TORCH_CHECK(x.device().is_cpu() && p.device().is_cpu(), "plga::positive_pow: CPU tensors only");
  TORCH_CHECK(p.dim() <= x.dim() && x.sizes().slice(x.dim() - p.dim()) == p.sizes(),
              "plga::positive_pow: p's shape must end x's, got x ", x.sizes(), " and p ", p.sizes());
  TORCH_CHECK(kHasAvx2Fma, "plga::positive_pow: needs a CPU with AVX2 and FMA");
  const auto xc = x.contiguous(), pc = p.contiguous();
  auto y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t span = pc.numel(), total = xc.numel();
  if (total == 0) return y;
  const float* xp = xc.data_ptr<float>();
  const float* pp = pc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, total, 4096, [&](int64_t a, int64_t b) {  // ≥ 4 Ki elements (~8 µs) per task
    while (a < b) {
      const int64_t j = a % span, len = std::min(b - a, span - j);
      pow_span(xp + a, pp + j, yp + a, len);
      a += len;
    }
  });
  return y;
}

}  // namespace

// The schema is defined in Python (plga/kernels/native.py, with the shape function torch.compile needs).
TORCH_LIBRARY_IMPL(plga, CPU, m) { m.impl("positive_pow", &positive_pow); }
