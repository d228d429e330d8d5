/*
 * target.c — which machine sflowc compiles for, and what the executable
 * will need from a CPU.
 *
 * As gcc and clang do, the default is a portable baseline of the
 * architecture, tuned for the build machine: x86-64-v2 on x86_64 (SSE4.2,
 * POPCNT, SSSE3, CX16: every x86 server since about 2009, see
 * docs/language.md, "Target CPU"), LLVM's "generic" (armv8-a) on aarch64.
 * -march=native or --target-cpu=NAME and --target-features=+a,-b opt in
 * to more.  The tuning is the per-function "tune-cpu" attribute, which
 * changes scheduling and cost choices only, never the instruction set.
 *
 * Two questions the LLVM C API has no call for are answered here from
 * what it does offer:
 *  - Is a CPU or feature name valid?  LLVM only warns ("'x' is not a
 *    recognized processor for this target") on its stderr when the target
 *    machine is made, and compiles for a generic CPU; so the warning is
 *    captured around LLVMCreateTargetMachine and turned into a usage error.
 *  - Which features does the chosen CPU imply?  The inliner refuses to
 *    inline a callee that needs a feature the caller lacks
 *    (TargetTransformInfo::areInlineCompatible), so a throwaway module with
 *    one empty function per feature of cpu_features.h, each marked as
 *    needing that feature on the baseline CPU, and one caller compiled for
 *    the target, tells after the `inline` pass which features the target
 *    has: the calls that are left are the ones it lacks.  This is LLVM's
 *    own view, for any CPU it knows, with no CPU table here to go stale.
 */
#include "sflowc.h"
#include "cpu_features.h"

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  const char *llvm, *cpuinfo;
  int emitted;
} Feature;

#define ROW(l, c, e) {l, c, e},
static const Feature x86_features[] = {SF_CPU_FEATURES_X86(ROW)};
static const Feature arm_features[] = {SF_CPU_FEATURES_AARCH64(ROW)};
#undef ROW

typedef enum { ARCH_OTHER, ARCH_X86_64, ARCH_AARCH64 } Arch;

static Arch arch_of(const char *triple) {
  if (!strncmp(triple, "x86_64", 6))
    return ARCH_X86_64;
  if (!strncmp(triple, "aarch64", 7) || !strncmp(triple, "arm64", 5))
    return ARCH_AARCH64;
  return ARCH_OTHER;
}

static const Feature *features_of(Arch a, int *n) {
  *n = a == ARCH_X86_64    ? (int)(sizeof x86_features / sizeof *x86_features)
       : a == ARCH_AARCH64 ? (int)(sizeof arm_features / sizeof *arm_features)
                           : 0;
  return a == ARCH_X86_64 ? x86_features : arm_features;
}

/* The CPU every host of the architecture has: the callee side of the
 * feature probe, and (x86_64 aside) the default target. */
static const char *baseline_cpu(Arch a) { return a == ARCH_X86_64 ? "x86-64" : "generic"; }

/* ------------------------------------------------------- LLVM's stderr */

/* Runs LLVMCreateTargetMachine with fd 2 sent to a temporary file and
 * returns what LLVM wrote there (heap string, "" when nothing), so that its
 * warnings about unknown names can become our errors.  NULL *tm with a
 * message when the capture itself cannot be set up. */
static char *create_captured(LLVMTargetRef t, const char *triple, const char *cpu,
                             const char *feat, LLVMCodeGenOptLevel lvl,
                             LLVMTargetMachineRef *tm) {
  *tm = NULL;
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = tmp ? dup(2) : -1;
  if (saved < 0 || dup2(fileno(tmp), 2) < 0) {
    fprintf(stderr, "sflowc: error: cannot check the target CPU: %s\n", strerror(errno));
    if (saved >= 0)
      close(saved);
    if (tmp)
      fclose(tmp);
    return NULL;
  }
  *tm = LLVMCreateTargetMachine(t, triple, cpu, feat, lvl, LLVMRelocPIC, LLVMCodeModelDefault);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  /* LLVM wrote to the descriptor, not through tmp's buffer. */
  off_t n = lseek(fileno(tmp), 0, SEEK_END);
  char *text = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
  if (text && n > 0 && pread(fileno(tmp), text, (size_t)n, 0) < 0)
    text[0] = '\0';
  fclose(tmp);
  return text;
}

