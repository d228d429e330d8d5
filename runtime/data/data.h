/*
 * data.h — the data layer: the file formats and data-set plumbing behind
 * `import std.data` (docs/data.md).  CSV into typed columns (csv.c), JSON
 * through cJSON (json.c), `.npy` arrays (npy.c), raw bytes (bytes.c), the
 * shuffled order of batches (batch.c), and what they share: whole files
 * mapped read-only, positions in them, a fast float parser (fileview.c,
 * numparse.c).
 *
 * Key design choice: the layer stands on core only (it allocates strings
 * and arrays and raises runtime errors; it never schedules), so its parsers
 * link into a unit test or a fuzzer with core alone.  Every parser works
 * on an in-memory view of the bytes and reports bad input as a runtime
 * error naming the file and the line and column (or JSON path, or byte
 * offset) of the fault, after giving back what it holds: inside a task a
 * runtime error unwinds with longjmp, so nothing may be left mapped.
 *
 * The `sf_std_data_*` functions are the C side of stdlib/data.sflow's
 * `@extern` declarations (the ABI is in the `@extern` contract: arguments
 * borrowed, str/array results owned, a struct result written into `out`
 * laid out as `out_type` describes, fields found by name).
 */
#ifndef SF_DATA_H
#define SF_DATA_H

#include "core.h"

/* ------------------------------------------------------- fileview.c */

/* A whole file, read-only: mapped when it is a regular file, read into
 * memory otherwise (a pipe), with a NUL byte after the end either way so a
 * scanner may look one byte ahead.  `name` is the path as the user wrote
 * it, for messages. */
typedef struct sf__view {
  const char *data;
  size_t len;
  const char *name;
  size_t map_len; /* 0: data was sf_alloc'ed */
} sf__view;
/* Opens path into v; false with errno set on failure. */
bool sf__view_open(sf__view *v, const char *path);
void sf__view_close(sf__view *v);
/* The path of an sflow string as a C string, or a runtime error at loc
 * (empty, or a NUL byte inside, which would name another file). */
const char *sf__data_path(sf_str *path, const char *what, const sf_loc *loc);
/* sf__view_open or a runtime error "cannot read PATH: reason". */
void sf__view_open_or_fail(sf__view *v, sf_str *path, const sf_loc *loc);
/* sf__write_file (core.h: a regular file replaced whole, a FIFO or a
 * device written in place) to an sflow path, then done(arg) (NULL: nothing;
 * the buffer's owner frees it there, also when the write failed), then a
 * runtime error "cannot write PATH: reason" if it did. */
void sf__write_or_fail(sf_str *path, const char *data, size_t n, void (*done)(void *), void *arg,
                       const sf_loc *loc);
/* The 1-based line and column (in bytes) of offset off of buf. */
void sf__line_col(const char *buf, size_t off, int64_t *line, int64_t *col);
/* The length of the valid UTF-8 prefix of [s, s+n) (n when all valid;
 * overlong forms, surrogates and code points past U+10FFFF are invalid). */
size_t sf__utf8_valid_prefix(const char *s, size_t n);

/* ------------------------------------------------------ numparse.c */

/* Parses a decimal number at p (before end): an optional sign, digits
 * with an optional '.', an optional exponent, or inf/infinity/nan in any
 * case.  Returns the end of the number, or NULL when p does not start
 * with one.  The result is correctly rounded: the common case (up to 19
 * significant digits) by Clinger's fast path or the Eisel-Lemire
 * algorithm, anything else (more digits, subnormals, a halfway case) by
 * strtod. */
const char *sf__parse_double(const char *p, const char *end, double *out);
/* The same for f32, correctly rounded to f32 (not through a double that
 * is rounded twice: a double that lands on an f32 halfway point is
 * re-read with strtof). */
const char *sf__parse_float(const char *p, const char *end, float *out);
/* An optional sign and decimal digits that fit an int64_t; NULL when p
 * does not start with one or it overflows (*overflow set). */
const char *sf__parse_int64(const char *p, const char *end, int64_t *out, bool *overflow);

/* ----------------------------------------------------------- csv.c */

/* Column kinds of a table. */
typedef enum {
  SF__COL_AUTO = 0, SF__COL_I64, SF__COL_F64, SF__COL_F32, SF__COL_STR, SF__COL_BOOL
} sf__col_kind;

/* A parsed CSV: one typed column per field of the header. */
typedef struct sf__csv_col {
  char *name;      /* NUL-terminated, owned */
  int32_t kind;    /* sf__col_kind, never AUTO once parsed */
  bool inferred;   /* the caller left the type to the parser */
  bool neg_zero;   /* an inferred i64 column read "-0" (csv.c's parallel merge) */
  int64_t len, cap;
  void *data;      /* int64_t, double, float or sf_str* values */
} sf__csv_col;
typedef struct sf__csv {
  int64_t ncols, nrows;
  sf__csv_col *cols;
} sf__csv;
typedef struct sf__csv_opts {
  char sep;            /* ',' unless the caller says otherwise */
  bool header;         /* the first record names the columns */
  int64_t ntypes;      /* 0: infer every column */
  const int32_t *types; /* one sf__col_kind per column (AUTO: infer it) */
} sf__csv_opts;
/* Parses buf[0, len) (buf[len] must be readable: a NUL) named `name` for
 * messages.  On bad input: false, with "name:line:col: ..." in err (and
 * nothing left allocated); otherwise true and *out filled.  A large input
 * is read in chunks over the pool (sf__par_for), with the same result and
 * the same message as one thread gives. */
