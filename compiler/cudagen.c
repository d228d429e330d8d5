/*
 * cudagen.c — CUDA C for kernels, from the checked AST.
 *
 * Each kernel becomes one self-contained NVRTC program: a short prelude
 * (the error record and the checked helpers) and one `extern "C"
 * __global__` function.  The text is meant to be read: one C statement per
 * sflow statement, each preceded by its source line in a comment, and the
 * user's names kept (renamed only where C++ or the prelude would clash).
 *
 * Key design choice: the GPU version keeps the CPU version's semantics.
 * Every array index is bounds-checked, integer division checks for zero
 * and float-to-integer casts check their range, exactly where the CPU twin
 * (codegen.c) does.  A failing check records its error (kind, source line
 * and column, the two numbers of the message) in a record the runtime reads
 * after the launch, the lowest failing thread's when several fail (as the
 * CPU version reports the first), and ends the thread with PTX `exit`, so
 * the runtime reports the same "file:line:col: runtime error" as the CPU
 * path.  Signature: (n, err, params...), where an array parameter `x`
 * becomes a pointer `x` and its length `x_len`, and so does a tensor
 * parameter (its first element's device address and its numel).
 */
#include "sflowc.h"
#include "parser.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The prelude is guarded so that --emit=cuda output (every kernel of a
 * program, one after another) is itself one valid NVRTC program. */
static const char prelude[] =
    "#ifndef SFLOW_KERNEL_PRELUDE\n"
    "#define SFLOW_KERNEL_PRELUDE\n"
    "/* The failed check of the lowest failing thread of a launch, so that the\n"
    " * report does not depend on the order threads run in; read by the runtime\n"
    " * afterwards.  ntid is the complement of that thread's index (0: none). */\n"
    "struct sf_kerr { int code, line, col, lock; long long a, b; double x; unsigned long long ntid; };\n"
    "enum { SF_KERR_INDEX = 1, SF_KERR_DIV = 2, SF_KERR_CAST_I32 = 3, SF_KERR_CAST_I64 = 4 };\n"
    "/* Only a thread that lowers the minimum writes, under the lock, and only\n"
    " * while it still is the minimum: the lowest failing thread's record stays. */\n"
    "__device__ static void sf_fail(sf_kerr *e, int code, int line, int col, long long a,\n"
    "                               long long b, double x) {\n"
    "  unsigned long long t = ~((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  if (atomicMax(&e->ntid, t) < t) {\n"
    "    while (atomicCAS(&e->lock, 0, 1) != 0) {}\n"
    "    if (*(volatile unsigned long long *)&e->ntid == t) {\n"
    "      e->line = line; e->col = col; e->a = a; e->b = b; e->x = x; e->code = code;\n"
    "    }\n"
    "    __threadfence();\n"
    "    atomicExch(&e->lock, 0);\n"
    "  }\n"
    "  asm volatile(\"exit;\");\n"
    "}\n"
    "__device__ static inline long long sf_ix(long long i, long long len, sf_kerr *e, int line,\n"
    "                                         int col) {\n"
    "  if ((unsigned long long)i >= (unsigned long long)len) sf_fail(e, SF_KERR_INDEX, line, col, i, len, 0);\n"
    "  return i;\n"
    "}\n"
    "/* x / -1 is -x and x % -1 is 0 without the trapping division, as on the CPU. */\n"
    "template <typename T> __device__ static inline T sf_div(T a, T b, sf_kerr *e, int line, int col) {\n"
    "  if (b == 0) sf_fail(e, SF_KERR_DIV, line, col, 0, 0, 0);\n"
    "  return b == -1 ? (T)(0ull - (unsigned long long)a) : a / b;\n"
    "}\n"
    "template <typename T> __device__ static inline T sf_rem(T a, T b, sf_kerr *e, int line, int col) {\n"
    "  if (b == 0) sf_fail(e, SF_KERR_DIV, line, col, 0, 0, 0);\n"
    "  return b == -1 ? (T)0 : a % b;\n"
    "}\n"
    "/* Shifts use the count modulo the width, as the CPU version does. */\n"
    "__device__ static inline long long sf_shl(long long a, long long b) {\n"
    "  return (long long)((unsigned long long)a << (b & 63));\n"
    "}\n"
    "__device__ static inline int sf_shl(int a, int b) { return (int)((unsigned)a << (b & 31)); }\n"
    "__device__ static inline long long sf_shr(long long a, long long b) { return a >> (b & 63); }\n"
    "__device__ static inline int sf_shr(int a, int b) { return a >> (b & 31); }\n"
    "__device__ static inline long long sf_iabs(long long a) { return a < 0 ? -a : a; }\n"
    "__device__ static inline int sf_iabs(int a) { return a < 0 ? -a : a; }\n"
    "template <typename T> __device__ static inline T sf_imin(T a, T b) { return a < b ? a : b; }\n"
    "template <typename T> __device__ static inline T sf_imax(T a, T b) { return a > b ? a : b; }\n"
    "__device__ static inline long long sf_to_i64(double v, sf_kerr *e, int line, int col) {\n"
    "  if (!(v >= -0x1p63 && v < 0x1p63)) sf_fail(e, SF_KERR_CAST_I64, line, col, 0, 0, v);\n"
    "  return (long long)v;\n"
    "}\n"
    "__device__ static inline int sf_to_i32(double v, sf_kerr *e, int line, int col) {\n"
    "  if (!(v > -0x1p31 - 1 && v < 0x1p31)) sf_fail(e, SF_KERR_CAST_I32, line, col, 0, 0, v);\n"
    "  return (int)v;\n"
    "}\n"
    "#endif\n";

