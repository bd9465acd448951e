/*
 * Antialiased bilinear resampling of a crop box, flip included, written straight into the
 * caller's buffer. Same filter and box semantics as PIL's Image.resize(BILINEAR, box=...):
 * separable, horizontal pass first over the rows the vertical pass needs, 8-bit intermediate.
 * Fixed-point coefficients are 16-bit so pairs of taps go through one SIMD multiply-add (SSE2,
 * or AVX2 where the CPU has it); the portable path does the same integer arithmetic, so all
 * give identical bytes. Results are
 * within rounding (+-1) of PIL's, which keeps more coefficient bits.
 */
#ifndef DATAPIPE_RESAMPLE_H
#define DATAPIPE_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* A thread's reusable working memory: one allocation, grown on demand, never shrunk. Reusing
   it avoids a fresh mmap (and its page faults) for every image. */
struct scratch {
    uint8_t *data;
    size_t size;
};

/* Returns NULL when out of memory. */
uint8_t *scratch_reserve(struct scratch *s, size_t size);

/* Which code does the arithmetic; all give identical bytes. */
enum { RESAMPLE_AUTO = 0, RESAMPLE_PORTABLE = 1, RESAMPLE_SSE2 = 2, RESAMPLE_AVX2 = 3 };

/* Whether this build and CPU can run `path`. */
int resample_path_available(int path);

/* What each output byte becomes: itself (`table` NULL), or entry [channel][byte] of a
   3 x 256 table of `itemsize`-byte values (2 or 4), e.g. the byte normalised to a float. A
   table lookup gives exactly the values it was filled with, however they were rounded. */
struct output_map {
    const void *table;
    int itemsize;
};

/*
 * Resample box (x0, y0)-(x1, y1) of `src` (RGBX pixels, rows `src_stride` bytes apart; each
 * row must have 4 readable bytes after its last pixel) to out_w x out_h packed RGB at `dst`,
 * mirrored left-right when `flip`, computed by `path` (RESAMPLE_AUTO: the fastest available),
 * each byte written as `map` says (NULL: bytes). Returns 0, or -1 when out of memory.
 */
/* `count` bytes of packed RGB at `bytes` (a multiple of 3), each written to `dst` as `map`'s
   table says (its table must be set). */
void map_rgb(const uint8_t *bytes, size_t count, const struct output_map *map, void *dst);

int resample_box_rgbx_to_rgb(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                             double x0, double y0, double x1, double y1, int flip,
                             void *dst, int out_w, int out_h, int path,
                             const struct output_map *map, struct scratch *work);

/*
 * `count` 8-bit planes of one size (a JPEG's Y, or its Cb and Cr): box (0, 0)-(box_w, box_h)
 * of each `src[k]` (src_w x src_h, rows `src_stride[k]` bytes apart, each with 16 readable
 * bytes after its last, and one readable row after the last) resampled with the same filter
 * to out_w x out_h bytes at `dst[k]` (rows `dst_stride` apart), mirrored when `flip`; the
 * filter weights are worked out once for all. Vertical pass first, then the horizontal one as
 * a vertical pass over the transposed rows: both run the SIMD row kernel, which a single
 * channel cannot use horizontally. All paths give identical bytes. 0, or -1 out of memory.
 */
int resample_planes(int count, const uint8_t *const *src, int src_w, int src_h,
                    const size_t *src_stride, double box_w, double box_h, int flip,
                    uint8_t *const *dst, int out_w, int out_h, size_t dst_stride, int path,
                    struct scratch *work);

#endif
