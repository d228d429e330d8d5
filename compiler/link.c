/*
 * link.c — the module's way out: LLVM's optimisation pipeline, then what
 * --emit asks for: IR text (llvm), an object file (obj), or by default an
 * executable linked with the runtime.
 *
 * Key design choice: sflowc links through the system C compiler driver
 * (`cc`, or $CC), handing it one temporary object, the runtime library
 * the driver named in CodegenOptions.runtime_lib (main.c finds it next to
 * the sflowc binary) and -lm -lpthread -ldl.  The driver knows the
 * platform's start files, libc and linker flags, which sflowc would
 * otherwise have to track per distribution; the runtime needs nothing
 * else, since it dlopens CUDA, NVRTC, BLAS and libssh2.
 */
#include "sflowc.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* LLVM's default<On> pipeline, vectorising from -O2 as clang does. */
static int optimise(LLVMModuleRef mod, LLVMTargetMachineRef tm, int opt_level) {
  if (opt_level == 0)
    return 0;
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  bool vec = opt_level >= 2;
  LLVMPassBuilderOptionsSetLoopVectorization(po, vec);
  LLVMPassBuilderOptionsSetSLPVectorization(po, vec);
  LLVMPassBuilderOptionsSetLoopInterleaving(po, vec);
  LLVMPassBuilderOptionsSetLoopUnrolling(po, 1);
  /* Bounds-checked index loops vectorise as they are: the checks are
   * unlikely exits with computable counts, and TBAA plus dereferenceable
   * array headers let LICM hoist len and data out of the loop. */
  char pipeline[32];
  snprintf(pipeline, sizeof pipeline, "default<O%d>", opt_level);
  LLVMErrorRef e = LLVMRunPasses(mod, pipeline, tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (!e)
    return 0;
  char *m = LLVMGetErrorMessage(e);
  fprintf(stderr, "sflowc: internal compiler error: optimiser: %s\n", m);
  LLVMDisposeErrorMessage(m);
  return 1;
}

static int emit_obj(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *path) {
  char *err = NULL;
  if (LLVMTargetMachineEmitToFile(tm, mod, (char *)path, LLVMObjectFile, &err)) {
    fprintf(stderr, "sflowc: error: cannot write object '%s': %s\n", path, err);
    LLVMDisposeMessage(err);
    return 1;
  }
  return 0;
}

/* Runs argv with posix_spawnp and waits; returns its exit status or -1. */
static int run_cmd(char **argv) {
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
  if (rc) {
    fprintf(stderr, "sflowc: error: cannot run '%s': %s\n", argv[0], strerror(rc));
    return -1;
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int link_exe(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *out,
                    const char *rtlib, bool debug) {
  struct stat st;
  if (stat(rtlib, &st) != 0) {
    fprintf(stderr, "sflowc: error: runtime library not found at '%s'\n", rtlib);
    return 1;
  }
  const char *tmpdir = getenv("TMPDIR");
  char obj[4096];
  snprintf(obj, sizeof obj, "%s/sflowc-XXXXXX.o", tmpdir && *tmpdir ? tmpdir : "/tmp");
  int fd = mkstemps(obj, 2);
  if (fd < 0) {
    fprintf(stderr, "sflowc: error: cannot create a temporary file in '%s': %s\n",
            tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
    return 1;
  }
  close(fd);
  int rc = emit_obj(mod, tm, obj);
  if (!rc) {
    const char *cc = getenv("CC");
    /* Without -g the executable carries no debug information, the
     * runtime's included (three quarters of a hello's bytes): it is the
     * file --nodes copies to every host. */
    char *argv[] = {(char *)(cc && *cc ? cc : "cc"), "-o", (char *)out, obj, (char *)rtlib, "-lm",
                    "-lpthread", "-ldl", debug ? NULL : "-Wl,--strip-debug", NULL};
    int st = run_cmd(argv);
    if (st != 0) {
      fprintf(stderr, "sflowc: error: linking '%s' failed (%s exited with %d)\n", out, argv[0], st);
      rc = 1;
    }
  }
  unlink(obj);
  return rc;
}

static int write_ir(LLVMModuleRef mod, const char *out) {
  char *ir = LLVMPrintModuleToString(mod);
  FILE *f = out && strcmp(out, "-") ? fopen(out, "w") : stdout;
  if (!f) {
    fprintf(stderr, "sflowc: error: cannot write '%s': %s\n", out, strerror(errno));
    LLVMDisposeMessage(ir);
    return 1;
  }
  fputs(ir, f);
  LLVMDisposeMessage(ir);
  if (f != stdout)
    return fclose(f) ? 1 : 0;
  fflush(stdout);
  return 0;
}

int link_program(void *mod, const Target *t, const CodegenOptions *opts) {
  int rc = optimise(mod, t->tm, opts->opt_level);
  if (rc)
    return rc;
  if (opts->emit && !strcmp(opts->emit, "llvm"))
    return write_ir(mod, opts->out);
  if (opts->emit && !strcmp(opts->emit, "obj"))
    return emit_obj(mod, t->tm, opts->out);
  return link_exe(mod, t->tm, opts->out, opts->runtime_lib, opts->debug);
}