bool sf__csv_parse(const char *buf, size_t len, const char *name, const sf__csv_opts *o,
                   sf__csv *out, char *err, size_t errlen);
void sf__csv_free(sf__csv *c);
/* "i64", "f64", "f32", "str", "auto" <-> sf__col_kind; -1 if unknown. */
int32_t sf__col_kind_of(const char *s, size_t n);
const char *sf__col_kind_name(int32_t kind);

/* std.data's csv functions.  Table and Column are stdlib/data.sflow's:
 *   struct Column { name: str, kind: str, floats: f64[], floats32: f32[],
 *                   ints: i64[], texts: str[] }
 *   struct Table { rows: i64, columns: Column[] }
 * read_csv infers every column's type; read_csv_as takes one of "auto",
 * "i64", "f64", "f32", "str" per column; parse_csv reads text in memory,
 * named `name` in messages. */
void sf_std_data_read_csv(void *out, const sf_type *out_type, sf_str *path, sf_str *sep,
                          bool header, const sf_loc *loc);
void sf_std_data_read_csv_as(void *out, const sf_type *out_type, sf_str *path, sf_array *types,
                             sf_str *sep, bool header, const sf_loc *loc);
void sf_std_data_parse_csv(void *out, const sf_type *out_type, sf_str *text, sf_str *name,
                           sf_str *sep, bool header, const sf_loc *loc);
/* A Table as CSV text: a header row, fields quoted only when needed (RFC
 * 4180), floats in the shortest form that reads back to the same value. */
sf_str *sf_std_data_format_csv(const void *table, const sf_type *table_type, sf_str *sep,
                               const sf_loc *loc);
void sf_std_data_write_csv(sf_str *path, const void *table, const sf_type *table_type,
                           sf_str *sep, const sf_loc *loc);

/* ---------------------------------------------------------- json.c */

/* cJSON is loaded with dlopen on first use (libcjson.so.1), so programs
 * that never touch JSON keep needing nothing but libc on a node
 * (docs/cluster.md "What a node needs").  A missing library is a runtime
 * error saying which package provides it. */

/* Any value as JSON text: numbers, bool, str, arrays, structs as objects
 * with their field names in declaration order.  NaN and infinities have no
 * JSON form: a runtime error naming the path ($.loss). */
sf_str *sf_std_data_to_json(const void *value, const sf_type *t, const sf_type *t_again,
                            const sf_loc *loc);
/* JSON text into a value of type t at out (zero-filled, written owned).
 * Bad JSON: "NAME:line:col: ..."; a missing field or a wrong type: its
 * path ("NAME: $.items[3].price: expected f64, found a string"). */
void sf_std_data_from_json(void *out, const sf_type *t, sf_str *text, sf_str *name,
                           const sf_type *t_again, const sf_loc *loc);
/* The dynamic JSON value (stdlib's `Json`: kind, flag, number, text,
 * items, keys; see docs/data.md) from text, from a file, to text, to a
 * file. */
void sf_std_data_parse_json(void *out, const sf_type *json_type, sf_str *text, sf_str *name,
                            const sf_loc *loc);
void sf_std_data_read_json(void *out, const sf_type *json_type, sf_str *path,
                           const sf_loc *loc);
sf_str *sf_std_data_dump_json(const void *json, const sf_type *json_type, const sf_loc *loc);
void sf_std_data_write_json(sf_str *path, const void *json, const sf_type *json_type,
                            const sf_loc *loc);
/* JSON Lines: one dynamic value per non-blank line, returned as a Json of
 * kind "array" (errors name the file's line); written one value per line
 * (Json[]). */
void sf_std_data_jsonl_read(void *out, const sf_type *json_type, sf_str *path,
                            const sf_loc *loc);
void sf_std_data_write_jsonl(sf_str *path, sf_array *values, const sf_loc *loc);
/* Internal: parse text (len bytes, NUL after) into a value of type t at
 * out, or false with a message in err.  `dynamic` selects the Json
 * mapping instead of the typed one.  Used by the functions above and by
 * the fuzzer. */
bool sf__json_decode(const char *text, size_t len, const char *name, const sf_type *t,
                     bool dynamic, void *out, char *err, size_t errlen);
/* Whether cJSON could be loaded (false: err says why). */
/* A value of type t as JSON text (to_json's), in a buffer the caller
 * frees with sf_free, its length in *len (a NUL follows it); NULL with the
 * message in err when the value has no JSON form (a NaN, invalid UTF-8),
 * instead of a runtime error, for callers that must go on (std.serve). */
