// The fused resize: a uint8 image resized bilinearly (half-pixel centres, no antialiasing),
// rounded half to even and optionally mirrored left-right, in one pass, with TensorFlow's
// arithmetic: the same float32 operations in the same order as its ResizeBilinear kernel
// (interpolation weights, the two rows' horizontal lerps, then the vertical lerp), so the
// result equals tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8), flipped, bit for bit.
// Faster because each source row is lerped horizontally once (not once per output row that
// uses it), a pixel's channels at a time, read as bytes and widened in registers (one 8-byte
// read gives both pixels of a lerp), nothing is written as float32 but the two rows' lerps, and
// the flip is an order of the output columns. No TensorFlow header here (fused_resize_op.cc is the op around it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// SHARDFEED_PORTABLE (a test's build) leaves out the AVX2 versions, to test the others here.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(SHARDFEED_PORTABLE)
#include <immintrin.h>
#define SHARDFEED_AVX2 1
#define SHARDFEED_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SHARDFEED_AVX2 0
#define SHARDFEED_CLONES
#endif

namespace {

struct Lerp {
  int64_t lower, upper;
  float lerp;
};

// TensorFlow's compute_interpolation_weights with its HalfPixelScaler, as it computes them.
std::vector<Lerp> weights(int64_t out_size, int64_t in_size) {
  std::vector<Lerp> w(out_size);
  const float scale = in_size / static_cast<float>(out_size);
  for (int64_t i = out_size - 1; i >= 0; --i) {
    const float in = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const float in_f = std::floor(in);
    w[i].lower = std::max(static_cast<int64_t>(in_f), static_cast<int64_t>(0));
    w[i].upper = std::min(static_cast<int64_t>(std::ceil(in)), in_size - 1);
    w[i].lerp = in - in_f;
  }
  return w;
}

// One source row as float32 (vectorised), the lerps then read from it.
SHARDFEED_CLONES
void to_float(const uint8_t* __restrict row, int64_t m, float* __restrict f) {
  for (int64_t i = 0; i < m; ++i) f[i] = row[i];
}

// Horizontal lerps of one row, value by value: out[j] = a + (b - a) * t.
SHARDFEED_CLONES
void horizontal_values(const float* __restrict f, const int32_t* __restrict lo, const int32_t* __restrict hi,
                       const float* __restrict t, int64_t n, float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) {
    const float a = f[lo[j]], b = f[hi[j]];
    out[j] = a + (b - a) * t[j];
  }
}

// Three or four channels, a pixel at a time: its two source pixels are adjacent (the upper
// column is the lower one or the next; where it is the lower one, the weight is 0, which gives
// the lower pixel's values exactly, as a lerp between a pixel and itself does), so one 8-byte
// read at the lower pixel holds both, widened to float32 in registers: a = its first four
// bytes, b = the four from the next pixel on. A 3-channel pixel's fourth lane is the next
// pixel's first channel, overwritten by the next output pixel (the output buffers have a float
// to spare; the rows read have 8 bytes to spare after them).
inline int64_t eight_bytes(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <int C>
void horizontal_pairs_sse2(const uint8_t* __restrict row, const int32_t* __restrict offset,
                           const float* __restrict weight, int64_t from, int64_t ow, float* __restrict out) {
  for (int64_t p = from; p < ow; ++p) {
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    const __m128i x = _mm_cvtsi64_si128(eight_bytes(row + offset[p]));
    const __m128i ab = _mm_unpacklo_epi8(_mm_unpacklo_epi32(x, _mm_srli_epi64(x, 8 * C)), zero);
    const __m128 a = _mm_cvtepi32_ps(_mm_unpacklo_epi16(ab, zero)), b = _mm_cvtepi32_ps(_mm_unpackhi_epi16(ab, zero));
    _mm_storeu_ps(out + p * C, _mm_add_ps(a, _mm_mul_ps(_mm_sub_ps(b, a), _mm_set1_ps(weight[p]))));
#else
    for (int c = 0; c < C; ++c) {
      const float a = row[offset[p] + c], b = row[offset[p] + C + c];
      out[p * C + c] = a + (b - a) * weight[p];
    }
#endif
  }
}

#if SHARDFEED_AVX2
// The same, two pixels at a time in the two halves of a 256-bit vector.
template <int C>
__attribute__((target("avx2"))) void horizontal_pairs_avx2(const uint8_t* __restrict row,
                                                           const int32_t* __restrict offset,
                                                           const float* __restrict weight, int64_t ow,
                                                           float* __restrict out) {
  const __m256i halves = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  int64_t p = 0;
  for (; p + 2 <= ow; p += 2) {
    const __m128i x0 = _mm_cvtsi64_si128(eight_bytes(row + offset[p]));
    const __m128i x1 = _mm_cvtsi64_si128(eight_bytes(row + offset[p + 1]));
    const __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi32(x0, x1)));
    const __m256 b = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_unpacklo_epi32(_mm_srli_epi64(x0, 8 * C), _mm_srli_epi64(x1, 8 * C))));
    const __m256 w = _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(weight + p)))),
        halves);
    const __m256 r = _mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(b, a), w));
    _mm_storeu_ps(out + p * C, _mm256_castps256_ps128(r));
    _mm_storeu_ps(out + (p + 1) * C, _mm256_extractf128_ps(r, 1));
  }
  horizontal_pairs_sse2<C>(row, offset, weight, p, ow, out);
}
#endif

