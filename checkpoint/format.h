/* checkpoint/format.h — the llm3d tensor file: a header, the config text, named tensors.
 *
 * The idea: a checkpoint file is a bag of WHOLE (global-shape) tensors found by
 * name, each with its dtype, shape and CRC32, so any parallel layout reads back
 * just the slice it holds, and any damage is found and named before it is used.
 *
 * Layout (little-endian), offsets from the start of the file:
 *   0       header, 256 x int32 (CKPT_H_* below; int64 fields take two ints, low first;
 *           the last int is the CRC32 of the 255 before it)
 *   1024    config text, "key=value\n" lines (config_write_text), config_bytes long
 *   ...     tensor data, each tensor 64-byte aligned, row-major
 *   table   n_tensors x CkptEntry (192 bytes each), at table_offset, last in the file
 * The file is exactly file_bytes long. Readers check magic, version, header CRC,
 * size, config CRC, table CRC, that every size adds up without overflow, that
 * every tensor lies inside the data region and that the run state is in range
 * (kind, step, data position, loss scale; the reserved header ints are 0), that
 * no two tensors overlap, and say in words what is wrong; tensor data is checked
 * against its CRC, and for NaN and inf, when read.
 *
 * Tensors are 1-D or 2-D for the model (vectors: ndim 1); a reader sees every
 * tensor as rows x cols (rows = 1 for a vector) and may ask for any rectangle. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "../common/util.h"

#define CKPT_MAGIC 0x54504b4c      /* "LKPT" little-endian */
#define CKPT_VERSION 1
#define CKPT_HEADER_INTS 256
#define CKPT_NAME_BYTES 128
#define CKPT_MAX_DIMS 4

/* dtypes of stored tensors; the first three match kernels/dtype.h */
enum { CKPT_F32 = 0, CKPT_BF16 = 1, CKPT_F16 = 2, CKPT_U8 = 3, CKPT_I32 = 4, CKPT_I64 = 5, CKPT_N_DTYPES };
size_t ckpt_dtype_size(int dtype);
const char *ckpt_dtype_name(int dtype);

/* header int positions */
enum {
    CKPT_H_MAGIC = 0, CKPT_H_VERSION = 1, CKPT_H_N_TENSORS = 2, CKPT_H_KIND = 3,
    CKPT_H_CONFIG_BYTES = 4, CKPT_H_TABLE_OFFSET = 6, CKPT_H_FILE_BYTES = 8,
    CKPT_H_STEP = 10, CKPT_H_LOADER_EPOCH = 12, CKPT_H_LOADER_CURSOR = 14,
    CKPT_H_RNG_STATE = 16, CKPT_H_HAS_RNG = 18, CKPT_H_LOSS_SCALE = 19 /* float bits */, CKPT_H_CLEAN_STEPS = 20,
    CKPT_H_OPTIMIZER = 21, CKPT_H_OPTIMIZER_STEP = 22, CKPT_H_CONFIG_CRC = 24, CKPT_H_TABLE_CRC = 25,
    CKPT_H_CRC = 255,
};
enum { CKPT_KIND_TRAIN = 1 };
/* The optimizer state the file holds (always AdamW's m and v in fp32, under optimizer.adamw.m/v):
 * ADAMW from fp32 AdamW, or from 8-bit AdamW of builds before the whole-tensor block rule (its config
 * says optimizer=adamw8bit: the moments were quantized in rank-local 256-element runs);
 * ADAMW8BIT_ROWS dequantized from 8-bit state under the whole-tensor rule with v on its own map (before
 * issue 52: a v far below its block's largest could decode to 0 under a live m); ADAMW8BIT_SQRT the same
 * blocks with v kept as sqrt(v) on m's map (kernels/adamw8bit.h), so requantizing them gives the saver's
 * codes back bit for bit. */
enum { CKPT_OPT_NONE = 0, CKPT_OPT_ADAMW = 1, CKPT_OPT_ADAMW8BIT_ROWS = 2, CKPT_OPT_ADAMW8BIT_SQRT = 3 };
#define CKPT_MAX_CLEAN_STEPS 2000                  /* = LOSS_SCALE_WINDOW (train/trainer.h): the count restarts there */
#define CKPT_MAX_POSITION (INT64_MAX / 2)          /* loader epoch and cursor, as data/loader.c bounds them: far past any run, +2^31 cannot overflow */

/* What a header holds besides the layout: the run's scalar state. */
typedef struct {
    int kind;
    int64_t step;
    int64_t loader_epoch, loader_cursor;
    uint64_t rng_state;
    int has_rng;
    float loss_scale;           /* fp16 dynamic loss scaling; 1 when unused */
    int clean_steps;            /* steps since the last overflow */
    int optimizer;              /* CKPT_OPT_* */
    int64_t optimizer_step;
} CkptState;

typedef struct {                /* one row of the tensor table: 192 bytes on disk */
    char name[CKPT_NAME_BYTES];
    int32_t dtype, ndim;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t offset, bytes;      /* where the data is in the file, and its length */
    uint32_t crc, reserved;
} CkptEntry;
_Static_assert(sizeof(CkptEntry) == 192, "CkptEntry is 192 bytes on disk");

/* 0 when a run can use s as it is (every field in range for what the run does
 * with it, see format.c); else -1 with one line naming path and the field. */
int ckpt_check_state(const CkptState *s, const char *path, char *err, size_t err_size);

/* CRC32 (the zlib / IEEE polynomial, so Python's zlib.crc32 agrees). Pass 0 to start. */
static inline uint32_t ckpt_crc32(uint32_t crc, const void *data, size_t bytes) { return crc32_update(crc, data, bytes); }

