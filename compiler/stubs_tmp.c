/* Temporary stubs while sema, codegen and the language server are written. */
#include "sflowc.h"
#include <stdlib.h>
#include <string.h>
int codegen_program(Program *p, const CodegenOptions *o) { (void)p; (void)o; return 0; }
char *cudagen_kernel(Decl *k) { (void)k; return strdup(""); }
