// Multi-head self-attention for fp32 inference on CPU, straight from the fused Q/K/V projection.
//
//   qkv (B, T, 3D), rows [q_1..q_H | k_1..k_H | v_1..v_H]  ->  out (B, T, D), heads side by side
//   out_h = softmax(scale * q_h k_h^T) v_h                  for every sample and head h
//
// Why not torch's flash kernel: at ViT lengths (T = 197 at 224 px) it splits the queries into
// blocks of 64 and pays a fixed cost per block; here one head's T x T scores (155 KB) stay in
// the core's cache, so a head is two BLAS calls and one softmax pass. Q, K and V are read in
// place (leading dimension 3D) and each head's output is written into its columns of `out`, so
// no transpose or copy surrounds the kernel. Heads run in parallel on torch's intra-op threads.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

// Fortran BLAS, column-major; libtorch_cpu exports MKL's.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

namespace {

using Vec = at::vec::Vectorized<float>;

// row <- exp(row - max(row)), returns 1 / sum(row). Exponents are floored at -87 so that the
// smallest weights are ~1e-38 rather than denormals, which would slow the next matmul ~2x;
// the output changes by less than 1e-37 of |v|.
float exp_row(float* row, int64_t n) {
  const int64_t full = n - n % Vec::size();
  Vec vmax(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < full; j += Vec::size()) vmax = at::vec::maximum(vmax, Vec::loadu(row + j));
  float mx = at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, vmax);
  for (int64_t j = full; j < n; ++j) mx = std::max(mx, row[j]);

  const Vec shift(mx), floor(-87.f);
  Vec vsum(0.f);
  for (int64_t j = 0; j < full; j += Vec::size()) {
    Vec e = at::vec::maximum(Vec::loadu(row + j) - shift, floor).exp_u20();
    e.store(row + j);
    vsum = vsum + e;
  }
  float sum = at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, vsum);
  for (int64_t j = full; j < n; ++j) {
    row[j] = std::exp(std::max(row[j] - mx, -87.f));
    sum += row[j];
  }
  return 1.f / sum;
}

at::Tensor attention(const at::Tensor& qkv, int64_t heads, double scale) {
  TORCH_CHECK(qkv.device().is_cpu() && qkv.scalar_type() == at::kFloat && qkv.dim() == 3 && qkv.is_contiguous(),
              "vitkit::attention: expected a contiguous float32 CPU tensor (B, T, 3D), got ", qkv.sizes());
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  TORCH_CHECK(qkv.size(2) == 3 * D && heads > 0 && D % heads == 0, "vitkit::attention: ", qkv.size(2),
              " columns are not 3 x heads x head_dim for ", heads, " heads");
  const int64_t hd = D / heads;
  auto out = at::empty({B, T, D}, qkv.options());
  const float* src = qkv.data_ptr<float>();
  float* dst = out.data_ptr<float>();

  at::parallel_for(0, B * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(T * T), inv_sum(T);  // one head's T x T, row-major: scores[i * T + j]
    const int t = T, d = hd, ld_qkv = 3 * D, ld_out = D;
    const float alpha = scale, zero = 0.f, one = 1.f;
    for (int64_t z = begin; z < end; ++z) {
      const int64_t b = z / heads, h = z % heads;
      const float* q = src + b * T * 3 * D + h * hd;
      const float* k = q + D;
      const float* v = q + 2 * D;
      float* o = dst + b * T * D + h * hd;
      // scores = scale * Q K^T  (column-major view: scores^T = K Q^T)
      sgemm_("T", "N", &t, &t, &d, &alpha, k, &ld_qkv, q, &ld_qkv, &zero, scores.data(), &t);
      for (int64_t i = 0; i < T; ++i) inv_sum[i] = exp_row(scores.data() + i * T, T);
      // O = exp(scores) V  (column-major view: O^T = V^T exp(scores)^T), then each row / its sum
      sgemm_("N", "N", &d, &t, &t, &one, v, &ld_qkv, scores.data(), &t, &zero, o, &ld_out);
      for (int64_t i = 0; i < T; ++i) {
        float* row = o + i * D;
        at::vec::map([c = inv_sum[i]](Vec x) { return x * Vec(c); }, row, row, hd);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(vitkit, m) { m.def("attention(Tensor qkv, int heads, float scale) -> Tensor"); }
TORCH_LIBRARY_IMPL(vitkit, CPU, m) { m.impl("attention", &attention); }
