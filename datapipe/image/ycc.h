/*
 * YCbCr to RGB with libjpeg's own fixed-point arithmetic (jdcolor.c: 16 fraction bits, the
 * same rounding), for planes already resampled to the output size: the same bytes libjpeg
 * would give for the same Y, Cb, Cr.
 */
#ifndef DATAPIPE_YCC_H
#define DATAPIPE_YCC_H

#include <stddef.h>
#include <stdint.h>

/* Whether this build and CPU have the AVX2 code. */
int ycc_avx2_available(void);

/* `width` x `height` pixels from three planes (rows `stride` apart) to packed RGB at `dst`
   (rows `dst_stride` apart), with the AVX2 code when `avx2` (it must be available) or the
   portable one: the same bytes. */
void ycc_to_rgb(const uint8_t *y, const uint8_t *cb, const uint8_t *cr, size_t stride,
                int width, int height, uint8_t *dst, size_t dst_stride, int avx2);

#endif
