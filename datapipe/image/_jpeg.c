/*
 * JPEG decoding for the loader and the converter, with libjpeg(-turbo).
 *
 * decode_region(data, x0, y0, w, h, scale_denom) -> (pixels: bytes, width, height, left, top)
 *   Decodes only the rows and (iMCU-aligned) columns a box needs, optionally at 1/2, 1/4 or
 *   1/8 scale in the DCT domain. The box is in stored pixels; the result covers at least the
 *   scaled box. `pixels` is packed RGB, `height` rows of `width` pixels, whose top-left pixel
 *   is scaled image pixel (left, top).
 *
 * crop_into(data, region, scale_denom, box, flip, out, path="auto", size=(0, 0),
 *           table=None) -> None
 *   The loader's whole per-image job in one call: decode `region` (x, y, w, h in stored pixels)
 *   as above, then resample the float `box` (x0, y0, x1, y1, stored pixels) with PIL's
 *   antialiased bilinear filter to fill `out` (a writable C-contiguous H x W x 3 uint8 array),
 *   mirrored when `flip`. No intermediate Python objects; working memory is reused per thread.
 *   `path` picks the resampler's code ("auto", or one of resample_paths(), for tests). With
 *   `size` (width, height), a JPEG of any other size is an error before anything is decoded:
 *   the region and box were planned from that size. `table` (3 x 256 values of 2 or 4 bytes,
 *   C-contiguous) maps each channel's byte to what `out` holds instead (normalised floats,
 *   written as the batch's dtype): `out` is then H x W x 3 of the table's item size.
 *
 * whole_into(data, scale_denom, flip, out, path="auto", size=(0, 0)) -> None
 *   The whole image resized to fill `out` (H x W x 3 uint8), mirrored when `flip`: the patch
 *   producer's call. A YCbCr JPEG is decoded to its planes as stored (no chroma upsampling,
 *   no colour conversion at the stored size); each plane is resampled from its own pixels
 *   with crop_into's filter and the colours converted at the output size, with libjpeg's
 *   arithmetic (ycc.c). On photos shrunk to about half their size that is ~7 % less CPU than
 *   decoding RGB and resizing it, and within 45 dB PSNR of it (chroma is smooth in photos;
 *   on per-pixel colour noise the two differ more, ~31 dB). Other JPEGs (greyscale, a
 *   colour space other than YCbCr) take crop_into's route.
 *
 * resample_paths() -> tuple of the resampler paths this build and CPU can run.
 *
 * In both, rows above the box are skipped (entropy-decoded only), rows below are never read,
 * columns outside the iMCU-aligned span are not decoded at all, and the GIL is released. They
 * raise ValueError on anything libjpeg rejects or warns about (truncated or corrupt data, CMYK);
 * callers fall back to PIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>

#include "resample.h"
#include "ycc.h"

struct error_manager {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

static void on_error(j_common_ptr cinfo) {
    struct error_manager *err = (struct error_manager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    /* A warning means corrupt data (truncation, a bad marker): fail, and let the caller's PIL
       path decide, as it would have without this module. Trace messages (level > 0) pass. */
    if (level < 0) on_error(cinfo);
}

/* Errors to `err` (a longjmp to err->jump), then the header of `data` read into `cinfo`;
   longjmps unless the image is `expect_w` x `expect_h` (when those are > 0). Call
   `watch_errors` before the setjmp, `read_header` after it. */
static void watch_errors(struct jpeg_decompress_struct *cinfo, struct error_manager *err) {
    cinfo->err = jpeg_std_error(&err->pub);
    err->pub.error_exit = on_error;
    err->pub.emit_message = on_message;
    err->message[0] = '\0';
}

static void read_header(struct jpeg_decompress_struct *cinfo, struct error_manager *err,
                        const uint8_t *data, size_t len, int expect_w, int expect_h) {
    jpeg_create_decompress(cinfo);
    jpeg_mem_src(cinfo, data, (unsigned long)len);
    jpeg_read_header(cinfo, TRUE);
    if (expect_w > 0 && ((int)cinfo->image_width != expect_w ||
                         (int)cinfo->image_height != expect_h)) {
        snprintf(err->message, sizeof err->message, "the JPEG is %ux%u pixels, not %dx%d",
                 (unsigned)cinfo->image_width, (unsigned)cinfo->image_height, expect_w,
                 expect_h);
        longjmp(err->jump, 1);
    }
}