/* The name LLVM quoted just before marker ("'+foo' is not ..."), without
 * a feature's sign, into buf. */
static void quoted_before(const char *text, const char *marker, char *buf, size_t n) {
  const char *end = strstr(text, marker), *start = end;
  if (!end)
    return;
  while (start > text && start[-1] != '\'')
    start--;
  if (*start == '+' || *start == '-')
    start++;
  snprintf(buf, n, "%.*s", (int)(end - start), start);
}

/* The names LLVM lists under `heading` in its -mcpu=help text (lines of
 * "  name  - description"), for "did you mean". */
static const char **help_names(const char *help, const char *heading, int *n) {
  *n = 0;
  const char *p = help ? strstr(help, heading) : NULL;
  if (!p)
    return NULL;
  const char **names = arena_alloc(sizeof *names * 1024);
  p = strchr(p, '\n');
  while (p && *n < 1024) {
    p++;
    if (*p == '\n')
      p++; /* the blank line under the heading */
    if (p[0] != ' ' || p[1] != ' ')
      break;
    const char *s = p + 2, *e = s;
    while (*e && *e != ' ' && *e != '\n')
      e++;
    names[(*n)++] = arena_strndup(s, (size_t)(e - s));
    p = strchr(p, '\n');
  }
  return names;
}

/* -------------------------------------------------------------- choice */

static LLVMTargetRef native_target(char **triple) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  *triple = LLVMGetDefaultTargetTriple();
  LLVMTargetRef t;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(*triple, &t, &err)) {
    fprintf(stderr, "sflowc: error: no LLVM target for '%s': %s\n", *triple, err);
    LLVMDisposeMessage(err);
    return NULL;
  }
  return t;
}

/* The CPU and feature string LLVM gets for request r (arena strings). */
static void choose(const TargetRequest *r, Arch a, const char **cpu, const char **feat,
                   const char **tune) {
  *tune = NULL;
  *feat = r->features ? r->features : "";
  if (r->cpu && !strcmp(r->cpu, "native")) {
    char *c = LLVMGetHostCPUName(), *f = LLVMGetHostCPUFeatures();
    *cpu = arena_strdup(c);
    *feat = *f && *feat ? arena_printf("%s,%s", f, *feat) : arena_strdup(*f ? f : *feat);
    LLVMDisposeMessage(c);
    LLVMDisposeMessage(f);
  } else if (r->cpu) {
    *cpu = r->cpu;
  } else {
    *cpu = a == ARCH_X86_64 ? "x86-64-v2" : a == ARCH_AARCH64 ? "generic" : "";
    char *h = LLVMGetHostCPUName();
    if (*h && strcmp(h, "generic"))
      *tune = arena_strdup(h);
    LLVMDisposeMessage(h);
  }
}

int target_check(const TargetRequest *r) {
  char *triple;
  LLVMTargetRef t = native_target(&triple);
  if (!t) {
    LLVMDisposeMessage(triple);
    return 1;
  }
  const char *cpu, *feat, *tune;
  choose(r, arch_of(triple), &cpu, &feat, &tune);
  LLVMTargetMachineRef tm;
  bool help = !strcmp(cpu, "help");
  char *said = create_captured(t, triple, cpu, feat, LLVMCodeGenLevelNone, &tm);
  int rc = said ? 0 : 1;
  if (said && help) {
    fputs(said, stdout);
    rc = -1;
  } else if (said && (strstr(said, "not a recognized processor") ||
                      strstr(said, "not a recognized feature"))) {
    LLVMTargetMachineRef htm;
    char *list = create_captured(t, triple, "help", "", LLVMCodeGenLevelNone, &htm);
    if (htm)
      LLVMDisposeTargetMachine(htm);
    bool bad_cpu = strstr(said, "not a recognized processor") != NULL;
    int n;
    const char **names = help_names(list, bad_cpu ? "Available CPUs" : "Available features", &n);
    /* The unknown name as LLVM quoted it: 'x' before the message. */
    char name[128];
    snprintf(name, sizeof name, "%s", cpu);
    if (!bad_cpu)
      quoted_before(said, "' is not a recognized feature", name, sizeof name);
    const char *guess = names ? suggest(name, names, n) : NULL;
    fprintf(stderr, "sflowc: error: unknown %s '%s' for %s", bad_cpu ? "CPU" : "CPU feature",
            name, triple);
    if (guess)
      fprintf(stderr, " (did you mean '%s'?)", guess);
    fprintf(stderr, "\nTry 'sflowc --target-cpu=help' for the %s LLVM knows.\n",
            bad_cpu ? "CPUs" : "CPUs and features");
    free(list);
    rc = 2;
  } else if (said && *said) {
    fputs(said, stderr); /* anything else LLVM had to say */
  }
  free(said);
  if (tm)
    LLVMDisposeTargetMachine(tm);
  LLVMDisposeMessage(triple);
  return rc;
}

