// bsb._C: CPU kernels for the Probe-JS belief read (Eq. 1-2 of the belief-shift branching paper).
//
// Tensors cross the boundary as raw addresses plus shapes (the caller, bsb/kernels/cpp.py, guarantees
// contiguous memory of the stated dtype and sizes), so this module never links against libtorch.
//
// topk_logprobs: one pass over each logit row. The row is walked in L1-sized blocks; per block the block max
// (and NaN / +inf flags) is taken first, then every element pays one exp for the online logsumexp and one
// vector compare against the running top-k threshold. Candidates above the threshold enter a bounded heap
// (ties keep the lower token id, as the reference's stable sort does). logp = x - (m + log s).
// floored_js: Eq. 2 floor on the union of two top-k supports, then Eq. 1, accumulated in double.

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define BSB_X86 1
#endif

namespace py = pybind11;

namespace {

constexpr int kBlock = 2048;  // 8 KiB of fp32: stays in L1 between the max pass and the exp pass
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum DType : int { F32 = 0, BF16 = 1, F16 = 2 };

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Entry {
  float v;
  int64_t i;
};

// "a ranks before b": larger value first, ties to the lower id. With this as the heap's "less", the heap
// root is the worst kept entry (the running threshold).
inline bool better(const Entry& a, const Entry& b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

struct TopK {
  std::vector<Entry> h;
  int k;
  explicit TopK(int k_) : k(k_) { h.reserve(k_); }
  bool full() const { return int(h.size()) == k; }
  float threshold() const { return h.front().v; }
  // Indices arrive in increasing order, so an entry equal to the root has a higher id and ranks after it.
  inline void push(float v, int64_t i) {
    if (!full()) {
      h.push_back({v, i});
      std::push_heap(h.begin(), h.end(), better);
    } else if (v > h.front().v) {
      std::pop_heap(h.begin(), h.end(), better);
      h.back() = {v, i};
      std::push_heap(h.begin(), h.end(), better);
    }
  }
};

struct RowStats {
  float m = kNegInf;  // running max
  double s = 0.0;     // sum of exp(x - m)
  bool nan = false;
};

// Scalar block step (the portable path and the reference for the vector path).
inline void block_scalar(const float* x, int len, int64_t base, RowStats& st, TopK& top) {
  float bm = kNegInf;
  for (int j = 0; j < len; ++j) {
    if (x[j] != x[j]) st.nan = true;
    else bm = std::max(bm, x[j]);
  }
  if (bm > st.m) {
    st.s = st.m == kNegInf ? 0.0 : st.s * std::exp(double(st.m) - double(bm));
    st.m = bm;
  }
  const bool live = st.m != kNegInf && st.m != std::numeric_limits<float>::infinity();
  for (int j = 0; j < len; ++j) {
    if (live) st.s += std::exp(x[j] - st.m);
    top.push(x[j], base + j);
  }
}

#ifdef BSB_X86
// Cephes-style exp on 8 lanes (relative error ~1e-7); inputs below -88.37 (and -inf) give exactly 0.
__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-88.3762626647949f), hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, z, x), _mm256_set1_ps(1.0f));
  __m256i n = _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127));
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
  return _mm256_andnot_ps(under, y);
}

__attribute__((target("avx2,fma"))) inline float hmax256(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

__attribute__((target("avx2,fma"))) void block_avx2(const float* x, int len, int64_t base, RowStats& st, TopK& top) {
  const int vlen = len & ~7;
  __m256 vmax = _mm256_set1_ps(kNegInf), vnan = _mm256_setzero_ps();
  for (int j = 0; j < vlen; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    vmax = _mm256_max_ps(v, vmax);  // a NaN lane keeps the old max; it is flagged below
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  float bm = hmax256(vmax);
  if (_mm256_movemask_ps(vnan)) st.nan = true;
  for (int j = vlen; j < len; ++j) {
    if (x[j] != x[j]) st.nan = true;
    else bm = std::max(bm, x[j]);
  }
  if (bm > st.m) {
    st.s = st.m == kNegInf ? 0.0 : st.s * std::exp(double(st.m) - double(bm));
    st.m = bm;
  }
  const bool live = st.m != kNegInf && st.m != std::numeric_limits<float>::infinity();
  const __m256 vm = _mm256_set1_ps(st.m);
  __m256 vs = _mm256_setzero_ps();
  int j = 0;
  for (; j < vlen; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    if (live) vs = _mm256_add_ps(vs, exp256(_mm256_sub_ps(v, vm)));
    if (!top.full()) {
      for (int u = 0; u < 8; ++u) top.push(x[j + u], base + j + u);
      continue;
    }
    int mask = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(top.threshold()), _CMP_GT_OQ));
    while (mask) {
      const int u = __builtin_ctz(mask);
      mask &= mask - 1;
      top.push(x[j + u], base + j + u);  // re-checks against the (possibly raised) threshold
    }
  }
  if (live) st.s += hsum256(vs);
  for (; j < len; ++j) {
    if (live) st.s += std::exp(x[j] - st.m);
    top.push(x[j], base + j);
  }
}

