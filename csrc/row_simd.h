// The SIMD row loops, written once over the vector traits `Vec` (simd_avx2.h / simd_avx512.h). probe.cpp
// includes this file once per instruction set, inside its own namespace and #pragma GCC target.

// exp(d) for d = x − max ≤ 0 as 2^t, t = d·log2(e): n = round(t), a degree-5 fit of 2^f on f = t − n in
// [−½, ½] (relative error 2.4e-7 in fp32), then p·2^n. t is clamped at −125 so that no denormal appears: a
// masked token (-inf) adds at most 2^-124 to a sum that is at least 1.
inline Vec::V vexp(Vec::V d) {
  const Vec::V t = Vec::max(Vec::mul(d, Vec::set1(1.44269504088896341f)), Vec::set1(-125.0f));
  const Vec::V n = Vec::round(t);
  const Vec::V f = Vec::sub(t, n);
  Vec::V p = Vec::set1(1.3276379322633147e-3f);
  p = Vec::fmadd(p, f, Vec::set1(9.675510227680206e-3f));
  p = Vec::fmadd(p, f, Vec::set1(5.550713092088699e-2f));
  p = Vec::fmadd(p, f, Vec::set1(2.4022120237350464e-1f));
  p = Vec::fmadd(p, f, Vec::set1(6.931469440460205e-1f));
  p = Vec::fmadd(p, f, Vec::set1(1.0000001192092896f));
  return Vec::ldexp(p, n);
}

// Σ exp(x − ref) and (with SX) Σ exp(x − ref)·x over the vector part of a block, two accumulators apiece
// for instruction-level parallelism; masked tokens add 0 (and, for SX, 0 rather than 0·(−inf)).
template <bool SX>
inline void sum_pass(const float* x, int vlen, float ref, double& s, double& sx) {
  constexpr int W = Vec::W;
  const Vec::V vm = Vec::set1(ref), ninf = Vec::set1(kNegInf);
  Vec::V s0 = Vec::zero(), s1 = Vec::zero(), t0 = Vec::zero(), t1 = Vec::zero();
  int j = 0;
  for (; j + 2 * W <= vlen; j += 2 * W) {
    const Vec::V v0 = Vec::load(x + j), v1 = Vec::load(x + j + W);
    const Vec::V e0 = vexp(Vec::sub(v0, vm)), e1 = vexp(Vec::sub(v1, vm));
    s0 = Vec::add(s0, e0);
    s1 = Vec::add(s1, e1);
    if (SX) {
      t0 = Vec::fmadd(e0, Vec::zero_where_not_gt(v0, ninf, v0), t0);
      t1 = Vec::fmadd(e1, Vec::zero_where_not_gt(v1, ninf, v1), t1);
    }
  }
  for (; j < vlen; j += W) {
    const Vec::V v = Vec::load(x + j);
    const Vec::V e = vexp(Vec::sub(v, vm));
    s0 = Vec::add(s0, e);
    if (SX) t0 = Vec::fmadd(e, Vec::zero_where_not_gt(v, ninf, v), t0);
  }
  s = Vec::hsum(Vec::add(s0, s1));
  sx = SX ? Vec::hsum(Vec::add(t0, t1)) : 0.0;
}

// The fused pass over the vector part of a block: exps against the running max `ref` of earlier blocks (the
// block's own max may exceed it; the caller rescales, or redoes the block when it exceeds it by > kSlack),
// while the same loads give the block max, the NaN flag and, per vector, the lanes above the top-k threshold.
template <bool SX>
inline float fused_pass(const float* x, int vlen, float ref, float thr, double& s, double& sx, unsigned& nan,
                        uint32_t* over) {
  constexpr int W = Vec::W;
  const Vec::V vm = Vec::set1(ref), ninf = Vec::set1(kNegInf), vthr = Vec::set1(thr);
  Vec::V s0 = Vec::zero(), t0 = Vec::zero(), vmax = ninf;
  for (int j = 0; j < vlen; j += W) {
    const Vec::V v = Vec::load(x + j);
    vmax = Vec::max(v, vmax);
    nan |= Vec::nan(v);
    over[j / W] = Vec::gt(v, vthr);
    const Vec::V e = vexp(Vec::sub(v, vm));
    s0 = Vec::add(s0, e);
    if (SX) t0 = Vec::fmadd(e, Vec::zero_where_not_gt(v, ninf, v), t0);
  }
  s = Vec::hsum(s0);
  sx = SX ? Vec::hsum(t0) : 0.0;
  return vlen ? Vec::hmax(vmax) : kNegInf;
}