/* Names a user may write that C++, CUDA or the prelude already use. */
static const char *const reserved[] = {
    "alignas", "alignof", "asm", "auto", "bool", "break", "case", "catch", "char", "class",
    "const", "constexpr", "continue", "default", "delete", "do", "double", "else", "enum",
    "explicit", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int",
    "long", "mutable", "namespace", "new", "noexcept", "nullptr", "operator", "private",
    "protected", "public", "register", "return", "short", "signed", "sizeof", "static",
    "struct", "switch", "template", "this", "throw", "true", "try", "typedef", "typename",
    "union", "unsigned", "using", "virtual", "void", "volatile", "while", "and", "or", "not",
    "xor", "bitand", "bitor", "compl", "threadIdx", "blockIdx", "blockDim", "gridDim",
    "warpSize", "sqrt", "sqrtf", "exp", "expf", "log", "logf", "tanh", "tanhf", "fabs",
    "fabsf", "fmin", "fminf", "fmax", "fmaxf", "pow", "powf", "floor", "floorf", "fmod",
    "fmodf", "min", "max", "abs", "main", "errno", "NULL", "INFINITY", "NAN",
};

typedef struct {
  Var *var;
  const char *cname;
} Name;

static struct {
  Buf *out;
  Decl *k;
  Name *names;
  int nnames, cap;
  int indent;
  int last_line; /* the line last shown in a comment */
} C;

/* ---------------------------------------------------------- names */

static bool taken(const char *s) {
  if (!strncmp(s, "sf_", 3) || strstr(s, "__"))
    return true;
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(reserved[i], s))
      return true;
  for (int i = 0; i < C.nnames; i++)
    if (!strcmp(C.names[i].cname, s))
      return true;
  return false;
}

/* A C name for v, unique in the kernel: shadowing in sflow is legal where
 * C++ would see the new name in its own initializer. */
static const char *bind(Var *v, const char *name) {
  bool arr = v && v->ty && v->ty->kind == TY_ARRAY;
  const char *c = name;
  for (int n = 2; taken(c) || (arr && taken(arena_printf("%s_len", c))); n++)
    c = arena_printf("%s_%d", name, n);
  if (C.nnames == C.cap) {
    C.cap = C.cap ? C.cap * 2 : 16;
    C.names = realloc(C.names, sizeof(Name) * (size_t)C.cap);
    if (!C.names)
      ice("out of memory");
  }
  C.names[C.nnames++] = (Name){v, c};
  /* An array's length travels as NAME_len: reserve that too. */
  if (arr)
    bind(NULL, arena_printf("%s_len", c));
  return c;
}