char *sf__json_encode(const void *value, const sf_type *t, size_t *len, char *err,
                      size_t errlen);
bool sf__cjson_load(char *err, size_t errlen);
/* The loaded cJSON's ParseWithLengthOpts (not NUL-terminated; *end: where
 * parsing stopped, the error's place on failure) and Delete, for the
 * layer's other readers of JSON (wordpiece.c reads tokenizer.json); only
 * after sf__cjson_load returned true. */
struct cJSON;
struct cJSON *sf__cjson_parse(const char *text, size_t len, const char **end);
void sf__cjson_delete(struct cJSON *j);

/* ----------------------------------------------------------- npy.c */

/* A parsed .npy header: the element kind (SF_F32, SF_F64, SF_I32, SF_I64,
 * or SF__NPY_U8), its shape and where the data starts. */
enum { SF__NPY_U8 = 100 };
#define SF__NPY_MAX_DIMS 32
typedef struct sf__npy {
  int32_t kind;
  int32_t ndim;
  int64_t shape[SF__NPY_MAX_DIMS];
  int64_t count;     /* product of shape */
  size_t data_off;   /* byte offset of the data */
  int32_t item_size;
} sf__npy;
/* Parses the header of the file image buf[0, len); false with a message
 * (naming the file and the byte offset) in err. */
bool sf__npy_parse_header(const char *buf, size_t len, const char *name, sf__npy *h,
                          char *err, size_t errlen);
/* Reads path into out, laid out as out_type: `shape: i64[]` and `data: T[]`
 * where T is f32, f64, i32 or i64 and must be the file's dtype (a u8 file
 * reads into i32 or i64). */
void sf_std_data_npy_read(void *out, const sf_type *out_type, sf_str *path, const sf_loc *loc);
/* The stdlib's externs (one per element type: externs are not
 * overloaded): read_npy_T fills NpyT { shape: i64[], data: T[] };
 * write_npy_T writes T[] data (u8: i32[] values 0..255). */
void sf_std_data_read_npy_f32(void *out, const sf_type *t, sf_str *path, const sf_loc *loc);
void sf_std_data_read_npy_f64(void *out, const sf_type *t, sf_str *path, const sf_loc *loc);
void sf_std_data_read_npy_i32(void *out, const sf_type *t, sf_str *path, const sf_loc *loc);
void sf_std_data_read_npy_i64(void *out, const sf_type *t, sf_str *path, const sf_loc *loc);
void sf_std_data_write_npy_f32(sf_str *path, sf_array *data, sf_array *shape, const sf_loc *loc);
void sf_std_data_write_npy_f64(sf_str *path, sf_array *data, sf_array *shape, const sf_loc *loc);
void sf_std_data_write_npy_i32(sf_str *path, sf_array *data, sf_array *shape, const sf_loc *loc);
void sf_std_data_write_npy_i64(sf_str *path, sf_array *data, sf_array *shape, const sf_loc *loc);
void sf_std_data_write_npy_u8(sf_str *path, sf_array *data, sf_array *shape, const sf_loc *loc);
/* The file's dtype as std.data names it ("f32", "f64", "i32", "i64", "u8"). */
sf_str *sf_std_data_npy_dtype(sf_str *path, const sf_loc *loc);
/* Writes data (f32, f64, i32 or i64 elements) with shape as a v1 .npy
 * (v2 when the header needs it); the product of shape must be len(data).
 * as_u8 stores i32/i64 values 0..255 as u8. */
void sf_std_data_npy_write(sf_str *path, sf_array *data, sf_array *shape, bool as_u8,
                           const sf_loc *loc);

/* --------------------------------------------------------- bytes.c */

/* A file's bytes as an i32[] of values 0..255, and back (a value outside
 * 0..255 is a runtime error naming its index). */
sf_array *sf_std_data_read_bytes(sf_str *path, const sf_loc *loc);
void sf_std_data_write_bytes(sf_str *path, sf_array *bytes, const sf_loc *loc);

/* --------------------------------------------------------- batch.c */

/* A permutation of 0..n-1 (i64[]) that depends only on (seed, epoch):
 * Fisher-Yates driven by SplitMix64 seeded from both.  The same on every
 * run, thread, node and worker count. */
sf_array *sf_std_data_permutation(int64_t n, int64_t seed, int64_t epoch, const sf_loc *loc);
/* Worker rank's part of every global batch of the epoch (i64[][]): the
 * permutation cut into batches of batch_size (the last one shorter unless
 * drop_last), each cut into `workers` near-equal parts (the first
 * size % workers one longer), part `rank` taken. */
sf_array *sf_std_data_batches(int64_t n, int64_t batch_size, int64_t seed, int64_t epoch,
                              int64_t rank, int64_t workers, bool drop_last, const sf_loc *loc);

#endif
