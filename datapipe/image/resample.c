/* Antialiased bilinear box resampling, RGBX in, packed RGB out (see resample.h). */
#include <limits.h>
#include "resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define HAVE_SSE2 1
#else
#define HAVE_SSE2 0
#endif
/* AVX2 is compiled in on x86-64 whatever the build flags, and used when the CPU has it. */
#if HAVE_SSE2 && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_AVX2 1
#define TARGET_AVX2 __attribute__((target("avx2")))
#else
#define HAVE_AVX2 0
#endif

/* 14 fraction bits: a weight of exactly 1.0 still fits in int16, and 255 * 2^14 * 2 taps per
   multiply-add stays far inside int32. */
#define PREC 14

uint8_t *scratch_reserve(struct scratch *s, size_t size) {
    if (size > s->size) {
        uint8_t *grown = realloc(s->data, size);
        if (grown == NULL) return NULL;
        s->data = grown;
        s->size = size;
    }
    return s->data;
}

/* Per output pixel along one axis: the first input pixel it reads, and its weights as pairs of
   int16 packed in an int32 (low half first) — the shape one multiply-add consumes. A pair's
   second weight may be zero padding; its input pixel must still be readable. */
struct axis {
    int *start;
    int *npairs;
    int32_t *pairs;
    int max_pairs;
};

static void axis_free(struct axis *a) {
    free(a->start);
    free(a->npairs);
    free(a->pairs);
}

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's coefficient rule: output pixel i samples around b0 + (i + 0.5) * scale; shrinking
   widens the filter by the scale, which is what makes it antialiased. */
