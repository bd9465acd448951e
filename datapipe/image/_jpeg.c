/*
 * Region decode of a JPEG with libjpeg(-turbo): decode only the rows and (iMCU-aligned)
 * columns a crop needs, optionally at 1/2, 1/4 or 1/8 scale in the DCT domain.
 *
 * decode_region(data, x0, y0, w, h, scale_denom) -> (pixels: bytes, width, height, left, top)
 *   The crop box is in stored pixels; the result covers at least the scaled box. `pixels` is
 *   packed RGB, `height` rows of `width` pixels, whose top-left pixel is scaled image pixel
 *   (left, top). Rows above the box are skipped (entropy-decoded only), rows below are never
 *   read, columns outside the iMCU-aligned span are not decoded at all. The GIL is released
 *   while decoding. Raises ValueError on anything libjpeg rejects or warns about (truncated or
 *   corrupt data); callers fall back to PIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <setjmp.h>
#include <jpeglib.h>

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

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer data;
    int x0, y0, w, h, denom;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiiii", &data, &x0, &y0, &w, &h, &denom)) return NULL;
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "scale_denom must be 1, 2, 4 or 8");
        return NULL;
    }
    struct jpeg_decompress_struct cinfo;
    struct error_manager err;
    unsigned char *pixels = NULL;
    JDIMENSION left = 0, width = 0, top = 0, height = 0;
    int failed = 0;

    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.message[0] = '\0';

    Py_BEGIN_ALLOW_THREADS
    if (setjmp(err.jump)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&cinfo);
        jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
        jpeg_read_header(&cinfo, TRUE);
        cinfo.out_color_space = JCS_RGB;
        cinfo.scale_num = 1;
        cinfo.scale_denom = (unsigned int)denom;
        jpeg_start_decompress(&cinfo);
        JDIMENSION out_w = cinfo.output_width, out_h = cinfo.output_height;
        /* The box in scaled pixels, widened to whole pixels and clamped to the image. */
        JDIMENSION sx0 = (JDIMENSION)(x0 / denom);
        JDIMENSION sy0 = (JDIMENSION)(y0 / denom);
        JDIMENSION sx1 = (JDIMENSION)((x0 + w + denom - 1) / denom);
        JDIMENSION sy1 = (JDIMENSION)((y0 + h + denom - 1) / denom);
        if (sx1 > out_w) sx1 = out_w;
        if (sy1 > out_h) sy1 = out_h;
        if (sx0 >= sx1) sx0 = sx1 ? sx1 - 1 : 0;
        if (sy0 >= sy1) sy0 = sy1 ? sy1 - 1 : 0;
        left = sx0;
        width = sx1 - sx0;
        if (width < out_w) jpeg_crop_scanline(&cinfo, &left, &width); /* iMCU-aligned */
        top = sy0;
        height = sy1 - sy0;
        if (top > 0) jpeg_skip_scanlines(&cinfo, top);
        size_t stride = (size_t)width * 3;
        pixels = (unsigned char *)malloc(stride * height);
        if (pixels == NULL) {
            strcpy(err.message, "out of memory");
            failed = 1;
        } else {
            while (cinfo.output_scanline < top + height) {
                JSAMPROW row = pixels + stride * (cinfo.output_scanline - top);
                jpeg_read_scanlines(&cinfo, &row, 1);
            }
        }
    }
    jpeg_destroy_decompress(&cinfo); /* also aborts: rows below the box are never decoded */
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&data);
    if (failed) {
        free(pixels);
        PyErr_Format(PyExc_ValueError, "libjpeg: %s", err.message);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)pixels, (Py_ssize_t)width * 3 * height);
    free(pixels);
    if (out == NULL) return NULL;
    return Py_BuildValue("(Niiii)", out, (int)width, (int)height, (int)left, (int)top);
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, x0, y0, w, h, scale_denom) -> (rgb, width, height, left, top)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpeg",
                                    "Region JPEG decode with libjpeg-turbo.", -1, methods};

PyMODINIT_FUNC PyInit__jpeg(void) { return PyModule_Create(&module); }
