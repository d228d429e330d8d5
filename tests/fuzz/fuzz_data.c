/*
 * fuzz_data.c — libFuzzer targets for std.data's parsers (runtime/data/):
 * CSV, JSON and .npy headers, the code that reads files a user did not
 * write.  One source, four binaries (-DFUZZ_CSV, -DFUZZ_JSON, -DFUZZ_NPY,
 * -DFUZZ_GGUF), built by scripts/fuzz.sh (FUZZ_TARGET=csv|json|npy|gguf).
 *
 * Any input must parse or be refused with a message naming the input and
 * a position; never a crash, a read past the input, a hang or a leak.
 * What parses is checked for consistency: every CSV column holds the row
 * count; a dynamic JSON value dumps to text that parses to a value that
 * dumps to the same text; an .npy header's data block lies inside the file;
 * a GGUF file's tensors and metadata strings lie inside it.
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "gguf.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "fuzz_data", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

/* The input with the NUL after it that every parser may look at. */
static char *terminated(const uint8_t *data, size_t size) {
  char *b = malloc(size + 1);
  memcpy(b, data, size);
  b[size] = 0;
  return b;
}

#ifdef FUZZ_CSV
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  /* Byte 0: separator and header; byte 1: column types, 2 bits each for
   * up to 4 columns (0 = infer them all). */
  static const char seps[] = {',', ';', '\t', '|'};
  sf__csv_opts o = {.sep = seps[data[0] & 3], .header = (data[0] >> 2) & 1};
  int32_t types[4];
  if (data[1]) {
    o.ntypes = 1 + (data[1] >> 6 & 3);
    for (int i = 0; i < o.ntypes; i++)
      types[i] = 1 + ((data[1] >> (2 * i)) & 3);
    o.types = types;
  }
  char *b = terminated(data + 2, size - 2);
  sf__csv c;
  char err[512];
  if (sf__csv_parse(b, size - 2, "fuzz.csv", &o, &c, err, sizeof err)) {
    for (int64_t i = 0; i < c.ncols; i++)
      if (c.cols[i].len != c.nrows || c.cols[i].kind == SF__COL_AUTO)
        abort();
    sf__csv_free(&c);
  } else if (strncmp(err, "fuzz.csv", 8) != 0) {
    abort(); /* every refusal names the file */
  }
  free(b);
  return 0;
}
#endif

#ifdef FUZZ_JSON
/* stdlib's Json, described by hand: kind, flag, number, text, items,
 * keys. */
typedef struct json {
  sf_str *kind;
  bool flag;
  double number;
  sf_str *text;
  sf_array *items, *keys;
} json;
extern const sf_type json_type;
static const sf_type json_items = {SF_ARRAY, 8, 8, 0, &json_type, NULL, "Json[]"};
static const sf_type str_items = {SF_ARRAY, 8, 8, 0, &sf_type_str, NULL, "str[]"};
static const sf_field json_fields[] = {
    {"kind", offsetof(json, kind), &sf_type_str},     {"flag", offsetof(json, flag), &sf_type_bool},
    {"number", offsetof(json, number), &sf_type_f64}, {"text", offsetof(json, text), &sf_type_str},
    {"items", offsetof(json, items), &json_items},    {"keys", offsetof(json, keys), &str_items}};
const sf_type json_type = {SF_STRUCT, sizeof(json), 8, 6, NULL, json_fields, "Json"};

/* A typed target too: struct { name: str, xs: f64[], n: i64, ok: bool }. */
typedef struct rec {
  sf_str *name;
  sf_array *xs;
  int64_t n;
  bool ok;
} rec;
static const sf_type f64s = {SF_ARRAY, 8, 8, 0, &sf_type_f64, NULL, "f64[]"};
static const sf_field rec_fields[] = {{"name", offsetof(rec, name), &sf_type_str},
                                      {"xs", offsetof(rec, xs), &f64s},
                                      {"n", offsetof(rec, n), &sf_type_i64},
                                      {"ok", offsetof(rec, ok), &sf_type_bool}};