static int axis_init(struct axis *a, int in_size, int out_size, double b0, double b1) {
    double scale = (b1 - b0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filterscale; /* the triangle reaches one input pixel, times the scale */
    int ksize = (int)ceil(support) * 2 + 1;
    a->max_pairs = (ksize + 1) / 2;
    a->start = malloc(sizeof(int) * (size_t)out_size);
    a->npairs = malloc(sizeof(int) * (size_t)out_size);
    a->pairs = malloc(sizeof(int32_t) * (size_t)out_size * (size_t)a->max_pairs);
    double *w = malloc(sizeof(double) * (size_t)(2 * a->max_pairs));
    if (!a->start || !a->npairs || !a->pairs || !w) {
        free(w);
        return -1;
    }
    for (int i = 0; i < out_size; i++) {
        double center = b0 + (i + 0.5) * scale;
        int lo = (int)(center - support + 0.5);
        int hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        if (lo > in_size - 1) lo = in_size - 1;
        int n = hi - lo;
        if (n < 1) n = 1;
        if (n > 2 * a->max_pairs) n = 2 * a->max_pairs;
        double total = 0.0;
        for (int k = 0; k < n; k++) {
            w[k] = triangle((k + lo - center + 0.5) / filterscale);
            total += w[k];
        }
        int np = (n + 1) / 2;
        int32_t *pair = a->pairs + (size_t)i * (size_t)a->max_pairs;
        for (int k = 0; k < np; k++) {
            int16_t c[2] = {0, 0};
            for (int j = 0; j < 2 && 2 * k + j < n; j++) {
                double weight = total > 0.0 ? w[2 * k + j] / total : 0.0;
                c[j] = (int16_t)(weight * (1 << PREC) + 0.5);
            }
            pair[k] = (int32_t)((uint32_t)(uint16_t)c[0] | ((uint32_t)(uint16_t)c[1] << 16));
        }
        a->start[i] = lo;
        a->npairs[i] = np;
    }
    free(w);
    return 0;
}

static inline int16_t pair_lo(int32_t p) { return (int16_t)(p & 0xFFFF); }
static inline int16_t pair_hi(int32_t p) { return (int16_t)((uint32_t)p >> 16); }

static inline uint8_t clamp_shift(int32_t acc) {
    acc >>= PREC;
    return (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
}

/* One source row (RGBX) to one packed-RGB row of out_w pixels, mirrored when flip. The row at
   dst must have one spare byte after its last pixel. */
static void horizontal_scalar(const uint8_t *row, const struct axis *ax, int out_w, int flip,
                              uint8_t *dst) {
    for (int d = 0; d < out_w; d++) {
        int i = flip ? out_w - 1 - d : d;
        const uint8_t *p = row + (size_t)ax->start[i] * 4;
        const int32_t *c = ax->pairs + (size_t)i * (size_t)ax->max_pairs;
        int32_t acc[3] = {1 << (PREC - 1), 1 << (PREC - 1), 1 << (PREC - 1)};
        for (int k = 0; k < ax->npairs[i]; k++, p += 8) {
            for (int ch = 0; ch < 3; ch++)
                acc[ch] += pair_lo(c[k]) * p[ch] + pair_hi(c[k]) * p[4 + ch];
        }
        for (int ch = 0; ch < 3; ch++) dst[3 * d + ch] = clamp_shift(acc[ch]);
    }
}

/* One output row from rows `first`, `first` + 1, ... of tmp (packed RGB, `stride` apart). */
static void vertical_scalar(const uint8_t *first, size_t stride, int row_bytes, int npairs,
                            const int32_t *c, uint8_t *out) {
    for (int x = 0; x < row_bytes; x++) {
        int32_t acc = 1 << (PREC - 1);
        const uint8_t *p = first + x;
        for (int k = 0; k < npairs; k++, p += 2 * stride)
            acc += pair_lo(c[k]) * p[0] + pair_hi(c[k]) * p[stride];
        out[x] = clamp_shift(acc);
    }
}

#if HAVE_SSE2
static void horizontal_sse2(const uint8_t *row, const struct axis *ax, int out_w, int flip,
                            uint8_t *dst) {
    const __m128i zero = _mm_setzero_si128();
    const __m128i round = _mm_set1_epi32(1 << (PREC - 1));
    for (int d = 0; d < out_w; d++) {
        int i = flip ? out_w - 1 - d : d;
        const uint8_t *p = row + (size_t)ax->start[i] * 4;
        const int32_t *c = ax->pairs + (size_t)i * (size_t)ax->max_pairs;
        __m128i acc = round;
        for (int k = 0; k < ax->npairs[i]; k++, p += 8) {
            /* Two pixels r0g0b0x0 r1g1b1x1 -> r0r1 g0g1 b0b1 x0x1 as int16: one madd per pair. */
            __m128i two = _mm_loadl_epi64((const __m128i *)p);
            __m128i mixed = _mm_unpacklo_epi8(two, _mm_srli_si128(two, 4));
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_unpacklo_epi8(mixed, zero),
                                                    _mm_set1_epi32(c[k])));
        }
        acc = _mm_srai_epi32(acc, PREC);
        acc = _mm_packus_epi16(_mm_packs_epi32(acc, acc), zero);
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(acc);
        memcpy(dst + 3 * d, &v, 4); /* the 4th byte is overwritten by the next pixel */
    }
}

/* Four rows at once: the weights and start of an output pixel are loaded once for all four,
   and the four results are packed together. */
