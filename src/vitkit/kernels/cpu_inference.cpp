// Two fp32 CPU inference kernels for the transformer block, registered as torch.ops.vitkit.*.
//
// attention(qkv, bias, heads, scale): multi-head self-attention straight from the fused Q/K/V
//   projection before its bias, qkv (B, T, 3D) with columns [q_1..q_H | k_1..k_H | v_1..v_H] and
//   bias (3D) -> out (B, T, D), heads side by side:
//       out_h = softmax(scale * (q_h + bq_h)(k_h + bk_h)^T) (v_h + bv_h)
//   Why not torch's flash kernel: at ViT lengths (T = 197 at 224 px) it splits the queries into
//   blocks of 64 and pays a fixed cost per block; here one head's T x T scores (155 KB) stay in
//   the core's cache, so a head is two BLAS calls and one softmax pass. K and V are read in place
//   (leading dimension 3D) and each head's output is written into its columns of `out`, so no
//   transpose or copy surrounds the kernel. The bias needs no pass of its own either: the key bias
//   adds q_i . bk_h to every score of row i, which softmax cancels; the weights of a row sum to
//   one, so the value bias is added to the output once; only the query bias is added, to a copy
//   of one head's queries (T x hd) in cache. Heads run in parallel on torch's intra-op threads.
//
// bias_gelu_(h, bias, approximate): h <- GELU(h + bias), exact (erf) or tanh form, row by row.
//   Writing GELU(x) = max(x, 0) - |x| Q(|x|), with Q(a) = Phi(-a) the Gaussian tail (or its tanh
//   counterpart), Q is a degree-5 polynomial on each of 16 pieces of [0, 6), interpolated at
//   Chebyshev nodes when the library loads; beyond 6, |x| Q(|x|) < 6e-9. With AVX-512 a vector
//   then costs 6 table permutes and 5 FMAs instead of an erf's division and exponential
//   (error < 3e-7 absolute, against torch's 1.2e-6 for float32).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include "cpu_exp_row.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

// Fortran BLAS, column-major; libtorch_cpu exports MKL's.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

namespace {

using Vec = at::vec::Vectorized<float>;

// ---- attention ---------------------------------------------------------------------------------

using vitkit_kernels::exp_row;

at::Tensor attention(const at::Tensor& qkv, const at::Tensor& bias, int64_t heads, double scale) {
  TORCH_CHECK(qkv.device().is_cpu() && qkv.scalar_type() == at::kFloat && qkv.dim() == 3 && qkv.is_contiguous(),
              "vitkit::attention: expected a contiguous float32 CPU tensor (B, T, 3D), got ", qkv.sizes());
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  TORCH_CHECK(qkv.size(2) == 3 * D && heads > 0 && D % heads == 0, "vitkit::attention: ", qkv.size(2),
              " columns are not 3 x heads x head_dim for ", heads, " heads");
  TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.numel() == 3 * D,
              "vitkit::attention: expected a contiguous float32 bias of ", 3 * D, " values, got ", bias.sizes());
  const int64_t hd = D / heads;
  auto out = at::empty({B, T, D}, qkv.options());
  const float* src = qkv.data_ptr<float>();
  const float* b_all = bias.data_ptr<float>();
  float* dst = out.data_ptr<float>();

  at::parallel_for(0, B * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(T * T), inv_sum(T), q(T * hd);  // scores row-major: scores[i * T + j]
    const int t = T, d = hd, ld_qkv = 3 * D, ld_out = D;
    const float alpha = scale, zero = 0.f, one = 1.f;
    for (int64_t z = begin; z < end; ++z) {
      const int64_t b = z / heads, h = z % heads;
      const float* q_in = src + b * T * 3 * D + h * hd;
      const float* k = q_in + D;
      const float* v = q_in + 2 * D;
      const float* bq = b_all + h * hd;
      const float* bv = b_all + 2 * D + h * hd;
      float* o = dst + b * T * D + h * hd;
      for (int64_t i = 0; i < T; ++i) at::vec::map2([](Vec x, Vec c) { return x + c; }, q.data() + i * hd, q_in + i * 3 * D, bq, hd);
      // scores = scale * Q K^T  (column-major view: scores^T = K Q^T)
      sgemm_("T", "N", &t, &t, &d, &alpha, k, &ld_qkv, q.data(), &d, &zero, scores.data(), &t);
      for (int64_t i = 0; i < T; ++i) inv_sum[i] = exp_row(scores.data() + i * T, T);
      // O = exp(scores) V  (column-major view: O^T = V^T exp(scores)^T), then each row / its sum + bv
      sgemm_("N", "N", &d, &t, &t, &one, v, &ld_qkv, scores.data(), &t, &zero, o, &ld_out);
      for (int64_t i = 0; i < T; ++i) {
        float* row = o + i * D;
        at::vec::map2([c = inv_sum[i]](Vec x, Vec y) { return x * Vec(c) + y; }, row, row, bv, hd);
      }
    }
  });
  return out;
}

// ---- bias + GELU -------------------------------------------------------------------------------

constexpr int kPieces = 16, kDegree = 5;
constexpr double kRange = 6.0;

