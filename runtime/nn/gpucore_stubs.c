/*
 * gpucore_stubs.c — weak stand-ins for the device API of the contract
 * (helper gpucore's runtime/nn/device.c), so the gpulayers branch links
 * and runs on the CPU before that branch is merged.  Delete this file
 * when device.c lands: its strong definitions override these anyway.
 *
 * Key design choice: sf__nn_gpu_here answers false, so no GPU path is
 * ever taken through these; the others are unreachable then and say so.
 */
#include "nn.h"

__attribute__((weak)) bool sf__nn_gpu_here(const sf_loc *loc) {
  (void)loc;
  return false;
}

_Noreturn static void unreachable(const char *what) {
  sf_runtime_error(NULL, "internal error: %s without the GPU tensor layer", what);
}

__attribute__((weak)) uint64_t sf__t_dptr(sf_tensor *t, const sf_loc *loc) {
  (void)t, (void)loc;
  unreachable("sf__t_dptr");
}
__attribute__((weak)) void sf__t_dwrote(sf_tensor *t) { (void)t; }
__attribute__((weak)) sf_tensor *sf__t_dempty(int32_t ndim, const int64_t *shape,
                                              const sf_loc *loc) {
  (void)ndim, (void)shape, (void)loc;
  unreachable("sf__t_dempty");
}
__attribute__((weak)) sf_tensor *sf__t_dzeros(int32_t ndim, const int64_t *shape,
                                              const sf_loc *loc) {
  (void)ndim, (void)shape, (void)loc;
  unreachable("sf__t_dzeros");
}
__attribute__((weak)) void *sf__nn_kernel(const char *file, const char *entry, int *block,
                                          const sf_loc *loc) {
  (void)file, (void)entry, (void)block, (void)loc;
  unreachable("sf__nn_kernel");
}
__attribute__((weak)) void sf__nn_launch(void *f, int64_t grid, int block, unsigned shmem,
                                         void **params, const sf_loc *loc) {
  (void)f, (void)grid, (void)block, (void)shmem, (void)params, (void)loc;
  unreachable("sf__nn_launch");
}