static void horizontal4_sse2(const uint8_t *row, size_t src_stride, const struct axis *ax,
                             int out_w, int flip, uint8_t *dst, size_t dst_stride) {
    const __m128i zero = _mm_setzero_si128();
    const __m128i round = _mm_set1_epi32(1 << (PREC - 1));
    for (int d = 0; d < out_w; d++) {
        int i = flip ? out_w - 1 - d : d;
        const uint8_t *p = row + (size_t)ax->start[i] * 4;
        const int32_t *c = ax->pairs + (size_t)i * (size_t)ax->max_pairs;
        __m128i acc[4] = {round, round, round, round};
        for (int k = 0; k < ax->npairs[i]; k++, p += 8) {
            __m128i cc = _mm_set1_epi32(c[k]);
            for (int r = 0; r < 4; r++) {
                __m128i two = _mm_loadl_epi64((const __m128i *)(p + src_stride * (size_t)r));
                __m128i mixed = _mm_unpacklo_epi8(two, _mm_srli_si128(two, 4));
                acc[r] = _mm_add_epi32(acc[r],
                                       _mm_madd_epi16(_mm_unpacklo_epi8(mixed, zero), cc));
            }
        }
        __m128i px = _mm_packus_epi16(
            _mm_packs_epi32(_mm_srai_epi32(acc[0], PREC), _mm_srai_epi32(acc[1], PREC)),
            _mm_packs_epi32(_mm_srai_epi32(acc[2], PREC), _mm_srai_epi32(acc[3], PREC)));
        for (int r = 0; r < 4; r++) {
            uint32_t v = (uint32_t)_mm_cvtsi128_si32(px);
            memcpy(dst + dst_stride * (size_t)r + 3 * d, &v, 4);
            px = _mm_srli_si128(px, 4);
        }
    }
}

static void vertical_sse2(const uint8_t *first, size_t stride, int row_bytes, int npairs,
                          const int32_t *c, uint8_t *out) {
    const __m128i zero = _mm_setzero_si128();
    const __m128i round = _mm_set1_epi32(1 << (PREC - 1));
    for (int x = 0; x < row_bytes; x += 8) {
        __m128i lo = round, hi = round;
        const uint8_t *p = first + x;
        for (int k = 0; k < npairs; k++, p += 2 * stride) {
            __m128i ab = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)p),
                                           _mm_loadl_epi64((const __m128i *)(p + stride)));
            __m128i cc = _mm_set1_epi32(c[k]);
            lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi8(ab, zero), cc));
            hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi8(ab, zero), cc));
        }
        __m128i px = _mm_packs_epi32(_mm_srai_epi32(lo, PREC), _mm_srai_epi32(hi, PREC));
        px = _mm_packus_epi16(px, zero);
        if (x + 8 <= row_bytes) {
            _mm_storel_epi64((__m128i *)(out + x), px);
        } else {
            uint8_t tail[16];
            _mm_storeu_si128((__m128i *)tail, px);
            memcpy(out + x, tail, (size_t)(row_bytes - x));
        }
    }
}
#endif

#if HAVE_AVX2
/* Four rows at once, two per 256-bit register: one byte shuffle per pair of taps and row pair
   does the interleave and the widening that takes three SSE2 instructions per row. */
TARGET_AVX2 static void horizontal4_avx2(const uint8_t *row, size_t src_stride,
                                         const struct axis *ax, int out_w, int flip,
                                         uint8_t *dst, size_t dst_stride) {
    /* r0g0b0x0 r1g1b1x1 -> int16 r0 r1 g0 g1 b0 b1 x0 x1, in each 128-bit lane */
    const __m256i widen = _mm256_setr_epi8(
        0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1,
        0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
    const __m256i round = _mm256_set1_epi32(1 << (PREC - 1));
    const uint8_t *r0 = row, *r1 = row + src_stride, *r2 = row + 2 * src_stride,
                  *r3 = row + 3 * src_stride;
    for (int d = 0; d < out_w; d++) {
        int i = flip ? out_w - 1 - d : d;
        size_t at = (size_t)ax->start[i] * 4;
        const int32_t *c = ax->pairs + (size_t)i * (size_t)ax->max_pairs;
        __m256i acc01 = round, acc23 = round;
        for (int k = 0; k < ax->npairs[i]; k++, at += 8) {
            __m256i cc = _mm256_set1_epi32(c[k]);
            __m256i p01 = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(r0 + at))),
                _mm_loadl_epi64((const __m128i *)(r1 + at)), 1);
            __m256i p23 = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(r2 + at))),
                _mm_loadl_epi64((const __m128i *)(r3 + at)), 1);
            acc01 = _mm256_add_epi32(acc01,
                                     _mm256_madd_epi16(_mm256_shuffle_epi8(p01, widen), cc));
            acc23 = _mm256_add_epi32(acc23,
                                     _mm256_madd_epi16(_mm256_shuffle_epi8(p23, widen), cc));
        }
        /* Lanes: acc01 = [row0 | row1], acc23 = [row2 | row3]; pack keeps lanes apart, so
           the 16 bytes come out as row0 row2 row1 row3... within lanes: reorder on store. */
        __m256i packed = _mm256_packs_epi32(_mm256_srai_epi32(acc01, PREC),
                                            _mm256_srai_epi32(acc23, PREC));
        packed = _mm256_packus_epi16(packed, packed);
        /* lane 0 bytes: row0 (0-3), row2 (4-7); lane 1: row1, row3 */
        __m128i lo = _mm256_castsi256_si128(packed), hi = _mm256_extracti128_si256(packed, 1);
        uint32_t v0 = (uint32_t)_mm_cvtsi128_si32(lo);
        uint32_t v2 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(lo, 4));
        uint32_t v1 = (uint32_t)_mm_cvtsi128_si32(hi);
        uint32_t v3 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(hi, 4));
        memcpy(dst + 3 * d, &v0, 4);
        memcpy(dst + dst_stride + 3 * d, &v1, 4);
        memcpy(dst + 2 * dst_stride + 3 * d, &v2, 4);
        memcpy(dst + 3 * dst_stride + 3 * d, &v3, 4);
    }
}

