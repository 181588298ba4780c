// bsb._C: CPU kernels for the Probe-JS belief read (Eq. 1-2 of the belief-shift branching paper).
//
// Tensors cross the boundary as raw addresses plus shapes (the caller, bsb/kernels/cpu_probe.py, guarantees
// contiguous memory of the stated dtype and sizes), so this module never links against libtorch.
//
// The SIMD row loops live in row_simd.h, instantiated for AVX2 and AVX-512 (chosen at load time).
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
#include <cstdlib>
#include <limits>
#include <string>
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

// "a ranks before b": larger value first, ties to the lower id (the reference's stable-sort order). A functor,
// so that nth_element / partial_sort inline it.
struct Better {
  bool operator()(const Entry& a, const Entry& b) const { return a.v > b.v || (a.v == b.v && a.i < b.i); }
};
constexpr Better better{};

// The k best (value, id) pairs of a row seen so far. Elements above the running threshold are appended to a
// candidate buffer of k + extra entries; when it fills, nth_element keeps the best k and the threshold
// becomes the k-th value. Amortised O(1) per candidate, also for adversarial (sorted) rows. Ids arrive in
// increasing order, so a later element equal to the threshold ranks after the k kept ones and is rejected.
struct TopK {
  std::vector<Entry> cand;
  int k;
  size_t cap;
  float thr = kNegInf;
  bool accept_all = true;  // until k entries are known, even -inf (masked) tokens are kept

  explicit TopK(int k_) : k(k_), cap(size_t(k_) + std::max(64, 4 * k_)) { cand.reserve(cap); }
  bool full() const { return !accept_all; }
  float threshold() const { return thr; }
  inline void push(float v, int64_t i) {
    if (!accept_all && !(v > thr)) return;
    cand.push_back({v, i});
    // The first flush comes at k entries, so that a threshold is in force from the k-th element on.
    if (cand.size() == cap || (accept_all && cand.size() == size_t(k))) flush();
  }
  void flush() {
    std::nth_element(cand.begin(), cand.begin() + (k - 1), cand.end(), better);
    cand.resize(size_t(k));
    thr = cand[size_t(k - 1)].v;  // every kept entry ranks at or before this one
    accept_all = false;
  }
  // The k best, best first.
  void finish() {
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), better);
    cand.resize(size_t(k));
  }
};

struct RowStats {
  float m = kNegInf;  // running max
  double s = 0.0;     // Σ exp(x - m)
  double sx = 0.0;    // Σ exp(x - m)·x over unmasked tokens (entropy = lse − sx / s)
  bool nan = false;

  void raise_max(float bm) {
    if (bm > m) {
      const double scale = m == kNegInf ? 0.0 : std::exp(double(m) - double(bm));
      s *= scale;
      sx *= scale;
      m = bm;
    }
  }
  bool live() const { return m != kNegInf && m != std::numeric_limits<float>::infinity(); }
  // One element after the block max was folded in (vector tails and the scalar path).
  inline void tail(float x, int64_t i, TopK* top, bool want_sx) {
    if (live() && x != kNegInf) {
      const double e = std::exp(double(x) - double(m));
      s += e;
      if (want_sx) sx += e * double(x);
    }
    if (top) top->push(x, i);
  }
  double lse() const { return double(m) + std::log(s); }
};

// The portable path (and the specification of the SIMD block in row_simd.h).
void block_scalar(const float* x, int len, int64_t base, RowStats& st, TopK* top, bool want_sx) {
  float bm = kNegInf;
  for (int j = 0; j < len; ++j) {
    if (x[j] != x[j]) st.nan = true;
    else bm = std::max(bm, x[j]);
  }
  st.raise_max(bm);
  for (int j = 0; j < len; ++j) st.tail(x[j], base + j, top, want_sx);
}

void top2_scalar(const float* x, int64_t n, float& first, float& second, bool& nan) {
  float f = kNegInf, s = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    const float v = x[j];
    if (v != v) { nan = true; continue; }
    if (v > f) { s = f; f = v; }
    else if (v > s) s = v;
  }
  first = f;
  second = s;
}

void widen_scalar(const uint16_t* src, int len, int dtype, float* dst) {
  for (int j = 0; j < len; ++j) dst[j] = dtype == BF16 ? bf16_to_f32(src[j]) : f16_to_f32(src[j]);
}

}  // namespace

#ifdef BSB_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace isa_avx2 {
#include "simd_avx2.h"
#include "row_simd.h"
}  // namespace isa_avx2
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma,f16c")
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive inside avx512fintrin.h
namespace isa_avx512 {
#include "simd_avx512.h"
#include "row_simd.h"
}  // namespace isa_avx512
#pragma GCC pop_options
#endif

