/*
 * main.c — the sflowc driver.  Reading it top to bottom tells the pipeline:
 * parse arguments, read the source, lex and parse (parse_source), check
 * (sema_program), then either dump what --emit asks for or generate code
 * and link (codegen_program).
 *
 * Exit codes follow rustc: 0 ok, 1 compile errors, 2 usage error, 101
 * internal compiler error (also for a crash, caught by a signal handler).
 */
#include "sflowc.h"
#include "parser.h"
#include "sflow_commit.h" /* generated: SFLOW_COMMIT */

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lsp_main(void);
int fmt_main(int argc, char **argv); /* fmt.c: `sflowc fmt` */

typedef struct {
  const char *input;
  const char *output;
  const char *emit; /* NULL, tokens, parse, ast, llvm, cuda, obj */
  bool check;
  int opt;
  bool debug;
  DiagFormat format;
  int color;
  TargetRequest target;
} Options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: sflowc FILE.sflow [-o OUT] [options]\n"
          "\n"
          "Compiles an sflow workflow into one native executable.\n"
          "\n"
          "options:\n"
          "  -o FILE               write the executable (or --emit output) to FILE\n"
          "  -O0 -O1 -O2 -O3       optimisation level (default -O2)\n"
          "  -g                    emit debug information (gdb stops on .sflow lines)\n"
          "  --target-cpu=NAME     compile for CPU NAME (LLVM's names: x86-64-v3,\n"
          "                        skylake-avx512, neoverse-n1, ...; 'help' lists them).\n"
          "                        Default: a portable baseline, x86-64-v2 on x86_64\n"
          "                        and generic (armv8-a) on aarch64, tuned for this\n"
          "                        machine\n"
          "  -march=NAME           the same as --target-cpu=NAME; -march=native uses\n"
          "                        every feature of this machine's CPU\n"
          "  --target-features=+A,-B  turn CPU features on (+) or off (-), LLVM names\n"
          "                        (+avx2,-fma); --nodes runs refuse hosts without them\n"
          "  --check               run the front end only (parse and type-check)\n"
          "  --emit=KIND           stop after a phase and print or write it:\n"
          "                          tokens  the token stream\n"
          "                          parse   the syntax tree before type checking\n"
          "                          ast     the type-checked syntax tree\n"
          "                          llvm    LLVM IR\n"
          "                          cuda    the CUDA C of every kernel\n"
          "                          obj     the object file (to -o)\n"
          "  --error-format=human|json  diagnostics as text (default) or JSON lines\n"
          "  --color=auto|always|never  colour diagnostics (auto: only on a terminal;\n"
          "                        NO_COLOR turns it off)\n"
          "  --lsp                 run the language server on stdin/stdout\n"
          "  fmt [--check] FILE... rewrite FILEs in the canonical layout (sflowc fmt --help)\n"
          "  --version             print the version, commit, LLVM and default target\n"
          "  --help                print this help\n"
          "\n"
          "exit codes: 0 ok, 1 compile errors, 2 usage error, 101 internal error\n");
}

/* The version, the commit and LLVM it was built from, and the default
 * target: what a bug report needs. */
static void print_version(void) {
  printf("sflowc %s (commit %s, LLVM %s)\ndefault target: ", SFLOW_VERSION, SFLOW_COMMIT,
         SFLOW_LLVM_VERSION);
  target_describe(stdout);
  printf("\n");
}

static _Noreturn void usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "sflowc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'sflowc --help' for more information.\n");
  exit(2);
}

static const char *const known_flags[] = {
    "-o", "-O0", "-O1", "-O2", "-O3", "-g", "--check", "--emit", "--error-format",
    "--color", "--lsp", "--version", "--help", "--target-cpu", "--target-features", "-march",
};

static void unknown_flag(const char *arg) {
  char name[64];
  snprintf(name, sizeof name, "%s", arg);
  char *eq = strchr(name, '=');
  if (eq)
    *eq = 0;
  const char *s = suggest(name, known_flags, (int)(sizeof known_flags / sizeof *known_flags));
  if (s) {
    fprintf(stderr, "sflowc: error: unknown option '%s' (did you mean '%s'?)\n", arg, s);
    fprintf(stderr, "Try 'sflowc --help' for more information.\n");
    exit(2);
  }
  usage_error("unknown option '%s'", arg);
}