/* 32 bytes per step: the two rows' bytes interleaved and widened within each 128-bit lane,
   four madds; packing within lanes then puts the 32 results back in order. */
TARGET_AVX2 static void vertical_avx2(const uint8_t *first, size_t stride, int row_bytes,
                                      int npairs, const int32_t *c, uint8_t *out) {
    const __m256i round = _mm256_set1_epi32(1 << (PREC - 1));
    const __m256i zero = _mm256_setzero_si256();
    int x = 0;
    for (; x + 32 <= row_bytes; x += 32) {
        __m256i acc0 = round, acc1 = round, acc2 = round, acc3 = round;
        const uint8_t *p = first + x;
        for (int k = 0; k < npairs; k++, p += 2 * stride) {
            __m256i a = _mm256_loadu_si256((const __m256i *)p);
            __m256i b = _mm256_loadu_si256((const __m256i *)(p + stride));
            __m256i cc = _mm256_set1_epi32(c[k]);
            __m256i lo = _mm256_unpacklo_epi8(a, b), hi = _mm256_unpackhi_epi8(a, b);
            /* lanes: lo = bytes 0-7 | 16-23 as pairs, hi = 8-15 | 24-31 */
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), cc));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), cc));
            acc2 = _mm256_add_epi32(acc2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), cc));
            acc3 = _mm256_add_epi32(acc3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), cc));
        }
        /* acc0: bytes 0-3 | 16-19, acc1: 4-7 | 20-23, acc2: 8-11 | 24-27, acc3: 12-15 | 28-31 */
        __m256i w01 = _mm256_packs_epi32(_mm256_srai_epi32(acc0, PREC),
                                         _mm256_srai_epi32(acc1, PREC));
        __m256i w23 = _mm256_packs_epi32(_mm256_srai_epi32(acc2, PREC),
                                         _mm256_srai_epi32(acc3, PREC));
        _mm256_storeu_si256((__m256i *)(out + x), _mm256_packus_epi16(w01, w23));
    }
    for (; x + 16 <= row_bytes; x += 16) {
        __m256i lo = round, hi = round;
        const uint8_t *p = first + x;
        for (int k = 0; k < npairs; k++, p += 2 * stride) {
            __m128i a = _mm_loadu_si128((const __m128i *)p);
            __m128i b = _mm_loadu_si128((const __m128i *)(p + stride));
            __m256i cc = _mm256_set1_epi32(c[k]);
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(
                                          _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b)), cc));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(
                                          _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b)), cc));
        }
        /* lo holds bytes 0-7 as 8 int32, hi bytes 8-15; packs works per 128-bit lane. */
        __m256i words = _mm256_packs_epi32(_mm256_srai_epi32(lo, PREC),
                                           _mm256_srai_epi32(hi, PREC));
        /* lanes now: [lo0-3 hi0-3 | lo4-7 hi4-7] -> restore 0..15 order */
        words = _mm256_permute4x64_epi64(words, 0xD8);
        __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(words),
                                         _mm256_extracti128_si256(words, 1));
        _mm_storeu_si128((__m128i *)(out + x), bytes);
    }
    if (x < row_bytes) vertical_sse2(first + x, stride, row_bytes - x, npairs, c, out + x);
}

