/* A window of a JPEG decoded, not the whole image: grain_dataset's crop-window decode.
 *
 * libjpeg(-turbo)'s partial decompression, as TensorFlow's decode_and_crop_jpeg uses it: the rows
 * above the window are skipped (entropy-decoded, not transformed: jpeg_skip_scanlines), the
 * columns outside it are not transformed (jpeg_crop_scanline, widened to whole iMCUs), and
 * decoding stops at the window's last row. The pixels are the whole image's, decoded with the
 * same settings (the accurate integer DCT, fancy upsampling: simplejpeg's defaults), cut to the
 * window. Errors and libjpeg's warnings (corrupt data it would recover from) return non-zero,
 * so that the caller decodes the whole image instead, which reports the error as before.
 * No Python here: called through ctypes, which releases the GIL for the call.
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

/* Decodes rows [top, top + height) and columns [left, left + width) of the image scaled by
 * 1/scale (1, 2, 4 or 8) as RGB into out: `height` rows of `stride` bytes, the window starting
 * *skip pixels into each (the decoded columns are widened to whole iMCUs, and by one column on
 * each side, so that the window's edge columns are upsampled from their true neighbours as in
 * the whole image). Returns 0, or 1 where libjpeg failed or warned, or the window is not in
 * the image or does not fit `stride`. */
int shardfeed_window_decode(const unsigned char *data, unsigned long size, int scale, int top, int left,
                            int height, int width, unsigned char *out, unsigned long stride, int *skip) {
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
  jpeg_read_header(&info, TRUE);
  info.out_color_space = JCS_RGB;
  info.scale_num = 1;
  info.scale_denom = (unsigned int)scale;
  jpeg_start_decompress(&info);
  if (top < 0 || left < 0 || height < 1 || width < 1 || (JDIMENSION)(top + height) > info.output_height ||
      (JDIMENSION)(left + width) > info.output_width)
    longjmp(failure.jump, 1);
  JDIMENSION x = left > 0 ? (JDIMENSION)left - 1 : 0;
  JDIMENSION end = (JDIMENSION)(left + width) < info.output_width ? (JDIMENSION)(left + width) + 1 : info.output_width;
  JDIMENSION columns = end - x;
  if (x > 0 || columns < info.output_width) jpeg_crop_scanline(&info, &x, &columns);
  if ((unsigned long)columns * 3 > stride) longjmp(failure.jump, 1);
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