/* "x86_64-pc-linux-gnu, CPU x86-64-v2 (tuned for znver3)": what a
 * compile without --target-cpu targets, for --version. */
void target_describe(FILE *f) {
  char *triple;
  LLVMTargetRef t = native_target(&triple);
  if (!t) {
    LLVMDisposeMessage(triple);
    return;
  }
  const char *cpu, *feat, *tune;
  choose(&(TargetRequest){0}, arch_of(triple), &cpu, &feat, &tune);
  fprintf(f, "%s, CPU %s", triple, *cpu ? cpu : "generic");
  if (tune)
    fprintf(f, " (tuned for %s)", tune);
  LLVMDisposeMessage(triple);
}

/* ------------------------------------------------------- feature probe */

static LLVMValueRef probe_fn(LLVMModuleRef m, LLVMContextRef c, const char *name,
                             const char *cpu, const char *feat) {
  LLVMTypeRef vt = LLVMFunctionType(LLVMVoidTypeInContext(c), NULL, 0, 0);
  LLVMValueRef f = LLVMAddFunction(m, name, vt);
  if (cpu)
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(c, "target-cpu", 10, cpu,
                                                      (unsigned)strlen(cpu)));
  if (feat)
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(c, "target-features", 15, feat,
                                                      (unsigned)strlen(feat)));
  return f;
}

/* has[i]: whether target machine tm (its own CPU and features) has
 * feature i of the table. */
static int probe_features(LLVMTargetMachineRef tm, const char *triple, Arch a, bool *has) {
  int n;
  const Feature *fs = features_of(a, &n);
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("sflowc.target-probe", c);
  LLVMSetTarget(m, triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(m, td);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  LLVMTypeRef vt = LLVMFunctionType(LLVMVoidTypeInContext(c), NULL, 0, 0);
  LLVMValueRef *callee = arena_alloc(sizeof *callee * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    callee[i] = probe_fn(m, c, arena_printf("f%d", i), baseline_cpu(a),
                         arena_printf("+%s", fs[i].llvm));
    LLVMSetLinkage(callee[i], LLVMInternalLinkage);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, callee[i], ""));
    LLVMBuildRetVoid(b);
  }
  LLVMValueRef caller = probe_fn(m, c, "caller", NULL, NULL);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, caller, ""));
  for (int i = 0; i < n; i++)
    LLVMBuildCall2(b, vt, callee[i], NULL, 0, "");
  LLVMBuildRetVoid(b);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e = LLVMRunPasses(m, "cgscc(inline)", tm, po);
  LLVMDisposePassBuilderOptions(po);
  int rc = 0;
  if (e) {
    char *msg = LLVMGetErrorMessage(e);
    fprintf(stderr, "sflowc: internal compiler error: target probe: %s\n", msg);
    LLVMDisposeErrorMessage(msg);
    rc = 101;
  }
  for (int i = 0; i < n; i++)
    has[i] = true;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(caller); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in))
      if (LLVMGetInstructionOpcode(in) == LLVMCall) {
        size_t len;
        const char *name = LLVMGetValueName2(LLVMGetCalledValue(in), &len);
        int i = atoi(name + 1);
        if (i >= 0 && i < n)
          has[i] = false;
      }
  LLVMDisposeBuilder(b);
  LLVMDisposeModule(m);
  LLVMDisposeTargetData(td);
  LLVMContextDispose(c);
  return rc;
}

