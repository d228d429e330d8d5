/*
 * fuzz_stubs.c — weak stand-ins for the back end, so the fuzzer (and other
 * front-end-only tools) link without LLVM.  A real definition, when linked,
 * wins over these.
 */
#include "sflowc.h"

#include <stdlib.h>
#include <string.h>

__attribute__((weak)) int codegen_program(Program *p, const CodegenOptions *o) {
  (void)p;
  (void)o;
  return 0;
}
__attribute__((weak)) char *cudagen_kernel(Decl *k) {
  (void)k;
  return strdup("");
}
__attribute__((weak)) int lsp_main(void) { return 0; }