static int cpu_has_avx2(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx2") ? 1 : 0;
    return known;
}
#endif

int resample_path_available(int path) {
    switch (path) {
    case RESAMPLE_AUTO:
    case RESAMPLE_PORTABLE:
        return 1;
    case RESAMPLE_SSE2:
        return HAVE_SSE2;
    case RESAMPLE_AVX2:
#if HAVE_AVX2
        return cpu_has_avx2();
#else
        return 0;
#endif
    default:
        return 0;
    }
}

/* One output row of `row_bytes` bytes from the horizontal pass's rows (see vertical_*). */
static void vertical_row(int path, const uint8_t *first, size_t stride, int row_bytes,
                         int npairs, const int32_t *c, uint8_t *out) {
#if HAVE_AVX2
    if (path == RESAMPLE_AVX2) {
        vertical_avx2(first, stride, row_bytes, npairs, c, out);
        return;
    }
#endif
#if HAVE_SSE2
    if (path != RESAMPLE_PORTABLE) {
        vertical_sse2(first, stride, row_bytes, npairs, c, out);
        return;
    }
#endif
    vertical_scalar(first, stride, row_bytes, npairs, c, out);
}

/* A row of RGB bytes through the per-channel table: three lookups per pixel, unrolled so the
   channel is known at compile time. */
static void map_row32(const uint8_t *bytes, int row_bytes, const uint32_t *table,
                      uint32_t *out) {
    const uint32_t *r = table, *g = table + 256, *b = table + 512;
    for (int x = 0; x < row_bytes; x += 3) {
        out[x] = r[bytes[x]];
        out[x + 1] = g[bytes[x + 1]];
        out[x + 2] = b[bytes[x + 2]];
    }
}

static void map_row16(const uint8_t *bytes, int row_bytes, const uint16_t *table,
                      uint16_t *out) {
    const uint16_t *r = table, *g = table + 256, *b = table + 512;
    for (int x = 0; x < row_bytes; x += 3) {
        out[x] = r[bytes[x]];
        out[x + 1] = g[bytes[x + 1]];
        out[x + 2] = b[bytes[x + 2]];
    }
}

void map_rgb(const uint8_t *bytes, size_t count, const struct output_map *map, void *dst) {
    /* In rows of at most INT_MAX / 3 * 3 bytes: the row mappers count in int. */
    const size_t chunk = (size_t)(INT_MAX / 3) * 3;
    for (size_t done = 0; done < count; done += chunk) {
        int n = (int)(count - done < chunk ? count - done : chunk);
        if (map->itemsize == 4)
            map_row32(bytes + done, n, map->table, (uint32_t *)dst + done);
        else
            map_row16(bytes + done, n, map->table, (uint16_t *)dst + done);
    }
}

/* The vertical pass: each output row straight into `dst`, or into `row` (row_bytes of
   scratch) and then through the map. */
