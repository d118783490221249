/* One box of a JPEG, decoded with the system's libjpeg-turbo (>= 1.5): jpeg_crop_scanline and
 * jpeg_skip_scanlines leave out the columns and rows outside the box, and the rows below it are never read.
 * The pixels are those of the whole-image decode (see jpeg_region.py for the one-column margin that keeps
 * the fancy upsampling of the box's edge columns exact). Plain C, no Python API: loaded with ctypes. */
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

#define MESSAGE 200
#define ROWS 4 /* rows asked of libjpeg per call: fewer calls than one at a time */

struct failure {
    struct jpeg_error_mgr manager;
    jmp_buf jump;
};

static void on_error(j_common_ptr info) {
    longjmp(((struct failure *)info->err)->jump, 1);
}

/* A libjpeg warning (level -1: corrupt or truncated data) is an error here: the caller then lets Pillow decode
 * the file and say what is wrong with it. Trace messages (level >= 0) are ignored. */
static void on_message(j_common_ptr info, int level) {
    if (level < 0)
        on_error(info);
}

static void fail_message(struct jpeg_decompress_struct *d, char *message) {
    char text[JMSG_LENGTH_MAX];
    (*d->err->format_message)((j_common_ptr)d, text);
    snprintf(message, MESSAGE, "%s", text);
}

/* Sampling layouts whose cropped decode was checked pixel for pixel against the whole decode: every component
 * 1x1, or luma 2x1 / 2x2 over 1x1 chroma (4:4:4, 4:2:2, 4:2:0, grayscale). */
static int checked_sampling(struct jpeg_decompress_struct *d) {
    for (int c = 1; c < d->num_components; c++)
        if (d->comp_info[c].h_samp_factor != 1 || d->comp_info[c].v_samp_factor != 1)
            return 0;
    int h = d->comp_info[0].h_samp_factor, v = d->comp_info[0].v_samp_factor;
    return (h == 1 && v == 1) || (h == 2 && (v == 1 || v == 2));
}

/* Error handling for d through f; the caller sets f->jump with setjmp before `read_header` (a longjmp target must
 * be a frame that is still live, so it cannot be set here). */
static void handle_errors(struct jpeg_decompress_struct *d, struct failure *f) {
    d->err = jpeg_std_error(&f->manager);
    f->manager.error_exit = on_error;
    f->manager.emit_message = on_message;
}

static void read_header(struct jpeg_decompress_struct *d, const uint8_t *data, size_t size) {
    jpeg_create_decompress(d);
    jpeg_mem_src(d, data, (unsigned long)size);
    jpeg_read_header(d, TRUE);
}

/* width, height, components and libjpeg's J_COLOR_SPACE of the stored image; 0, or -1 with a message. */
int vk_jpeg_info(const uint8_t *data, size_t size, int *width, int *height, int *components, int *colorspace, char *message) {
    struct jpeg_decompress_struct d;
    struct failure f;
    handle_errors(&d, &f);
    if (setjmp(f.jump)) {
        fail_message(&d, message);
        jpeg_destroy_decompress(&d);
        return -1;
    }
    read_header(&d, data, size);
    *width = (int)d.image_width;
    *height = (int)d.image_height;
    *components = d.num_components;
    *colorspace = (int)d.jpeg_color_space;
    jpeg_destroy_decompress(&d);
    return 0;
}

/* The box [left, left + cols) x [top, top + rows) of the image decoded at 1/scale (scale 1, 2, 4 or 8), as gray or
 * RGB, written to out as `rows` rows of `cols` pixels. Only the columns [span_left, span_left + span_cols) around
 * the box are decoded (libjpeg widens them to whole iMCUs), the rows above it are skipped and those below never
 * read. Returns 0; -1 with a message on bad data; -2 if the box does not fit or the memory runs out. */
int vk_jpeg_region(const uint8_t *data, size_t size, int scale, int gray, int left, int top, int cols, int rows,
                   int span_left, int span_cols, uint8_t *out, char *message) {
    struct jpeg_decompress_struct d;
    struct failure f;
    JSAMPLE *volatile line = NULL;
    handle_errors(&d, &f);
    if (setjmp(f.jump)) {
        fail_message(&d, message);
        jpeg_destroy_decompress(&d);
        free(line);
        return -1;
    }
    read_header(&d, data, size);
    d.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    d.scale_num = 1;
    d.scale_denom = (unsigned int)scale;
    jpeg_start_decompress(&d);
    JDIMENSION x = (JDIMENSION)span_left, w = (JDIMENSION)span_cols;
    if (left < 0 || top < 0 || cols <= 0 || rows <= 0 || span_left < 0 || span_left > left || span_left + span_cols < left + cols ||
        x + w > d.output_width || (JDIMENSION)(top + rows) > d.output_height) {
        snprintf(message, MESSAGE, "box outside the %ux%u image", d.output_width, d.output_height);
        jpeg_destroy_decompress(&d);
        return -2;
    }
    int whole = !checked_sampling(&d);
    if (whole) {  /* another sampling layout: decode every column and row, keep the box's */
        x = 0;
        w = d.output_width;
    } else {
        jpeg_crop_scanline(&d, &x, &w);
    }
    size_t channels = (size_t)d.output_components;
    line = malloc((size_t)w * channels * ROWS);
    if (line == NULL) {
        snprintf(message, MESSAGE, "out of memory for %d rows of %u pixels", ROWS, w);
        jpeg_destroy_decompress(&d);
        return -2;
    }
    JSAMPROW row[ROWS];
    for (int k = 0; k < ROWS; k++)
        row[k] = line + (size_t)k * w * channels;
    if (top > 0) {
        if (whole) {
            for (int r = 0; r < top;)
                r += (int)jpeg_read_scanlines(&d, row, (JDIMENSION)(top - r < ROWS ? top - r : ROWS));
        } else {
            jpeg_skip_scanlines(&d, (JDIMENSION)top);
        }
    }
    for (int r = 0; r < rows;) {
        int got = (int)jpeg_read_scanlines(&d, row, (JDIMENSION)(rows - r < ROWS ? rows - r : ROWS));
        for (int k = 0; k < got; k++, r++)
            memcpy(out + (size_t)r * cols * channels, row[k] + (size_t)(left - (int)x) * channels, (size_t)cols * channels);
    }
    jpeg_abort_decompress(&d);  /* the rows below the box are never decoded */
    jpeg_destroy_decompress(&d);
    free(line);
    return 0;
}