/* "768x2048" into buf (at most size bytes, always terminated; "..." when cut). */
const char *ckpt_shape_text(const int64_t *shape, int ndim, char *buf, size_t size);

/* ------------------------------------------------------------------ writing */

/* Test hooks, so a crash or a full disk in the middle of a write is reproducible:
 * after kill_after bytes the process SIGKILLs itself; after fail_after bytes
 * every write fails with ENOSPC. -1 = off. */
typedef struct { int64_t kill_after, fail_after; } CkptWriteHooks;

typedef struct {
    char path[1024], tmp[1100];
    FILE *f;
    int32_t header[CKPT_HEADER_INTS];
    CkptEntry *entries;
    int n, cap;
    int64_t pos;                /* bytes written so far */
    CkptWriteHooks hooks;
} CkptWriter;

/* Starts "<path>.tmp". Nothing at <path> changes until ckpt_writer_finish. */
void ckpt_writer_open(CkptWriter *w, const char *path, const CkptState *s, const char *config_text, CkptWriteHooks hooks);
/* Appends one tensor (shape[0..ndim-1], data in dtype, row-major). */
void ckpt_writer_add(CkptWriter *w, const char *name, int dtype, int ndim, const int64_t *shape, const void *data);
/* Table, header, flush, fsync, rename over <path>. */
void ckpt_writer_finish(CkptWriter *w);
/* Raw checked write that honours the hooks; on failure removes the temporary and dies. */
void ckpt_write_bytes(CkptWriter *w, const void *data, size_t bytes);

/* ------------------------------------------------------------------ reading */

typedef struct {
    char path[1024];
    FILE *f;
    int32_t header[CKPT_HEADER_INTS];
    CkptState state;
    char *config_text;          /* NUL-terminated */
    CkptEntry *entries;
    int n;
    int64_t file_bytes;
} CkptReader;

/* Opens and validates everything but the tensor data. Returns 0, or -1 with a
 * message naming the file and the problem in err. */
int ckpt_open(CkptReader *r, const char *path, char *err, size_t err_size);
void ckpt_close(CkptReader *r);
const CkptEntry *ckpt_find(const CkptReader *r, const char *name);
/* The 2-D view of a tensor: rows = shape[0..ndim-2] multiplied, cols = shape[ndim-1]. */
void ckpt_entry_dims(const CkptEntry *e, int64_t *rows, int64_t *cols);
/* Reads rows [row0, row0+rows) x cols [col0, col0+cols) of a float tensor
 * (f32, bf16 or f16) into dst as fp32, (rows, cols) row-major. The whole
 * tensor is streamed so its CRC is checked even when only a slice is kept.
 * Returns 0, or -1 with a message in err. */
int ckpt_read_f32(CkptReader *r, const CkptEntry *e, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                  float *dst, char *err, size_t err_size);
/* Reads a whole tensor as stored (any dtype) into dst (e->bytes), CRC checked. */
int ckpt_read_raw(CkptReader *r, const CkptEntry *e, void *dst, char *err, size_t err_size);
/* Streams a tensor and checks its CRC. */
int ckpt_verify(CkptReader *r, const CkptEntry *e, char *err, size_t err_size);
/* ckpt_verify, also counting the tensor's non-finite values (NaN, +-inf) and the index of the first (-1: none). */
int ckpt_scan(CkptReader *r, const CkptEntry *e, int64_t *n_nonfinite, int64_t *first, char *err, size_t err_size);
/* The pass under ckpt_scan, for any file (safetensors too): bytes at offset of f read once, their CRC32
 * into *crc, the count of non-finite values of dtype and the index of the first. 0, or -1 with err. */
int ckpt_scan_bytes(FILE *f, const char *path, const char *name, int64_t offset, int64_t bytes, int dtype, uint32_t *crc,
                    int64_t *n_nonfinite, int64_t *first, char *err, size_t err_size);

/* Non-finite values are refused where tensors are read (ckpt_read_region, so every reader of
 * weights or optimizer state: resume, init_from, sample, logits, export, Hugging Face import):
 * a NaN loaded is a NaN trained on and saved again. Only `inspect --allow_nonfinite=1` shows them. */
/* How many of count values of dtype at data are NaN or +-inf (f32, bf16, f16; other dtypes have none),
 * the index of the first in *first (-1 when none). One pass over the bits. */
int64_t ckpt_count_nonfinite(const void *data, int dtype, int64_t count, int64_t *first);
/* The refusal: path, tensor, the value (nan, inf, -inf), element index and, for a matrix, its row and col. */
void ckpt_nonfinite_message(const char *path, const char *name, int dtype, const void *value, int64_t index, int64_t rows,
                            int64_t cols, char *err, size_t err_size);

/* The shared slice reader (also used for safetensors, which have no CRC: crc_want
 * NULL skips the check). file_offset: the tensor's first byte; the tensor is
 * grows x gcols of dtype. */
int ckpt_read_region(FILE *f, const char *path, const char *name, int64_t file_offset, int dtype, int64_t grows,
                     int64_t gcols, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float *dst,
                     const uint32_t *crc_want, char *err, size_t err_size);

/* Scalar conversions (round to nearest even on the way down). */
float ckpt_bf16_to_f32(uint16_t h);
float ckpt_f16_to_f32(uint16_t h);
uint16_t ckpt_f32_to_bf16(float x);
uint16_t ckpt_f32_to_f16(float x);