/* Working memory per thread, freed when the thread ends. */
struct buffers {
    struct scratch pixels, resample, planes;
};
static pthread_key_t buffers_key;
static pthread_once_t buffers_once = PTHREAD_ONCE_INIT;

static void free_buffers(void *p) {
    struct buffers *b = p;
    free(b->pixels.data);
    free(b->resample.data);
    free(b->planes.data);
    free(b);
}

static void make_buffers_key(void) { pthread_key_create(&buffers_key, free_buffers); }

static struct buffers *thread_buffers(void) {
    pthread_once(&buffers_once, make_buffers_key);
    struct buffers *b = pthread_getspecific(buffers_key);
    if (b == NULL) {
        b = calloc(1, sizeof *b);
        if (b != NULL && pthread_setspecific(buffers_key, b) != 0) {
            free(b);
            b = NULL;
        }
    }
    return b;
}

/* A decoded region: `height` rows of `width` pixels, `stride` bytes apart, in scratch memory. */
struct region {
    uint8_t *pixels;
    size_t stride;
    int width, height, left, top;
};

/* Decodes the box into `mem`, `bpp` bytes per pixel in `space`, with `slack` spare bytes after
   each row; fails unless the image is `expect_w` x `expect_h` (when those are > 0). Runs without
   the GIL. Returns 0, or -1 with `message` set. */
static int decode_box(const uint8_t *data, size_t len, int x0, int y0, int w, int h, int denom,
                      int expect_w, int expect_h, J_COLOR_SPACE space, int bpp, size_t slack,
                      struct scratch *mem, struct region *out, char *message) {
    struct jpeg_decompress_struct cinfo;
    struct error_manager err;
    int failed = 0;
    watch_errors(&cinfo, &err);
    if (setjmp(err.jump)) {
        failed = 1;
    } else {
        read_header(&cinfo, &err, data, len, expect_w, expect_h);
        cinfo.out_color_space = space;
        cinfo.scale_num = 1;
        cinfo.scale_denom = (unsigned int)denom;
        jpeg_start_decompress(&cinfo);
        JDIMENSION out_w = cinfo.output_width, out_h = cinfo.output_height;
        /* The box in scaled pixels, widened to whole pixels and clamped to the image. */
        JDIMENSION sx0 = (JDIMENSION)(x0 / denom), sy0 = (JDIMENSION)(y0 / denom);
        JDIMENSION sx1 = (JDIMENSION)((x0 + w + denom - 1) / denom);
        JDIMENSION sy1 = (JDIMENSION)((y0 + h + denom - 1) / denom);
        if (sx1 > out_w) sx1 = out_w;
        if (sy1 > out_h) sy1 = out_h;
        if (sx0 >= sx1) sx0 = sx1 ? sx1 - 1 : 0;
        if (sy0 >= sy1) sy0 = sy1 ? sy1 - 1 : 0;
        JDIMENSION left = sx0, width = sx1 - sx0, top = sy0, height = sy1 - sy0;
        if (width < out_w) jpeg_crop_scanline(&cinfo, &left, &width); /* iMCU-aligned */
        if (top > 0) jpeg_skip_scanlines(&cinfo, top);
        size_t stride = (size_t)width * (size_t)bpp + slack;
        uint8_t *pixels = scratch_reserve(mem, stride * height);
        if (pixels == NULL) {
            strcpy(err.message, "out of memory");
            failed = 1;
        } else {
            while (cinfo.output_scanline < top + height) {
                JSAMPROW rows[16];
                JDIMENSION n = 0, next = cinfo.output_scanline - top;
                for (; n < 16 && next + n < height; n++)
                    rows[n] = pixels + stride * (next + n);
                jpeg_read_scanlines(&cinfo, rows, n);
            }
            if (slack > 0)
                for (JDIMENSION y = 0; y < height; y++)
                    memset(pixels + stride * y + stride - slack, 0, slack);
            *out = (struct region){pixels, stride, (int)width, (int)height, (int)left,
                                   (int)top};
        }
    }
    jpeg_destroy_decompress(&cinfo); /* also aborts: rows below the box are never decoded */
    if (failed) strcpy(message, err.message);
    return failed ? -1 : 0;
}