static const char *cname(Var *v) {
  for (int i = C.nnames - 1; i >= 0; i--)
    if (C.names[i].var == v)
      return C.names[i].cname;
  ice("cudagen: variable '%s' has no C name", v ? v->name : "?");
}

const char *cudagen_entry(Decl *k) {
  const char *m = k->mangled ? k->mangled : k->name;
  char *s = arena_printf("sflow_%s", m);
  for (char *p = s; *p; p++)
    if (*p == '.')
      *p = '_';
  return s;
}

/* ---------------------------------------------------------- output */

static void out(const char *s) { buf_puts(C.out, s); }
static void outf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void outf(const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof tmp) {
    out(tmp);
    return;
  }
  va_start(ap, fmt);
  char *big = malloc((size_t)n + 1);
  if (!big)
    ice("out of memory");
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  out(big);
  free(big);
}
static void pad(void) {
  for (int i = 0; i < C.indent; i++)
    out("  ");
}

/* "// 12: acc += x[j]" — the statement's source line, trimmed, with
 * anything that could end or extend a line comment made harmless. */
static void line_comment(Loc loc) {
  Source *s = src_get(loc.file);
  if (!s || loc.off < 0 || (size_t)loc.off > s->len)
    return;
  size_t b = (size_t)loc.off, e = b;
  while (b > 0 && s->text[b - 1] != '\n')
    b--;
  while (e < s->len && s->text[e] != '\n' && s->text[e] != '\r')
    e++;
  while (b < e && (s->text[b] == ' ' || s->text[b] == '\t'))
    b++;
  while (e > b && (s->text[e - 1] == ' ' || s->text[e - 1] == '\t' || s->text[e - 1] == '\\'))
    e--;
  if (loc.line == C.last_line)
    return; /* a one-line `for ... { body }` shows its line once */
  C.last_line = loc.line;
  if (e - b > 120)
    e = b + 120;
  pad();
  outf("// %d: ", loc.line);
  for (size_t i = b; i < e; i++) {
    unsigned char c = (unsigned char)s->text[i];
    buf_putc(C.out, c == '\t' ? ' ' : (c < 0x20 || c == 0x7f) ? '?' : (char)c);
  }
  out("\n");
}

static const char *ctype(Type *t) {
  switch (t->kind) {
  case TY_BOOL: return "bool";
  case TY_I32: return "int";
  case TY_I64:
  case TY_UNTYPED_INT: return "long long";
  case TY_F32: return "float";
  case TY_F64:
  case TY_UNTYPED_FLOAT: return "double";
  default: ice("cudagen: no CUDA type for %s", ty_str(t));
  }
}

/* ------------------------------------------------------ expressions */

static void expr(Node *n);

static void int_lit(int64_t v, Type *t) {
  if (t->kind == TY_I32) {
    if (v == INT32_MIN)
      out("(-2147483647 - 1)");
    else
      outf("%" PRId64, v);
  } else if (v == INT64_MIN) {
    out("(-9223372036854775807LL - 1)");
  } else {
    outf("%" PRId64 "LL", v);
  }
}

/* The shortest text that reads back as the same value, with a point or an
 * exponent so C sees a floating literal, and `f` for f32. */
static void float_lit(double v, Type *t) {
  bool f32 = t->kind == TY_F32;
  char b[64];
  if (isinf(v)) {
    out(v > 0 ? (f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)")
              : (f32 ? "__int_as_float(0xff800000)" : "__longlong_as_double(0xfff0000000000000LL)"));
    return;
  }
  for (int prec = f32 ? 6 : 15; prec <= 17; prec++) {
    snprintf(b, sizeof b, "%.*g", prec, v);
    if (f32 ? strtof(b, NULL) == (float)v : strtod(b, NULL) == v)
      break;
  }
  if (!strpbrk(b, ".eEn"))
    strcat(b, ".0");
  outf("%s%s", b, f32 ? "f" : "");
}