static const sf_type rec_type = {SF_STRUCT, sizeof(rec), 8, 4, NULL, rec_fields, "Rec"};

static const sf_loc LOC = {"fuzz.sflow", 1, 1};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *b = terminated(data, size);
  char err[1024];
  json j = {0};
  if (sf__json_decode(b, size, "fuzz.json", &json_type, true, &j, err, sizeof err)) {
    /* Dumping fails (a runtime error, caught) only for a number with no
     * JSON form: 1e999 parses to inf. */
    jmp_buf jb;
    sf__error_jmp = &jb;
    if (setjmp(jb) == 0) {
      sf_str *s1 = sf_std_data_dump_json(&j, &json_type, &LOC);
      json j2 = {0};
      if (!sf__json_decode(sf__str_data(s1), (size_t)sf__str_len(s1), "dump", &json_type, true,
                           &j2, err, sizeof err))
        abort(); /* what we write must parse */
      sf_str *s2 = sf_std_data_dump_json(&j2, &json_type, &LOC);
      if (!sf_str_eq(s1, s2))
        abort();
      sf_release(s1);
      sf_release(s2);
      sf_value_release(&json_type, &j2);
    }
    sf__error_jmp = NULL;
    sf_value_release(&json_type, &j);
  } else if (strncmp(err, "fuzz.json", 9) != 0) {
    abort();
  }
  rec r = {0};
  if (sf__json_decode(b, size, "fuzz.json", &rec_type, false, &r, err, sizeof err))
    sf_value_release(&rec_type, &r);
  else if (r.name || r.xs)
    abort(); /* a refusal leaves nothing behind */
  free(b);
  return 0;
}
#endif

#ifdef FUZZ_NPY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *b = terminated(data, size);
  sf__npy h;
  char err[512];
  if (sf__npy_parse_header(b, size, "fuzz.npy", &h, err, sizeof err)) {
    if (h.data_off > size || (size_t)h.count * (size_t)h.item_size > size - h.data_off)
      abort();
    /* Touch the data block as the reader does. */
    volatile unsigned char sum = 0;
    for (size_t i = 0; i < (size_t)h.count * (size_t)h.item_size; i++)
      sum += (unsigned char)b[h.data_off + i];
  } else if (strncmp(err, "fuzz.npy", 8) != 0) {
    abort();
  }
  free(b);
  return 0;
}
#endif

#ifdef FUZZ_GGUF
/* The exact bytes (no NUL after them), so ASan sees any read past the end;
 * what parses is walked: each tensor's data and each string of the
 * metadata must lie inside the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *b = malloc(size ? size : 1);
  memcpy(b, data, size);
  sf__gguf g;
  char err[512];
  if (sf__gguf_parse(&g, b, size, err, sizeof err)) {
    for (int64_t i = 0; i < g.ntensors; i++) {
      const sf__gguf_tensor *t = &g.tensors[i];
      if ((const char *)t->data < b || t->bytes > size ||
          (size_t)((const char *)t->data - b) > size - t->bytes)
        abort();
    }
    for (int64_t i = 0; i < g.nkv; i++) {
      const sf__gguf_kv *kv = &g.kv[i];
      if (kv->type == SF__GGUF_STR || (kv->type == SF__GGUF_ARR && kv->elem == SF__GGUF_STR)) {
        const char *p = kv->val;
        for (uint64_t k = 0; k < kv->n; k++) {
          uint64_t n;
          const char *s = sf__gguf_next_str(&p, &n);
          if (s < b || p > b + size)
            abort();
        }
      }
      int64_t v;
      double d;
      (void)sf__gguf_int(kv, &v);
      (void)sf__gguf_float(kv, &d);
    }
    sf__gguf_close(&g);
  } else if (!err[0]) {
    abort(); /* refused without a message */
  }
  free(b);
  return 0;
}
#endif