static const char *flag_value(const char *arg, const char *flag) {
  size_t n = strlen(flag);
  if (strncmp(arg, flag, n) == 0 && arg[n] == '=')
    return arg + n + 1;
  return NULL;
}

/* --target-features takes LLVM's syntax: names with a sign, comma
 * separated.  LLVM itself checks the names (target.c). */
static void check_features(const char *v) {
  for (const char *p = v;;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n < 2 || (*p != '+' && *p != '-'))
      usage_error("--target-features takes +NAME and -NAME items separated by commas, as in "
                  "+avx2,-fma (got '%s')",
                  v);
    if (!e)
      break;
    p = e + 1;
  }
}

static Options parse_args(int argc, char **argv) {
  Options o = {.opt = 2, .color = -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--version")) {
      print_version();
      exit(0);
    } else if (!strcmp(a, "--lsp")) {
      exit(lsp_main());
    } else if (!strcmp(a, "-o")) {
      if (i + 1 >= argc)
        usage_error("%s needs a file name", "-o");
      o.output = argv[++i];
    } else if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3]) {
      o.opt = a[2] - '0';
    } else if (!strcmp(a, "-g")) {
      o.debug = true;
    } else if (!strcmp(a, "--check")) {
      o.check = true;
    } else if ((v = flag_value(a, "--emit"))) {
      static const char *kinds[] = {"tokens", "parse", "ast", "llvm", "cuda", "obj"};
      bool ok = false;
      for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        ok |= !strcmp(v, kinds[k]);
      if (!strcmp(v, "llvm-ir"))
        v = "llvm", ok = true;
      if (!ok)
        usage_error("unknown --emit kind '%s' (expected tokens, parse, ast, llvm, cuda or obj)", v);
      o.emit = v;
    } else if ((v = flag_value(a, "--error-format"))) {
      if (!strcmp(v, "json"))
        o.format = DIAG_JSON;
      else if (!strcmp(v, "human"))
        o.format = DIAG_HUMAN;
      else
        usage_error("unknown --error-format '%s' (expected human or json)", v);
    } else if ((v = flag_value(a, "--color"))) {
      if (!strcmp(v, "always"))
        o.color = 1;
      else if (!strcmp(v, "never"))
        o.color = 0;
      else if (!strcmp(v, "auto"))
        o.color = -1;
      else
        usage_error("unknown --color '%s' (expected auto, always or never)", v);
    } else if ((v = flag_value(a, "--target-cpu")) || (v = flag_value(a, "-march"))) {
      if (!*v)
        usage_error("%s needs a CPU name, as in --target-cpu=x86-64-v3", a);
      o.target.cpu = v;
    } else if ((v = flag_value(a, "--target-features"))) {
      check_features(v);
      o.target.features = v;
    } else if (!strcmp(a, "--emit") || !strcmp(a, "--error-format") || !strcmp(a, "--color") ||
               !strcmp(a, "--target-cpu") || !strcmp(a, "--target-features") ||
               !strcmp(a, "-march")) {
      usage_error("%s needs a value, as in --emit=ast", a);
    } else if (a[0] == '-' && a[1]) {
      unknown_flag(a);
    } else if (o.input) {
      usage_error("more than one input file ('%s')", a);
    } else {
      o.input = a;
    }
  }
  /* Before the input is read, so a bad name is a usage error whatever the
   * file holds; --target-cpu=help needs no input. */
  if (o.target.cpu || o.target.features) {
    int rc = target_check(&o.target);
    if (rc)
      exit(rc < 0 ? 0 : rc);
  }
  if (!o.input)
    usage_error("%s", "no input file");
  return o;
}

/* ---------------------------------------------------------- self path */

/* The runtime library the link step uses: ../lib/sflow/libsflowrt.a from
 * the directory of the running sflowc (the build tree and an installed
 * tree have the same layout). */
static const char *runtime_lib(void) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  const char *dir = ".";
  if (n > 0) {
    buf[n] = 0;
    dir = dirname(buf);
  }
  return arena_printf("%s/../lib/sflow/libsflowrt.a", dir);
}

