// 8-lane fp32 vector traits for row_simd.h (included under #pragma GCC target("avx2,fma,f16c")).
struct Vec {
  using V = __m256;
  static constexpr int W = 8;
  static inline V load(const float* p) { return _mm256_loadu_ps(p); }
  static inline V set1(float x) { return _mm256_set1_ps(x); }
  static inline V zero() { return _mm256_setzero_ps(); }
  static inline V add(V a, V b) { return _mm256_add_ps(a, b); }
  static inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static inline V max(V a, V b) { return _mm256_max_ps(a, b); }  // a NaN in a yields b
  static inline V min(V a, V b) { return _mm256_min_ps(a, b); }
  static inline unsigned gt(V a, V b) { return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ))); }
  static inline unsigned nan(V a) { return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q))); }
  static inline V zero_where_not_gt(V x, V lo, V y) { return _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_GT_OQ), y); }
  static inline float hmax(V v) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_max_ss(a, _mm_shuffle_ps(a, a, 1)));
  }
  static inline float hsum(V v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_shuffle_ps(a, a, 1)));
  }
  static inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static inline V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static inline V ldexp(V p, V n) {  // p·2^n for integral n in [-125, 0]
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
  }
};

// bf16 / fp16 -> fp32 for one block.
inline void widen(const uint16_t* src, int len, int dtype, float* dst) {
  int j = 0;
  for (; j + 8 <= len; j += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
    const __m256 f = dtype == 1 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
    _mm256_storeu_ps(dst + j, f);
  }
  for (; j < len; ++j) dst[j] = dtype == 1 ? bf16_to_f32(src[j]) : f16_to_f32(src[j]);
}