__attribute__((target("avx2,f16c"))) void widen_avx2(const uint16_t* src, int len, int dtype, float* dst) {
  int j = 0;
  for (; j + 8 <= len; j += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
    __m256 f = dtype == BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
    _mm256_storeu_ps(dst + j, f);
  }
  for (; j < len; ++j) dst[j] = dtype == BF16 ? bf16_to_f32(src[j]) : f16_to_f32(src[j]);
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
const bool kHasAvx2 = false;
#endif

void widen_scalar(const uint16_t* src, int len, int dtype, float* dst) {
  for (int j = 0; j < len; ++j) dst[j] = dtype == BF16 ? bf16_to_f32(src[j]) : f16_to_f32(src[j]);
}

// One row: top-k log-probs (sorted, ties to the lower id), the row max and a NaN flag.
void topk_row(const void* row, int dtype, int64_t V, int k, float* out_lp, int64_t* out_idx, float* out_max,
              uint8_t* out_nan) {
  RowStats st;
  TopK top(k);
  alignas(32) float buf[kBlock];
  for (int64_t b = 0; b < V; b += kBlock) {
    const int len = int(std::min<int64_t>(kBlock, V - b));
    const float* x;
    if (dtype == F32) {
      x = static_cast<const float*>(row) + b;
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(row) + b;
#ifdef BSB_X86
      if (kHasAvx2) widen_avx2(src, len, dtype, buf);
      else
#endif
        widen_scalar(src, len, dtype, buf);
      x = buf;
    }
#ifdef BSB_X86
    if (kHasAvx2) { block_avx2(x, len, b, st, top); continue; }
#endif
    block_scalar(x, len, b, st, top);
  }
  std::sort_heap(top.h.begin(), top.h.end(), better);  // best first
  const float lse = float(double(st.m) + std::log(st.s));
  for (int j = 0; j < k; ++j) {
    out_lp[j] = top.h[j].v - lse;  // -inf stays -inf (a masked token)
    out_idx[j] = top.h[j].i;
  }
  *out_max = st.m;
  *out_nan = st.nan;
}

void topk_rows(const void* base, int dtype, int64_t rows, int64_t V, int k, float* lp, int64_t* idx, float* rmax,
               uint8_t* rnan) {
  const size_t esize = dtype == F32 ? 4 : 2;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < rows; ++r) {
    topk_row(static_cast<const char*>(base) + size_t(r) * size_t(V) * esize, dtype, V, k, lp + r * k, idx + r * k,
             rmax + r, rnan + r);
  }
}

// Eq. 2 then Eq. 1 for one pair of top-k rows; -inf entries are outside the support.
double floored_js_pair(const float* la, const int64_t* ia, int ka, const float* lb, const int64_t* ib, int kb) {
  double ma = -INFINITY, mb = -INFINITY;
  for (int j = 0; j < ka; ++j) ma = std::max(ma, double(la[j]));
  for (int j = 0; j < kb; ++j) mb = std::max(mb, double(lb[j]));
  // Only ratios within a side matter (renormalisation), so exp(l - max) avoids underflow of tiny supports.
  double pa[64], pb[64], fa = INFINITY, fb = INFINITY;
  for (int j = 0; j < ka; ++j) {
    pa[j] = la[j] == kNegInf ? 0.0 : std::exp(double(la[j]) - ma);
    if (la[j] != kNegInf) fa = std::min(fa, pa[j]);
  }
  for (int j = 0; j < kb; ++j) {
    pb[j] = lb[j] == kNegInf ? 0.0 : std::exp(double(lb[j]) - mb);
    if (lb[j] != kNegInf) fb = std::min(fb, pb[j]);
  }
  fa *= 0.5;
  fb *= 0.5;
  double qa[128], qb[128];
  bool b_matched[64] = {false};
  int n = 0;
  for (int j = 0; j < ka; ++j) {
    if (la[j] == kNegInf) continue;
    double other = fb;
    for (int u = 0; u < kb; ++u) {
      if (ib[u] == ia[j] && lb[u] != kNegInf) { other = pb[u]; b_matched[u] = true; break; }
    }
    qa[n] = pa[j];
    qb[n++] = other;
  }
  for (int u = 0; u < kb; ++u) {
    if (lb[u] == kNegInf || b_matched[u]) continue;
    qa[n] = fa;
    qb[n++] = pb[u];
  }
  double za = 0, zb = 0;
  for (int j = 0; j < n; ++j) { za += qa[j]; zb += qb[j]; }
  double js = 0;
  for (int j = 0; j < n; ++j) {
    const double p = qa[j] / za, q = qb[j] / zb, m = 0.5 * (p + q);
    if (p > 0) js += 0.5 * p * std::log(p / m);
    if (q > 0) js += 0.5 * q * std::log(q / m);
  }
  return std::min(std::max(js, 0.0), std::log(2.0));
}