// The Gaussian tail Q(a) = Phi(-a) = erfc(a / sqrt 2) / 2, or the tanh form's 1 - sigmoid-like counterpart.
double tail(double a, bool approximate) {
  if (!approximate) return 0.5 * std::erfc(a / std::sqrt(2.0));
  return 0.5 * (1.0 - std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
}

// coef[d][i]: the coefficient of t^d on piece i, where a = (i + t) * kRange / kPieces, t in [0, 1].
struct Table {
  alignas(64) float coef[kDegree + 1][kPieces];
};

Table fit(bool approximate) {
  Table table{};
  for (int i = 0; i < kPieces; ++i) {
    double m[kDegree + 1][kDegree + 2];  // Vandermonde rows at the Chebyshev nodes | values
    for (int r = 0; r <= kDegree; ++r) {
      const double t = 0.5 - 0.5 * std::cos(M_PI * (2 * r + 1) / (2 * (kDegree + 1)));
      double p = 1.0;
      for (int c = 0; c <= kDegree; ++c, p *= t) m[r][c] = p;
      m[r][kDegree + 1] = tail((i + t) * kRange / kPieces, approximate);
    }
    for (int c = 0; c <= kDegree; ++c) {  // Gauss-Jordan with partial pivoting
      int pivot = c;
      for (int r = c + 1; r <= kDegree; ++r)
        if (std::abs(m[r][c]) > std::abs(m[pivot][c])) pivot = r;
      std::swap(m[c], m[pivot]);
      for (int r = 0; r <= kDegree; ++r) {
        if (r == c) continue;
        const double f = m[r][c] / m[c][c];
        for (int k = c; k <= kDegree + 1; ++k) m[r][k] -= f * m[c][k];
      }
    }
    for (int c = 0; c <= kDegree; ++c) table.coef[c][i] = static_cast<float>(m[c][kDegree + 1] / m[c][c]);
  }
  return table;
}

#if defined(CPU_CAPABILITY_AVX512)
const Table kErf = fit(false), kTanh = fit(true);

__m512 gelu16(__m512 x, const Table& table) {
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(x), _mm512_set1_ps(kRange));
  const __m512 u = _mm512_mul_ps(a, _mm512_set1_ps(kPieces / kRange));
  const __m512 piece = _mm512_min_ps(_mm512_roundscale_ps(u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
                                     _mm512_set1_ps(kPieces - 1));
  const __m512 t = _mm512_sub_ps(u, piece);
  const __m512i index = _mm512_cvttps_epi32(piece);
  __m512 q = _mm512_permutexvar_ps(index, _mm512_load_ps(table.coef[kDegree]));
  for (int d = kDegree - 1; d >= 0; --d) q = _mm512_fmadd_ps(q, t, _mm512_permutexvar_ps(index, _mm512_load_ps(table.coef[d])));
  // max(0, x) keeps a NaN x (the second operand wins); a is clamped, so |x| = inf gives x, not NaN
  return _mm512_fnmadd_ps(a, q, _mm512_max_ps(_mm512_setzero_ps(), x));
}

void bias_gelu_row(const float* h, const float* bias, float* out, int64_t n, bool approximate) {
  const Table& table = approximate ? kTanh : kErf;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(out + j, gelu16(_mm512_add_ps(_mm512_loadu_ps(h + j), _mm512_loadu_ps(bias + j)), table));
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(out + j, m, gelu16(_mm512_add_ps(_mm512_maskz_loadu_ps(m, h + j), _mm512_maskz_loadu_ps(m, bias + j)), table));
  }
}
#else  // no table permutes of 16 lanes: the closed forms, as torch computes them
void bias_gelu_row(const float* h, const float* bias, float* out, int64_t n, bool approximate) {
  if (approximate) {
    const float k = std::sqrt(2.0 / M_PI);
    at::vec::map2([k](Vec x, Vec b) {
      const Vec y = x + b;
      const Vec g = Vec(0.5f) * y * (Vec(1.f) + (Vec(k) * (y + Vec(0.044715f) * y * y * y)).tanh());
      return Vec::blendv(g, Vec(0.f), y < Vec(-20.f));  // far left GELU is 0: -inf * 0 would be NaN
    }, out, h, bias, n);
  } else {
    at::vec::map2([](Vec x, Vec b) {
      const Vec y = x + b;
      const Vec g = Vec(0.5f) * y * (Vec(1.f) + (y * Vec(static_cast<float>(M_SQRT1_2))).erf());
      return Vec::blendv(g, Vec(0.f), y < Vec(-20.f));  // far left GELU is 0: -inf * 0 would be NaN
    }, out, h, bias, n);
  }
}
#endif

void bias_gelu_(const at::Tensor& h, const at::Tensor& bias, bool approximate) {
  TORCH_CHECK(h.device().is_cpu() && h.scalar_type() == at::kFloat && h.dim() >= 1 && h.is_contiguous(),
              "vitkit::bias_gelu_: expected a contiguous float32 CPU tensor, got ", h.sizes());
  const int64_t n = h.size(-1);
  TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.dim() == 1 && bias.numel() == n,
              "vitkit::bias_gelu_: expected a contiguous float32 bias of ", n, " values, got ", bias.sizes());
  float* data = h.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  const int64_t rows = n == 0 ? 0 : h.numel() / n;
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) bias_gelu_row(data + i * n, b, data + i * n, n, approximate);
  });
}

}  // namespace

TORCH_LIBRARY(vitkit, m) {
  m.def("attention(Tensor qkv, Tensor bias, int heads, float scale) -> Tensor");
  m.def("bias_gelu_(Tensor(a!) h, Tensor bias, bool approximate) -> ()");
}
TORCH_LIBRARY_IMPL(vitkit, CPU, m) {
  m.impl("attention", &attention);
  m.impl("bias_gelu_", &bias_gelu_);
}
