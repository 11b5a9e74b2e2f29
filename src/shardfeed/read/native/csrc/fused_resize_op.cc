// The TensorFlow op around fused_resize.cc: ShardfeedFusedResize(image uint8 [h, w, c],
// size int32 [2], flip bool) -> uint8 [size[0], size[1], c]. Built and loaded by
// read/fused_resize.py.
#include <cstdint>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

void shardfeed_fused_resize(const uint8_t* image, int64_t height, int64_t width, int64_t channels, uint8_t* out,
                            int64_t out_height, int64_t out_width, bool flip);

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

REGISTER_OP("ShardfeedFusedResize")
    .Input("image: uint8")
    .Input("size: int32")
    .Input("flip: bool")
    .Output("resized: uint8")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle image, size;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &image));
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(1, &size));
      TF_RETURN_IF_ERROR(c->WithRank(size, 2, &size));
      c->set_output(0, c->MakeShape({c->Dim(size, 0), c->Dim(size, 1), c->Dim(image, 2)}));
      return absl::OkStatus();
    });

class ShardfeedFusedResizeOp : public OpKernel {
 public:
  explicit ShardfeedFusedResizeOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& image = context->input(0);
    const Tensor& size = context->input(1);
    const Tensor& flip = context->input(2);
    OP_REQUIRES(context, image.dims() == 3, errors::InvalidArgument("image must be [height, width, channels]"));
    OP_REQUIRES(context, size.NumElements() == 2, errors::InvalidArgument("size must be [height, width]"));
    OP_REQUIRES(context, flip.NumElements() == 1, errors::InvalidArgument("flip must be one bool"));
    const auto out_size = size.flat<int32_t>();
    const int64_t height = image.dim_size(0), width = image.dim_size(1), channels = image.dim_size(2);
    OP_REQUIRES(context, out_size(0) > 0 && out_size(1) > 0, errors::InvalidArgument("size must be positive"));
    OP_REQUIRES(context, height > 0 && width > 0, errors::InvalidArgument("the image is empty"));
    OP_REQUIRES(context, channels >= 1 && channels <= 4, errors::InvalidArgument("channels must be 1 to 4"));
    OP_REQUIRES(context, width * channels < (int64_t{1} << 31), errors::InvalidArgument("the image is too wide"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({out_size(0), out_size(1), channels}), &out));
    shardfeed_fused_resize(image.flat<uint8_t>().data(), height, width, channels, out->flat<uint8_t>().data(),
                           out_size(0), out_size(1), flip.flat<bool>()(0));
  }
};

REGISTER_KERNEL_BUILDER(Name("ShardfeedFusedResize").Device(tensorflow::DEVICE_CPU), ShardfeedFusedResizeOp);
