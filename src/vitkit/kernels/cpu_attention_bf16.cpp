// bf16 multi-head self-attention for CPUs with AVX512_BF16, registered as torch.ops.vitkit_bf16.attention.
//
// attention(qkv, bias, heads, scale): the bf16 twin of vitkit::attention (cpu_inference.cpp), same
//   layout: qkv (B, T, 3D) bf16 with columns [q_1..q_H | k_1..k_H | v_1..v_H] before their bias,
//   bias (3D) bf16 -> out (B, T, D) bf16, heads side by side:
//       out_h = softmax(scale * (q_h + bq_h)(k_h + bk_h)^T) (v_h + bv_h)
//   Why: written as two bf16 matmuls and a softmax, attention rounds its T x T scores to bf16
//   (8 bits of mantissa) before the softmax, which visibly lowers top-1 agreement with fp32.
//   Here the scores come out of vdpbf16ps in fp32
//   and stay fp32 through the softmax; only the probabilities are rounded to bf16 for P V (as
//   torch's flash kernel does). And it is as fast as the matmuls: one head's scores stay in the
//   core's cache. As in the fp32 kernel, the key bias is left out (it adds the same q_i . bk to
//   every score of row i, which softmax cancels), the value bias is added to the output once
//   (a row of weights sums to one), and the query bias and the scale are applied as the queries
//   are read.
//
//   Scores: tiles of MR query rows x 32 keys, the keys packed in pairs of dimensions
//   (vdpbf16ps multiplies pairs), so each tile is d/2 broadcast-and-dot steps over registers.
//   P V: tiles of R rows x d columns, the values packed in pairs of keys.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <immintrin.h>
#include <torch/library.h>

#include "cpu_exp_row.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

constexpr int MR = 4;  // query rows per score tile (x 2 vectors of 16 keys: 8 accumulators)

inline __m512 load_bf16(const uint16_t* p) {  // 16 bf16 -> 16 floats
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
inline __m256i to_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

using vitkit_kernels::exp_row;

// acc_out[r][:] = sum over key pairs jp of P[r][jp] . V[jp][:] for R rows of P, d = DV x 16 columns.
template <int DV>
void pv_tile(const uint32_t* P, int64_t ldp, int64_t pairs, const uint32_t* V, float (*acc_out)[DV * 16]) {
  constexpr int R = 24 / DV;
  __m512 acc[R][DV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < DV; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t jp = 0; jp < pairs; ++jp) {
    __m512i b[DV];
    for (int c = 0; c < DV; ++c) b[c] = _mm512_loadu_si512(V + jp * DV * 16 + c * 16);
    for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_set1_epi32((int)P[r * ldp + jp]);
      for (int c = 0; c < DV; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)a, (__m512bh)b[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < DV; ++c) _mm512_storeu_ps(acc_out[r] + c * 16, acc[r][c]);
}

template <int DV>
void attend(const uint16_t* qkv, const uint16_t* bias, uint16_t* out, int64_t B, int64_t T, int64_t H, double scale) {
  constexpr int64_t d = DV * 16;
  constexpr int R = 24 / DV;
  const int64_t D = H * d, ld = 3 * D;
  const int64_t Tk = (T + 31) / 32 * 32;  // keys padded for the score tiles
  const int64_t Tq = (T + MR - 1) / MR * MR;  // query rows padded for the score tiles
  const int64_t T2 = (T + 1) / 2 * 2;  // keys padded to pairs for P V
  const int64_t Tp = (T + R - 1) / R * R;  // rows padded for the P V tiles
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint16_t> Q(Tq * d, 0), P(Tp * T2, 0);
    std::vector<uint32_t> K(d / 2 * Tk, 0), V(T2 / 2 * d, 0);
    std::vector<float> S(Tq * Tk);
    alignas(64) float tile[R][DV * 16];
    for (int64_t z = begin; z < end; ++z) {
      const int64_t b = z / H, h = z % H;
      const uint16_t* base = qkv + b * T * ld;
      const uint16_t* bq = bias + h * d;
      const uint16_t* bv = bias + 2 * D + h * d;
      // queries: (q + bq) * scale, rounded once
      const __m512 s = _mm512_set1_ps((float)scale);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t c = 0; c < d; c += 16)
          _mm256_storeu_si256((__m256i*)(Q.data() + i * d + c),
                              to_bf16(_mm512_mul_ps(_mm512_add_ps(load_bf16(base + i * ld + h * d + c), load_bf16(bq + c)), s)));
      // keys, as pairs of dimensions: K[p][j] = (k_j[2p], k_j[2p + 1])
      for (int64_t j = 0; j < T; ++j) {
        uint32_t pairs[d / 2];
        std::memcpy(pairs, base + j * ld + D + h * d, d * sizeof(uint16_t));
        for (int64_t p = 0; p < d / 2; ++p) K[p * Tk + j] = pairs[p];
      }
      // S = Q K^T in fp32
      const uint32_t* Q32 = (const uint32_t*)Q.data();
      for (int64_t i = 0; i < Tq; i += MR) {
        for (int64_t j = 0; j < Tk; j += 32) {
          __m512 acc[MR][2];
          for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
          for (int64_t p = 0; p < d / 2; ++p) {
            const __m512i k0 = _mm512_loadu_si512(K.data() + p * Tk + j), k1 = _mm512_loadu_si512(K.data() + p * Tk + j + 16);
            for (int r = 0; r < MR; ++r) {
              const __m512i a = _mm512_set1_epi32((int)Q32[(i + r) * (d / 2) + p]);
              acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)a, (__m512bh)k0);
              acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)a, (__m512bh)k1);
            }
          }
          for (int r = 0; r < MR; ++r) {
            _mm512_storeu_ps(S.data() + (i + r) * Tk + j, acc[r][0]);
            _mm512_storeu_ps(S.data() + (i + r) * Tk + j + 16, acc[r][1]);
          }
        }
      }
      // softmax in fp32, the weights rounded to bf16 (rows of T2, the odd key's partner zero)
      for (int64_t i = 0; i < T; ++i) {
        float* row = S.data() + i * Tk;
        const float inv = exp_row(row, T);
        uint16_t* prow = P.data() + i * T2;
        int64_t j = 0;
        for (; j + 16 <= T; j += 16)
          _mm256_storeu_si256((__m256i*)(prow + j), to_bf16(_mm512_mul_ps(_mm512_loadu_ps(row + j), _mm512_set1_ps(inv))));
        if (j < T) {
          const __mmask16 m = (__mmask16)((1u << (T - j)) - 1);
          _mm256_mask_storeu_epi16(prow + j, m, to_bf16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), _mm512_set1_ps(inv))));
        }
      }
      // values, as pairs of keys: V[jp][c] = (v_2jp[c], v_2jp+1[c]); the odd last key's partner is zero
      for (int64_t jp = 0; jp < T2 / 2; ++jp) {
        const uint16_t* v0 = base + 2 * jp * ld + 2 * D + h * d;
        for (int64_t c = 0; c < d; c += 16) {
          const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(v0 + c)));
          const __m512i hi = 2 * jp + 1 < T
              ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(v0 + ld + c))), 16)
              : _mm512_setzero_si512();
          _mm512_storeu_si512(V.data() + jp * d + c, _mm512_or_si512(lo, hi));
        }
      }
      // out = P V + bv
      const uint32_t* P32 = (const uint32_t*)P.data();
      for (int64_t i = 0; i < T; i += R) {
        pv_tile<DV>(P32 + i * (T2 / 2), T2 / 2, T2 / 2, V.data(), tile);
        for (int64_t r = 0; r < std::min<int64_t>(R, T - i); ++r) {
          uint16_t* o = out + (b * T + i + r) * D + h * d;
          for (int64_t c = 0; c < d; c += 16)
            _mm256_storeu_si256((__m256i*)(o + c), to_bf16(_mm512_add_ps(_mm512_loadu_ps(tile[r] + c), load_bf16(bv + c))));
        }
      }
    }
  });
}