// exp(x − ref) stays finite for x − ref ≤ kSlack (2^(60·log2 e) ≈ 1e26 per term).
constexpr float kSlack = 60.0f;

// One block of a row (≤ kBlock elements, L1-resident): the logsumexp terms, the Σ e·x of the entropy, the
// NaN flag and the top-k candidates. Usually a single fused pass; the first block of a row, or one whose max
// jumps more than kSlack above the running max, takes two (max first, then exps at that max).
inline void block(const float* x, int len, int64_t base, RowStats& st, TopK* top, bool want_sx) {
  constexpr int W = Vec::W;
  const int vlen = len - len % W;
  unsigned nan = 0;
  uint32_t over[kBlock / W];  // lanes above the threshold, per vector (fused pass only)
  double s = 0, sx = 0;
  float bm = kNegInf;
  const bool fused = st.live();
  if (fused) {
    const float thr = top && top->full() ? top->threshold() : kNegInf;
    bm = want_sx ? fused_pass<true>(x, vlen, st.m, thr, s, sx, nan, over)
                 : fused_pass<false>(x, vlen, st.m, thr, s, sx, nan, over);
  } else {
    Vec::V vmax = Vec::set1(kNegInf);
    for (int j = 0; j < vlen; j += W) {
      const Vec::V v = Vec::load(x + j);
      vmax = Vec::max(v, vmax);
      nan |= Vec::nan(v);
    }
    if (vlen) bm = Vec::hmax(vmax);
  }
  if (nan) st.nan = true;
  for (int j = vlen; j < len; ++j) {
    if (x[j] != x[j]) st.nan = true;
    else bm = std::max(bm, x[j]);
  }
  if (fused && !(bm > st.m + kSlack)) {
    st.s += s;  // both sums are relative to the old max; raise_max rescales them exactly
    st.sx += sx;
    st.raise_max(bm);
  } else {
    st.raise_max(bm);
    if (st.live()) {
      if (want_sx) sum_pass<true>(x, vlen, st.m, s, sx);
      else sum_pass<false>(x, vlen, st.m, s, sx);
      st.s += s;
      st.sx += sx;
    }
  }
  if (top) {
    for (int j = 0; j < vlen; j += W) {
      if (!top->full()) {
        for (int u = 0; u < W; ++u) top->push(x[j + u], base + j + u);
        continue;
      }
      // Lanes above the threshold as of the fused pass (a later, higher threshold is re-checked in push).
      unsigned mask = fused ? over[j / W] : Vec::gt(Vec::load(x + j), Vec::set1(top->threshold()));
      while (mask) {
        const int u = __builtin_ctz(mask);
        mask &= mask - 1;
        top->push(x[j + u], base + j + u);
      }
    }
  }
  for (int j = vlen; j < len; ++j) st.tail(x[j], base + j, top, want_sx);
}

// Largest and second-largest value of a row (a tie for first gives both the same value); NaN flagged.
inline void top2(const float* x, int64_t n, float& first, float& second, bool& nan) {
  constexpr int W = Vec::W;
  Vec::V t1 = Vec::set1(kNegInf), t2 = t1;
  unsigned nanm = 0;
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    const Vec::V v = Vec::load(x + j);
    nanm |= Vec::nan(v);
    t2 = Vec::max(Vec::min(t1, v), t2);  // the lane's old first, or v, whichever is smaller, may be second
    t1 = Vec::max(v, t1);
  }
  alignas(64) float a[W], b[W];
  Vec::store(a, t1);
  Vec::store(b, t2);
  float f = kNegInf, s = kNegInf;
  auto take = [&](float v) {
    if (v != v) { nan = true; return; }
    if (v > f) { s = f; f = v; }
    else if (v > s) s = v;
  };
  for (int u = 0; u < W; ++u) { take(a[u]); take(b[u]); }
  for (; j < n; ++j) take(x[j]);
  if (nanm) nan = true;
  first = f;
  second = s;
}