static bool is_int(Type *t) { return t->kind == TY_I32 || t->kind == TY_I64 || t->kind == TY_UNTYPED_INT; }
static bool is_flt(Type *t) { return t->kind == TY_F32 || t->kind == TY_F64 || t->kind == TY_UNTYPED_FLOAT; }

/* An operand: parenthesised unless it is atomic. */
static void operand(Node *n) {
  bool atom = n->kind == N_NAME || n->kind == N_INT || n->kind == N_FLOAT || n->kind == N_BOOL ||
              n->kind == N_INDEX || n->kind == N_CALL;
  if (!atom)
    out("(");
  expr(n);
  if (!atom)
    out(")");
}

static void checked2(const char *fn, Node *a, Node *b, Loc loc) {
  outf("%s(", fn);
  expr(a);
  out(", ");
  expr(b);
  outf(", sf_err, %d, %d)", loc.line, loc.col);
}

static const char *op_text(int op) {
  switch (op) {
  case TOK_LE: return "<=";
  case TOK_GE: return ">=";
  case TOK_EQ: return "==";
  case TOK_NE: return "!=";
  case TOK_ANDAND: return "&&";
  case TOK_OROR: return "||";
  default: {
    static char s[2];
    s[0] = (char)op;
    return s;
  }
  }
}

static void binary(Node *n) {
  Type *t = n->lhs->ty;
  if (is_int(t) && (n->op == '/' || n->op == '%')) {
    checked2(n->op == '/' ? "sf_div" : "sf_rem", n->lhs, n->rhs, n->loc);
    return;
  }
  if (is_int(t) && (n->op == TOK_SHL || n->op == TOK_SHR)) {
    outf("%s(", n->op == TOK_SHL ? "sf_shl" : "sf_shr");
    expr(n->lhs);
    outf(", (%s)", ctype(t));
    operand(n->rhs);
    out(")");
    return;
  }
  if (is_flt(t) && n->op == '%') {
    outf("%s(", t->kind == TY_F32 ? "fmodf" : "fmod");
    expr(n->lhs);
    out(", ");
    expr(n->rhs);
    out(")");
    return;
  }
  operand(n->lhs);
  outf(" %s ", op_text(n->op));
  operand(n->rhs);
}

static void math1(const char *name, Node *call, Node *arg) {
  bool f32 = call->ty->kind == TY_F32;
  outf("%s%s(", name, f32 ? "f" : "");
  if (arg->ty != call->ty) { /* integers become floats, as on the CPU */
    outf("(%s)", ctype(call->ty));
    operand(arg);
  } else {
    expr(arg);
  }
  out(")");
}

static void float_arg(Node *a, Type *t) {
  if (a->ty != t && !ty_is_untyped(a->ty)) {
    outf("(%s)", ctype(t));
    operand(a);
  } else {
    expr(a);
  }
}

static void cast(Node *n, Node *a) {
  Type *to = n->ty, *from = a->ty;
  if (is_flt(from) && is_int(to)) {
    outf("%s((double)", to->kind == TY_I32 ? "sf_to_i32" : "sf_to_i64");
    operand(a);
    outf(", sf_err, %d, %d)", n->loc.line, n->loc.col);
    return;
  }
  if (from == to) {
    expr(a);
    return;
  }
  outf("(%s)", ctype(to));
  operand(a);
}

