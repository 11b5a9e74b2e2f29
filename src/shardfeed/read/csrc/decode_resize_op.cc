// load's JPEG path in one TensorFlow op: ShardfeedDecodeResize(contents string, window int32[4],
// ratio int32, size int32[2], flip bool; channels, fast_dct) -> (image uint8 [size, channels],
// ok bool). The crop window decoded by libjpeg as decode_and_crop_jpeg decodes it
// (window_decode.c with WINDOW_AS_TENSORFLOW: the same values), its rows handed straight to the
// fused resize (fused_resize.cc), so the result is
// fused_resize(decode_and_crop_jpeg(contents, window, channels, ratio, dct_method)), without
// TensorFlow's per-row copies and the window's tensor. Where libjpeg refuses or warns about the
// JPEG, ok is false (the image zeros) and the caller decodes it with TensorFlow's op, which
// reports the error as before. Built and loaded by read/decode_resize.py.
#include <cstdint>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

extern "C" int shardfeed_window_decode(const unsigned char* data, unsigned long size, int scale, int top, int left,
                                       int height, int width, int channels, int flags, unsigned char* out,
                                       unsigned long stride, int* skip, char* message);
void shardfeed_fused_resize_rows(const uint8_t* image, int64_t stride, int64_t height, int64_t width,
                                 int64_t channels, uint8_t* out, int64_t out_height, int64_t out_width, bool flip);

constexpr int kFastDct = 1, kAsTensorFlow = 2;  // window_decode.c's flags
constexpr int kMargin = 72;                     // columns the decode may add: an iMCU (32 px at most) a side, and one

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

REGISTER_OP("ShardfeedDecodeResize")
    .Input("contents: string")
    .Input("window: int32")
    .Input("ratio: int32")
    .Input("size: int32")
    .Input("flip: bool")
    .Attr("channels: int")
    .Attr("fast_dct: bool")
    .Output("image: uint8")
    .Output("ok: bool")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle size;
      int channels;
      TF_RETURN_IF_ERROR(c->GetAttr("channels", &channels));
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(3, &size));
      TF_RETURN_IF_ERROR(c->WithRank(size, 2, &size));
      c->set_output(0, c->MakeShape({c->Dim(size, 0), c->Dim(size, 1), channels}));
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    });

class ShardfeedDecodeResizeOp : public OpKernel {
 public:
  explicit ShardfeedDecodeResizeOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("channels", &channels_));
    OP_REQUIRES_OK(context, context->GetAttr("fast_dct", &fast_dct_));
    OP_REQUIRES(context, channels_ == 1 || channels_ == 3, errors::InvalidArgument("channels must be 1 or 3"));
  }

  void Compute(OpKernelContext* context) override {
    const auto& contents = context->input(0).scalar<tensorflow::tstring>()();
    const auto window = context->input(1).flat<int32_t>();
    const int32_t ratio = context->input(2).scalar<int32_t>()();
    const auto size = context->input(3).flat<int32_t>();
    const bool flip = context->input(4).scalar<bool>()();
    OP_REQUIRES(context, window.size() == 4, errors::InvalidArgument("window must be [top, left, height, width]"));
    OP_REQUIRES(context, size.size() == 2 && size(0) > 0 && size(1) > 0,
                errors::InvalidArgument("size must be 2 positive values"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({size(0), size(1), channels_}), &out));
    Tensor* ok = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(1, TensorShape({}), &ok));
    const int height = window(2), width = window(3);
    bool decoded = height > 0 && width > 0 && (ratio == 1 || ratio == 2 || ratio == 4 || ratio == 8);
    if (decoded) {
      const int64_t stride = static_cast<int64_t>(width + kMargin) * channels_;
      Tensor buffer;  // TensorFlow's allocator, not zeroed: every byte read is written by the decode
      OP_REQUIRES_OK(context, context->allocate_temp(tensorflow::DT_UINT8, TensorShape({height * stride}), &buffer));
      uint8_t* rows = buffer.flat<uint8_t>().data();
      int skip = 0;
      char message[512];
      decoded = shardfeed_window_decode(reinterpret_cast<const unsigned char*>(contents.data()), contents.size(),
                                        ratio, window(0), window(1), height, width, channels_,
                                        kAsTensorFlow | (fast_dct_ ? kFastDct : 0), rows, stride, &skip,
                                        message) == 0;
      if (decoded) {
        shardfeed_fused_resize_rows(rows + static_cast<int64_t>(skip) * channels_, stride, height, width,
                                    channels_, out->flat<uint8_t>().data(), size(0), size(1), flip);
      }
    }
    if (!decoded) out->flat<uint8_t>().setZero();
    ok->scalar<bool>()() = decoded;
  }

 private:
  int channels_;
  bool fast_dct_;
};

REGISTER_KERNEL_BUILDER(Name("ShardfeedDecodeResize").Device(tensorflow::DEVICE_CPU), ShardfeedDecodeResizeOp);