static void vertical_pass(int path, const uint8_t *tmp, size_t stride, int first_row,
                          const struct axis *ay, int row_bytes, int out_h,
                          const struct output_map *map, uint8_t *row, void *dst) {
    int mapped = map != NULL && map->table != NULL;
    size_t out_row = (size_t)row_bytes * (size_t)(mapped ? map->itemsize : 1);
    for (int i = 0; i < out_h; i++) {
        const uint8_t *first = tmp + stride * (size_t)(ay->start[i] - first_row);
        const int32_t *c = ay->pairs + (size_t)i * (size_t)ay->max_pairs;
        uint8_t *out = (uint8_t *)dst + out_row * (size_t)i;
        vertical_row(path, first, stride, row_bytes, ay->npairs[i], c, mapped ? row : out);
        if (mapped && map->itemsize == 4)
            map_row32(row, row_bytes, map->table, (uint32_t *)out);
        else if (mapped)
            map_row16(row, row_bytes, map->table, (uint16_t *)out);
    }
}

int resample_box_rgbx_to_rgb(const uint8_t *src, int src_w, int src_h, size_t src_stride,
                             double x0, double y0, double x1, double y1, int flip,
                             void *dst, int out_w, int out_h, int path,
                             const struct output_map *map, struct scratch *work) {
    struct axis ax = {0}, ay = {0};
    int status = -1;
    if (axis_init(&ax, src_w, out_w, x0, x1) || axis_init(&ay, src_h, out_h, y0, y1)) goto done;

    /* The source rows the vertical pass reads, padding taps included (which may reach one
       row past the image: those rows are zero and weigh nothing). */
    int first_row = ay.start[0], end_row = 0;
    for (int i = 0; i < out_h; i++) {
        int end = ay.start[i] + 2 * ay.npairs[i];
        if (ay.start[i] < first_row) first_row = ay.start[i];
        if (end > end_row) end_row = end;
    }
    int row_bytes = 3 * out_w;
    size_t stride = ((size_t)row_bytes + 1 + 15) & ~(size_t)15; /* room for 8-byte loads */
    size_t tmp_bytes = stride * (size_t)(end_row - first_row);
    /* After the rows: one output row of bytes, for a map to read. */
    uint8_t *tmp = scratch_reserve(work, tmp_bytes + (size_t)row_bytes + 16);
    if (tmp == NULL) goto done;

    if (path == RESAMPLE_AUTO)
        path = resample_path_available(RESAMPLE_AVX2)   ? RESAMPLE_AVX2
               : resample_path_available(RESAMPLE_SSE2) ? RESAMPLE_SSE2
                                                        : RESAMPLE_PORTABLE;
    int src_end = end_row < src_h ? end_row : src_h;
    for (int y = first_row; y < end_row; y++) {
        uint8_t *line = tmp + stride * (size_t)(y - first_row);
        memset(line + row_bytes, 0, stride - (size_t)row_bytes);
        if (y >= src_h) memset(line, 0, stride);
    }
    for (int y = first_row; y < src_end;) {
        const uint8_t *row = src + src_stride * (size_t)y;
        uint8_t *line = tmp + stride * (size_t)(y - first_row);
        int rows = path != RESAMPLE_PORTABLE && y + 4 <= src_end ? 4 : 1;
#if HAVE_AVX2
        if (path == RESAMPLE_AVX2 && rows == 4)
            horizontal4_avx2(row, src_stride, &ax, out_w, flip, line, stride);
        else
#endif
#if HAVE_SSE2
        if (path != RESAMPLE_PORTABLE && rows == 4)
            horizontal4_sse2(row, src_stride, &ax, out_w, flip, line, stride);
        else if (path != RESAMPLE_PORTABLE)
            horizontal_sse2(row, &ax, out_w, flip, line);
        else
#endif
            horizontal_scalar(row, &ax, out_w, flip, line);
        y += rows;
    }
    vertical_pass(path, tmp, stride, first_row, &ay, row_bytes, out_h, map, tmp + tmp_bytes,
                  dst);
    status = 0;
done:
    axis_free(&ax);
    axis_free(&ay);
    return status;
}