static void call(Node *n) {
  Node **av = n->argv;
  Type *t = n->ty;
  switch (n->builtin) {
  case B_LEN:
    if (t->kind == TY_I32)
      out("(int)");
    outf("%s_len", cname(av[0]->var));
    return;
  case B_THREAD_ID: out(t->kind == TY_I32 ? "(int)sf_tid" : "sf_tid"); return;
  case B_SQRT: math1("sqrt", n, av[0]); return;
  case B_EXP: math1("exp", n, av[0]); return;
  case B_LOG: math1("log", n, av[0]); return;
  case B_TANH: math1("tanh", n, av[0]); return;
  case B_FLOOR: math1("floor", n, av[0]); return;
  case B_SIN: math1("sin", n, av[0]); return;
  case B_COS: math1("cos", n, av[0]); return;
  case B_TAN: math1("tan", n, av[0]); return;
  case B_CEIL: math1("ceil", n, av[0]); return;
  case B_ROUND: math1("rint", n, av[0]); return; /* half to even, as llvm.roundeven */
  case B_ATAN2:
    outf("%s(", t->kind == TY_F32 ? "atan2f" : "atan2");
    float_arg(av[0], t);
    out(", ");
    float_arg(av[1], t);
    out(")");
    return;
  case B_POW:
    outf("%s(", t->kind == TY_F32 ? "powf" : "pow");
    float_arg(av[0], t);
    out(", ");
    float_arg(av[1], t);
    out(")");
    return;
  case B_ABS:
    if (is_flt(t)) {
      math1("fabs", n, av[0]);
    } else {
      out("sf_iabs(");
      expr(av[0]);
      out(")");
    }
    return;
  case B_MIN:
  case B_MAX: {
    bool mn = n->builtin == B_MIN;
    if (is_flt(t)) /* fmin/fmax: a NaN operand yields the other one, as llvm.minnum */
      outf("%s%s(", mn ? "fmin" : "fmax", t->kind == TY_F32 ? "f" : "");
    else
      outf("sf_i%s<%s>(", mn ? "min" : "max", ctype(t));
    expr(av[0]);
    out(", ");
    expr(av[1]);
    out(")");
    return;
  }
  case B_CAST_I32:
  case B_CAST_I64:
  case B_CAST_F32:
  case B_CAST_F64: cast(n, av[0]); return;
  default: ice("cudagen: builtin %d in a kernel", n->builtin);
  }
}

static void name_ref(Node *n) {
  if (n->var) {
    out(cname(n->var));
    return;
  }
  Decl *d = n->decl;
  if (d && d->kind == D_CONST && d->value) {
    /* A constant is inlined as its (constant) expression, in its type. */
    outf("((%s)", ctype(d->type));
    operand(d->value);
    out(")");
    return;
  }
  ice("cudagen: name '%s' in a kernel", n->name);
}

static void expr(Node *n) {
  switch (n->kind) {
  case N_INT:
    if (is_flt(n->ty))
      float_lit((double)n->ival, n->ty);
    else
      int_lit(n->ival, n->ty);
    return;
  case N_FLOAT: float_lit(n->fval, n->ty); return;
  case N_BOOL: out(n->ival ? "true" : "false"); return;
  case N_NAME: name_ref(n); return;
  case N_BINARY: binary(n); return;
  case N_UNARY:
    out(n->op == '!' ? "!" : "-");
    operand(n->lhs);
    return;
  case N_INDEX: {
    const char *a = cname(n->lhs->var);
    outf("%s[sf_ix(", a);
    expr(n->rhs);
    outf(", %s_len, sf_err, %d, %d)]", a, n->loc.line, n->loc.col);
    return;
  }
  case N_CALL: call(n); return;
  default: ice("cudagen: expression kind %d in a kernel", n->kind);
  }
}

/* ------------------------------------------------------- statements */

static void stmt(Node *n);

static void body(Node *b) {
  C.indent++;
  for (Node *s = b && b->kind == N_BLOCK ? b->body : b; s; s = s->next)
    stmt(s);
  C.indent--;
}

static void assign(Node *n) {
  Type *t = n->lhs->ty;
  pad();
  if (n->op != '=' && is_int(t) && (n->op == '/' || n->op == '%')) {
    expr(n->lhs);
    out(" = ");
    checked2(n->op == '/' ? "sf_div" : "sf_rem", n->lhs, n->rhs, n->loc);
  } else if (n->op != '=' && is_flt(t) && n->op == '%') {
    expr(n->lhs);
    outf(" = %s(", t->kind == TY_F32 ? "fmodf" : "fmod");
    expr(n->lhs);
    out(", ");
    expr(n->rhs);
    out(")");
  } else {
    expr(n->lhs);
    outf(" %s= ", n->op == '=' ? "" : op_text(n->op));
    expr(n->rhs);
  }
  out(";\n");
}

