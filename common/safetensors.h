/* common/safetensors.h — reading and writing safetensors files.
 *
 * Format (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian unsigned header length N, then N bytes of UTF-8 JSON, then
 * the data buffer. The JSON is an object mapping each tensor name to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]} (offsets
 * relative to the data buffer, END exclusive, row-major little-endian data),
 * plus an optional "__metadata__" object of string -> string. Files written
 * here load with `safetensors.torch.load_file`.
 *
 * Writer: tensors are stored in the order added, at contiguous offsets
 * starting at 0; the header is padded with spaces so the data buffer starts
 * at a multiple of 8; the file is written atomically (common/fsutil.h).
 * Because offsets are contiguous in insertion order, a tensor's data is only
 * as aligned as the sizes before it make it: add tensors with wider dtypes
 * first, or read through safetensors_read_f32 / memcpy.
 *
 * Reader: the file is mapped read-only and validated before anything is
 * returned: header length within the file, JSON well-formed, no duplicate
 * names, dtype known, shape entries non-negative, product(shape) * dtype size
 * == END - BEGIN, offsets in bounds and, sorted, covering the data buffer
 * exactly (no gaps, no overlap, no trailing bytes), metadata values strings.
 * Errors read "PATH: what" and name the tensor.
 *
 *   safetensors_writer *w = safetensors_writer_new();
 *   int64_t shape[2] = {4, 8};
 *   safetensors_add(w, "w", ST_F32, 2, shape, data);   // data not copied
 *   safetensors_set_meta(w, "format", "pt");
 *   if (safetensors_write(w, "model.safetensors", &err)) die(err.msg);
 *   safetensors_writer_free(w);
 *
 *   safetensors_file *f;
 *   if (safetensors_open("model.safetensors", &f, &err)) die(err.msg);
 *   const safetensors_tensor *t = safetensors_find(f, "w");
 *   safetensors_close(f);
 */
#ifndef KF_COMMON_SAFETENSORS_H
#define KF_COMMON_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/** Element types supported (the spec's names are given by
 * safetensors_dtype_name: "F64", "F32", "F16", "BF16", "I64", "I32", "U8"). */
typedef enum safetensors_dtype {
    ST_F64,
    ST_F32,
    ST_F16,
    ST_BF16,
    ST_I64,
    ST_I32,
    ST_U8
} safetensors_dtype;

/** Most dimensions a tensor may have. */
#define ST_MAX_DIMS 8

/** The spec's name of dt, e.g. "F32". */
const char *safetensors_dtype_name(safetensors_dtype dt);

/** A tensor in an open file (or a view of one being written). */
typedef struct safetensors_tensor {
    const char *name;
    safetensors_dtype dtype;
    int ndim; /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;    /* product of shape (1 for a scalar) */
    uint64_t nbytes;  /* numel * dtype size */
    uint64_t offset;  /* BEGIN in the data buffer */
    const void *data; /* nbytes of row-major little-endian data;
                         only as aligned as offset makes it */
} safetensors_tensor;

/** Collects tensors and metadata, then writes them in one go. */
typedef struct safetensors_writer safetensors_writer;

safetensors_writer *safetensors_writer_new(void);

/** Adds a tensor. name and shape are copied; data is NOT copied and must stay
 * valid until safetensors_write returns. A repeated name is a fatal error (a
 * bug in the caller), as is ndim > ST_MAX_DIMS or a negative dimension. */
void safetensors_add(safetensors_writer *w, const char *name, safetensors_dtype dt, int ndim,
                     const int64_t *shape, const void *data);

/** Sets "__metadata__"[key] = value (both copied; a repeated key replaces). */
void safetensors_set_meta(safetensors_writer *w, const char *key, const char *value);

/** Writes the file atomically (temp + fsync + rename + fsync dir). */
int safetensors_write(safetensors_writer *w, const char *path, kf_err *err);

void safetensors_writer_free(safetensors_writer *w);

/** An open, validated file. tensors[] are in data-offset order. */
typedef struct safetensors_file {
    char *path;
    size_t n;
    safetensors_tensor *tensors;
    size_t nmeta;
    char **meta_keys, **meta_values;
    void *map; /* the whole file, mapped read-only */
    size_t map_len;
} safetensors_file;

/** Opens and validates path. @return 0, or -1 with err set. */
int safetensors_open(const char *path, safetensors_file **out, kf_err *err);

/** The tensor called name, or NULL. */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

/** The metadata value for key, or NULL. */
const char *safetensors_meta(const safetensors_file *f, const char *key);

/** Copies t's elements into dst (numel floats), converting F64/F16/BF16 to
 * float; integer dtypes are an error ("tensor 'NAME': dtype I64 is not a float"). */
int safetensors_read_f32(const safetensors_tensor *t, float *dst, kf_err *err);

/** Unmaps and frees f (NULL allowed); its tensors' data become invalid. */
void safetensors_close(safetensors_file *f);

#endif
