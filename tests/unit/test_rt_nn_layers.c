/*
 * test_rt_nn_layers.c — the nn layer (runtime/nn/), its second half
 * (test_rt_nn.c has the ops, their gradients and the optimizers):
 * printing and serialization through core's hooks, safetensors (a round
 * trip, the bytes of the format, a hand-made F16/BF16 file, the strict
 * errors), randn, the encoder layers (Embedding, LayerNorm, dropout,
 * attention, gradient clipping), the fused Linear and the gradient
 * accumulated in place, indexing (rows, select, narrow, index_select,
 * gather, stack, cat), and f32 to f16/bf16 rounding (every half value,
 * nn.save's dtype, round_bf16).  Gradient checks as test_rt_nn.c's
 * (nn_test.h).
 */
#include <math.h>
#include <stddef.h>

#include "rt_test.h"

#include "nn.h"
#include "nn_test.h"
#include "simd.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_nn_layers", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static void test_print_and_serialize(void) {
  sf_tensor *a = mk(2, SHAPE(2, 2), (float[]){1, 2, 3, 4.5f});
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__format_value(&b, &sf__type_tensor, &a, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor([[1.0, 2.0], [3.0, 4.5]])");
  sf__buf_free(&b);
  sf_tensor *z = mk(0, NULL, (float[]){3});
  sf__format_value(&b, &sf__type_tensor, &z, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor(3.0)");
  sf__buf_free(&b);
  sf_tensor *big = mk(1, SHAPE(2000), NULL);
  for (int i = 0; i < 2000; i++)
    sf__t_data(big)[i] = (float)i;
  sf__format_value(&b, &sf__type_tensor, &big, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor([0.0, 1.0, 2.0, ..., 1997.0, 1998.0, 1999.0])");
  sf__buf_free(&b);
  sf_tensor *at = sf__t_transpose(a, 0, 1, &LOC);
  sf__format_value(&b, &sf__type_tensor, &at, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor([[1.0, 3.0], [2.0, 4.5]])");
  sf__buf_free(&b);
  /* A struct with a transposed view and an unset tensor, through core's
   * serializer: the values come back contiguous, the unset one unset. */
  linear_c l = {at, NULL}, back = {0};
  sf__ser_value(&b, &linear_type, &l);
  sf__reader r = {(const unsigned char *)b.data, (const unsigned char *)b.data + b.len};
  CU_ASSERT(sf__de_value(&r, &linear_type, &back));
  CU_ASSERT(r.p == r.end && back.bias == NULL && back.weight && !back.weight->req);
  check_vals("read back", back.weight, (float[]){1, 3, 2, 4.5f}, 4, 0);
  /* Cut short anywhere: refused, nothing leaked. */
  int64_t live = sf__tensor_live;
  for (size_t cut = 0; cut < b.len; cut++) {
    linear_c bad = {0};
    sf__reader rc = {(const unsigned char *)b.data, (const unsigned char *)b.data + cut};
    CU_ASSERT(!sf__de_value(&rc, &linear_type, &bad));
    sf_value_release(&linear_type, &bad);
  }
  CHECK_INT(sf__tensor_live, live);
  sf__buf_free(&b);
  /* An empty tensor whose other dimension is larger than the bytes. */
  sf_tensor *e = mk(2, SHAPE(0, 1000000), NULL), *eb = NULL;
  sf__ser_value(&b, &sf__type_tensor, &e);
  sf__reader re = {(const unsigned char *)b.data, (const unsigned char *)b.data + b.len};
  CU_ASSERT(sf__de_value(&re, &sf__type_tensor, &eb) && eb && eb->numel == 0);
  if (eb)
    check_shape(eb, 2, SHAPE(0, 1000000));
  sf_release(e);
  sf_release(eb);
  sf__buf_free(&b);
  sf_value_release(&linear_type, &back);
  sf_tensor *all[] = {a, z, big, at};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
}

/* -------------------------------------------------------- safetensors */

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(*n + 1);
  if (fread(buf, 1, *n, f) != *n)
    *n = 0;
  buf[*n] = 0;
  fclose(f);
  return buf;
}

static void write_all(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, n, f);
  fclose(f);
}

static void test_safetensors_round_trip(void) {
  char path[] = "/tmp/sflow_nn_XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  sf_str *ps = sf_str_new(path, (int64_t)strlen(path));
  model_c m, m2;
  model_init(&m, 5);
  model_init(&m2, 9);
  sf_str *f32 = sf_str_new("f32", 3);
  sf_std_nn_save(&m, &model_type, ps, f32, &model_type, &LOC);
  sf_release(f32);
  size_t n = 0;
  char *bytes = read_all(path, &n);
  uint64_t hl = 0;
  memcpy(&hl, bytes, 8);
  CU_ASSERT((8 + hl) % 8 == 0);
  char *header = strndup(bytes + 8, hl);
  const char *start = "{\"__metadata__\":{\"format\":\"pt\"},\"fc1.weight\":{\"dtype\":"
                      "\"F32\",\"shape\":[4,3],\"data_offsets\":[0,48]},\"fc1.bias\":";
  CU_ASSERT(strncmp(header, start, strlen(start)) == 0);
  CU_ASSERT(strstr(header, "\"blocks.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2]") != NULL);
  CU_ASSERT(strstr(header, "\"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
                           "[120,128]}") != NULL);
  /* 12 + 4 + 4 + 2 + 8 + 2 floats of data after the header. */
  CHECK_INT(n, 8 + hl + 4 * (12 + 4 + 4 + 2 + 8 + 2));
  CU_ASSERT(memcmp(bytes + 8 + hl, sf__t_data(m.fc1.weight), 48) == 0);
  free(header);
  free(bytes);
  sf_std_nn_load(&m2, &model_type, ps, true, &model_type, &LOC);
  sf_array *a = sf_std_nn_params(&m, &model_type, &model_type, &LOC);
  sf_array *b = sf_std_nn_params(&m2, &model_type, &model_type, &LOC);
  bool same = a->len == b->len;
  for (int64_t i = 0; same && i < a->len; i++) {
    sf_tensor *x = ((sf_tensor **)a->data)[i], *y = ((sf_tensor **)b->data)[i];
    same = x->numel == y->numel && x != y &&
           memcmp(sf__t_data(x), sf__t_data(y), (size_t)x->numel * 4) == 0;
  }
  CU_ASSERT(same); /* bitwise */
  sf_release(a);
  sf_release(b);
  /* Into a struct that lacks a name of the file: an error when strict;
   * a struct with a name the file lacks, or another shape, always. */
  linear_c l = {0};
  sf_std_nn_linear(&l, &linear_type, 3, 4, 1, &LOC);
  char want[1024];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s has no tensor \"weight\" "
           "(the struct's weight, shape [4, 3])", path);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC), want);
  typedef struct {
    linear_c fc1;
  } half_c;
  static const sf_field half_fields[] = {{"fc1", 0, &linear_type}};
  static const sf_type half_type = {SF_STRUCT, 16, 8, 1, NULL, half_fields, "Half"};
  half_c h = {l};
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s has a tensor "
           "\"blocks.0.weight\" that the struct lacks (strict = false ignores it)", path);
  EXPECT_ERROR(sf_std_nn_load(&h, &half_type, ps, true, &half_type, &LOC), want);
  sf_std_nn_load(&h, &half_type, ps, false, &half_type, &LOC);
  CU_ASSERT(memcmp(sf__t_data(h.fc1.bias), sf__t_data(m.fc1.bias), 16) == 0);
  linear_c wrong = {0};
  sf_std_nn_linear(&wrong, &linear_type, 4, 3, 1, &LOC);
  half_c hw = {wrong};
  float before = sf__t_data(wrong.bias)[0];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s: \"fc1.weight\" has shape "
           "[4, 3] in the file, but the struct's is [3, 4]", path);
  EXPECT_ERROR(sf_std_nn_load(&hw, &half_type, ps, false, &half_type, &LOC), want);
  CU_ASSERT(sf__t_data(wrong.bias)[0] == before); /* nothing copied */
  sf_value_release(&linear_type, &l);
  sf_value_release(&linear_type, &wrong);
  sf_value_release(&model_type, &m);
  sf_value_release(&model_type, &m2);
  sf_release(ps);
  unlink(path);
}

/* A file written by hand as another writer would: F16 and BF16 values,
 * an I64 buffer the struct does not have, metadata, no padding. */
