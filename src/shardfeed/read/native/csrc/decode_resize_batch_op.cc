// load's JPEG batches in one TensorFlow op: ShardfeedDecodeResizeBatch(contents string [B],
// windows int32 [B, 4], ratios int32 [B], flips bool [B]; height, width, channels, fast_dct)
// -> (images uint8 [B, height, width, channels], ok bool [B]): decode_resize_batch.cc's batch
// (each crop window decoded as decode_and_crop_jpeg decodes it, resized by the fused resize
// straight into the batch: the pixels of decode_and_crop_jpeg then the fused resize op, without
// a TensorFlow op per record, TensorFlow's per-row copies, the window's tensor or the copy of
// each image into the batch), a large batch's records spread over TensorFlow's intra-op threads. Where
// libjpeg refuses or warns about a JPEG, its ok is false (its image zeros) and the caller
// decodes that record with TensorFlow's op, which reports the error as before.
// Built and loaded by read/batch_decode.py.
#include <cstdint>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

extern "C" int64_t shardfeed_decode_resize_batch(int64_t count, const unsigned char* const* data,
                                                 const uint64_t* sizes, const int32_t* windows,
                                                 const int32_t* ratios, const uint8_t* flips, int64_t out_height,
                                                 int64_t out_width, int channels, int flags, uint8_t* images,
                                                 uint8_t* ok);

constexpr int kFastDct = 1, kAsTensorFlow = 2;  // window_decode.c's flags
constexpr int64_t kCostPerRecord = 1000000;    // ~cycles to decode and resize one window: a record a shard
// A batch of fewer JPEG bytes is decoded on the op's own thread: ~80 ms of libjpeg at most, and
// tf.data runs two or more batch decodes at once anyway; spreading such a batch over the intra-op
// threads cost 1.5-2.5% more CPU an image on 200-500 px photos (1.8 MB a batch of 64). Phone-sized
// photos (~120 MB a batch) are spread, so that the first batch does not wait for 64 decodes in turn.
constexpr uint64_t kSpreadBytes = 16u << 20;

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
    std::vector<const unsigned char*> data(n);
    std::vector<uint64_t> sizes(n);
    uint64_t total = 0;
    for (int64_t i = 0; i < n; ++i) {
      data[i] = reinterpret_cast<const unsigned char*>(contents(i).data());
      sizes[i] = contents(i).size();
      total += sizes[i];
    }
    static_assert(sizeof(bool) == 1, "flips and ok are passed as a byte a record");
    const int32_t* window = windows.flat<int32_t>().data();
    const auto* flip = reinterpret_cast<const uint8_t*>(flips.data());
    uint8_t* pixels = images->flat<uint8_t>().data();
    auto* good = reinterpret_cast<uint8_t*>(ok->flat<bool>().data());
    const int64_t image_bytes = static_cast<int64_t>(height_) * width_ * channels_;
    const int flags = kAsTensorFlow | (fast_dct_ ? kFastDct : 0);
    auto decode = [&](int64_t start, int64_t end) {
      shardfeed_decode_resize_batch(end - start, data.data() + start, sizes.data() + start, window + 4 * start,
                                    ratios.data() + start, flip + start, height_, width_, channels_, flags,
                                    pixels + start * image_bytes, good + start);
    };
    if (total < kSpreadBytes) {
      decode(0, n);
    } else {
      context->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(n, kCostPerRecord, decode);
    }
  }

 private:
  int height_, width_, channels_;
  bool fast_dct_;
};

REGISTER_KERNEL_BUILDER(Name("ShardfeedDecodeResizeBatch").Device(tensorflow::DEVICE_CPU),
                        ShardfeedDecodeResizeBatchOp);
