// Shared by cpu_inference.cpp and cpu_attention_bf16.cpp: the softmax's exponentials, in fp32.
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace vitkit_kernels {

// row <- exp(row - max(row)), returns 1 / sum(row). Exponents are floored at -87 so that the
// smallest weights are ~1e-38 rather than denormals, which would slow the next matmul;
// the output changes by less than 1e-37 of |v|.
inline float exp_row(float* row, int64_t n) {
  using Vec = at::vec::Vectorized<float>;
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

}  // namespace vitkit_kernels