static void test_safetensors_halves(void) {
  const char *hdr = "{\"weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                    "\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
                    "\"bias\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
                    "\"position_ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[12,20]}}";
  uint64_t hl = strlen(hdr);
  /* F16: 1.0, -2.5, 65504 (the largest), 2^-24 (the smallest subnormal);
   * BF16: 1.0, 3.140625. */
  uint16_t halves[6] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x3F80, 0x4049};
  int64_t pos = 7;
  size_t n = 8 + hl + 12 + 8;
  char *file = calloc(1, n);
  memcpy(file, &hl, 8);
  memcpy(file + 8, hdr, hl);
  memcpy(file + 8 + hl, halves, 12);
  memcpy(file + 8 + hl + 12, &pos, 8);
  char path[] = "/tmp/sflow_nn_XXXXXX";
  close(mkstemp(path));
  write_all(path, file, n);
  sf_str *ps = sf_str_new(path, (int64_t)strlen(path));
  linear_c l = {mk(2, SHAPE(2, 2), NULL), mk(1, SHAPE(2), NULL)};
  char want[1024];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s has a tensor "
           "\"position_ids\" that the struct lacks (strict = false ignores it)", path);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, true, &linear_type, &LOC), want);
  sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC);
  check_vals("f16", l.weight, (float[]){1.0f, -2.5f, 65504.0f, 0x1p-24f}, 4, 0);
  check_vals("bf16", l.bias, (float[]){1.0f, 3.140625f}, 2, 0);
  /* Offsets past the data, and a file too short for its header. */
  memcpy(file + 8 + strlen("{\"weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,"),
         "9", 1);
  write_all(path, file, n);
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s: the data of \"weight\" "
           "(offsets 0..9) does not fit F16 [2, 2] within the 20 data bytes", path);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC), want);
  write_all(path, file, 20);
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s is not a safetensors "
           "file (header length %lu for a file of 20 bytes)", path, (unsigned long)hl);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC), want);
  CU_ASSERT(sf__f16_to_f32(0x7C00) == INFINITY && isnan(sf__f16_to_f32(0x7E00)));
  CU_ASSERT(sf__f16_to_f32(0x8000) == 0.0f && signbit(sf__f16_to_f32(0x8000)));
  CU_ASSERT(sf__f16_to_f32(0x0200) == 0x1p-15f && sf__f16_to_f32(0x0400) == 0x1p-14f);
  free(file);
  sf_value_release(&linear_type, &l);
  sf_release(ps);
  unlink(path);
}