template <int C>
void horizontal_pairs(const uint8_t* row, const int32_t* offset, const float* weight, int64_t ow, float* out) {
#if SHARDFEED_AVX2
  if (__builtin_cpu_supports("avx2")) return horizontal_pairs_avx2<C>(row, offset, weight, ow, out);
#endif
  horizontal_pairs_sse2<C>(row, offset, weight, 0, ow, out);
}

// The vertical lerp of two lerped rows, rounded half to even (adding 1.5 * 2^23 leaves the
// nearest integer under the default rounding mode, as tf.round gives) into uint8.
void vertical_values(const float* __restrict top, const float* __restrict bottom, float t, int64_t n,
                     uint8_t* __restrict out) {
  const float magic = 12582912.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v = top[i] + (bottom[i] - top[i]) * t;
    v = (v + magic) - magic;
    v = std::min(std::max(v, 0.0f), 255.0f);
    out[i] = static_cast<uint8_t>(static_cast<int32_t>(v));
  }
}

#if SHARDFEED_AVX2
// The same, 32 values at a time: cvtps2dq rounds half to even (the default rounding mode), the
// packs saturate to 0..255 and the permute undoes their lane interleaving.
__attribute__((target("avx2"))) void vertical_avx2(const float* __restrict top, const float* __restrict bottom,
                                                   float t, int64_t n, uint8_t* __restrict out) {
  const __m256 weight = _mm256_set1_ps(t);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 a = _mm256_loadu_ps(top + i + 8 * k), b = _mm256_loadu_ps(bottom + i + 8 * k);
      q[k] = _mm256_cvtps_epi32(_mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(b, a), weight)));
    }
    const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(bytes, order));
  }
  vertical_values(top + i, bottom + i, t, n - i, out + i);
}
#endif

void vertical(const float* top, const float* bottom, float t, int64_t n, uint8_t* out) {
#if SHARDFEED_AVX2
  if (__builtin_cpu_supports("avx2")) return vertical_avx2(top, bottom, t, n, out);
#endif
  vertical_values(top, bottom, t, n, out);
}

}  // namespace

// `stride`: the bytes from one source row to the next (at least width * channels: a window of a
// wider decode, decode_resize_batch_op.cc; the last row ends the buffer).
void shardfeed_fused_resize_rows(const uint8_t* image, int64_t stride, int64_t height, int64_t width,
                                 int64_t channels, uint8_t* out, int64_t out_height, int64_t out_width, bool flip) {
  const std::vector<Lerp> ys = weights(out_height, height), xs = weights(out_width, width);
  const int64_t n = out_width * channels, m = width * channels;
  const bool pairs = channels >= 3;  // 3 or 4 channels: horizontal_pairs, else value by value
  std::vector<int32_t> offset(out_width), lo(pairs ? 0 : n), hi(pairs ? 0 : n);
  std::vector<float> weight(out_width + 1), t(pairs ? 0 : n), row(pairs ? 0 : m), rows(2 * (n + 1));
  std::vector<uint8_t> copy(pairs ? m + 8 : 0);  // a row near the image's end, with 8 bytes to spare
  for (int64_t p = 0; p < out_width; ++p) {
    const Lerp& x = xs[flip ? out_width - 1 - p : p];  // the flip: output column p reads column x
    offset[p] = static_cast<int32_t>(x.lower * channels);
    weight[p] = x.upper == x.lower ? 0.0f : x.lerp;  // else upper is lower + 1
    for (int64_t c = 0; !pairs && c < channels; ++c) {
      lo[p * channels + c] = static_cast<int32_t>(x.lower * channels + c);
      hi[p * channels + c] = static_cast<int32_t>(x.upper * channels + c);
      t[p * channels + c] = x.lerp;
    }
  }
  auto lerp_row = [&](int64_t y, float* dst) {
    const uint8_t* source = image + y * stride;
    if (!pairs) {
      to_float(source, m, row.data());
      horizontal_values(row.data(), lo.data(), hi.data(), t.data(), n, dst);
      return;
    }
    if ((height - 1 - y) * stride < 8) {  // the 8-byte reads would pass the last row's end
      std::memcpy(copy.data(), source, m);
      source = copy.data();
    }
    if (channels == 3) {
      horizontal_pairs<3>(source, offset.data(), weight.data(), out_width, dst);
    } else {
      horizontal_pairs<4>(source, offset.data(), weight.data(), out_width, dst);
    }
  };
  float* top = rows.data();
  float* bottom = rows.data() + n + 1;
  int64_t top_row = -1, bottom_row = -1;  // the source rows whose lerps the two buffers hold
  for (int64_t y = 0; y < out_height; ++y) {
    const int64_t lower = ys[y].lower, upper = ys[y].upper;
    if (top_row != lower) {
      if (bottom_row == lower) {
        std::swap(top, bottom);
        std::swap(top_row, bottom_row);
      } else {
        lerp_row(lower, top);
        top_row = lower;
      }
    }
    if (upper == lower) {  // one source row (an edge, or an output row on a source row): lerped once
      vertical(top, top, ys[y].lerp, n, out + y * n);
      continue;
    }
    if (bottom_row != upper) {
      lerp_row(upper, bottom);
      bottom_row = upper;
    }
    vertical(top, bottom, ys[y].lerp, n, out + y * n);
  }
}

void shardfeed_fused_resize(const uint8_t* image, int64_t height, int64_t width, int64_t channels, uint8_t* out,
                            int64_t out_height, int64_t out_width, bool flip) {
  shardfeed_fused_resize_rows(image, width * channels, height, width, channels, out, out_height, out_width, flip);
}
