/*
 * autocast.c — nn.autocast (work in progress).
 */
#include "nn.h"
sf_tensor *sf__t_bf16_rounded(sf_tensor *t) { return NULL; }
sf_tensor *sf__ac_matmul(sf_tensor *a, sf_tensor *b, const sf_loc *loc) { return NULL; }
sf_tensor *sf__ac_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc) { return NULL; }
sf_tensor *sf__ac_linear(sf_tensor *x, sf_tensor *w, sf_tensor *b, const sf_loc *loc) { return NULL; }
void sf_std_nn_autocast(bool on, const sf_loc *loc) { (void)loc; sf__autocast = on; }
