// The fused resize: a uint8 image resized bilinearly (half-pixel centres, no antialiasing),
// rounded half to even and optionally mirrored left-right, in one pass, with TensorFlow's
// arithmetic: the same float32 operations in the same order as its ResizeBilinear kernel
// (interpolation weights, the two rows' horizontal lerps, then the vertical lerp), so the
// result equals tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8), flipped, bit for bit.
// Faster because each source row is lerped horizontally once (not once per output row that
// uses it), four channels at a time, nothing is written as float32, and the flip is an order
// of the output columns. No TensorFlow header here (fused_resize_op.cc is the op around it).
#include <algorithm>
#include <cmath>
#include <cstdint>
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

// Three or four channels: a pixel's channels lerped as one 4-lane vector (a 3-channel pixel's
// fourth lane is overwritten by the next pixel's; the buffers have a float to spare).
void horizontal_pixels(const float* __restrict f, const int32_t* __restrict lo, const int32_t* __restrict hi,
                       const float* __restrict t, int64_t ow, int64_t channels, float* __restrict out) {
#if defined(__SSE2__)
  for (int64_t p = 0; p < ow; ++p) {
    const int64_t j = p * channels;
    const __m128 a = _mm_loadu_ps(f + lo[j]), b = _mm_loadu_ps(f + hi[j]);
    _mm_storeu_ps(out + j, _mm_add_ps(a, _mm_mul_ps(_mm_sub_ps(b, a), _mm_set1_ps(t[j]))));
  }
#else
  horizontal_values(f, lo, hi, t, ow * channels, out);
#endif
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

void shardfeed_fused_resize(const uint8_t* image, int64_t height, int64_t width, int64_t channels, uint8_t* out,
                            int64_t out_height, int64_t out_width, bool flip) {
  const std::vector<Lerp> ys = weights(out_height, height), xs = weights(out_width, width);
  const int64_t n = out_width * channels, m = width * channels;
  std::vector<int32_t> lo(n), hi(n);
  std::vector<float> t(n), row(m + 1), rows(2 * (n + 1));
  for (int64_t p = 0; p < out_width; ++p) {
    const Lerp& x = xs[flip ? out_width - 1 - p : p];  // the flip: output column p reads column x
    for (int64_t c = 0; c < channels; ++c) {
      lo[p * channels + c] = static_cast<int32_t>(x.lower * channels + c);
      hi[p * channels + c] = static_cast<int32_t>(x.upper * channels + c);
      t[p * channels + c] = x.lerp;
    }
  }
  auto lerp_row = [&](int64_t y, float* dst) {
    to_float(image + y * m, m, row.data());
    if (channels >= 3) {
      horizontal_pixels(row.data(), lo.data(), hi.data(), t.data(), out_width, channels, dst);
    } else {
      horizontal_values(row.data(), lo.data(), hi.data(), t.data(), n, dst);
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
    if (bottom_row != upper) {
      lerp_row(upper, bottom);
      bottom_row = upper;
    }
    vertical(top, bottom, ys[y].lerp, n, out + y * n);
  }
}
