// load's JPEG batches in one TensorFlow op: ShardfeedDecodeResizeBatch(contents string [B],
// windows int32 [B, 4], ratios int32 [B], flips bool [B]; height, width, channels, fast_dct)
// -> (images uint8 [B, height, width, channels], ok bool [B]). Each record's crop window
// (top, left, height, width at 1/ratio scale) decoded by libjpeg as decode_and_crop_jpeg
// decodes it (window_decode.c with WINDOW_AS_TENSORFLOW: the same values), then resized, rounded
// and flipped by the fused resize (fused_resize.cc) straight into its place in the batch: the
// pixels of decode_and_crop_jpeg then the fused resize op, without a TensorFlow op per record,
// TensorFlow's per-row copies, the window's tensor or the copy of each image into the batch.
// Where libjpeg refuses or warns about a JPEG, its ok is false (its image zeros) and the caller
// decodes that record with TensorFlow's op, which reports the error as before.
// Built and loaded by read/batch_decode.py.
#include <cstdint>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

extern "C" int shardfeed_window_decode(const unsigned char* data, unsigned long size, int scale, int top, int left,
                                       int height, int width, int channels, int flags, unsigned char* out,
                                       unsigned long stride, int* skip);
void shardfeed_fused_resize_rows(const uint8_t* image, int64_t stride, int64_t height, int64_t width,
                                 int64_t channels, uint8_t* out, int64_t out_height, int64_t out_width, bool flip);

constexpr int kFastDct = 1, kAsTensorFlow = 2;  // window_decode.c's flags
constexpr int kMargin = 72;  // columns the decode may add before and after a window: an iMCU (32 px at most) a side
constexpr int kSpare = 16;   // bytes after the last row, read and not used by the resize's 8-byte reads

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

REGISTER_OP("ShardfeedDecodeResizeBatch")
    .Input("contents: string")
    .Input("windows: int32")
    .Input("ratios: int32")
    .Input("flips: bool")
    .Attr("height: int >= 1")
    .Attr("width: int >= 1")
    .Attr("channels: int")
    .Attr("fast_dct: bool")
    .Output("images: uint8")
    .Output("ok: bool")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      int height, width, channels;
      TF_RETURN_IF_ERROR(c->GetAttr("height", &height));
      TF_RETURN_IF_ERROR(c->GetAttr("width", &width));
      TF_RETURN_IF_ERROR(c->GetAttr("channels", &channels));
      tensorflow::shape_inference::ShapeHandle contents;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &contents));
      c->set_output(0, c->MakeShape({c->Dim(contents, 0), height, width, channels}));
      c->set_output(1, c->Vector(c->Dim(contents, 0)));
      return absl::OkStatus();
    });

class ShardfeedDecodeResizeBatchOp : public OpKernel {
 public:
  explicit ShardfeedDecodeResizeBatchOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("height", &height_));
    OP_REQUIRES_OK(context, context->GetAttr("width", &width_));
    OP_REQUIRES_OK(context, context->GetAttr("channels", &channels_));
    OP_REQUIRES_OK(context, context->GetAttr("fast_dct", &fast_dct_));
    OP_REQUIRES(context, channels_ == 1 || channels_ == 3, errors::InvalidArgument("channels must be 1 or 3"));
  }

  void Compute(OpKernelContext* context) override {
    const auto contents = context->input(0).flat<tensorflow::tstring>();
    const Tensor& windows = context->input(1);
    const auto ratios = context->input(2).flat<int32_t>();
    const auto flips = context->input(3).flat<bool>();
    const int64_t n = contents.size();
    OP_REQUIRES(context, windows.dims() == 2 && windows.dim_size(0) == n && windows.dim_size(1) == 4,
                errors::InvalidArgument("windows must be [records, 4]: top, left, height, width"));
    OP_REQUIRES(context, ratios.size() == n && flips.size() == n,
                errors::InvalidArgument("ratios and flips must have one value a record"));
    Tensor* images = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({n, height_, width_, channels_}), &images));
    Tensor* ok = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(1, TensorShape({n}), &ok));
    const auto window = windows.matrix<int32_t>();
    const int64_t image_bytes = static_cast<int64_t>(height_) * width_ * channels_;
    std::vector<uint8_t> rows;  // one record's decoded rows at a time, reused
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* out = images->flat<uint8_t>().data() + i * image_bytes;
      const int top = window(i, 0), left = window(i, 1), height = window(i, 2), width = window(i, 3);
      const int ratio = ratios(i);
      bool decoded = height > 0 && width > 0 && (ratio == 1 || ratio == 2 || ratio == 4 || ratio == 8);
      if (decoded) {
        const int64_t stride = static_cast<int64_t>(width + 2 * kMargin) * channels_;
        rows.resize(static_cast<size_t>(height * stride + kSpare));
        int skip = 0;
        decoded = shardfeed_window_decode(reinterpret_cast<const unsigned char*>(contents(i).data()),
                                          contents(i).size(), ratio, top, left, height, width, channels_,
                                          kAsTensorFlow | (fast_dct_ ? kFastDct : 0), rows.data(), stride,
                                          &skip) == 0;
        if (decoded) {
          shardfeed_fused_resize_rows(rows.data() + static_cast<int64_t>(skip) * channels_, stride, height, width,
                                      channels_, out, height_, width_, flips(i));
        }
      }
      if (!decoded) std::fill(out, out + image_bytes, 0);
      ok->flat<bool>()(i) = decoded;
    }
  }

 private:
  int height_, width_, channels_;
  bool fast_dct_;
};

REGISTER_KERNEL_BUILDER(Name("ShardfeedDecodeResizeBatch").Device(tensorflow::DEVICE_CPU),
                        ShardfeedDecodeResizeBatchOp);
