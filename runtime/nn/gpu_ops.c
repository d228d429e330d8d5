/*
 * gpu_ops.c — the GPU versions of the core tensor ops (work in progress).
 */
#include "nn.h"

#define TODO(what) sf_runtime_error(loc, "GPU: %s is not written yet", what)
sf_tensor *sf__gpu_binary(int32_t op, sf_tensor *a, sf_tensor *b, int32_t nd,
                          const int64_t *shape, const sf_loc *loc) { TODO("binary"); }
sf_tensor *sf__gpu_scalar(int32_t op, sf_tensor *a, float s, bool left, const sf_loc *loc) { TODO("scalar"); }
sf_tensor *sf__gpu_neg(sf_tensor *a, const sf_loc *loc) { TODO("neg"); }
sf_tensor *sf__gpu_unary(int32_t kind, sf_tensor *a, const sf_loc *loc) { TODO("unary"); }
sf_tensor *sf__gpu_reduce(int32_t kind, sf_tensor *a, int32_t ax, const sf_loc *loc) { TODO("reduce"); }
sf_tensor *sf__gpu_reduce_to(sf_tensor *g, int32_t ndim, const int64_t *shape) { const sf_loc *loc = NULL; TODO("reduce_to"); }
void sf__gpu_assign(sf_tensor *dst, const sf_tensor *src) { const sf_loc *loc = NULL; TODO("assign"); }
void sf__gpu_add_into(sf_tensor *dst, const sf_tensor *src) { const sf_loc *loc = NULL; TODO("add_into"); }
void sf__gpu_copy_into(sf_tensor *dst, const sf_tensor *src) { const sf_loc *loc = NULL; TODO("copy_into"); }
sf_tensor *sf__gpu_contig(sf_tensor *t) { const sf_loc *loc = NULL; TODO("contig"); }
sf_tensor *sf__gpu_matmul(sf_tensor *a, sf_tensor *b, int32_t nd, const int64_t *shape,
                          const sf_loc *loc) { TODO("matmul"); }
sf_tensor *sf__gpu_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc) { TODO("matmul_nt"); }
sf_tensor *sf__gpu_linear(sf_tensor *x, sf_tensor *w, sf_tensor *b, const sf_loc *loc) { TODO("linear"); }
void sf__gpu_sgd_step(sf_array *ps, sf_array *bufs, double lr, double momentum, double wd,
                      const sf_loc *loc) { TODO("sgd"); }
void sf__gpu_adamw_step(sf_array *ps, sf_array *m, sf_array *v, float step_size, float bc2_sqrt,
                        float decay, float w1, float b2, float w2, float eps, const sf_loc *loc) { TODO("adamw"); }
sf_tensor *sf__gpu_clip_grad_norm(sf_array *ps, double max_norm, const sf_loc *loc) { TODO("clip"); }
sf_tensor *sf__gpu_full(int32_t ndim, const int64_t *shape, float v, const sf_loc *loc) { TODO("full"); }
double sf__gpu_clip_grad_norm_read(sf_array *ps, double max_norm, const sf_loc *loc) { TODO("clip"); }