/* A crash is a compiler bug: say so, with the rustc-style exit code. */
static void on_crash(int sig) {
  static const char msg[] = "sflowc: internal compiler error: crashed (signal ";
  char num[4] = {(char)('0' + sig / 10), (char)('0' + sig % 10), ')', '\n'};
  if (write(2, msg, sizeof msg - 1) < 0 || write(2, num, 4) < 0) {
  }
  _exit(101);
}

static void install_crash_handler(void) {
  static char altstack[65536];
  stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
  sigaltstack(&ss, NULL);
  struct sigaction sa = {.sa_handler = on_crash, .sa_flags = SA_ONSTACK};
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGFPE, &sa, NULL);
  sigaction(SIGILL, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}

/* ------------------------------------------------------------- phases */

static void dump_tokens(int file) {
  int n;
  Token *t = lex_source(file, &n);
  for (int i = 0; i <= n; i++) {
    int k = t[i].kind;
    printf("%d:%d %s", t[i].loc.line, t[i].loc.col, tok_spelling(k));
    if (k == TOK_IDENT || k == TOK_INT || k == TOK_FLOAT)
      printf(" %s", t[i].text);
    else if (k == TOK_STRING)
      printf(" %zu bytes", t[i].slen);
    printf("\n");
  }
}

static void write_text(const char *path, const char *text, size_t len) {
  FILE *f = path && strcmp(path, "-") ? fopen(path, "wb") : stdout;
  if (!f) {
    fprintf(stderr, "sflowc: error: cannot write '%s': %s\n", path, strerror(errno));
    exit(1);
  }
  fwrite(text, 1, len, f);
  if (f != stdout && fclose(f) != 0) {
    fprintf(stderr, "sflowc: error: cannot write '%s': %s\n", path, strerror(errno));
    exit(1);
  }
}

static char *default_output(const char *input) {
  const char *base = strrchr(input, '/');
  base = base ? base + 1 : input;
  char *out = arena_strdup(base);
  char *dot = strrchr(out, '.');
  if (dot && dot != out)
    *dot = 0;
  if (!strcmp(out, base))
    out = arena_printf("%s.out", out);
  return out;
}

int main(int argc, char **argv) {
  install_crash_handler();
  if (argc > 1 && !strcmp(argv[1], "fmt"))
    return fmt_main(argc - 2, argv + 2);
  Options o = parse_args(argc, argv);
  diag_init(o.format, o.color);

  size_t len;
  char why[128];
  char *text = read_file(o.input, &len, why, sizeof why);
  if (!text) {
    fprintf(stderr, "sflowc: error: cannot read '%s': %s\n", o.input, why);
    return 1;
  }
  int file = src_add(o.input, text, len, "");
  free(text);

  if (o.emit && !strcmp(o.emit, "tokens")) {
    dump_tokens(file);
    return diag_error_count() ? 1 : 0;
  }

  Program prog = {0};
  prog.main = parse_source(file);
  if (o.emit && !strcmp(o.emit, "parse")) {
    Buf b = {0};
    ast_dump(prog.main, &b);
    if (diag_error_count())
      return 1;
    write_text(o.output, b.data, b.len);
    return 0;
  }
  if (diag_error_count())
    return 1;
  if (!sema_program(&prog) || diag_error_count())
    return 1;
  if (o.check)
    return 0;
  if (o.emit && !strcmp(o.emit, "ast")) {
    Buf b = {0};
    for (Module *m = prog.modules; m; m = m->next)
      if (m == prog.main)
        ast_dump(m, &b);
    write_text(o.output, b.data, b.len);
    return 0;
  }
  if (o.emit && !strcmp(o.emit, "cuda")) {
    Buf b = {0};
    for (Module *m = prog.modules; m; m = m->next)
      for (Decl *d = m->decls; d; d = d->next)
        if (d->kind == D_KERNEL) {
          char *k = cudagen_kernel(d);
          buf_puts(&b, k);
          free(k);
        }
    write_text(o.output, b.data ? b.data : "", b.len);
    return 0;
  }
  CodegenOptions co = {
      .opt_level = o.opt,
      .debug = o.debug,
      .emit = o.emit,
      .out = o.output ? o.output : (o.emit ? (strcmp(o.emit, "obj") ? "-" : "out.o") : default_output(o.input)),
      .runtime_lib = runtime_lib(),
      .target = o.target,
  };
  int rc = codegen_program(&prog, &co);
  return rc == 101 ? 101 : rc ? 1 : 0;
}
