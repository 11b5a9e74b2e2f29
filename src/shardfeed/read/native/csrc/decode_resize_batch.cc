// A batch of JPEG crop windows decoded and resized into one uint8 array [count, height, width,
// channels]: each record's window (top, left, height, width at 1/ratio scale) decoded by libjpeg
// (window_decode.c; with WINDOW_AS_TENSORFLOW cut as decode_and_crop_jpeg cuts it), then resized,
// rounded and flipped by the fused resize (fused_resize.cc) straight into its place in the
// batch. Where libjpeg refuses or warns about a JPEG (or its window or ratio is not one it can
// decode), its ok is 0 and its image zeros: the caller decodes that record its own way, which
// reports the error. No TensorFlow header: decode_resize_batch_op.cc is load's op around it
// (read/batch_decode.py), grain_dataset calls it through ctypes (read/window_decode.py).
#include <algorithm>
#include <cstdint>
#include <vector>

extern "C" int shardfeed_window_decode(const unsigned char* data, unsigned long size, int scale, int top, int left,
                                       int height, int width, int channels, int flags, unsigned char* out,
                                       unsigned long stride, int* skip);
void shardfeed_fused_resize_rows(const uint8_t* image, int64_t stride, int64_t height, int64_t width,
                                 int64_t channels, uint8_t* out, int64_t out_height, int64_t out_width, bool flip);

namespace {
constexpr int kMargin = 72;  // columns the decode may add before and after a window: an iMCU (32 px at most) a side
constexpr int kSpare = 16;   // bytes after the last row, read and not used by the resize's 8-byte reads
}  // namespace

// `data`, `sizes`: each record's JPEG; `windows`: [count, 4] int32; `ratios`: 1, 2, 4 or 8;
// `flips`, `ok`: a byte a record; `flags`: window_decode.c's. Returns how many decoded.
extern "C" int64_t shardfeed_decode_resize_batch(int64_t count, const unsigned char* const* data,
                                                 const uint64_t* sizes, const int32_t* windows,
                                                 const int32_t* ratios, const uint8_t* flips, int64_t out_height,
                                                 int64_t out_width, int channels, int flags, uint8_t* images,
                                                 uint8_t* ok) {
  const int64_t image_bytes = out_height * out_width * channels;
  std::vector<uint8_t> rows;  // one record's decoded rows at a time, reused
  int64_t decoded_count = 0;
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* out = images + i * image_bytes;
    const int32_t* window = windows + 4 * i;
    const int top = window[0], left = window[1], height = window[2], width = window[3], ratio = ratios[i];
    bool decoded = height > 0 && width > 0 && (ratio == 1 || ratio == 2 || ratio == 4 || ratio == 8);
    if (decoded) {
      const int64_t stride = static_cast<int64_t>(width + 2 * kMargin) * channels;
      rows.resize(static_cast<size_t>(height * stride + kSpare));
      int skip = 0;
      decoded = shardfeed_window_decode(data[i], static_cast<unsigned long>(sizes[i]), ratio, top, left, height, width,
                                        channels, flags, rows.data(), static_cast<unsigned long>(stride), &skip) == 0;
      if (decoded) {
        shardfeed_fused_resize_rows(rows.data() + static_cast<int64_t>(skip) * channels, stride, height, width,
                                    channels, out, out_height, out_width, flips[i] != 0);
      }
    }
    if (!decoded) std::fill(out, out + image_bytes, 0);
    ok[i] = decoded ? 1 : 0;
    decoded_count += decoded ? 1 : 0;
  }
  return decoded_count;
}

// One decoded image (rows `stride` bytes apart) resized, rounded and flipped into `out`
// [out_height, out_width, channels] by the fused resize: grain_dataset's images of other
// formats, with load's pixels (ctypes needs a C name).
extern "C" void shardfeed_resize_into(const uint8_t* image, int64_t stride, int64_t height, int64_t width,
                                      int64_t channels, uint8_t* out, int64_t out_height, int64_t out_width,
                                      int flip) {
  shardfeed_fused_resize_rows(image, stride, height, width, channels, out, out_height, out_width, flip != 0);
}