/* rows x cols bytes at `src` (rows `src_stride` apart) to cols x rows at `dst` (`dst_stride`
   apart): 8 x 8 tiles with SSE2 unpacks (few enough registers that none spill), the edges one
   byte at a time. Tiles go down a strip of 8 source columns, so each output row is written
   in order and the strip's source lines (rows x 64 bytes) stay in the L1 cache. */
#if HAVE_SSE2
/* Fully unrolled, so the tile stays in registers (GCC keeps arrays in memory otherwise). */
#define UNROLLED _Pragma("GCC unroll 16")

/* One 16 x 16 tile: four rounds of unpacks (bytes, then 16-, 32-, 64-bit pairs). */
static void transpose16(const uint8_t *src, size_t src_stride, uint8_t *dst,
                        size_t dst_stride) {
    __m128i a[16], b[16];
    UNROLLED
    for (int i = 0; i < 16; i++)
        a[i] = _mm_loadu_si128((const __m128i *)(src + src_stride * (size_t)i));
    UNROLLED
    for (int i = 0; i < 8; i++) {
        b[i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
        b[i + 8] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
    }
    UNROLLED
    for (int h = 0; h < 2; h++)
        UNROLLED
        for (int i = 0; i < 4; i++) {
            a[8 * h + i] = _mm_unpacklo_epi16(b[8 * h + 2 * i], b[8 * h + 2 * i + 1]);
            a[8 * h + i + 4] = _mm_unpackhi_epi16(b[8 * h + 2 * i], b[8 * h + 2 * i + 1]);
        }
    UNROLLED
    for (int q = 0; q < 4; q++)
        UNROLLED
        for (int i = 0; i < 2; i++) {
            b[4 * q + i] = _mm_unpacklo_epi32(a[4 * q + 2 * i], a[4 * q + 2 * i + 1]);
            b[4 * q + i + 2] = _mm_unpackhi_epi32(a[4 * q + 2 * i], a[4 * q + 2 * i + 1]);
        }
    /* b[4q + 2t] holds columns 4q + 2t and 4q + 2t + 1 (a half each) of rows 0-7, b[4q + 2t + 1]
       the same of rows 8-15 */
    UNROLLED
    for (int k = 0; k < 16; k += 2) {
        _mm_storeu_si128((__m128i *)(dst + dst_stride * (size_t)k),
                         _mm_unpacklo_epi64(b[k], b[k + 1]));
        _mm_storeu_si128((__m128i *)(dst + dst_stride * (size_t)(k + 1)),
                         _mm_unpackhi_epi64(b[k], b[k + 1]));
    }
}
#endif

static void transpose_bytes(const uint8_t *src, size_t src_stride, int rows, int cols,
                            uint8_t *dst, size_t dst_stride) {
    int c0 = 0;
#if HAVE_SSE2
    for (; c0 + 16 <= cols && rows >= 16; c0 += 16) {
        int r0 = 0;
        for (; r0 + 16 <= rows; r0 += 16)
            transpose16(src + src_stride * (size_t)r0 + c0, src_stride,
                        dst + dst_stride * (size_t)c0 + r0, dst_stride);
        for (int j = c0; j < c0 + 16; j++)
            for (int i = r0; i < rows; i++)
                dst[dst_stride * (size_t)j + i] = src[src_stride * (size_t)i + j];
    }
    for (; c0 + 8 <= cols; c0 += 8) {
        int r0 = 0;
        for (; r0 + 8 <= rows; r0 += 8) {
            const uint8_t *s0 = src + src_stride * (size_t)r0 + c0;
            __m128i r[8];
            UNROLLED
            for (int i = 0; i < 8; i++)
                r[i] = _mm_loadl_epi64((const __m128i *)(s0 + src_stride * (size_t)i));
            /* bytes of rows (0,1) (2,3) (4,5) (6,7) interleaved, then their 16-bit pairs,
               then 32-bit quads: each 128-bit result holds two output rows */
            __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]);
            __m128i a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
            __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
            __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
            __m128i c[4] = {_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2),
                            _mm_unpacklo_epi32(b1, b3), _mm_unpackhi_epi32(b1, b3)};
            uint8_t *d0 = dst + dst_stride * (size_t)c0 + r0;
            UNROLLED
            for (int i = 0; i < 4; i++) {
                _mm_storel_epi64((__m128i *)(d0 + dst_stride * (size_t)(2 * i)), c[i]);
                _mm_storel_epi64((__m128i *)(d0 + dst_stride * (size_t)(2 * i + 1)),
                                 _mm_unpackhi_epi64(c[i], c[i]));
            }
        }
        for (int j = c0; j < c0 + 8; j++)
            for (int i = r0; i < rows; i++)
                dst[dst_stride * (size_t)j + i] = src[src_stride * (size_t)i + j];
    }