namespace {

using BlockFn = void (*)(const float*, int, int64_t, RowStats&, TopK*, bool);
using Top2Fn = void (*)(const float*, int64_t, float&, float&, bool&);
using WidenFn = void (*)(const uint16_t*, int, int, float*);

// The instruction set is chosen once, when the module loads: the best the CPU has, capped by BSB_CPU_ISA
// (scalar | avx2 | avx512). set_isa() changes it for tests that cover every path on one machine.
struct Isa {
  const char* name = "scalar";
  BlockFn block = block_scalar;
  Top2Fn top2 = top2_scalar;
  WidenFn widen = widen_scalar;
};

bool cpu_has(const std::string& name) {
  if (name == "scalar") return true;
#ifdef BSB_X86
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (name == "avx2") return avx2;
  if (name == "avx512") return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#endif
  return false;
}

Isa make_isa(const std::string& name) {
  Isa isa;
#ifdef BSB_X86
  if (name == "avx2" || name == "avx512") isa = {"avx2", isa_avx2::block, isa_avx2::top2, isa_avx2::widen};
  if (name == "avx512") isa = {"avx512", isa_avx512::block, isa_avx512::top2, isa_avx2::widen};
#endif
  return isa;
}

Isa best_isa() {
  const char* order[] = {"avx512", "avx2", "scalar"};
  const char* cap = std::getenv("BSB_CPU_ISA");
  int start = 0;
  while (cap && start < 2 && std::string(cap) != order[start]) ++start;  // an unknown cap means no cap
  if (cap && std::string(cap) != order[start]) start = 0;
  for (int j = start; j < 3; ++j)
    if (cpu_has(order[j])) return make_isa(order[j]);
  return Isa{};
}
Isa kIsa = best_isa();

bool set_isa(const std::string& name) {
  if (!cpu_has(name)) return false;
  kIsa = make_isa(name);
  return true;
}

// Walks one row in L1-sized blocks (widening bf16 / fp16 into a buffer first).
void walk_row(const void* row, int dtype, int64_t V, RowStats& st, TopK* top, bool want_sx) {
  alignas(64) float buf[kBlock];
  for (int64_t b = 0; b < V; b += kBlock) {
    const int len = int(std::min<int64_t>(kBlock, V - b));
    const float* x = static_cast<const float*>(row) + b;
    if (dtype != F32) {
      kIsa.widen(static_cast<const uint16_t*>(row) + b, len, dtype, buf);
      x = buf;
    }
    kIsa.block(x, len, b, st, top, want_sx);
  }
}

inline const void* row_ptr(const void* base, int dtype, int64_t r, int64_t V) {
  return static_cast<const char*>(base) + size_t(r) * size_t(V) * (dtype == F32 ? 4 : 2);
}

// One row: top-k log-probs (sorted, ties to the lower id), the row max and a NaN flag.
void topk_row(const void* row, int dtype, int64_t V, int k, float* out_lp, int64_t* out_idx, float* out_max,
              uint8_t* out_nan) {
  RowStats st;
  TopK top(k);
  walk_row(row, dtype, V, st, &top, false);
  top.finish();
  const float lse = float(st.lse());
  for (int j = 0; j < k; ++j) {
    out_lp[j] = top.cand[j].v - lse;  // -inf stays -inf (a masked token)
    out_idx[j] = top.cand[j].i;
  }
  *out_max = st.m;
  *out_nan = st.nan;
}

void topk_rows(const void* base, int dtype, int64_t rows, int64_t V, int k, float* lp, int64_t* idx, float* rmax,
               uint8_t* rnan) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < rows; ++r) topk_row(row_ptr(base, dtype, r, V), dtype, V, k, lp + r * k, idx + r * k, rmax + r, rnan + r);
}

// Row status codes (bsb/kernels/checks.py): the first that applies over all rows, in the reference's order.
enum Status : int { OK = 0, HAS_NAN = 1, HAS_POSINF = 2, ALL_MASKED = 3, CHAINS_NOT_CONTIGUOUS = 4 };

// Each row's max and NaN flag, filled during a kernel's own pass, turned into one status code (no extra read).
struct RowChecks {
  std::vector<float> max;
  std::vector<uint8_t> nan;
  explicit RowChecks(size_t rows) : max(rows), nan(rows) {}
  int status() const {
    for (size_t r = 0; r < max.size(); ++r)
      if (nan[r] || max[r] != max[r]) return HAS_NAN;
    for (float m : max)
      if (m == std::numeric_limits<float>::infinity()) return HAS_POSINF;
    for (float m : max)
      if (m == kNegInf) return ALL_MASKED;
    return OK;
  }
};

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

