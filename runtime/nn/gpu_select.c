/*
 * gpu_select.c — the GPU's entries of the device kernel table (nn.h,
 * "dev.c") for std.nn's masks and selections: tri (tril/triu), where,
 * topk's indices and multinomial's draws, over kernels/nn_select.cu.  The
 * ops (create.c, select.c) check their arguments and record their nodes;
 * these only launch.
 *
 * Key design choice: where and tri read their operands through their
 * strides (a broadcast dimension has stride 0), so nothing is copied
 * first; topk and multinomial return host integers by design (an i64[]),
 * so they read their result back, as argmax does.
 */
#include <inttypes.h>
#include <string.h>

#include "nn.h"

#define NB 256 /* the block size of every kernel of nn_select.cu */

/* Mirrors struct sf_nns_nd of nn_select.cu. */
typedef struct {
  int32_t ndim, pad;
  int64_t shape[SF__TMAX];
  int64_t st[3][SF__TMAX];
} nd_desc;

static void launch(const char *entry, int64_t grid, void **params, const sf_loc *loc) {
  int block;
  if (grid > 0)
    sf__nn_launch(sf__nn_kernel("nn_select", entry, &block, loc), grid, NB, 0, params, loc);
}

/* Operand t's strides over the result shape (right-aligned; 0 where t is
 * broadcast). */
static void strides_over(nd_desc *d, int j, const sf_tensor *t) {
  for (int32_t a = 0; a < d->ndim; a++) {
    int32_t ta = a - (d->ndim - t->ndim);
    d->st[j][a] = ta < 0 || t->shape[ta] == 1 ? 0 : t->strides[ta];
  }
}

sf_tensor *sf__gpu_tri(sf_tensor *x, int64_t k, bool upper, const sf_loc *loc) {
  sf_tensor *out = sf__t_dempty(x->ndim, x->shape, loc);
  nd_desc d = {.ndim = x->ndim};
  memcpy(d.shape, x->shape, sizeof d.shape);
  strides_over(&d, 0, x);
  uint64_t px = sf__t_dptr(x, loc), po = sf__t_dptr(out, loc);
  int64_t n = x->numel;
  int32_t up = upper;
  void *params[] = {&px, &po, &n, &k, &up, &d};
  launch("sf_nns_tri", sf__nn_grid(n, NB), params, loc);
  sf__t_dwrote(out);
  return out;
}

void sf__gpu_where(sf_tensor *out, sf_tensor *c, sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  nd_desc d = {.ndim = out->ndim};
  memcpy(d.shape, out->shape, sizeof d.shape);
  strides_over(&d, 0, c);
  strides_over(&d, 1, a);
  strides_over(&d, 2, b);
  uint64_t pc = sf__t_dptr(c, loc), pa = sf__t_dptr(a, loc), pb = sf__t_dptr(b, loc),
           po = sf__t_dptr(out, loc);
  int64_t n = out->numel;
  void *params[] = {&pc, &pa, &pb, &po, &n, &d};
  launch("sf_nns_where", sf__nn_grid(n, NB), params, loc);
  sf__t_dwrote(out);
}

/* An i64 device buffer of count entries (a float tensor of twice as many
 * words, as argmax's), read back into out after the launch. */
static void read_back(sf_tensor *buf, int64_t *out, int64_t count) {
  if (count)
    memcpy(out, sf__t_data(buf), (size_t)count * sizeof(int64_t));
}

void sf__gpu_topk(sf_tensor *x, int64_t k, int64_t *idx, const sf_loc *loc) {
  int64_t n = x->ndim ? x->shape[x->ndim - 1] : 1, rows = n ? x->numel / n : 0;
  int64_t count = rows * k, words = 2 * (count > 0 ? count : 1);
  sf_tensor *xc = sf__gpu_contig(x), *buf = sf__t_dempty(1, &words, loc);
  uint64_t px = sf__t_dptr(xc, loc), pi = sf__t_dptr(buf, loc);
  void *params[] = {&px, &pi, &rows, &n, &k};
  if (k > 0)
    launch("sf_nns_topk", rows, params, loc);
  sf__t_dwrote(buf);
  read_back(buf, idx, count);
  sf_release(buf);
  sf_release(xc);
}

void sf__gpu_multinomial(sf_tensor *p, int64_t n, uint64_t seed, int64_t *out,
                         const sf_loc *loc) {
  int64_t c = p->shape[p->ndim - 1], rows = p->numel / c;
  int64_t count = rows * n, words = 2 * (count > 0 ? count : 1);
  sf_tensor *pc = sf__gpu_contig(p), *buf = sf__t_dempty(1, &words, loc);
  uint64_t pp = sf__t_dptr(pc, loc), po = sf__t_dptr(buf, loc);
  unsigned long long s = seed;
  void *params[] = {&pp, &po, &rows, &c, &n, &s};
  launch("sf_nns_multinomial", sf__nn_grid(count, NB), params, loc);
  sf__t_dwrote(buf);
  read_back(buf, out, count);
  sf_release(buf);
  sf_release(pc);
}