/* A YCbCr JPEG's three planes as stored, each in its own pixels (chroma at its sampling). */
struct planes {
    uint8_t *pixels[3];
    size_t stride[3];
    int width[3], height[3]; /* decoded pixels that hold the image */
    double box_w[3], box_h[3]; /* the image's extent in the plane's pixels */
};

/* Like decode_box for the whole image, but to planes (libjpeg's raw data). Returns 1 when the
   JPEG is not 3-component YCbCr with luma at the highest sampling (the caller decodes RGB). */
static int decode_planes(const uint8_t *data, size_t len, int denom, int expect_w,
                         int expect_h, struct scratch *mem, struct planes *out, char *message) {
    struct jpeg_decompress_struct cinfo;
    struct error_manager err;
    int status = 0;
    watch_errors(&cinfo, &err);
    if (setjmp(err.jump)) {
        status = -1;
    } else {
        read_header(&cinfo, &err, data, len, expect_w, expect_h);
        jpeg_component_info *c = cinfo.comp_info;
        if (cinfo.num_components != 3 || cinfo.jpeg_color_space != JCS_YCbCr ||
            c[0].h_samp_factor != cinfo.max_h_samp_factor ||
            c[0].v_samp_factor != cinfo.max_v_samp_factor ||
            c[1].h_samp_factor != c[2].h_samp_factor ||
            c[1].v_samp_factor != c[2].v_samp_factor) {
            status = 1;
        } else {
            cinfo.raw_data_out = TRUE;
            cinfo.out_color_space = JCS_YCbCr;
            cinfo.scale_num = 1;
            cinfo.scale_denom = (unsigned int)denom;
            jpeg_start_decompress(&cinfo);
            int lines = cinfo.max_v_samp_factor * cinfo.min_DCT_scaled_size; /* per call */
            int calls = ((int)cinfo.output_height + lines - 1) / lines;
            size_t offset[3], total = 0;
            for (int k = 0; k < 3; k++) {
                int per_call = c[k].v_samp_factor * c[k].DCT_scaled_size;
                int alloc_w = (int)c[k].width_in_blocks * c[k].DCT_scaled_size;
                out->stride[k] = ((size_t)alloc_w + 16 + 15) & ~(size_t)15;
                offset[k] = total;
                /* every call's rows, plus one readable row for the resampler's padding */
                total += out->stride[k] * (size_t)(calls * per_call + 1);
                out->width[k] = (int)c[k].downsampled_width;
                out->height[k] = (int)c[k].downsampled_height;
                double scale = (double)c[k].DCT_scaled_size / DCTSIZE;
                out->box_w[k] = cinfo.image_width * scale * c[k].h_samp_factor /
                                cinfo.max_h_samp_factor;
                out->box_h[k] = cinfo.image_height * scale * c[k].v_samp_factor /
                                cinfo.max_v_samp_factor;
            }
            uint8_t *base = scratch_reserve(mem, total);
            if (base == NULL) {
                strcpy(err.message, "out of memory");
                status = -1;
            } else {
                for (int k = 0; k < 3; k++) out->pixels[k] = base + offset[k];
                JSAMPROW rows[3][4 * DCTSIZE];
                JSAMPARRAY planes[3] = {rows[0], rows[1], rows[2]};
                for (int call = 0; call < calls; call++) {
                    for (int k = 0; k < 3; k++) {
                        int per_call = c[k].v_samp_factor * c[k].DCT_scaled_size;
                        for (int r = 0; r < per_call; r++)
                            rows[k][r] = out->pixels[k] +
                                         out->stride[k] * (size_t)(call * per_call + r);
                    }
                    jpeg_read_raw_data(&cinfo, planes, (JDIMENSION)lines);
                }
                for (int k = 0; k < 3; k++) /* the padding row */
                    memset(out->pixels[k] + out->stride[k] * (size_t)(calls *
                           c[k].v_samp_factor * c[k].DCT_scaled_size), 0, out->stride[k]);
            }
        }
    }
    jpeg_destroy_decompress(&cinfo);
    if (status < 0) strcpy(message, err.message);
    return status;
}

