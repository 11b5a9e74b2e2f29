/* A window of a JPEG decoded, not the whole image: grain_dataset's crop-window decode, and the
 * decode half of load's batch decode op (decode_resize_batch_op.cc).
 *
 * libjpeg(-turbo)'s partial decompression, as TensorFlow's decode_and_crop_jpeg uses it: the rows
 * above the window are skipped (entropy-decoded, not transformed: jpeg_skip_scanlines), the
 * columns outside it are not transformed (jpeg_crop_scanline, widened to whole iMCUs), and
 * decoding stops at the window's last row. The pixels are the whole image's, decoded with the
 * same settings (the accurate integer DCT, fancy upsampling: simplejpeg's defaults), cut to the
 * window; or, with WINDOW_AS_TENSORFLOW, as decode_and_crop_jpeg cuts it (the columns not
 * widened by one, so that the window's edge columns are upsampled as image edges, as there):
 * the same values. Errors and libjpeg's warnings (corrupt data it would recover from) return
 * non-zero, so that the caller decodes another way, which reports the error as before.
 * No Python here: called through ctypes (which releases the GIL for the call) or from the op.
 */
#include <setjmp.h>
#include <stdio.h>

#include <jpeglib.h>

struct failure {
  struct jpeg_error_mgr manager;
  jmp_buf jump;
};

static void on_error(j_common_ptr info) { longjmp(((struct failure *)info->err)->jump, 1); }

static void on_message(j_common_ptr info, int level) {
  if (level < 0) info->err->num_warnings++; /* a warning: the data are corrupt */
}

#define WINDOW_FAST_DCT 1      /* libjpeg's fast integer IDCT (TensorFlow's 'INTEGER_FAST') */
#define WINDOW_AS_TENSORFLOW 2 /* the window's columns cut as decode_and_crop_jpeg cuts them */

/* Decodes rows [top, top + height) and columns [left, left + width) of the image scaled by
 * 1/scale (1, 2, 4 or 8) as RGB (channels 3) or grey (channels 1) into out: `height` rows of
 * `stride` bytes, the window starting *skip pixels into each (the decoded columns are widened
 * to whole iMCUs and, unless WINDOW_AS_TENSORFLOW, by one column on each side, so that the
 * window's edge columns are upsampled from their true neighbours as in the whole image).
 * Returns 0, or 1 where libjpeg failed or warned, or the window is not in the image or does
 * not fit `stride`. */
int shardfeed_window_decode(const unsigned char *data, unsigned long size, int scale, int top, int left,
                            int height, int width, int channels, int flags, unsigned char *out,
                            unsigned long stride, int *skip) {
  struct jpeg_decompress_struct info;
  struct failure failure;
  info.err = jpeg_std_error(&failure.manager);
  failure.manager.error_exit = on_error;
  failure.manager.emit_message = on_message;
  if (setjmp(failure.jump)) {
    jpeg_destroy_decompress(&info);
    return 1;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, data, size);
  if (channels != 1 && channels != 3) longjmp(failure.jump, 1);
  jpeg_read_header(&info, TRUE);
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  info.scale_num = 1;
  info.scale_denom = (unsigned int)scale;
  info.dct_method = (flags & WINDOW_FAST_DCT) ? JDCT_IFAST : JDCT_ISLOW;
  jpeg_start_decompress(&info);
  if (top < 0 || left < 0 || height < 1 || width < 1 || (JDIMENSION)(top + height) > info.output_height ||
      (JDIMENSION)(left + width) > info.output_width)
    longjmp(failure.jump, 1);
  int widen = !(flags & WINDOW_AS_TENSORFLOW);
  JDIMENSION x = (left > 0 && widen) ? (JDIMENSION)left - 1 : (JDIMENSION)left;
  JDIMENSION end = (JDIMENSION)(left + width) + ((JDIMENSION)(left + width) < info.output_width && widen);
  JDIMENSION columns = end - x;
  if (x > 0 || columns < info.output_width) jpeg_crop_scanline(&info, &x, &columns);
  if ((unsigned long)columns * (unsigned long)channels > stride) longjmp(failure.jump, 1);
  *skip = left - (int)x;
  JSAMPARRAY rows = (JSAMPARRAY)(*info.mem->alloc_small)((j_common_ptr)&info, JPOOL_IMAGE,
                                                         (size_t)height * sizeof(JSAMPROW));
  for (int r = 0; r < height; r++) rows[r] = out + (size_t)r * stride;
  if (top > 0) jpeg_skip_scanlines(&info, (JDIMENSION)top);
  while (info.output_scanline < (JDIMENSION)(top + height)) {
    JDIMENSION done = info.output_scanline - (JDIMENSION)top;
    if (jpeg_read_scanlines(&info, rows + done, (JDIMENSION)height - done) == 0) longjmp(failure.jump, 1);
  }
  int warned = failure.manager.num_warnings > 0;
  jpeg_abort_decompress(&info);
  jpeg_destroy_decompress(&info);
  return warned;
}