template <typename T>
T* ptr(uintptr_t a) { return reinterpret_cast<T*>(a); }

void py_topk(uintptr_t logits, int dtype, int64_t rows, int64_t V, int k, uintptr_t lp, uintptr_t idx,
             uintptr_t rmax, uintptr_t rnan) {
  py::gil_scoped_release nogil;
  topk_rows(ptr<const void>(logits), dtype, rows, V, k, ptr<float>(lp), ptr<int64_t>(idx), ptr<float>(rmax),
            ptr<uint8_t>(rnan));
}

void py_floored_js(uintptr_t la, uintptr_t ia, int ka, uintptr_t lb, uintptr_t ib, int kb, int64_t rows,
                   uintptr_t out) {
  py::gil_scoped_release nogil;
  const float *a = ptr<const float>(la), *b = ptr<const float>(lb);
  const int64_t *xa = ptr<const int64_t>(ia), *xb = ptr<const int64_t>(ib);
  float* o = ptr<float>(out);
#pragma omp parallel for schedule(static) if (rows > 256)
  for (int64_t r = 0; r < rows; ++r) o[r] = float(floored_js_pair(a + r * ka, xa + r * ka, ka, b + r * kb, xb + r * kb, kb));
}

// Probe-JS over N boundary reads of L positions each: top-k of every (row, position), then the floored JS
// between row i and i+1 wherever pair[i] (same chain), averaged over L; NaN elsewhere.
void py_probe_js(uintptr_t logits, int dtype, int64_t N, int64_t L, int64_t V, int k, uintptr_t pair, uintptr_t out,
                 uintptr_t rmax, uintptr_t rnan) {
  py::gil_scoped_release nogil;
  std::vector<float> lp(size_t(N * L * k));
  std::vector<int64_t> idx(size_t(N * L * k));
  topk_rows(ptr<const void>(logits), dtype, N * L, V, k, lp.data(), idx.data(), ptr<float>(rmax), ptr<uint8_t>(rnan));
  const uint8_t* same = ptr<const uint8_t>(pair);
  float* o = ptr<float>(out);
  for (int64_t i = 0; i < N; ++i) {
    if (i + 1 == N || !same[i]) { o[i] = std::numeric_limits<float>::quiet_NaN(); continue; }
    double acc = 0;
    for (int64_t l = 0; l < L; ++l) {
      const size_t a = size_t((i * L + l) * k), b = size_t(((i + 1) * L + l) * k);
      acc += floored_js_pair(lp.data() + a, idx.data() + a, k, lp.data() + b, idx.data() + b, k);
    }
    o[i] = float(acc / double(L));
  }
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "bsb CPU kernels (raw pointers; use bsb.kernels, not this module)";
  m.def("topk_logprobs", &py_topk, "rows of logits -> top-k logprobs, ids, row max, NaN flag");
  m.def("floored_js", &py_floored_js, "floored JS (Eq. 1-2) between paired top-k rows");
  m.def("probe_js", &py_probe_js, "Probe-JS scores of consecutive boundary reads");
  m.attr("has_avx2") = kHasAvx2;
  m.attr("max_k") = 64;
#ifdef _OPENMP
  m.attr("openmp") = true;
#else
  m.attr("openmp") = false;
#endif
}