static void test_randn(void) {
  sf_array *sh = i64s(1, (int64_t[]){10000});
  sf_tensor *a = sf_std_nn_randn(sh, 7, &LOC), *b = sf_std_nn_randn(sh, 7, &LOC),
            *c = sf_std_nn_randn(sh, 8, &LOC);
  CU_ASSERT(memcmp(sf__t_data(a), sf__t_data(b), 40000) == 0);
  CU_ASSERT(memcmp(sf__t_data(a), sf__t_data(c), 40000) != 0);
  double s = 0, s2 = 0;
  for (int i = 0; i < 10000; i++) {
    s += sf__t_data(a)[i];
    s2 += sf__t_data(a)[i] * sf__t_data(a)[i];
  }
  double mean = s / 10000, var = s2 / 10000 - mean * mean;
  CU_ASSERT(fabs(mean) < 0.05 && fabs(var - 1) < 0.05);
  sf_tensor *u1 = sf_std_nn_randn(sh, -1, &LOC), *u2 = sf_std_nn_randn(sh, -1, &LOC);
  CU_ASSERT(memcmp(sf__t_data(u1), sf__t_data(u2), 40000) != 0); /* the call's stream moves */
  sf_release(sh);
  sf_tensor *all[] = {a, b, c, u1, u2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
}

/* ------------------------------------------------------------- layers */

typedef struct {
  sf_array *ids, *shape, *mask;
  int64_t heads;
  double p;
} layer_ctx;
static sf_tensor *f_embedding(sf_tensor **in, void *ctx) {
  layer_ctx *c = ctx;
  return sf__t_embedding(in[0], c->ids, c->shape, &LOC);
}
static sf_tensor *f_layer_norm(sf_tensor **in, void *ctx) {
  return sf__t_layer_norm(in[0], in[1], in[2], 1e-5, &LOC);
}
static sf_tensor *f_rms_norm(sf_tensor **in, void *ctx) {
  return sf__t_rms_norm(in[0], in[1], 1e-5, &LOC);
}
static sf_tensor *f_dropout(sf_tensor **in, void *ctx) {
  return sf__t_dropout(in[0], ((layer_ctx *)ctx)->p, 11, true, &LOC);
}
static sf_tensor *f_attention(sf_tensor **in, void *ctx) {
  layer_ctx *c = ctx;
  return sf__t_attention(in[0], in[1], in[2], c->mask, c->heads, &LOC);
}

/* Every layer's backward against finite differences: Embedding with a
 * repeated id (the scatter adds), LayerNorm's three inputs, dropout's
 * fixed mask, attention self and cross, with padding and a fully padded
 * batch row. */
static void test_grad_layers(void) {
  layer_ctx e = {.ids = i64s(6, (int64_t[]){1, 4, 1, 0, 3, 1}), .shape = i64s(2, (int64_t[]){2, 3})};
  sf_tensor *w[1] = {rnd(2, SHAPE(5, 3), -1, 1, true)};
  gradcheck("embedding (repeated ids)", f_embedding, &e, 1, w);
  release_all(w, 1);
  sf_tensor *ln[3] = {rnd(3, SHAPE(2, 3, 5), -2, 2, true), rnd(1, SHAPE(5), 0.5f, 1.5f, true),
                      rnd(1, SHAPE(5), -1, 1, true)};
  gradcheck("layer_norm", f_layer_norm, NULL, 3, ln);
  release_all(ln, 3);
  sf_tensor *rn[2] = {rnd(3, SHAPE(2, 3, 5), -2, 2, true), rnd(1, SHAPE(5), 0.5f, 1.5f, true)};
  gradcheck("rms_norm", f_rms_norm, NULL, 2, rn);
  release_all(rn, 2);
  layer_ctx d = {.p = 0.4};
  sf_tensor *x[1] = {rnd(2, SHAPE(4, 5), -1, 1, true)};
  gradcheck("dropout p=0.4", f_dropout, &d, 1, x);
  release_all(x, 1);
  layer_ctx a = {.mask = i64s(8, (int64_t[]){1, 1, 1, 0, 1, 0, 0, 1}), .heads = 2};
  sf_tensor *q[3] = {rnd(3, SHAPE(2, 4, 6), -1, 1, true), rnd(3, SHAPE(2, 4, 6), -1, 1, true),
                     rnd(3, SHAPE(2, 4, 6), -1, 1, true)};
  gradcheck("attention 2 heads, padded", f_attention, &a, 3, q);
  release_all(q, 3);
  layer_ctx c = {.mask = i64s(6, (int64_t[]){0, 0, 0, 1, 1, 0}), .heads = 3};
  sf_tensor *qc[3] = {rnd(3, SHAPE(2, 2, 6), -1, 1, true), rnd(3, SHAPE(2, 3, 6), -1, 1, true),
                      rnd(3, SHAPE(2, 3, 6), -1, 1, true)};
  gradcheck("attention cross, all-pad row", f_attention, &c, 3, qc);
  release_all(qc, 3);
  sf_array *arrs[] = {e.ids, e.shape, a.mask, c.mask};
  for (size_t i = 0; i < 4; i++)
    sf_release(arrs[i]);
}

/* tril/triu, where (broadcast), masked_fill and topk's values against
 * finite differences (select.c, create.c). */
static sf_tensor *g_cond; /* where's and masked_fill's condition */
static sf_tensor *f_tril(sf_tensor **in, void *ctx) {
  (void)ctx;
  sf_tensor *t = sf__t_transpose(in[0], 0, 1, &LOC), *y = sf__t_tri(t, -1, false, &LOC);
  sf_release(t);
  return y;
}
static sf_tensor *f_triu(sf_tensor **in, void *ctx) {
  (void)ctx;
  return sf__t_tri(in[0], 1, true, &LOC);
}
static sf_tensor *f_where(sf_tensor **in, void *ctx) {
  (void)ctx;
  return sf__t_where(g_cond, in[0], in[1], &LOC);
}
static sf_tensor *f_masked_fill(sf_tensor **in, void *ctx) {
  (void)ctx;
  return sf_std_nn_masked_fill(in[0], g_cond, -3.0, &LOC);
}
/* topk's values as sf_std_nn_topk makes them: its indices, then gather. */
static sf_tensor *f_topk(sf_tensor **in, void *ctx) {
  (void)ctx;
  int64_t rows = in[0]->numel / in[0]->shape[in[0]->ndim - 1];
  sf_array *idx = sf_array_new(&sf_type_i64, rows * 3, &LOC);
  sf__nn_dev_here(&LOC)->topk(in[0], 3, idx->data, &LOC);
  sf_tensor *v = sf__t_gather(in[0], -1, idx, &LOC);
  sf_release(idx);
  return v;
}

static void test_grad_select(void) {
  sf_tensor *x[1] = {rnd(3, SHAPE(2, 4, 3), -1, 1, true)};
  gradcheck("tril(-1) of a transposed view", f_tril, NULL, 1, x);
  gradcheck("triu(1)", f_triu, NULL, 1, x);
  release_all(x, 1);
  g_cond = rnd(3, SHAPE(2, 1, 4), -1, 1, false);
  for (int64_t i = 0; i < g_cond->numel; i++)
    sf__t_wdata(g_cond)[i] = sf__t_data(g_cond)[i] > 0 ? 1.0f : 0.0f;
  sf_tensor *ab[2] = {rnd(2, SHAPE(3, 4), -1, 1, true), rnd(3, SHAPE(2, 3, 1), -1, 1, true)};
  gradcheck("where (2,1,4) (3,4) (2,3,1)", f_where, NULL, 2, ab);
  release_all(ab, 2);
  sf_tensor *m[1] = {rnd(3, SHAPE(2, 3, 4), -1, 1, true)};
  gradcheck("masked_fill", f_masked_fill, NULL, 1, m);
  release_all(m, 1);
  sf_release(g_cond);
  sf_tensor *t[1] = {rnd(2, SHAPE(3, 7), -1, 1, true)};
  gradcheck("topk k=3 values", f_topk, NULL, 1, t);
  release_all(t, 1);
}

/* Layer norm runs its row sums four rows at a time, a row per vector
 * lane, and the rest of the rows one by one: each row's output and input
 * gradient equal, bit for bit, that row normalised alone (one row: the
 * single-row loop), for 7 rows of 37 (a group of four, three left over, a
 * tail of 1 in the four-wide loops along the row). */
static void test_layer_norm_rows(void) {
  int64_t rows = 7, d = 37;
  sf_tensor *x = rnd(2, SHAPE(rows, d), -3, 3, true), *w = rnd(1, SHAPE(d), 0.5f, 1.5f, true);
  sf_tensor *b = rnd(1, SHAPE(d), -1, 1, true), *up = rnd(2, SHAPE(rows, d), -1, 1, false);
  sf_tensor *y = sf__t_layer_norm(x, w, b, 1e-5, &LOC);
  sf_tensor *yu = sf__t_binary(SF_TOP_MUL, y, up, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, yu, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  int64_t ydiff = 0, gdiff = 0;
  for (int64_t r = 0; r < rows; r++) {
    sf_tensor *xr = mk(2, SHAPE(1, d), sf__t_data(x) + r * d);
    sf_tensor *ur = mk(2, SHAPE(1, d), sf__t_data(up) + r * d);
    xr->req = true;
    sf_tensor *yr = sf__t_layer_norm(xr, w, b, 1e-5, &LOC);
    sf_tensor *yur = sf__t_binary(SF_TOP_MUL, yr, ur, &LOC);
    sf_tensor *lr = sf__t_reduce(SF__R_SUM, yur, SF__ALL_AXES, &LOC);
    sf__backward(lr, &LOC);
    ydiff += memcmp(sf__t_data(yr), sf__t_data(y) + r * d, (size_t)d * sizeof(float)) != 0;
    gdiff += memcmp(sf__t_data(xr->grad), sf__t_data(x->grad) + r * d,
                    (size_t)d * sizeof(float)) != 0;
    sf_tensor *rel[] = {xr, ur, yr, yur, lr};
    for (size_t i = 0; i < 5; i++)
      sf_release(rel[i]);
  }
  printf("\n    rows differing from the row alone: output %ld, input gradient %ld ", (long)ydiff,
         (long)gdiff);
  CU_ASSERT(ydiff == 0);
  CU_ASSERT(gdiff == 0);
  sf_tensor *rel[] = {x, w, b, up, y, yu, l};
  for (size_t i = 0; i < 7; i++)
    sf_release(rel[i]);
}

/* Forward values by hand, dropout's statistics and seeds, clipping, and
 * every layer's errors. */
static void test_layers_forward(void) {
  sf_tensor *w = mk(2, SHAPE(3, 2), (float[]){0, 1, 10, 11, 20, 21});
  sf_array *ids = i64s(4, (int64_t[]){2, 0, 2, 1}), *sh = i64s(2, (int64_t[]){2, 2});
  sf_tensor *e = sf__t_embedding(w, ids, sh, &LOC);
  check_shape(e, 3, SHAPE(2, 2, 2));
  check_vals("embedding", e, (float[]){20, 21, 0, 1, 20, 21, 10, 11}, 8, 0);
  sf_array *bad = i64s(2, (int64_t[]){1, 3}), *sh2 = i64s(1, (int64_t[]){2});
  EXPECT_ERROR(sf__t_embedding(w, bad, sh2, &LOC),
               "t.sflow:3:7: runtime error: embedding: id 3 (position 1) is out of range for 3 "
               "embeddings (weight shape [3, 2])");
  EXPECT_ERROR(sf__t_embedding(w, ids, sh2, &LOC),
               "t.sflow:3:7: runtime error: embedding: 4 ids do not fill shape [2]");
  /* LayerNorm of [1, 2, 3, 4]: mean 2.5, biased variance 1.25. */
  sf_tensor *x = mk(2, SHAPE(1, 4), (float[]){1, 2, 3, 4});
  sf_tensor *g = mk(1, SHAPE(4), (float[]){1, 2, 1, 1}), *b = mk(1, SHAPE(4), (float[]){0, 0, 0, 1});
  sf_tensor *y = sf__t_layer_norm(x, g, b, 1e-5, &LOC);
  float r = (float)(1 / sqrt(1.25 + 1e-5));
  check_vals("layer_norm", y, (float[]){-1.5f * r, -1.0f * r, 0.5f * r, 1.5f * r + 1}, 4, 1e-6f);
  EXPECT_ERROR(sf__t_layer_norm(x, b, sf__t_empty(1, SHAPE(3), &LOC), 1e-5, &LOC),
               "t.sflow:3:7: runtime error: layer_norm: weight [4] and bias [3] must both be "
               "[4], the last dimension of the input [1, 4]");
  /* Dropout: the same mask for a seed, another for another seed, about
   * p zeroed, the rest scaled by 1/(1-p); identity when off. */
  sf_tensor *ones = sf__t_full(1, SHAPE(100000), 1.0f);
  sf_tensor *d1 = sf__t_dropout(ones, 0.25, 5, true, &LOC), *d2 = sf__t_dropout(ones, 0.25, 5, true, &LOC);
  sf_tensor *d3 = sf__t_dropout(ones, 0.25, 6, true, &LOC);
  CU_ASSERT(memcmp(sf__t_data(d1), sf__t_data(d2), 400000) == 0);
  CU_ASSERT(memcmp(sf__t_data(d1), sf__t_data(d3), 400000) != 0);
  int64_t zeros = 0, other = 0;
  for (int64_t i = 0; i < 100000; i++) {
    float v = sf__t_data(d1)[i];
    zeros += v == 0.0f;
    other += v != 0.0f && v != (float)(1 / 0.75);
  }
  printf("\n    dropout p=0.25: %.4f of 100000 zeroed ", zeros / 1e5);
  CU_ASSERT(fabs(zeros / 1e5 - 0.25) < 0.01 && other == 0);
  sf_tensor *id0 = sf__t_dropout(ones, 0.0, 5, true, &LOC), *id1 = sf__t_dropout(ones, 0.5, 5, false, &LOC);
  CU_ASSERT(id0 == ones && id1 == ones);
  EXPECT_ERROR(sf__t_dropout(ones, 1.5, 5, true, &LOC),
               "t.sflow:3:7: runtime error: dropout: p must be in [0, 1], not 1.5");
  /* Attention: one head, one query over two keys of which the second is
   * padding: the output is the first value exactly. */
  sf_tensor *q = mk(3, SHAPE(1, 1, 2), (float[]){1, 0});
  sf_tensor *k = mk(3, SHAPE(1, 2, 2), (float[]){1, 0, 5, 5});
  sf_tensor *v = mk(3, SHAPE(1, 2, 2), (float[]){3, 4, 100, 100});
  sf_array *m = i64s(2, (int64_t[]){1, 0}), *none = i64s(0, NULL), *m3 = i64s(3, (int64_t[]){1, 1, 1});
  sf_tensor *o = sf__t_attention(q, k, v, m, 1, &LOC);
  check_vals("attention padded", o, (float[]){3, 4}, 2, 1e-6f);
  /* Unmasked: softmax([1, 5] / sqrt 2) weights. */
  sf_tensor *o2 = sf__t_attention(q, k, v, none, 1, &LOC);
  double p1 = 1 / (1 + exp(4 / sqrt(2.0)));
  check_vals("attention", o2, (float[]){(float)(3 * p1 + 100 * (1 - p1)), (float)(4 * p1 + 100 * (1 - p1))}, 2, 1e-4f);
  EXPECT_ERROR(sf__t_attention(q, k, v, m, 3, &LOC),
               "t.sflow:3:7: runtime error: attention: 3 heads do not divide the width 2 of q [1, 1, 2]");
  EXPECT_ERROR(sf__t_attention(q, k, v, m3, 1, &LOC),
               "t.sflow:3:7: runtime error: attention: the mask has 3 entries, but keys [1, 2, 2] "
               "need 2 (B * S, one per key; [] for none)");
  EXPECT_ERROR(sf__t_attention(q, k, x, m, 1, &LOC),
               "t.sflow:3:7: runtime error: attention: q [1, 1, 2], k [1, 2, 2] and v [1, 4] must "
               "be (B, T, D), (B, S, D) and (B, S, D)");
  /* Clipping: gradients 3 and 4 (norm 5) to norm 1; a large max_norm
   * leaves them alone. */
  sf_tensor *p0 = mk(1, SHAPE(1), (float[]){0}), *p1t = mk(1, SHAPE(1), (float[]){0});
  p0->req = p1t->req = true;
  p0->grad = mk(1, SHAPE(1), (float[]){3});
  p1t->grad = mk(1, SHAPE(1), (float[]){4});
  sf_array *ps = sf_array_new(&sf__type_tensor, 2, &LOC);
  ((sf_tensor **)ps->data)[0] = p0;
  ((sf_tensor **)ps->data)[1] = p1t;
  CU_ASSERT(fabs(sf__clip_grad_norm(ps, 10.0, &LOC) - 5.0) < 1e-12);
  CU_ASSERT(sf__t_data(p0->grad)[0] == 3.0f);
  CU_ASSERT(fabs(sf__clip_grad_norm(ps, 1.0, &LOC) - 5.0) < 1e-12);
  check_vals("clipped", p0->grad, (float[]){0.6f}, 1, 1e-6f);
  check_vals("clipped", p1t->grad, (float[]){0.8f}, 1, 1e-6f);
  sf_release(ps); /* releases p0 and p1t */
  sf_tensor *all[] = {w, e, x, g, b, y, ones, d1, d2, d3, id0, id1, q, k, v, o, o2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_array *arrs[] = {ids, sh, bad, sh2, m, none, m3};
  for (size_t i = 0; i < sizeof arrs / sizeof *arrs; i++)
    sf_release(arrs[i]);
}

/* ------------------------------------------- per-sample dropout, vectors */

typedef struct {
  sf_array *index, *mask;
  int64_t heads, stream;
  double p;
} rows_ctx;
static sf_tensor *f_dropout_rows(sf_tensor **in, void *ctx) {
  rows_ctx *c = ctx;
  return sf__t_dropout_rows(in[0], c->p, 3, c->index, c->stream, true, &LOC);
}
static sf_tensor *f_attention_dropout(sf_tensor **in, void *ctx) {
  rows_ctx *c = ctx;
  return sf__t_attention_dropout(in[0], in[1], in[2], c->mask, c->heads, c->p, 3, c->index,
                                 c->stream, true, &LOC);
}

/* Row r of x (rows, n) alone, as a (1, n) tensor (a copy). */
static sf_tensor *row_of(sf_tensor *x, int64_t r) {
  int64_t n = x->numel / x->shape[0];
  sf_tensor *t = mk(2, SHAPE(1, n), sf__t_data(x) + r * n);
  return t;
}

#ifdef SF__AVX2
/* Whether exp8 and phi8 of x[0..8) differ in any bit from exp4 and phi4. */
static SF__AVX2 int avx2_differs(const float *x) {
  sf__f8 v;
  memcpy(&v, x, sizeof v);
  sf__f8 e = sf__exp8(-0.5f * v * v), p = sf__phi8(v);
  float e8[8], p8[8];
  memcpy(e8, &e, sizeof e8);
  memcpy(p8, &p, sizeof p8);
  for (int h = 0; h < 2; h++) {
    sf__f4 v4 = sf__ld4(x + 4 * h), e4 = sf__exp4(-0.5f * v4 * v4), p4 = sf__phi4(v4);
    if (memcmp(&e4, e8 + 4 * h, sizeof e4) || memcmp(&p4, p8 + 4 * h, sizeof p4))
      return 1;
  }
  return 0;
}

/* The same for exp16 and phi16 (AVX-512F) of x[0..16). */
static SF__AVX512 int avx512_differs(const float *x) {
  sf__f16 v;
  memcpy(&v, x, sizeof v);
  sf__f16 e = sf__exp16(-0.5f * v * v), p = sf__phi16(v);
  float e16[16], p16[16];
  memcpy(e16, &e, sizeof e16);
  memcpy(p16, &p, sizeof p16);
  for (int h = 0; h < 4; h++) {
    sf__f4 v4 = sf__ld4(x + 4 * h), e4 = sf__exp4(-0.5f * v4 * v4), p4 = sf__phi4(v4);
    if (memcmp(&e4, e16 + 4 * h, sizeof e4) || memcmp(&p4, p16 + 4 * h, sizeof p4))
      return 1;
  }
  return 0;
}
#endif

/* dropout_rows and attention_dropout: finite differences; a row's mask is
 * the same alone as in a batch (what makes 1, 2 and 4 workers agree) and
 * follows (seed, index, stream); errors.  Then simd.h's exp and normal CDF
 * against libm's, and the masked softmax's right-padding path against the
 * general one. */
static void test_dropout_rows(void) {
  rows_ctx d = {.index = i64s(4, (int64_t[]){7, 3, 7, 100}), .p = 0.4, .stream = 2};
  sf_tensor *x[1] = {rnd(2, SHAPE(4, 5), -1, 1, true)};
  gradcheck("dropout_rows p=0.4", f_dropout_rows, &d, 1, x);
  release_all(x, 1);
  rows_ctx a = {.index = i64s(2, (int64_t[]){41, 5}), .mask = i64s(8, (int64_t[]){1, 1, 1, 0, 1, 0, 0, 1}),
                .heads = 2, .p = 0.3, .stream = 1};
  sf_tensor *q[3] = {rnd(3, SHAPE(2, 4, 6), -1, 1, true), rnd(3, SHAPE(2, 4, 6), -1, 1, true),
                     rnd(3, SHAPE(2, 4, 6), -1, 1, true)};
  gradcheck("attention_dropout p=0.3", f_attention_dropout, &a, 3, q);

  /* Batch independence: each row's values equal the row run alone. */
  sf_tensor *ones = sf__t_full(2, SHAPE(4, 64), 1.0f);
  sf_tensor *all = sf__t_dropout_rows(ones, 0.5, 9, d.index, 0, true, &LOC);
  bool same = true;
  for (int64_t r = 0; r < 4; r++) {
    sf_tensor *one = row_of(ones, r);
    sf_array *ix = i64s(1, (int64_t[]){((int64_t *)d.index->data)[r]});
    sf_tensor *alone = sf__t_dropout_rows(one, 0.5, 9, ix, 0, true, &LOC);
    same = same && memcmp(sf__t_data(alone), sf__t_data(all) + r * 64, 64 * sizeof(float)) == 0;
    sf_release(alone);
    sf_release(one);
    sf_release(ix);
  }
  CU_ASSERT(same);
  const float *m = sf__t_data(all);
  CU_ASSERT(memcmp(m, m + 2 * 64, 64 * sizeof(float)) == 0); /* index 7 twice: one mask */
  CU_ASSERT(memcmp(m, m + 64, 64 * sizeof(float)) != 0);     /* 7 and 3 differ */
  sf_tensor *s1 = sf__t_dropout_rows(ones, 0.5, 9, d.index, 1, true, &LOC);
  sf_tensor *s2 = sf__t_dropout_rows(ones, 0.5, 10, d.index, 0, true, &LOC);
  CU_ASSERT(memcmp(m, sf__t_data(s1), 64 * sizeof(float)) != 0); /* another stream */
  CU_ASSERT(memcmp(m, sf__t_data(s2), 64 * sizeof(float)) != 0); /* another seed */
  sf_tensor *off = sf__t_dropout_rows(ones, 0.5, 9, d.index, 0, false, &LOC);
  CU_ASSERT(off == ones);
  /* attention_dropout: batch row 1 alone gives batch row 1's output. */
  sf__no_grad = true;
  sf_tensor *o = sf__t_attention_dropout(q[0], q[1], q[2], a.mask, 2, 0.3, 3, a.index, 1, true, &LOC);
  sf_tensor *q1 = sf__t_row(q[0], 1, &LOC), *k1 = sf__t_row(q[1], 1, &LOC), *v1 = sf__t_row(q[2], 1, &LOC);
  sf_tensor *q1r = sf__t_reshape(q1, 3, SHAPE(1, 4, 6), &LOC), *k1r = sf__t_reshape(k1, 3, SHAPE(1, 4, 6), &LOC);
  sf_tensor *v1r = sf__t_reshape(v1, 3, SHAPE(1, 4, 6), &LOC);
  sf_array *m1 = i64s(4, (int64_t[]){1, 0, 0, 1}), *i1 = i64s(1, (int64_t[]){5});
  sf_tensor *o1 = sf__t_attention_dropout(q1r, k1r, v1r, m1, 2, 0.3, 3, i1, 1, true, &LOC);
  check_vals("attention_dropout row alone", o1, sf__t_data(o) + 24, 24, 1e-6f);
  sf_tensor *plain = sf__t_attention(q[0], q[1], q[2], a.mask, 2, &LOC);
  sf_tensor *ev = sf__t_attention_dropout(q[0], q[1], q[2], a.mask, 2, 0.3, 3, a.index, 1, false, &LOC);
  check_vals("attention_dropout off", ev, sf__t_data(plain), 48, 0);
  sf__no_grad = false;
  EXPECT_ERROR(sf__t_dropout_rows(ones, 0.5, 9, a.index, 0, true, &LOC),
               "t.sflow:3:7: runtime error: dropout_rows: index has 2 entries, but the tensor "
               "[4, 64] needs one per row of its first axis");
  EXPECT_ERROR(sf__t_dropout_rows(ones, 0.5, -1, d.index, 0, true, &LOC),
               "t.sflow:3:7: runtime error: dropout_rows: seed must be >= 0, not -1");
  EXPECT_ERROR(sf__t_attention_dropout(q[0], q[1], q[2], a.mask, 2, 0.3, 3, d.index, 1, true, &LOC),
               "t.sflow:3:7: runtime error: attention_dropout: index has 4 entries, but the "
               "tensor [2, 4, 6] needs one per row of its first axis");
  sf_tensor *rel[] = {ones, all, s1, s2, off, o, q1, k1, v1, q1r, k1r, v1r, o1, plain, ev};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
    sf_release(rel[i]);
  release_all(q, 3);
  sf_release(m1);
  sf_release(i1);

  /* simd.h: exp within 2 ulp of libm on [-87, 0], 0 below and for -inf,
   * NaN kept; Φ within 5e-6 relative of erfc's on [-6, 8]. */
  double worst_ulp = 0, worst_rel = 0;
  for (float v = -87.0f; v <= 0.0f; v += 0.00071f) {
    double e = exp((double)v);
    float ef = (float)e, ulp = nextafterf(ef, INFINITY) - ef;
    double u = fabs(sf__exp4(sf__splat4(v))[0] - e) / ulp;
    worst_ulp = u > worst_ulp ? u : worst_ulp;
  }
  sf__f4 edge = sf__exp4((sf__f4){-INFINITY, -90.0f, NAN, 0.0f});
  CU_ASSERT(edge[0] == 0.0f && edge[1] == 0.0f && isnan(edge[2]) && edge[3] == 1.0f);
  for (float v = -6.0f; v <= 8.0f; v += 0.00031f) {
    double want = 0.5 * erfc(-(double)v / sqrt(2.0));
    double r = fabs(sf__phi4(sf__splat4(v))[0] - want) / want;
    worst_rel = r > worst_rel ? r : worst_rel;
  }
  printf("\n    simd exp: max %.2f ulp; normal CDF: max relative error %.2e ", worst_ulp, worst_rel);
  CU_ASSERT(worst_ulp <= 2.0);
  CU_ASSERT(worst_rel <= 5e-6);
  /* The eight-lane versions (AVX2) give the four-lane bits, and so does the
   * GELU op whichever it dispatches to. */
  int64_t nsweep = 4000, diff8 = 0, diff16 = 0;
  sf_tensor *sx = mk(1, SHAPE(4003), NULL);
  for (int64_t i = 0; i < 4003; i++)
    sf__t_data(sx)[i] = -12.0f + 0.005f * (float)i;
#ifdef SF__AVX2
  if (sf__have_avx2())
    for (int64_t i = 0; i < nsweep; i += 8)
      diff8 += avx2_differs(sf__t_data(sx) + i);
  if (sf__have_avx512())
    for (int64_t i = 0; i < nsweep; i += 16)
      diff16 += avx512_differs(sf__t_data(sx) + i);
  printf("\n    avx512 %s: %ld of %ld blocks differ from 4 lanes ",
         sf__have_avx512() ? "present" : "absent", (long)diff16, (long)(nsweep / 16));
#endif
  CU_ASSERT(diff8 == 0);
  CU_ASSERT(diff16 == 0);
  /* GELU's backward, whichever width it dispatches to, is the four-lane
   * g (Φ(x) + x φ(x)) bit for bit (the tail of 3 included). */
  {
    sf_tensor *gxs = mk(1, SHAPE(4003), sf__t_data(sx));
    gxs->req = true;
    sf_tensor *gys = sf__t_unary(SF__U_GELU, gxs, &LOC);
    sf_tensor *gl = sf__t_reduce(SF__R_SUM, gys, SF__ALL_AXES, &LOC);
    sf__backward(gl, &LOC);
    int64_t diffb = 0;
    for (int64_t i = 0; i + 4 <= 4000; i += 4) {
      sf__f4 v = sf__ld4(sf__t_data(sx) + i);
      sf__f4 pdf = sf__splat4(0.39894228040143267794f) * sf__exp4(sf__splat4(-0.5f) * v * v);
      sf__f4 want = sf__splat4(1.0f) * (sf__phi4(v) + v * pdf);
      diffb += memcmp(&want, sf__t_data(gxs->grad) + i, sizeof want) != 0;
    }
    CU_ASSERT(diffb == 0);
    sf_release(gl);
    sf_release(gys);
    sf_release(gxs);
  }
  sf_tensor *sg = sf__t_unary(SF__U_GELU, sx, &LOC);
  int64_t diffg = 0;
  for (int64_t i = 0; i + 4 <= 4003; i += 4) {
    sf__f4 v = sf__ld4(sf__t_data(sx) + i), y4 = v * sf__phi4(v);
    diffg += memcmp(&y4, sf__t_data(sg) + i, sizeof y4) != 0;
  }
  printf("\n    avx2 %s: %ld of %ld blocks differ from 4 lanes; gelu op: %ld ",
         sf__have_avx2() ? "present" : "absent", (long)diff8, (long)(nsweep / 8), (long)diffg);
  CU_ASSERT(diffg == 0);
  sf_release(sx);
  sf_release(sg);
  /* gelu through the vector path, tails included (7 values). */
  sf_tensor *gx = mk(1, SHAPE(7), (float[]){-5, -1, -0.1f, 0, 0.5f, 2, 10});
  sf_tensor *gy = sf__t_unary(SF__U_GELU, gx, &LOC);
  float gw[7];
  for (int i = 0; i < 7; i++) {
    double xv = sf__t_data(gx)[i];
    gw[i] = (float)(xv * 0.5 * erfc(-xv / sqrt(2.0)));
  }
  check_vals("gelu", gy, gw, 7, 2e-7f);
  CU_ASSERT(fabsf(sf__t_data(gy)[0] - gw[0]) <= 1e-5f * fabsf(gw[0])); /* the tail, relatively */

  /* Masked softmax: right padding (the prefix path) and a scattered mask
   * (the general one) both equal attention over the kept keys alone. */
  sf_tensor *aq = rnd(3, SHAPE(1, 3, 4), -1, 1, false), *ak = rnd(3, SHAPE(1, 7, 4), -1, 1, false);
  sf_tensor *av = rnd(3, SHAPE(1, 7, 4), -1, 1, false);
  sf_array *pre = i64s(7, (int64_t[]){1, 1, 1, 1, 1, 0, 0});
  sf_array *sc = i64s(7, (int64_t[]){0, 1, 0, 1, 1, 0, 1});
  sf_tensor *kp = sf__t_rows(sf__t_reshape(ak, 2, SHAPE(7, 4), &LOC), 0, 5, &LOC);
  sf_tensor *vp = sf__t_rows(sf__t_reshape(av, 2, SHAPE(7, 4), &LOC), 0, 5, &LOC);
  float ks[16], vs[16];
  int64_t kept[4] = {1, 3, 4, 6};
  for (int i = 0; i < 4; i++) {
    memcpy(ks + 4 * i, sf__t_data(ak) + 4 * kept[i], 4 * sizeof(float));
    memcpy(vs + 4 * i, sf__t_data(av) + 4 * kept[i], 4 * sizeof(float));
  }
  sf_tensor *kpr = sf__t_reshape(kp, 3, SHAPE(1, 5, 4), &LOC), *vpr = sf__t_reshape(vp, 3, SHAPE(1, 5, 4), &LOC);
  sf_tensor *ksr = mk(3, SHAPE(1, 4, 4), ks), *vsr = mk(3, SHAPE(1, 4, 4), vs);
  sf_array *none = i64s(0, NULL);
  sf_tensor *op = sf__t_attention(aq, ak, av, pre, 2, &LOC), *wp = sf__t_attention(aq, kpr, vpr, none, 2, &LOC);
  sf_tensor *os = sf__t_attention(aq, ak, av, sc, 2, &LOC), *ws = sf__t_attention(aq, ksr, vsr, none, 2, &LOC);
  check_vals("softmax right padding", op, sf__t_data(wp), 12, 1e-6f);
  check_vals("softmax scattered mask", os, sf__t_data(ws), 12, 1e-6f);
  sf_tensor *rel2[] = {gx, gy, aq, ak, av, kp, vp, kpr, vpr, ksr, vsr, op, wp, os, ws};
  for (size_t i = 0; i < sizeof rel2 / sizeof *rel2; i++)
    sf_release(rel2[i]);
  sf_array *arrs[] = {d.index, a.index, a.mask, pre, sc, none};
  for (size_t i = 0; i < sizeof arrs / sizeof *arrs; i++)
    sf_release(arrs[i]);
}

static sf_tensor *f_linear_fused(sf_tensor **in, void *ctx) {
  (void)ctx;
  return sf__t_linear(in[0], in[1], in[2], &LOC);
}

/* The bias-in-the-product Linear: finite differences for x, w and b (x 3-D,
 * so the bias gradient sums over two axes), the values of the composed
 * x wᵀ + b, and a bias of another shape going the composed way. */
static void test_linear_fused(void) {
  sf_tensor *in[3] = {rnd(3, SHAPE(2, 3, 4), -1, 1, true), rnd(2, SHAPE(5, 4), -1, 1, true),
                      rnd(1, SHAPE(5), -1, 1, true)};
  gradcheck("linear (bias in the product)", f_linear_fused, NULL, 3, in);
  sf__no_grad = true;
  sf_tensor *y = sf__t_linear(in[0], in[1], in[2], &LOC);
  sf_tensor *h = sf__t_matmul_nt(in[0], in[1], &LOC), *want = sf__t_binary(SF_TOP_ADD, h, in[2], &LOC);
  check_shape(y, 3, SHAPE(2, 3, 5));
  check_vals("linear fused", y, sf__t_data(want), 30, 1e-6f);
  sf_tensor *b2 = rnd(2, SHAPE(3, 5), -1, 1, false);
  sf_tensor *y2 = sf__t_linear(in[0], in[1], b2, &LOC), *want2 = sf__t_binary(SF_TOP_ADD, h, b2, &LOC);
  check_vals("linear, (3, 5) bias", y2, sf__t_data(want2), 30, 0);
  sf__no_grad = false;
  EXPECT_ERROR(sf__t_linear(in[2], in[1], in[2], &LOC),
               "t.sflow:3:7: runtime error: linear: input of shape [5] does not fit a weight of "
               "shape [5, 4] (the weight is (out, in), the input (..., in))");
  sf_tensor *rel[] = {y, h, want, b2, y2, want2};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
    sf_release(rel[i]);
  release_all(in, 3);
}

/* A Linear's input gradient adds into the gradient the input already
 * has (sgemm with beta 1, no zeroing and no add pass): x feeds two
 * products, and its gradient is bitwise the two products into zeros
 * added, for out up to the library's k block (as here). */
static void test_grad_acc_product(void) {
  enum { R = 64, IN = 48, O1 = 32, O2 = 40 };
  sf_tensor *x = rnd(2, SHAPE(R, IN), -1, 1, true), *w1 = rnd(2, SHAPE(O1, IN), -1, 1, false);
  sf_tensor *w2 = rnd(2, SHAPE(O2, IN), -1, 1, false), *u1 = rnd(2, SHAPE(R, O1), -1, 1, false);
  sf_tensor *u2 = rnd(2, SHAPE(R, O2), -1, 1, false);
  sf_tensor *y1 = sf__t_matmul_nt(x, w1, &LOC), *y2 = sf__t_matmul_nt(x, w2, &LOC);
  sf_tensor *p1 = sf__t_binary(SF_TOP_MUL, y1, u1, &LOC), *p2 = sf__t_binary(SF_TOP_MUL, y2, u2, &LOC);
  sf_tensor *s1 = sf__t_reduce(SF__R_SUM, p1, SF__ALL_AXES, &LOC);
  sf_tensor *s2 = sf__t_reduce(SF__R_SUM, p2, SF__ALL_AXES, &LOC);
  sf_tensor *l = sf__t_binary(SF_TOP_ADD, s1, s2, &LOC);
  sf__backward(l, &LOC);
  float *g1 = malloc(R * IN * sizeof *g1), *g2 = malloc(R * IN * sizeof *g2);
  sf__sgemm(false, false, R, IN, O1, 1.0f, sf__t_data(u1), O1, sf__t_data(w1), IN, 0.0f, g1, IN);
  sf__sgemm(false, false, R, IN, O2, 1.0f, sf__t_data(u2), O2, sf__t_data(w2), IN, 0.0f, g2, IN);
  if (strncmp(sf__blas_sgemm(), "sflow", 5) == 0) {
    /* sflow's GEMM (SFLOW_BLAS=sflow) continues each element's fma chain
     * from C for beta 1: the second product's chain starts at the first's
     * values (g1 + 0 below is then exactly that). */
    memcpy(g1, g2, R * IN * sizeof *g1);
    sf__sgemm(false, false, R, IN, O1, 1.0f, sf__t_data(u1), O1, sf__t_data(w1), IN, 1.0f, g1, IN);
    memset(g2, 0, R * IN * sizeof *g2);
  }
  int64_t bad = -1;
  for (int64_t i = 0; i < R * IN && bad < 0; i++) {
    float want = g2[i] + g1[i];
    if (memcmp(&sf__t_data(x->grad)[i], &want, sizeof want))
      bad = i;
  }
  if (bad >= 0)
    fprintf(stderr, "\n  grad_acc_product: value %lld: %.9g want %.9g\n", (long long)bad,
            sf__t_data(x->grad)[bad], g2[bad] + g1[bad]);
  CHECK_INT(bad, -1);
  free(g1);
  free(g2);
  sf_tensor *rel[] = {x, w1, w2, u1, u2, y1, y2, p1, p2, s1, s2, l};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
    sf_release(rel[i]);
}

/* ------------------------------------------------------ rows, stack, cat */

static sf_array *tensors(int n, sf_tensor **ts) {
  sf_array *a = sf_array_new(&sf__type_tensor, n, &LOC);
  for (int i = 0; i < n; i++) {
    sf_retain(ts[i]);
    ((sf_tensor **)a->data)[i] = ts[i];
  }
  return a;
}

/* (x * x)[-2] and the rows 1..3 of xᵀ: the gradient only in the rows taken. */
static sf_tensor *f_rows(sf_tensor **in, void *ctx) {
  (void)ctx;
  sf_tensor *sq = sf__t_binary(SF_TOP_MUL, in[0], in[0], &LOC);
  sf_tensor *r = sf__t_row(sq, -2, &LOC);
  sf_tensor *t = sf__t_transpose(in[0], 0, 1, &LOC);
  sf_tensor *s = sf__t_rows(t, 1, 3, &LOC); /* (2, 4) */
  sf_tensor *s0 = sf__t_row(s, 1, &LOC);    /* (4) */
  sf_tensor *out = sf__t_binary(SF_TOP_MUL, r, s0, &LOC);
  sf_tensor *all[] = {sq, r, t, s, s0};
  for (size_t i = 0; i < 5; i++)
    sf_release(all[i]);
  return out;
}

/* stack([a[1], b * b, a[0]]) and cat([a, b, a], axis 0 or 1). */
static sf_tensor *f_stack(sf_tensor **in, void *ctx) {
  (void)ctx;
  sf_tensor *a1 = sf__t_row(in[0], 1, &LOC), *a0 = sf__t_row(in[0], 0, &LOC);
  sf_tensor *bb = sf__t_binary(SF_TOP_MUL, in[1], in[1], &LOC);
  sf_array *ts = tensors(3, (sf_tensor *[]){a1, bb, a0});
  sf_tensor *out = sf__t_stack(ts, &LOC);
  sf_release(ts);
  sf_release(a1);
  sf_release(a0);
  sf_release(bb);
  return out;
}

static sf_tensor *f_cat(sf_tensor **in, void *ctx) {
  sf_tensor *bb = sf__t_binary(SF_TOP_MUL, in[1], in[1], &LOC);
  sf_array *ts = tensors(3, (sf_tensor *[]){in[0], bb, in[0]});
  sf_tensor *out = sf__t_cat(ts, *(int64_t *)ctx, &LOC);
  sf_release(ts);
  sf_release(bb);
  return out;
}

/* Row views, stack and cat: forward values, finite-difference gradients
 * (through strided views and repeated inputs), and their errors. */
static void test_index_stack_cat(void) {
  sf_tensor *x = mk(2, SHAPE(3, 2), (float[]){1, 2, 3, 4, 5, 6});
  sf_tensor *r = sf__t_row(x, -1, &LOC), *s = sf__t_rows(x, 1, 3, &LOC);
  check_shape(r, 1, SHAPE(2));
  check_vals("x[-1]", r, (float[]){5, 6}, 2, 0);
  check_shape(s, 2, SHAPE(2, 2));
  check_vals("x[1..3]", s, (float[]){3, 4, 5, 6}, 4, 0);
  CU_ASSERT(r->st == x->st && s->st == x->st); /* views, no copy */
  sf_tensor *e = sf__t_rows(x, 2, 2, &LOC);
  check_shape(e, 2, SHAPE(0, 2));
  sf_tensor *z = sf__t_row(r, 0, &LOC);
  check_shape(z, 0, NULL);
  check_vals("x[-1][0]", z, (float[]){5}, 1, 0);
  EXPECT_ERROR(sf__t_row(x, 3, &LOC), "t.sflow:3:7: runtime error: tensor index 3 out of bounds "
                                       "for length 3 (shape [3, 2])");
  EXPECT_ERROR(sf__t_row(x, -4, &LOC), "t.sflow:3:7: runtime error: tensor index -4 out of "
                                        "bounds for length 3 (shape [3, 2])");
  EXPECT_ERROR(sf__t_rows(x, 2, 1, &LOC), "t.sflow:3:7: runtime error: tensor slice [2..1] out "
                                           "of range for length 3 (shape [3, 2])");
  EXPECT_ERROR(sf__t_row(z, 0, &LOC), "t.sflow:3:7: runtime error: tensor index: a 0-d tensor "
                                       "has no rows to index (use item() for its value)");
  sf_array *none = sf_array_new(&sf__type_tensor, 0, &LOC);
  EXPECT_ERROR(sf__t_stack(none, &LOC),
               "t.sflow:3:7: runtime error: stack: needs at least one tensor, got an empty array");
  sf_array *bad = tensors(2, (sf_tensor *[]){x, r});
  EXPECT_ERROR(sf__t_cat(bad, 0, &LOC),
               "t.sflow:3:7: runtime error: cat: tensor 1 has shape [2], but tensor 0 has [3, 2] "
               "(cat needs the same shape except along axis 0)");
  EXPECT_ERROR(sf__t_cat(bad, 2, &LOC), "t.sflow:3:7: runtime error: cat: axis 2 is out of range for a tensor of shape [3, 2]");
  sf_array *two = tensors(2, (sf_tensor *[]){x, s});
  sf_tensor *c = sf__t_cat(two, 0, &LOC);
  check_vals("cat", c, (float[]){1, 2, 3, 4, 5, 6, 3, 4, 5, 6}, 10, 0);
  sf_tensor *xs[1] = {rnd(2, SHAPE(4, 4), -1, 1, true)};
  gradcheck("rows of x*x and of x^T", f_rows, NULL, 1, xs);
  release_all(xs, 1);
  sf_tensor *ab[2] = {rnd(2, SHAPE(2, 3), -1, 1, true), rnd(1, SHAPE(3), -1, 1, true)};
  gradcheck("stack of rows", f_stack, NULL, 2, ab);
  release_all(ab, 2);
  int64_t ax0 = 0, ax1 = -1;
  sf_tensor *cd[2] = {rnd(2, SHAPE(2, 2), -1, 1, true), rnd(2, SHAPE(2, 3), -1, 1, true)};
  gradcheck("cat axis -1, repeated input", f_cat, &ax1, 2, cd);
  release_all(cd, 2);
  sf_tensor *ce[2] = {rnd(2, SHAPE(2, 3), -1, 1, true), rnd(2, SHAPE(1, 3), -1, 1, false)};
  gradcheck("cat axis 0, one constant", f_cat, &ax0, 2, ce);
  release_all(ce, 2);
  sf_tensor *all[] = {x, r, s, e, z, c};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(none);
  sf_release(bad);
  sf_release(two);
}

/* -------------------------------------- select, narrow, index_select */

/* select(x*x, 1, -1) times narrow(xᵀ, 0, -3, 2)'s select 1 along axis 1:
 * views along inner axes of contiguous and strided tensors. */
static sf_tensor *f_select_narrow(sf_tensor **in, void *ctx) {
  (void)ctx;
  sf_tensor *sq = sf__t_binary(SF_TOP_MUL, in[0], in[0], &LOC); /* (4, 3) */
  sf_tensor *a = sf__t_select(sq, 1, -1, &LOC);                  /* (4) */
  sf_tensor *t = sf__t_transpose(in[0], 0, 1, &LOC);             /* (3, 4) */
  sf_tensor *n = sf__t_narrow(t, -1, -3, 2, &LOC);               /* (3, 2) */
  sf_tensor *b = sf__t_select(n, 1, 1, &LOC);                    /* (3) */
  sf_tensor *c = sf__t_narrow(in[0], 1, 1, 2, &LOC);             /* (4, 2) */
  sf_tensor *c0 = sf__t_narrow(c, 1, 0, 1, &LOC);               /* (4, 1) */
  sf_tensor *ab = sf__t_binary(SF_TOP_MUL, a, c0, &LOC);          /* (4, 4) */
  sf_tensor *s = sf__t_reduce(SF__R_SUM, b, SF__ALL_AXES, &LOC);
  sf_tensor *out = sf__t_binary(SF_TOP_ADD, ab, s, &LOC);
  sf_tensor *all[] = {sq, a, t, n, b, c, c0, ab, s};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  return out;
}

typedef struct {
  int64_t axis;
  int64_t n;
  const int64_t *idx;
  bool gather;
} gather_ctx;

static sf_tensor *f_gather(sf_tensor **in, void *ctx) {
  gather_ctx *g = ctx;
  sf_array *ix = i64s(g->n, g->idx);
  sf_tensor *sq = sf__t_binary(SF_TOP_MUL, in[0], in[0], &LOC);
  sf_tensor *out = g->gather ? sf__t_gather(sq, g->axis, ix, &LOC)
                             : sf__t_index_select(sq, g->axis, ix, &LOC);
  sf_release(sq);
  sf_release(ix);
  return out;
}

static void test_select_narrow_gather(void) {
  sf_tensor *x = mk(3, SHAPE(2, 3, 2), (float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  sf_tensor *a = sf__t_select(x, 1, -1, &LOC), *b = sf__t_narrow(x, 2, 1, 1, &LOC);
  check_shape(a, 2, SHAPE(2, 2));
  check_vals("select(x, 1, -1)", a, (float[]){4, 5, 10, 11}, 4, 0);
  check_shape(b, 3, SHAPE(2, 3, 1));
  check_vals("narrow(x, 2, 1, 1)", b, (float[]){1, 3, 5, 7, 9, 11}, 6, 0);
  CU_ASSERT(a->st == x->st && b->st == x->st); /* views */
  sf_tensor *c = sf__t_narrow(x, -2, -2, 2, &LOC);
  check_vals("narrow(x, -2, -2, 2)", c, (float[]){2, 3, 4, 5, 8, 9, 10, 11}, 8, 0);
  sf_tensor *e = sf__t_narrow(x, 1, 3, 0, &LOC);
  check_shape(e, 3, SHAPE(2, 0, 2));
  sf_array *ix = i64s(4, (int64_t[]){2, 0, -1, 2});
  sf_tensor *is = sf__t_index_select(x, 1, ix, &LOC);
  check_shape(is, 3, SHAPE(2, 4, 2));
  check_vals("index_select", is, (float[]){4, 5, 0, 1, 4, 5, 4, 5, 10, 11, 6, 7, 10, 11, 10, 11},
             16, 0);
  CU_ASSERT(is->st != x->st);
  /* gather along axis 2 with k = 1: one entry per (i, j), as picking a
   * target's log-probability. */
  sf_array *gx = i64s(6, (int64_t[]){1, 0, 0, 1, -1, 0});
  sf_tensor *ga = sf__t_gather(x, 2, gx, &LOC);
  check_shape(ga, 3, SHAPE(2, 3, 1));
  check_vals("gather", ga, (float[]){1, 2, 4, 7, 9, 10}, 6, 0);
  sf_array *none = i64s(0, NULL);
  sf_tensor *z = sf__t_index_select(x, 0, none, &LOC);
  check_shape(z, 3, SHAPE(0, 3, 2));
  EXPECT_ERROR(sf__t_select(x, 1, 3, &LOC), "t.sflow:3:7: runtime error: select: index 3 out of "
                                            "bounds for length 3 along axis 1 (shape [2, 3, 2])");
  EXPECT_ERROR(sf__t_select(x, 3, 0, &LOC), "t.sflow:3:7: runtime error: select: axis 3 is out of "
                                            "range for a tensor of shape [2, 3, 2]");
  EXPECT_ERROR(sf__t_narrow(x, 1, 2, 2, &LOC), "t.sflow:3:7: runtime error: narrow: start 2 and "
                                               "length 2 do not fit length 3 along axis 1 (shape "
                                               "[2, 3, 2])");
  EXPECT_ERROR(sf__t_narrow(x, 0, -3, 1, &LOC), "t.sflow:3:7: runtime error: narrow: start -3 and "
                                                "length 1 do not fit length 2 along axis 0 (shape "
                                                "[2, 3, 2])");
  sf_array *bad = i64s(3, (int64_t[]){0, 1, -4});
  EXPECT_ERROR(sf__t_index_select(x, 1, bad, &LOC),
               "t.sflow:3:7: runtime error: index_select: index -4 (entry 2 of idx) out of bounds "
               "for length 3 along axis 1 (shape [2, 3, 2])");
  EXPECT_ERROR(sf__t_gather(x, 1, bad, &LOC),
               "t.sflow:3:7: runtime error: gather: idx has 3 entries, not a multiple of 4: along "
               "axis 1 of shape [2, 3, 2] it holds a row-major index of shape [2, 1, 2] with any "
               "length k in place of the 1");
  sf_tensor *s0 = sf__t_select(a, 0, 0, &LOC), *s00 = sf__t_select(s0, 0, 0, &LOC);
  EXPECT_ERROR(sf__t_select(s00, 0, 0, &LOC), "t.sflow:3:7: runtime error: select: axis 0 is out "
                                              "of range for a tensor of shape []");
  /* Finite differences through inner axes, strided views, and repeated
   * indices (their gradients add). */
  sf_tensor *xs[1] = {rnd(2, SHAPE(4, 3), -1, 1, true)};
  gradcheck("select and narrow, inner axes", f_select_narrow, NULL, 1, xs);
  release_all(xs, 1);
  const int64_t rep[] = {2, 0, 2, -1, 1};
  gather_ctx g1 = {1, 5, rep, false};
  sf_tensor *ys[1] = {rnd(3, SHAPE(2, 3, 2), -1, 1, true)};
  gradcheck("index_select axis 1, repeated", f_gather, &g1, 1, ys);
  gather_ctx g0 = {0, 3, (int64_t[]){1, 1, 0}, false};
  gradcheck("index_select axis 0, repeated", f_gather, &g0, 1, ys);
  const int64_t gi[] = {0, 2, 2, 1, 1, 1, 0, 0, 2, 2, -3, 1, 2, 0, 0, 1, 1, 1, 2, 0, 0, 2, 1, 0};
  gather_ctx g2 = {1, 24, gi, true}; /* an index of shape (2, 6, 2) into (2, 3, 2) */
  gradcheck("gather axis 1, k = 6", f_gather, &g2, 1, ys);
  release_all(ys, 1);
  /* Only the selected elements get a gradient. */
  sf_tensor *p = rnd(2, SHAPE(2, 3), -1, 1, true);
  sf_tensor *q = sf__t_select(p, 1, 1, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, q, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  check_vals("grad of select(p, 1, 1)", p->grad, (float[]){0, 1, 0, 0, 1, 0}, 6, 0);
  sf_tensor *all[] = {x, a, b, c, e, is, ga, z, s0, s00, p, q, l};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(ix);
  sf_release(gx);
  sf_release(none);
  sf_release(bad);
}

/* ------------------------------------------------ f16 / bf16 rounding */

static float bits_f(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* Every half value converts back to itself; every midpoint between two
 * neighbours goes to the even one, a hair above or below it to the nearer
 * one; the edge cases PyTorch 2.15 gives (its bit patterns). */
static void test_half_rounding(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    bool f16nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    bool bfnan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (!f16nan && sf__f32_to_f16(sf__f16_to_f32((uint16_t)h)) != h)
      bad++;
    if (!bfnan && sf__f32_to_bf16(sf__bf16_to_f32((uint16_t)h)) != h)
      bad++;
    if (f16nan && !isnan(sf__f16_to_f32(sf__f32_to_f16(sf__f16_to_f32((uint16_t)h)))))
      bad++;
    if (bfnan && !isnan(sf__bf16_to_f32(sf__f32_to_bf16(sf__bf16_to_f32((uint16_t)h)))))
      bad++;
    /* Midpoints of h and h + 1 among positive finite values. */
    if (h < 0x7bff) {
      double lo = sf__f16_to_f32((uint16_t)h), hi = sf__f16_to_f32((uint16_t)(h + 1));
      float mid = (float)((lo + hi) / 2); /* exact in f32 */
      uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
      uint32_t mb;
      memcpy(&mb, &mid, 4);
      if (sf__f32_to_f16(mid) != even || sf__f32_to_f16(bits_f(mb + 1)) != h + 1 ||
          sf__f32_to_f16(bits_f(mb - 1)) != h)
        bad++;
    }
    if (h < 0x7f7f) {
      uint32_t mb = (h << 16) | 0x8000u;
      uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
      if (sf__f32_to_bf16(bits_f(mb)) != even || sf__f32_to_bf16(bits_f(mb + 1)) != h + 1 ||
          sf__f32_to_bf16(bits_f(mb - 1)) != h)
        bad++;
    }
  }
  CHECK_INT(bad, 0);
  /* torch.tensor([...]).to(torch.float16 / torch.bfloat16).view(torch.int16) */
  const float v[] = {70000.0f, 65520.0f, 65519.99f, 3.4e38f, 1e-8f, 0x1p-25f, 0x1p-25f * 1.0001f};
  const uint16_t f16[] = {0x7c00, 0x7c00, 0x7bff, 0x7c00, 0x0000, 0x0000, 0x0001};
  const uint16_t bf16[] = {18313, 18304, 18304, 32640, 12844, 13056, 13056};
  for (int i = 0; i < 7; i++) {
    CHECK_INT(sf__f32_to_f16(v[i]), f16[i]);
    CHECK_INT(sf__f32_to_bf16(v[i]), bf16[i]);
    CHECK_INT(sf__f32_to_f16(-v[i]), f16[i] | 0x8000);
  }
  CU_ASSERT(isnan(sf__f16_to_f32(sf__f32_to_f16(NAN))) && isnan(sf__bf16_to_f32(sf__f32_to_bf16(-NAN))));
  CU_ASSERT(isnan(sf__bf16_to_f32(sf__f32_to_bf16(bits_f(0x7f800001u))))); /* payload below bf16's */
  CU_ASSERT(isnan(sf__f16_to_f32(sf__f32_to_f16(bits_f(0x7f800001u)))));
  CHECK_INT(sf__f32_to_bf16(INFINITY), 0x7f80);
  CHECK_INT(sf__f32_to_f16(-INFINITY), 0xfc00);
  CHECK_INT(sf__f32_to_bf16(bits_f(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds up: inf */
  /* round_bf16: the values, and the gradient rounded as torch's
   * x.bfloat16().float() (an upstream of 1.0079 arrives as 1.0078125). */
  sf_tensor *x = mk(1, SHAPE(3), (float[]){1.00390625f, 1.01171875f, 0.1f});
  x->req = true;
  sf_tensor *r = sf__t_round_bf16(x, &LOC);
  check_vals("round_bf16", r, (float[]){1.0f, 1.015625f, 0.10009765625f}, 3, 0);
  sf_tensor *w = mk(1, SHAPE(3), (float[]){1.0079f, 3.0f, -2.0f});
  sf_tensor *rw = sf__t_binary(SF_TOP_MUL, r, w, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, rw, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  check_vals("grad of round_bf16", x->grad, (float[]){1.0078125f, 3.0f, -2.0f}, 3, 0);
  sf_tensor *all[] = {x, r, w, rw, l};
  for (size_t i = 0; i < 5; i++)
    sf_release(all[i]);
}

/* nn.save with dtype bf16 and f16: the header names the dtype, the data
 * is 2 bytes a value, and nn.load brings back the rounded values; a dtype
 * we do not write is an error naming it. */
static void test_safetensors_save_halves(void) {
  char path[] = "/tmp/sflow_nn_XXXXXX";
  close(mkstemp(path));
  sf_str *ps = sf_str_new(path, (int64_t)strlen(path));
  linear_c l = {mk(2, SHAPE(2, 2), (float[]){0.1f, -70000.0f, 1e-6f, NAN}),
                mk(1, SHAPE(2), (float[]){65519.0f, -0.0f})};
  linear_c back = {mk(2, SHAPE(2, 2), NULL), mk(1, SHAPE(2), NULL)};
  const char *names[] = {"bf16", "F16", "BF16", "f16"};
  for (int k = 0; k < 4; k++) {
    bool bf = names[k][0] == 'b' || names[k][0] == 'B';
    sf_str *dt = sf_str_new(names[k], (int64_t)strlen(names[k]));
    sf_std_nn_save(&l, &linear_type, ps, dt, &linear_type, &LOC);
    sf_release(dt);
    size_t n = 0;
    char *bytes = read_all(path, &n);
    uint64_t hl = 0;
    memcpy(&hl, bytes, 8);
    char want[200];
    snprintf(want, sizeof want, "\"weight\":{\"dtype\":\"%s\",\"shape\":[2,2],\"data_offsets\":[0,8]}",
             bf ? "BF16" : "F16");
    CU_ASSERT(strstr(bytes + 8, want) != NULL);
    CHECK_INT(n, 8 + hl + 12);
    uint16_t h0;
    memcpy(&h0, bytes + 8 + hl, 2);
    CHECK_INT(h0, bf ? 0x3dcd : 0x2e66); /* 0.1 */
    free(bytes);
    sf_std_nn_load(&back, &linear_type, ps, true, &linear_type, &LOC);
    const float *w = sf__t_data(back.weight), *b = sf__t_data(back.bias);
    if (bf) {
      CU_ASSERT(w[0] == 0.10009765625f && w[1] == -70144.0f && w[2] == 9.98377799987793e-07f);
      CU_ASSERT(b[0] == 65536.0f);
    } else {
      CU_ASSERT(w[0] == 0.0999755859375f && w[1] == -INFINITY && w[2] == 1.0132789611816406e-06f);
      CU_ASSERT(b[0] == 65504.0f);
    }
    CU_ASSERT(isnan(w[3]) && b[1] == 0.0f && signbit(b[1]));
  }
  sf_str *dt = sf_str_new("fp8", 3);
  EXPECT_ERROR(sf_std_nn_save(&l, &linear_type, ps, dt, &linear_type, &LOC),
               "t.sflow:3:7: runtime error: nn.save: dtype \"fp8\" is not one of \"f32\", "
               "\"bf16\", \"f16\"");
  sf_release(dt);
  sf_value_release(&linear_type, &l);
  sf_value_release(&linear_type, &back);
  sf_release(ps);
  unlink(path);
}

/* RMSNorm by hand: x = [3, 4] has mean(x²) = 12.5, so rstd = 1/sqrt(12.5
 * + eps); times weight [1, 2].  And its errors, naming the shapes. */
static void test_rms_norm(void) {
  sf_tensor *x = mk(2, SHAPE(1, 2), (float[]){3, 4}), *w = mk(1, SHAPE(2), (float[]){1, 2});
  sf_tensor *y = sf__t_rms_norm(x, w, 0.5, &LOC);
  float r = (float)(1.0 / sqrt(12.5 + 0.5));
  check_vals("rms_norm by hand", y, (float[]){3 * r, 4 * r * 2}, 2, 1e-6f);
  sf_tensor *w3 = mk(1, SHAPE(3), NULL);
  EXPECT_ERROR(sf__t_rms_norm(x, w3, 1e-5, &LOC),
                  "t.sflow:3:7: runtime error: rms_norm: weight [3] must be [2], the last "
                  "dimension of the input [1, 2]");
  EXPECT_ERROR(sf__t_rms_norm(x, w, 0.0, &LOC),
                  "t.sflow:3:7: runtime error: rms_norm: eps must be positive, not 0");
  sf_release(y);
  sf_release(w3);
  sf_release(w);
  sf_release(x);
}

int main(int argc, char **argv) {
  sf__nn_install();
  static const rt_test tests[] = {
      {"print_and_serialize", test_print_and_serialize},
      {"safetensors_round_trip", test_safetensors_round_trip},
      {"safetensors_halves", test_safetensors_halves},
      {"randn", test_randn},
      {"layers_forward", test_layers_forward},
      {"grad_layers", test_grad_layers},
      {"grad_select", test_grad_select},
      {"index_stack_cat", test_index_stack_cat},
      {"select_narrow_gather", test_select_narrow_gather},
      {"half_rounding", test_half_rounding},
      {"safetensors_save_halves", test_safetensors_save_halves},
      {"dropout_rows", test_dropout_rows},
      {"linear_fused", test_linear_fused},
      {"grad_acc_product", test_grad_acc_product},
      {"layer_norm_rows", test_layer_norm_rows},
      {"rms_norm", test_rms_norm},
      {NULL, NULL},
  };
  return rt_run("nn_layers", tests, argc, argv);
}