static int check_denom(int denom) {
    if (denom == 1 || denom == 2 || denom == 4 || denom == 8) return 0;
    PyErr_SetString(PyExc_ValueError, "scale_denom must be 1, 2, 4 or 8");
    return -1;
}

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer data;
    int x0, y0, w, h, denom, failed;
    struct region r;
    char message[JMSG_LENGTH_MAX];
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiiii", &data, &x0, &y0, &w, &h, &denom)) return NULL;
    struct buffers *mem = thread_buffers();
    if (check_denom(denom) || mem == NULL) {
        PyBuffer_Release(&data);
        return mem == NULL ? PyErr_NoMemory() : NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    failed = decode_box(data.buf, (size_t)data.len, x0, y0, w, h, denom, 0, 0, JCS_RGB, 3, 0,
                        &mem->pixels, &r, message);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (failed) return PyErr_Format(PyExc_ValueError, "libjpeg: %s", message);
    PyObject *out = PyBytes_FromStringAndSize((const char *)r.pixels,
                                              (Py_ssize_t)r.stride * r.height);
    if (out == NULL) return NULL;
    return Py_BuildValue("(Niiii)", out, r.width, r.height, r.left, r.top);
}

static const char *const path_names[] = {"auto", "portable", "sse2", "avx2"};

static int resample_path(const char *name) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, path_names[i]) == 0) return i; /* RESAMPLE_* follow this order */
    return -1;
}

/* The RESAMPLE_* code of `name` when this build and CPU run it; -1 with ValueError set. */
static int available_path(const char *name) {
    int path = resample_path(name);
    if (path < 0 || !resample_path_available(path)) {
        PyErr_Format(PyExc_ValueError, "resampler path %s is not available here", name);
        return -1;
    }
    return path;
}

static PyObject *resample_paths(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *names = PyList_New(0);
    for (int i = RESAMPLE_PORTABLE; names != NULL && i <= RESAMPLE_AVX2; i++) {
        if (!resample_path_available(i)) continue;
        PyObject *name = PyUnicode_FromString(path_names[i]);
        if (name == NULL || PyList_Append(names, name) < 0) Py_CLEAR(names);
        Py_XDECREF(name);
    }
    if (names == NULL) return NULL;
    PyObject *result = PyList_AsTuple(names);
    Py_DECREF(names);
    return result;
}