int py_topk(uintptr_t logits, int dtype, int64_t rows, int64_t V, int k, uintptr_t lp, uintptr_t idx) {
  py::gil_scoped_release nogil;
  RowChecks chk(static_cast<size_t>(rows));
  topk_rows(ptr<const void>(logits), dtype, rows, V, k, ptr<float>(lp), ptr<int64_t>(idx), chk.max.data(), chk.nan.data());
  return chk.status();
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
// between row i and i+1 wherever both belong to the same chain, averaged over L; NaN elsewhere.
int py_probe_js(uintptr_t logits, int dtype, int64_t N, int64_t L, int64_t V, int k, uintptr_t chains, uintptr_t out) {
  py::gil_scoped_release nogil;
  const int64_t* chain = ptr<const int64_t>(chains);
  std::vector<int64_t> runs;  // each chain must be one contiguous run
  for (int64_t i = 0; i < N; ++i)
    if (i == 0 || chain[i] != chain[i - 1]) runs.push_back(chain[i]);
  std::sort(runs.begin(), runs.end());
  if (std::adjacent_find(runs.begin(), runs.end()) != runs.end()) return CHAINS_NOT_CONTIGUOUS;
  const size_t rows = size_t(N * L);
  std::vector<float> lp(rows * size_t(k));
  std::vector<int64_t> idx(rows * size_t(k));
  RowChecks chk(rows);
  topk_rows(ptr<const void>(logits), dtype, N * L, V, k, lp.data(), idx.data(), chk.max.data(), chk.nan.data());
  if (const int status = chk.status()) return status;
  float* o = ptr<float>(out);
#pragma omp parallel for schedule(static) if (N * L > 64)
  for (int64_t i = 0; i < N; ++i) {
    if (i + 1 == N || chain[i] != chain[i + 1]) { o[i] = std::numeric_limits<float>::quiet_NaN(); continue; }
    double acc = 0;
    for (int64_t l = 0; l < L; ++l) {
      const size_t a = size_t((i * L + l) * k), b = size_t(((i + 1) * L + l) * k);
      acc += floored_js_pair(lp.data() + a, idx.data() + a, k, lp.data() + b, idx.data() + b, k);
    }
    o[i] = float(acc / double(L));
  }
  return OK;
}

// Per row: surprisal −log π(token) and the entropy of the full softmax, one pass; row max and NaN flag.
int py_surprisal_entropy(uintptr_t logits, int dtype, int64_t rows, int64_t V, uintptr_t tokens, uintptr_t sur,
                         uintptr_t ent) {
  py::gil_scoped_release nogil;
  const void* base = ptr<const void>(logits);
  const int64_t* tok = ptr<const int64_t>(tokens);
  float *so = ptr<float>(sur), *eo = ptr<float>(ent);
  RowChecks chk(static_cast<size_t>(rows));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < rows; ++r) {
    const void* row = row_ptr(base, dtype, r, V);
    RowStats st;
    walk_row(row, dtype, V, st, nullptr, true);
    float xt;
    if (dtype == F32) xt = static_cast<const float*>(row)[tok[r]];
    else widen_scalar(static_cast<const uint16_t*>(row) + tok[r], 1, dtype, &xt);
    const double lse = st.lse();
    so[r] = float(lse - double(xt));
    eo[r] = float(std::max(0.0, lse - st.sx / st.s));
    chk.max[r] = st.m;
    chk.nan[r] = st.nan;
  }
  return chk.status();
}

// Per row: top-1 minus top-2 logit, one read pass; the row max and NaN flag for the input checks.
int py_logit_margin(uintptr_t logits, int dtype, int64_t rows, int64_t V, uintptr_t out) {
  py::gil_scoped_release nogil;
  const void* base = ptr<const void>(logits);
  float* o = ptr<float>(out);
  RowChecks chk(static_cast<size_t>(rows));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < rows; ++r) {
    const void* row = row_ptr(base, dtype, r, V);
    float first = kNegInf, second = kNegInf;
    bool nan = false;
    if (dtype == F32) {
      kIsa.top2(static_cast<const float*>(row), V, first, second, nan);
    } else {
      alignas(64) float buf[kBlock];
      for (int64_t b = 0; b < V; b += kBlock) {
        const int len = int(std::min<int64_t>(kBlock, V - b));
        kIsa.widen(static_cast<const uint16_t*>(row) + b, len, dtype, buf);
        float f, s;
        kIsa.top2(buf, len, f, s, nan);
        second = std::max(std::max(second, s), std::min(first, f));
        first = std::max(first, f);
      }
    }
    o[r] = first - second;
    chk.max[r] = first;
    chk.nan[r] = nan;
  }
  return chk.status();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "bsb CPU kernels (raw pointers; use bsb.kernels, not this module)";
  m.def("topk_logprobs", &py_topk, "rows of logits -> top-k logprobs and ids; returns a status code");
  m.def("floored_js", &py_floored_js, "floored JS (Eq. 1-2) between paired top-k rows");
  m.def("probe_js", &py_probe_js, "Probe-JS scores of consecutive boundary reads");
  m.def("surprisal_entropy", &py_surprisal_entropy, "per-row surprisal of a token and softmax entropy");
  m.def("logit_margin", &py_logit_margin, "per-row top-1 minus top-2 logit");
  m.def("isa", [] { return std::string(kIsa.name); }, "the instruction set the row loops use");
  m.def("set_isa", &set_isa, "switch to scalar / avx2 / avx512 if the CPU has it (tests); returns success");
  m.attr("max_k") = 64;
#ifdef _OPENMP
  m.attr("openmp") = true;
#else
  m.attr("openmp") = false;
#endif
}
