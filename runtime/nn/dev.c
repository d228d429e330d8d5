/*
 * dev.c — the device kernel table of the nn layer (nn.h, "dev.c"): the
 * CPU's and the GPU's, the choice between them (once per forward call,
 * once per backward rule), and the names of the op kinds of kinds.h.
 *
 * Key design choice: both tables are built from the one X-macro list of
 * entries (SF__NN_KERNELS) and the one list of each kind, so an entry or a
 * kind that one device lacks is a compile or link error here, not a
 * fall-through at run time; the ops themselves never test the device.
 */
#include <string.h>

#include "nn.h"

_Static_assert((int)SF__B_ADD == (int)SF_TOP_ADD && (int)SF__B_SUB == (int)SF_TOP_SUB &&
                   (int)SF__B_MUL == (int)SF_TOP_MUL && (int)SF__B_DIV == (int)SF_TOP_DIV,
               "kinds.h's binary values are sflow.h's SF_TOP_*");

#define SF__NN_CPU(name, ret, params) .name = sf__cpu_##name,
#define SF__NN_GPU(name, ret, params) .name = sf__gpu_##name,
const sf__nn_dev sf__nn_cpu = {.name = "cpu", .bf16_linear = false, SF__NN_KERNELS(SF__NN_CPU)};
const sf__nn_dev sf__nn_gpu = {.name = "gpu", .bf16_linear = true, SF__NN_KERNELS(SF__NN_GPU)};
#undef SF__NN_CPU
#undef SF__NN_GPU

static __thread const sf__nn_dev *forced; /* sf__nn_dev_force's, or NULL */

void sf__nn_dev_force(const sf__nn_dev *d) { forced = d; }

const sf__nn_dev *sf__nn_dev_here(const sf_loc *loc) {
  if (__builtin_expect(forced != NULL, 0))
    return forced;
  return sf__nn_gpu_here(loc) ? &sf__nn_gpu : &sf__nn_cpu;
}

const sf__nn_dev *sf__nn_dev_of(const sf__node *n, const sf_tensor *g) {
  if (!n->gpu)
    return &sf__nn_cpu;
  if (sf__nn_gpu_here(NULL))
    return &sf__nn_gpu;
  const sf_tensor *on = g->st->dev ? g : n->saved && n->saved->st->dev ? n->saved : NULL;
  for (int32_t i = 0; !on && i < SF__NIN + n->nmore; i++) {
    const sf_tensor *t = i < SF__NIN ? n->in[i] : n->more[i - SF__NIN];
    on = t && t->st->dev ? t : NULL;
  }
  if (on)
    sf__gpu_use_device(on->st->gpu - 1);
  return &sf__nn_gpu;
}

/* ------------------------------------------- allocation and copies */

sf_tensor *sf__cpu_empty(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return sf__t_empty(ndim, shape, loc);
}
sf_tensor *sf__cpu_zeros(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return sf__t_zeros(ndim, shape, loc);
}
sf_tensor *sf__cpu_contig(sf_tensor *t) { return sf__t_contig(t); }
void sf__cpu_assign(sf_tensor *dst, const sf_tensor *src) { sf__t_assign(dst, src); }
sf_tensor *sf__gpu_empty(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return sf__t_dempty(ndim, shape, loc);
}
sf_tensor *sf__gpu_zeros(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return sf__t_dzeros(ndim, shape, loc);
}

/* ------------------------------------------------------------ kinds */

#define SF__NAME_B(K, name, v) [SF__B_##K] = #name,
#define SF__NAME_U(K, name, out) [SF__U_##K] = #name,
#define SF__NAME_R(K, name) [SF__R_##K] = #name,
#define SF__OUT_U(K, name, out) [SF__U_##K] = out,
static const char *const binary_names[SF__B_END] = {SF_NN_BINARY_KINDS(SF__NAME_B)};
static const char *const unary_names[SF__U_COUNT] = {SF_NN_UNARY_KINDS(SF__NAME_U)};
static const char *const reduce_names[SF__R_COUNT] = {SF_NN_REDUCE_KINDS(SF__NAME_R)};
static const bool unary_out[SF__U_COUNT] = {SF_NN_UNARY_KINDS(SF__OUT_U)};

int32_t sf__kind_check(const char *list, int32_t kind, int32_t lo, int32_t end,
                       const sf_loc *loc) {
  if (kind < lo || kind >= end)
    sf_runtime_error(loc, "internal error: %s kind %d is not in kinds.h", list, (int)kind);
  return kind;
}

const char *sf__binary_name(int32_t op) {
  return binary_names[sf__kind_check("binary", op, SF__B_ADD, SF__B_END, NULL)];
}
const char *sf__unary_name(int32_t kind) {
  return unary_names[sf__kind_check("unary", kind, 0, SF__U_COUNT, NULL)];
}
const char *sf__reduce_name(int32_t kind) {
  return reduce_names[sf__kind_check("reduce", kind, 0, SF__R_COUNT, NULL)];
}
bool sf__unary_uses_output(int32_t kind) {
  return unary_out[sf__kind_check("unary", kind, 0, SF__U_COUNT, NULL)];
}