/* `table` (None, or 3 x 256 items of 2 or 4 bytes) into `map`; 0, or -1 with an exception. */
static int get_output_map(PyObject *table_obj, Py_buffer *table, struct output_map *map) {
    map->table = NULL;
    map->itemsize = 1;
    if (table_obj == Py_None) return 0;
    if (PyObject_GetBuffer(table_obj, table, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) return -1;
    if ((table->itemsize != 2 && table->itemsize != 4) || table->len != 768 * table->itemsize) {
        PyBuffer_Release(table);
        PyErr_SetString(PyExc_ValueError, "table must hold 3 x 256 values of 2 or 4 bytes");
        return -1;
    }
    map->table = table->buf;
    map->itemsize = (int)table->itemsize;
    return 0;
}

/* `out` as a writable C-contiguous H x W x 3 array of `itemsize`-byte items; 0, or -1. */
static int get_output(PyObject *out_obj, int itemsize, Py_buffer *out) {
    if (PyObject_GetBuffer(out_obj, out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT))
        return -1;
    if (out->ndim != 3 || out->shape[2] != 3 || out->itemsize != itemsize ||
        out->shape[0] < 1 || out->shape[1] < 1) {
        PyBuffer_Release(out);
        PyErr_Format(PyExc_ValueError, "out must be a C-contiguous H x W x 3 array of %d-byte "
                     "items (uint8, or the table's item size)", itemsize);
        return -1;
    }
    return 0;
}

static PyObject *crop_into(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "region", "scale_denom", "box", "flip", "out", "path",
                               "size", "table", NULL};
    Py_buffer data, out, table = {0};
    int rx, ry, rw, rh, denom, flip, failed = 0, expect_w = 0, expect_h = 0;
    const char *path_name = "auto";
    double bx0, by0, bx1, by1;
    PyObject *out_obj, *table_obj = Py_None;
    struct region r;
    struct output_map map;
    char message[JMSG_LENGTH_MAX] = "";
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*(iiii)i(dddd)pO|s(ii)O", keywords, &data,
                                     &rx, &ry, &rw, &rh, &denom, &bx0, &by0, &bx1, &by1, &flip,
                                     &out_obj, &path_name, &expect_w, &expect_h, &table_obj))
        return NULL;
    int path = available_path(path_name);
    if (path < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (check_denom(denom) || get_output_map(table_obj, &table, &map)) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (get_output(out_obj, map.itemsize, &out)) {
        PyBuffer_Release(&data);
        if (map.table != NULL) PyBuffer_Release(&table);
        return NULL;
    }
    int out_h = (int)out.shape[0], out_w = (int)out.shape[1];
    struct buffers *mem = thread_buffers();
    if (mem == NULL) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        if (map.table != NULL) PyBuffer_Release(&table);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    /* RGBX: 4-byte pixels for the resampler, plus one spare pixel per row for its last tap. */
    failed = decode_box(data.buf, (size_t)data.len, rx, ry, rw, rh, denom, expect_w, expect_h,
                        JCS_EXT_RGBX, 4, 4, &mem->pixels, &r, message);
    if (!failed) {
        double x0 = bx0 / denom - r.left, y0 = by0 / denom - r.top;
        double x1 = bx1 / denom - r.left, y1 = by1 / denom - r.top;
        if (x0 < 0) x0 = 0;
        if (y0 < 0) y0 = 0;
        if (x1 > r.width) x1 = r.width;
        if (y1 > r.height) y1 = r.height;
        if (x1 <= x0 || y1 <= y0) {
            strcpy(message, "crop box outside the decoded region");
            failed = 1;
        } else if (resample_box_rgbx_to_rgb(r.pixels, r.width, r.height, r.stride, x0, y0, x1,
                                            y1, flip, out.buf, out_w, out_h, path, &map,
                                            &mem->resample)) {
            strcpy(message, "out of memory");
            failed = 1;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (map.table != NULL) PyBuffer_Release(&table);
    if (failed) return PyErr_Format(PyExc_ValueError, "libjpeg: %s", message);
    Py_RETURN_NONE;
}

/* The decoded planes resized to out_w x out_h and converted to RGB at `dst`. */
static int planes_into(const struct planes *planes, int flip, uint8_t *dst, int out_w,
                       int out_h, int path, struct buffers *mem) {
    size_t stride = ((size_t)out_w + 15) & ~(size_t)15, plane = stride * (size_t)out_h;
    uint8_t *sized = scratch_reserve(&mem->planes, 3 * plane);
    if (sized == NULL) return -1;
    uint8_t *const out[3] = {sized, sized + plane, sized + 2 * plane};
    /* Cb and Cr share a size (and so their filter weights) whenever they share sampling. */
    int chroma_alike = planes->width[1] == planes->width[2] &&
                       planes->height[1] == planes->height[2] &&
                       planes->box_w[1] == planes->box_w[2] && planes->box_h[1] == planes->box_h[2];
    for (int k = 0, count; k < 3; k += count) {
        count = k == 1 && chroma_alike ? 2 : 1;
        if (resample_planes(count, (const uint8_t *const *)&planes->pixels[k],
                            planes->width[k], planes->height[k], &planes->stride[k],
                            planes->box_w[k], planes->box_h[k], flip, &out[k], out_w, out_h,
                            stride, path, &mem->resample))
            return -1;
    }
    int avx2 = ycc_avx2_available() && (path == RESAMPLE_AVX2 || path == RESAMPLE_AUTO);
    ycc_to_rgb(sized, sized + plane, sized + 2 * plane, stride, out_w, out_h, dst,
               (size_t)out_w * 3, avx2);
    return 0;
}

static PyObject *whole_into(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "scale_denom", "flip", "out", "path", "size", NULL};
    Py_buffer data, out;
    int denom, flip, failed = 0, expect_w = 0, expect_h = 0;
    const char *path_name = "auto";
    PyObject *out_obj;
    char message[JMSG_LENGTH_MAX] = "";
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*ipO|s(ii)", keywords, &data, &denom,
                                     &flip, &out_obj, &path_name, &expect_w, &expect_h))
        return NULL;
    int path = available_path(path_name);
    if (path < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (check_denom(denom) || get_output(out_obj, 1, &out)) {
        PyBuffer_Release(&data);
        return NULL;
    }
    int out_h = (int)out.shape[0], out_w = (int)out.shape[1];
    struct buffers *mem = thread_buffers();
    if (mem == NULL) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    struct planes planes;
    failed = decode_planes(data.buf, (size_t)data.len, denom, expect_w, expect_h,
                           &mem->pixels, &planes, message);
    if (failed == 0 && planes_into(&planes, flip, out.buf, out_w, out_h, path, mem)) {
        strcpy(message, "out of memory");
        failed = -1;
    } else if (failed == 1) { /* not YCbCr: decode RGB and resize it, as crop_into does */
        struct region r;
        struct output_map bytes = {NULL, 1};
        failed = decode_box(data.buf, (size_t)data.len, 0, 0, INT_MAX / 2, INT_MAX / 2,
                            denom, expect_w, expect_h, JCS_EXT_RGBX, 4, 4, &mem->pixels, &r,
                            message);
        if (!failed && resample_box_rgbx_to_rgb(r.pixels, r.width, r.height, r.stride, 0.0,
                                                0.0, r.width, r.height, flip, out.buf,
                                                out_w, out_h, path, &bytes,
                                                &mem->resample)) {
            strcpy(message, "out of memory");
            failed = -1;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (failed) return PyErr_Format(PyExc_ValueError, "libjpeg: %s", message);
    Py_RETURN_NONE;
}

/* map_into(pixels, table, out): H x W x 3 uint8 `pixels` through `table` into `out` (the
   table's item size): the decoder's own output map, for pixels that steps changed after it. */
static PyObject *map_into(PyObject *self, PyObject *args) {
    PyObject *src_obj, *table_obj, *out_obj;
    Py_buffer src, table = {0}, out;
    struct output_map map;
    if (!PyArg_ParseTuple(args, "OOO", &src_obj, &table_obj, &out_obj)) return NULL;
    if (table_obj == Py_None) {
        PyErr_SetString(PyExc_ValueError, "map_into needs a table");
        return NULL;
    }
    if (get_output_map(table_obj, &table, &map)) return NULL;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) {
        PyBuffer_Release(&table);
        return NULL;
    }
    if (src.ndim != 3 || src.shape[2] != 3 || src.itemsize != 1) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "pixels must be a C-contiguous H x W x 3 uint8 array");
        return NULL;
    }
    if (get_output(out_obj, map.itemsize, &out)) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&table);
        return NULL;
    }
    if (out.shape[0] != src.shape[0] || out.shape[1] != src.shape[1]) {
        PyErr_SetString(PyExc_ValueError, "out must have the pixels' height and width");
    } else {
        Py_BEGIN_ALLOW_THREADS
        map_rgb(src.buf, (size_t)src.len, &map, out.buf);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&src);
    PyBuffer_Release(&table);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, x0, y0, w, h, scale_denom) -> (rgb, width, height, left, top)"},
    {"crop_into", (PyCFunction)(void (*)(void))crop_into, METH_VARARGS | METH_KEYWORDS,
     "crop_into(data, region, scale_denom, box, flip, out, path='auto', size=(0, 0), "
     "table=None) -> None"},
    {"whole_into", (PyCFunction)(void (*)(void))whole_into, METH_VARARGS | METH_KEYWORDS,
     "whole_into(data, scale_denom, flip, out, path='auto', size=(0, 0)) -> None"},
    {"map_into", map_into, METH_VARARGS,
     "map_into(pixels, table, out) -> None: each byte through the 3 x 256 table"},
    {"resample_paths", resample_paths, METH_NOARGS,
     "resample_paths() -> the resampler paths this build and CPU can run"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpeg",
                                    "Region JPEG decode and crop-resize with libjpeg-turbo.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__jpeg(void) { return PyModule_Create(&module); }
