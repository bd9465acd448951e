/* YCbCr to RGB (see ycc.h). The AVX2 code splits libjpeg's constants so every product fits a
   16-bit multiply-add, exactly: 91881 = 65536 + 26345, 116130 = 2 x 65536 - 14942 and
   46802 = 65536 - 18734, the whole multiples added outside the shift. So both give the same
   bytes. */
#include "ycc.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_AVX2 1
#else
#define HAVE_AVX2 0
#endif

static inline uint8_t clamp255(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

static void row_portable(const uint8_t *y, const uint8_t *cb, const uint8_t *cr, int width,
                         uint8_t *rgb) {
    for (int x = 0; x < width; x++) {
        int32_t l = y[x], b = (int32_t)cb[x] - 128, r = (int32_t)cr[x] - 128;
        rgb[3 * x] = clamp255(l + ((91881 * r + 32768) >> 16));
        rgb[3 * x + 1] = clamp255(l + ((-22554 * b - 46802 * r + 32768) >> 16));
        rgb[3 * x + 2] = clamp255(l + ((116130 * b + 32768) >> 16));
    }
}

#if HAVE_AVX2
/* (pair products + 32768) >> 16 for 16 pixels: `lo`/`hi` hold (cb, cr) int16 pairs. */
__attribute__((target("avx2"))) static inline __m256i fraction(__m256i lo, __m256i hi,
                                                                __m256i weights) {
    const __m256i half = _mm256_set1_epi32(32768);
    __m256i a = _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(lo, weights), half), 16);
    __m256i b = _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(hi, weights), half), 16);
    return _mm256_packs_epi32(a, b); /* per lane: undoes the unpacks' order */
}

__attribute__((target("avx2"))) static inline __m128i bytes_of(__m256i words) {
    return _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
}

__attribute__((target("avx2"))) static void row_avx2(const uint8_t *y, const uint8_t *cb,
                                                     const uint8_t *cr, int width,
                                                     uint8_t *rgb) {
    const __m256i bias = _mm256_set1_epi16(128);
    const __m256i w_r = _mm256_set1_epi32((int32_t)((uint32_t)26345 << 16));
    const __m256i w_g = _mm256_set1_epi32((int32_t)(((uint32_t)18734 << 16) |
                                                    (uint16_t)-22554));
    const __m256i w_b = _mm256_set1_epi32((int32_t)(uint16_t)-14942);
    /* R, G, B (16 bytes each) -> 48 bytes r0 g0 b0 r1 ...: byte i of output block k comes
       from plane (3k + i) % 3 at pixel (16k + i) / 3. */
    static const int8_t pick[3][3][16] = {
        {{0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1, 5},
         {-1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1},
         {-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1}},
        {{-1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10, -1},
         {5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10},
         {-1, 5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1}},
        {{-1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1, -1},
         {-1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1},
         {10, -1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15}}};
    int x = 0;
    for (; x + 16 <= width; x += 16) {
        __m256i l = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(y + x)));
        __m256i b = _mm256_sub_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(cb + x))), bias);
        __m256i r = _mm256_sub_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(cr + x))), bias);
        __m256i lo = _mm256_unpacklo_epi16(b, r), hi = _mm256_unpackhi_epi16(b, r);
        __m256i red = _mm256_add_epi16(_mm256_add_epi16(l, r), fraction(lo, hi, w_r));
        __m256i green = _mm256_sub_epi16(_mm256_add_epi16(l, fraction(lo, hi, w_g)), r);
        __m256i blue = _mm256_add_epi16(_mm256_add_epi16(l, _mm256_add_epi16(b, b)),
                                        fraction(lo, hi, w_b));
        __m128i planes[3] = {bytes_of(red), bytes_of(green), bytes_of(blue)};
        /* unrolled, so the planes stay in registers and the masks are loaded once a row */
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++) {
            __m128i out = _mm_setzero_si128();
            _Pragma("GCC unroll 3") for (int c = 0; c < 3; c++)
                out = _mm_or_si128(out, _mm_shuffle_epi8(
                                            planes[c],
                                            _mm_loadu_si128((const __m128i *)pick[k][c])));
            _mm_storeu_si128((__m128i *)(rgb + 3 * x + 16 * k), out);
        }
    }
    row_portable(y + x, cb + x, cr + x, width - x, rgb + 3 * x);
}
#endif

int ycc_avx2_available(void) {
#if HAVE_AVX2
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

void ycc_to_rgb(const uint8_t *y, const uint8_t *cb, const uint8_t *cr, size_t stride,
                int width, int height, uint8_t *dst, size_t dst_stride, int avx2) {
    (void)avx2;
    for (int row = 0; row < height; row++) {
        size_t at = stride * (size_t)row;
        uint8_t *out = dst + dst_stride * (size_t)row;
#if HAVE_AVX2
        if (avx2) {
            row_avx2(y + at, cb + at, cr + at, width, out);
            continue;
        }
#endif
        row_portable(y + at, cb + at, cr + at, width, out);
    }
}