static void if_stmt(Node *n, bool chained) {
  if (!chained)
    pad();
  out("if (");
  expr(n->cond);
  out(") {\n");
  body(n->then);
  pad();
  out("}");
  if (n->els && n->els->kind == N_IF) {
    out(" else ");
    if_stmt(n->els, true);
    return;
  }
  if (n->els) {
    out(" else {\n");
    body(n->els);
    pad();
    out("}");
  }
  out("\n");
}

static void stmt(Node *n) {
  line_comment(n->loc);
  switch (n->kind) {
  case N_LET: {
    Type *t = n->var ? n->var->ty : n->lhs->ty;
    const char *c = bind(n->var, n->name);
    pad();
    outf("%s%s %s = ", n->ival ? "" : "const ", ctype(t), c);
    float_arg(n->lhs, t);
    out(";\n");
    return;
  }
  case N_ASSIGN: assign(n); return;
  case N_EXPR_STMT:
    pad();
    out("(void)(");
    expr(n->lhs);
    out(");\n");
    return;
  case N_IF: if_stmt(n, false); return;
  case N_WHILE:
    pad();
    out("while (");
    expr(n->cond);
    out(") {\n");
    body(n->body);
    pad();
    out("}\n");
    return;
  case N_FOR: {
    /* The bound is evaluated once, as in the CPU version. */
    Type *it = n->rhs->lhs->ty;
    const char *v = bind(n->var, n->name);
    const char *end = bind(NULL, arena_printf("%s_end", v));
    pad();
    outf("for (%s %s = ", ctype(it), v);
    expr(n->rhs->lhs);
    outf(", %s = ", end);
    expr(n->rhs->rhs);
    outf("; %s < %s; %s++) {\n", v, end, v);
    body(n->body);
    pad();
    out("}\n");
    return;
  }
  case N_BREAK: pad(); out("break;\n"); return;
  case N_CONTINUE: pad(); out("continue;\n"); return;
  case N_RETURN: pad(); out("return;\n"); return;
  case N_BLOCK:
    pad();
    out("{\n");
    body(n);
    pad();
    out("}\n");
    return;
  default:
    pad();
    out("(void)(");
    expr(n);
    out(");\n");
    return;
  }
}

/* ------------------------------------------------------------ kernel */

char *cudagen_kernel(Decl *k) {
  Buf b = {0};
  C.out = &b;
  C.k = k;
  C.nnames = 0;
  C.indent = 0;
  C.last_line = 0;
  out(prelude);
  Source *s = src_get(k->loc.file);
  const char *path = s ? s->path : "?";
  const char *slash = strrchr(path, '/');
  outf("\n// kernel %s (%s:%d)\n", k->name, slash ? slash + 1 : path, k->loc.line);
  outf("extern \"C\" __global__ void %s(long long sf_n, sf_kerr *sf_err", cudagen_entry(k));
  for (Decl *p = k->params; p; p = p->next) {
    const char *c = bind(p->var, p->name);
    /* A tensor parameter is seen as the f32[] of its elements (sema.c's
     * begin_body): the runtime passes its device pointer and numel. */
    Type *t = p->var && p->var->ty ? p->var->ty : p->type;
    if (t->kind == TY_ARRAY)
      outf(",\n    %s *%s, long long %s_len", ctype(t->elem), c, c);
    else
      outf(",\n    %s %s", ctype(p->type), c);
  }
  out(") {\n");
  out("  const long long sf_tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n");
  out("  if (sf_tid >= sf_n) return;\n");
  body(k->body);
  out("}\n");
  free(C.names);
  C.names = NULL;
  C.nnames = C.cap = 0;
  if (!b.data)
    buf_puts(&b, "");
  return b.data;
}