at::Tensor attention(const at::Tensor& qkv, const at::Tensor& bias, int64_t heads, double scale) {
  TORCH_CHECK(qkv.device().is_cpu() && qkv.scalar_type() == at::kBFloat16 && qkv.dim() == 3 && qkv.is_contiguous(),
              "vitkit_bf16::attention: expected a contiguous bf16 CPU tensor (B, T, 3D), got ", qkv.sizes());
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  TORCH_CHECK(qkv.size(2) == 3 * D && heads > 0 && D % heads == 0, "vitkit_bf16::attention: ", qkv.size(2),
              " columns are not 3 x heads x head_dim for ", heads, " heads");
  TORCH_CHECK(bias.scalar_type() == at::kBFloat16 && bias.is_contiguous() && bias.numel() == 3 * D,
              "vitkit_bf16::attention: expected a contiguous bf16 bias of ", 3 * D, " values");
  auto out = at::empty({B, T, D}, qkv.options());
  const auto* q = (const uint16_t*)qkv.data_ptr<at::BFloat16>();
  const auto* bb = (const uint16_t*)bias.data_ptr<at::BFloat16>();
  auto* o = (uint16_t*)out.data_ptr<at::BFloat16>();
  switch (D / heads) {
    case 32: attend<2>(q, bb, o, B, T, heads, scale); break;
    case 48: attend<3>(q, bb, o, B, T, heads, scale); break;
    case 64: attend<4>(q, bb, o, B, T, heads, scale); break;
    case 80: attend<5>(q, bb, o, B, T, heads, scale); break;
    case 96: attend<6>(q, bb, o, B, T, heads, scale); break;
    case 128: attend<8>(q, bb, o, B, T, heads, scale); break;
    default: TORCH_CHECK(false, "vitkit_bf16::attention: head size ", D / heads, " is not one of 32, 48, 64, 80, 96, 128");
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(vitkit_bf16, m) { m.def("attention(Tensor qkv, Tensor bias, int heads, float scale) -> Tensor"); }
TORCH_LIBRARY_IMPL(vitkit_bf16, CPU, m) { m.impl("attention", &attention); }