#endif
    for (int j = c0; j < cols; j++)
        for (int i = 0; i < rows; i++)
            dst[dst_stride * (size_t)j + i] = src[src_stride * (size_t)i + j];
}

/* Rows `in_rows` -> `ax`'s outputs: output row d (from axis index flip ? n-1-d : d) of
   `row_bytes` bytes. The source has one readable row past its last for padding taps. */
static void vertical_rows(int path, const uint8_t *src, size_t src_stride,
                          const struct axis *ax, int n, int flip, int row_bytes, uint8_t *dst,
                          size_t dst_stride) {
    for (int d = 0; d < n; d++) {
        int i = flip ? n - 1 - d : d;
        vertical_row(path, src + src_stride * (size_t)ax->start[i], src_stride, row_bytes,
                     ax->npairs[i], ax->pairs + (size_t)i * (size_t)ax->max_pairs,
                     dst + dst_stride * (size_t)d);
    }
}

static size_t padded_stride(int bytes) { return ((size_t)bytes + 16 + 15) & ~(size_t)15; }

int resample_planes(int count, const uint8_t *const *src, int src_w, int src_h,
                    const size_t *src_stride, double box_w, double box_h, int flip,
                    uint8_t *const *dst, int out_w, int out_h, size_t dst_stride, int path,
                    struct scratch *work) {
    struct axis ax = {0}, ay = {0};
    int status = -1;
    if (axis_init(&ax, src_w, out_w, 0.0, box_w) || axis_init(&ay, src_h, out_h, 0.0, box_h))
        goto done;
    if (path == RESAMPLE_AUTO)
        path = resample_path_available(RESAMPLE_AVX2)   ? RESAMPLE_AVX2
               : resample_path_available(RESAMPLE_SSE2) ? RESAMPLE_SSE2
                                                        : RESAMPLE_PORTABLE;
    /* tall: out_h rows of src_w; wide: its transpose, src_w (+1 zero row) rows of out_h;
       narrow: out_w rows of out_h, transposed into dst. */
    size_t tall_stride = padded_stride(src_w), wide_stride = padded_stride(out_h);
    size_t tall = tall_stride * (size_t)out_h, wide = wide_stride * (size_t)(src_w + 1);
    uint8_t *mem = scratch_reserve(work, tall + wide + wide_stride * (size_t)out_w);
    if (mem == NULL) goto done;
    uint8_t *tall_rows = mem, *wide_rows = mem + tall, *narrow = mem + tall + wide;
    memset(wide_rows + wide_stride * (size_t)src_w, 0, wide_stride);
    for (int k = 0; k < count; k++) {
        vertical_rows(path, src[k], src_stride[k], &ay, out_h, 0, src_w, tall_rows,
                      tall_stride);
        transpose_bytes(tall_rows, tall_stride, out_h, src_w, wide_rows, wide_stride);
        vertical_rows(path, wide_rows, wide_stride, &ax, out_w, flip, out_h, narrow,
                      wide_stride);
        transpose_bytes(narrow, wide_stride, out_w, out_h, dst[k], dst_stride);
    }
    status = 0;
done:
    axis_free(&ax);
    axis_free(&ay);
    return status;
}