/* Whether the feature string names +feature (the last mention wins). */
static int explicit_sign(const char *feat, const char *name) {
  int sign = 0;
  size_t n = strlen(name);
  for (const char *p = feat; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n + 1 && (*p == '+' || *p == '-') && !strncmp(p + 1, name, n))
      sign = *p == '+' ? 1 : -1;
    p = e ? e + 1 : NULL;
  }
  return sign;
}

/* What a host's CPU must have: the features of the table that the target
 * enables and that code generation emits, plus every feature the user
 * named with a '+' (arena string, "a,b,c"). */
static const char *needs_of(LLVMTargetMachineRef tm, const char *triple, Arch a,
                            const char *user_feat, const char *feat, int *rc) {
  int n;
  const Feature *fs = features_of(a, &n);
  bool *has = arena_alloc(sizeof *has * (size_t)(n + 1));
  *rc = n ? probe_features(tm, triple, a, has) : 0;
  int sse42 = -1;
  for (int i = 0; i < n; i++)
    if (!strcmp(fs[i].llvm, "sse4.2"))
      sse42 = i;
  Buf b = {0};
  for (int i = 0; i < n; i++) {
    bool need = has[i] && fs[i].emitted;
    /* LLVM's x86 inliner ignores CX16 and LAHF-SAHF when comparing
     * functions, so the probe cannot see them: they are needed when the
     * feature string enables them or the target has SSE4.2 (every x86 CPU
     * with SSE4.2 has both; x86-64-v2 lists all three). */
    if (a == ARCH_X86_64 && (!strcmp(fs[i].llvm, "cx16") || !strcmp(fs[i].llvm, "sahf")))
      need = explicit_sign(feat, fs[i].llvm) > 0 ||
             (explicit_sign(feat, fs[i].llvm) == 0 && sse42 >= 0 && has[sse42]);
    if (explicit_sign(user_feat, fs[i].llvm) > 0)
      need = true;
    if (need)
      buf_printf(&b, "%s%s", b.len ? "," : "", fs[i].llvm);
  }
  /* A '+' feature the table does not list still goes on the list. */
  for (const char *p = user_feat; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char *name = arena_strndup(p + 1, len ? len - 1 : 0);
    bool listed = false;
    for (int i = 0; i < n; i++)
      listed |= !strcmp(fs[i].llvm, name);
    if (*p == '+' && !listed && *name)
      buf_printf(&b, "%s%s", b.len ? "," : "", name);
    p = e ? e + 1 : NULL;
  }
  const char *s = arena_strdup(b.data ? b.data : "");
  buf_free(&b);
  return s;
}

/* ------------------------------------------------------------ open */

int target_open(const TargetRequest *r, int opt_level, Target *out) {
  memset(out, 0, sizeof *out);
  char *triple;
  LLVMTargetRef t = native_target(&triple);
  if (!t) {
    LLVMDisposeMessage(triple);
    return 1;
  }
  Arch a = arch_of(triple);
  const char *cpu, *feat, *tune;
  choose(r, a, &cpu, &feat, &tune);
  LLVMCodeGenOptLevel lvl = opt_level == 0   ? LLVMCodeGenLevelNone
                            : opt_level == 1 ? LLVMCodeGenLevelLess
                            : opt_level == 2 ? LLVMCodeGenLevelDefault
                                             : LLVMCodeGenLevelAggressive;
  out->tm = LLVMCreateTargetMachine(t, triple, cpu, feat, lvl, LLVMRelocPIC,
                                    LLVMCodeModelDefault);
  out->triple = arena_strdup(triple);
  LLVMDisposeMessage(triple);
  out->cpu = cpu;
  out->features = feat;
  out->tune = tune;
  int rc = 0;
  out->needs = needs_of(out->tm, out->triple, a, r->features, feat, &rc);
  return rc;
}

/* Tunes every function for the build machine when the target is the
 * portable baseline (gcc's -mtune beside -march): scheduling and cost
 * choices only, the instruction set stays the target's. */
void target_tune(void *mod, const Target *t) {
  if (!t->tune)
    return;
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  unsigned n = (unsigned)strlen(t->tune);
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (!LLVMIsDeclaration(f))
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(ctx, "tune-cpu", 8, t->tune, n));
}
