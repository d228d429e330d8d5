/*
 * gguf.h — the GGUF container (ggml's file format for LLM weights):
 * metadata key/values and tensor descriptions over a read-only mapping of
 * the file (gguf.c).  Part of the data layer, so both the tokenizer (its
 * vocabulary and merges are metadata) and the nn layer (the tensors,
 * runtime/nn/quant.h) read it.
 *
 * Key design choice: parse once, validate everything, copy nothing.  Every
 * length, count, offset and shape is checked against the file's size and
 * against overflow while parsing, so afterwards a key's value bytes and a
 * tensor's data are plain pointers into the mapping that callers walk
 * without further checks.
 */
#ifndef SF_GGUF_H
#define SF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "data.h"

/* Metadata value types (gguf_metadata_value_type). */
enum {
  SF__GGUF_U8 = 0, SF__GGUF_I8, SF__GGUF_U16, SF__GGUF_I16, SF__GGUF_U32, SF__GGUF_I32,
  SF__GGUF_F32, SF__GGUF_BOOL, SF__GGUF_STR, SF__GGUF_ARR, SF__GGUF_U64, SF__GGUF_I64,
  SF__GGUF_F64, SF__GGUF_NVTYPES
};

/* Tensor types (ggml_type) that sflow reads; gguf.c knows the block sizes
 * of the others only to name them in errors. */
enum {
  SF__GGML_F32 = 0, SF__GGML_F16 = 1, SF__GGML_Q4_0 = 2, SF__GGML_Q4_1 = 3,
  SF__GGML_Q8_0 = 8, SF__GGML_BF16 = 30,
};

typedef struct {
  const char *key;     /* not NUL-terminated: key_len bytes */
  uint32_t key_len;
  uint32_t type;       /* SF__GGUF_* */
  uint32_t elem;       /* an array's element type (not itself an array) */
  uint64_t n;          /* an array's length; 1 otherwise */
  const char *val;     /* the value's bytes (an array's: after its header) */
} sf__gguf_kv;

typedef struct {
  const char *name;    /* not NUL-terminated: name_len bytes */
  uint32_t name_len;
  uint32_t type;       /* ggml_type */
  int32_t ndim;        /* 1..4 */
  int64_t dims[4];     /* ggml order: dims[0] is the row length (contiguous) */
  int64_t numel;
  uint64_t offset;     /* from the start of the data section */
  uint64_t bytes;
  const void *data;    /* in the mapping, aligned as general.alignment says */
} sf__gguf_tensor;

typedef struct sf__gguf {
  sf__view view;       /* the mapping; view.name is the path for messages */
  uint32_t version;    /* 2 or 3 */
  uint64_t alignment;  /* general.alignment, 32 when absent */
  int64_t nkv, ntensors;
  sf__gguf_kv *kv;
  sf__gguf_tensor *tensors;
} sf__gguf;

/* Parses the GGUF image data[0, len) into g (which keeps pointers into
 * data, and takes none of it).  false: err holds "field: problem" (the
 * offset, key or tensor named), nothing allocated in g. */
bool sf__gguf_parse(sf__gguf *g, const char *data, size_t len, char *err, size_t errlen);
/* Opens and parses path; false with err "PATH: problem" (a file that
 * cannot be read says why). */
bool sf__gguf_open(sf__gguf *g, const char *path, char *err, size_t errlen);
void sf__gguf_close(sf__gguf *g);

/* The key, or NULL. */
const sf__gguf_kv *sf__gguf_find(const sf__gguf *g, const char *key);
/* The tensor named name, or NULL. */
const sf__gguf_tensor *sf__gguf_tensor_named(const sf__gguf *g, const char *name);
/* The name of a value type ("u32", "str", "arr") or of a ggml type
 * ("Q4_1"), "?" when unknown. */
const char *sf__gguf_vtype_name(uint32_t t);
const char *sf__ggml_type_name(uint32_t t);
/* Bytes of n elements (a multiple of the block size) of ggml type t, 0
 * when t is unknown or n is not a multiple. */
uint64_t sf__ggml_bytes(uint32_t t, int64_t n);

/* An integer or float scalar as int64 / double: false when kv is of
 * another type (a string or an array). */
bool sf__gguf_int(const sf__gguf_kv *kv, int64_t *out);
bool sf__gguf_float(const sf__gguf_kv *kv, double *out);
/* Walks a string value or the strings of a string array: *p at a length
 * prefix (kv->val to start), returns the string and its length and
 * advances *p.  Only for keys the parser validated. */
static inline const char *sf__gguf_next_str(const char **p, uint64_t *len) {
  uint64_t n;
  memcpy(&n, *p, 8);
  const char *s = *p + 8;
  *p = s + n;
  *len = n;
  return s;
}

#endif
