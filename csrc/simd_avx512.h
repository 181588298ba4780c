// 16-lane fp32 vector traits for row_simd.h (included under #pragma GCC target("avx512f,...")).
struct Vec {
  using V = __m512;
  static constexpr int W = 16;
  static inline V load(const float* p) { return _mm512_loadu_ps(p); }
  static inline V set1(float x) { return _mm512_set1_ps(x); }
  static inline V zero() { return _mm512_setzero_ps(); }
  static inline V add(V a, V b) { return _mm512_add_ps(a, b); }
  static inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static inline V max(V a, V b) { return _mm512_max_ps(a, b); }  // a NaN in a yields b
  static inline V min(V a, V b) { return _mm512_min_ps(a, b); }
  static inline unsigned gt(V a, V b) { return unsigned(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)); }
  static inline unsigned nan(V a) { return unsigned(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)); }
  static inline V zero_where_not_gt(V x, V lo, V y) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GT_OQ), y); }
  static inline float hmax(V v) { return _mm512_reduce_max_ps(v); }
  static inline float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static inline V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static inline V ldexp(V p, V n) { return _mm512_scalef_ps(p, n); }
};
