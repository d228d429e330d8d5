/*
 * sflowc.h — the compiler's one internal header.
 *
 * One section per compiler file, in pipeline order: the arena and sources
 * (util.c), diagnostics (diag.c), tokens and the lexer (lexer.c over the
 * flex scanner grammar/sflow.l), the AST (ast.c, built by grammar/sflow.y),
 * types (types.c), semantic analysis (sema.c, its files sharing
 * sema_internal.h), GPU settle points (settle.c), the target machine
 * (target.c), LLVM host code (codegen.c, its files sharing
 * codegen_internal.h, calling the runtime through the rows of rtabi.h),
 * recursion unrolling (unroll.c), CUDA C for kernels (cudagen.c),
 * optimisation, object and linking (link.c), and the driver (main.c).
 *
 * Memory policy: everything the front end allocates lives in one arena that
 * is freed once, when the compilation ends.  Nothing in the AST is freed
 * piecemeal, so passes may share sub-trees freely.
 */
#ifndef SFLOWC_H
#define SFLOWC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SFLOW_VERSION "0.1.0"

typedef struct Type Type;
typedef struct Node Node;
typedef struct Decl Decl;
typedef struct TypeExpr TypeExpr;
typedef struct Var Var;
typedef struct Module Module;

/* ---------------------------------------------------------------- util.c */

void *arena_alloc(size_t n); /* zeroed; aborts via ice() on OOM */
char *arena_strdup(const char *s);
char *arena_strndup(const char *s, size_t n);
char *arena_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void arena_free_all(void);

/* A growable byte buffer (heap, not arena) for output text. */
typedef struct {
  char *data;
  size_t len, cap;
} Buf;
void buf_putc(Buf *b, char c);
void buf_puts(Buf *b, const char *s);
void buf_putn(Buf *b, const char *s, size_t n);
void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(Buf *b);

/* A source file, registered once; Loc.file indexes the table. */
typedef struct {
  const char *path;    /* as given on the command line or resolved import */
  const char *text;    /* NUL-terminated copy; may contain NUL bytes inside */
  size_t len;          /* length in bytes, NULs included */
  const char *modname; /* "" for the main file, "util", "std.math", ... */
} Source;
int src_add(const char *path, const char *text, size_t len, const char *modname);
Source *src_get(int id);
int src_count(void);
void src_reset(void);
/* Reads a whole regular file of at most 64 MiB; returns NULL and writes
 * why not ("is a directory", strerror's text, ...) into why on failure. */
char *read_file(const char *path, size_t *len, char *why, size_t whylen);

/* A position in a source: 1-based line and column (in bytes). */
typedef struct {
  int file;
  int line, col;
  int off; /* byte offset of the first character */
  int len; /* length in bytes of the token or construct (for underlines) */
} Loc;

/* Internal compiler error: prints file/line of the compiler and exits 101. */
_Noreturn void ice_at(const char *cfile, int cline, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ice(...) ice_at(__FILE__, __LINE__, __VA_ARGS__)

/* ---------------------------------------------------------------- diag.c */

typedef enum { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE } DiagLevel;
typedef enum { DIAG_HUMAN, DIAG_JSON } DiagFormat;

void diag_init(DiagFormat fmt, int color /* -1 auto, 0 never, 1 always */);
void diag_error(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_warning(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A note attaches to the diagnostic just reported. */
void diag_note(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int diag_error_count(void);
/* Stop reporting after this many errors (default 50); the driver checks. */
bool diag_too_many(void);
/* Optional sink for the language server: when set, diagnostics go to it
 * instead of stderr. */
typedef void (*DiagSink)(void *ctx, DiagLevel lvl, Loc loc, const char *msg);
void diag_set_sink(DiagSink sink, void *ctx);
void diag_reset(void);

/* "Did you mean": the closest candidate within edit distance (len+2)/3, or
 * NULL.  Candidates equal to name are ignored. */
const char *suggest(const char *name, const char *const *cands, int n);
int edit_distance(const char *a, const char *b, int limit);

/* --------------------------------------------------------------- lexer.c */

/* Token kinds come from the bison-generated header (TOK_IDENT, TOK_INT,
 * ...); single-character operators use their character code. */
typedef struct {
  int kind;
  Loc loc;
  const char *text; /* arena copy of the lexeme */
  int64_t ival;     /* TOK_INT */
  double fval;      /* TOK_FLOAT */
  char *sval;       /* TOK_STRING: decoded bytes (arena) */
  size_t slen;
} Token;

/* Lexes a whole source into a token array (terminated by kind 0, EOF).
 * Applies newline-as-terminator insertion and bracket tracking; reports
 * lexical errors through diag. */
Token *lex_source(int file, int *ntok);
extern bool lex_fatal; /* the last lex_source met an error that stops parsing */
const char *tok_name(int kind);    /* "'{'", "identifier", "'while'" */
const char *tok_spelling(int kind); /* for --emit=tokens */
/* The language's keywords, one source of truth for the editor tests. */
extern const char *const sflow_keywords[];
extern const int sflow_nkeywords;
/* Predeclared type names (identifiers, not keywords). */
extern const char *const sflow_type_names[];
extern const int sflow_ntype_names;
/* Builtin function names known to sema. */
extern const char *const sflow_builtin_names[];
extern const int sflow_nbuiltin_names;

/* The deepest bracket nesting accepted (like clang's -fbracket-depth). */
#define SFLOW_MAX_NESTING 256

/* --------------------------------------------------------------- types.c */

typedef enum {
  TY_ERROR, /* poison: suppresses follow-on errors */
  TY_VOID,
  TY_BOOL,
  TY_I32,
  TY_I64,
  TY_F32,
  TY_F64,
  TY_STR,
  TY_UNTYPED_INT,   /* an integer literal not yet given a type */
  TY_UNTYPED_FLOAT, /* a float literal not yet given a type */
  TY_ARRAY,         /* elem */
  TY_STRUCT,        /* decl: D_STRUCT */
  TY_FUTURE,        /* elem */
  TY_ACTOR,         /* decl: D_ACTOR */
  TY_GROUP,         /* decl: D_ACTOR */
  TY_MAP,           /* key, elem (the value) */
  TY_FN,            /* params[nparams], elem (the result, TY_VOID for none) */
  TY_TENSOR,        /* an n-d f32 array of std.nn: a reference (sf_tensor *) */
  TY_TPARAM,        /* the type parameter T of a generic @extern function */
  TY_MODULE,        /* a name bound by import; only valid before '.' */
} TypeKind;

struct Type {
  TypeKind kind;
  Type *elem;
  Decl *decl;
  Type *key;     /* TY_MAP */
  Type **params; /* TY_FN */
  int nparams;
  void *llvm; /* codegen's cached LLVMTypeRef */
};

/* Types are interned: equal types are the same pointer.  types_reset forgets
 * the table when the arena is freed. */
void types_reset(void);
Type *ty_prim(TypeKind k);
Type *ty_array(Type *elem);
Type *ty_future(Type *elem);
Type *ty_struct(Decl *d);
Type *ty_actor(Decl *d);
Type *ty_group(Decl *d);
Type *ty_map(Type *key, Type *val);
/* The type parameters of a generic @extern: 0 (T, first) or 1 (second). */
Type *ty_tparam(int i);
Type *ty_fn(Type **params, int nparams, Type *ret); /* params copied */
bool ty_is_map_key(Type *t); /* str i64 i32 bool */
bool ty_is_int(Type *t);     /* i32, i64, untyped int */
bool ty_is_float(Type *t);   /* f32, f64, untyped float */
bool ty_is_numeric(Type *t);
bool ty_is_untyped(Type *t);
bool ty_is_ref(Type *t);      /* str, arrays, futures, actors, groups, maps, tensors */
bool ty_has_refs(Type *t);    /* a ref, or a struct with a ref inside */
bool ty_is_gpu_elem(Type *t); /* f32 f64 i32 i64 */
/* "i64", "f32[]", "future<i64>", "group<Counter>", "Batch",
 * "map<str, i64>", "fn(f64) -> f64" (arena). */
const char *ty_str(Type *t);

/* ----------------------------------------------------------------- AST */

/* Type syntax, as written. */
typedef enum { TE_NAME, TE_ARRAY, TE_GENERIC, TE_FN } TypeExprKind;
struct TypeExpr {
  TypeExprKind kind;
  Loc loc;
  const char *name; /* TE_NAME: "i64", "Batch"; TE_GENERIC: "future", "group", "map" */
  TypeExpr *arg;    /* TE_ARRAY: element; TE_GENERIC: the argument; TE_FN: first parameter */
  const char *module; /* TE_NAME qualified as mod.Name, else NULL */
  TypeExpr *arg2;   /* TE_GENERIC map<K, V>: V */
  TypeExpr *next;   /* TE_FN: the next parameter type */
  TypeExpr *ret;    /* TE_FN: the result type, or NULL */
};

typedef enum {
  /* expressions */
  N_INT,       /* ival */
  N_FLOAT,     /* fval */
  N_BOOL,      /* ival 0/1 */
  N_STR,       /* sval, slen */
  N_NAME,      /* name; var (local) or decl (global item) after sema */
  N_BINARY,    /* op, lhs, rhs */
  N_UNARY,     /* op ('-' or '!'), lhs */
  N_CALL,      /* callee (N_NAME or N_FIELD), args */
  N_INDEX,     /* lhs[rhs] */
  N_FIELD,     /* lhs.name */
  N_ARRAY_LIT, /* args: elements */
  N_COMPREH,   /* [lhs for name in rhs]; rhs may be N_RANGE */
  N_RANGE,     /* lhs..rhs (only in for and comprehensions) */
  N_STRUCT_LIT,/* name (module?) { args: N_FIELD_INIT list } */
  N_FIELD_INIT,/* name: lhs */
  N_AWAIT,     /* await lhs */
  N_SPAWN,     /* spawn callee(args) [* count]: lhs = N_CALL, rhs = count */
  N_LAUNCH,    /* launch name[rhs](args) */
  N_MAP_NEW,   /* map<K, V>(): texpr */
  /* statements */
  N_LET,       /* let/var name [: texpr] = lhs; ival 1 for var */
  N_ASSIGN,    /* lhs op= rhs; op is '=' or the binary operator of '+=' '-=' '*=' '/=' */
  N_EXPR_STMT, /* lhs */
  N_IF,        /* cond then els (els: N_BLOCK or N_IF or NULL) */
  N_WHILE,     /* cond body */
  N_FOR,       /* for name in rhs (N_RANGE or array expr) body */
  N_BREAK,
  N_CONTINUE,
  N_RETURN,    /* lhs or NULL */
  N_BLOCK,     /* body: statement list */
} NodeKind;

/* Builtins that sema recognises by name; N_CALL.builtin after sema. */
typedef enum {
  B_NONE,
  B_PRINT, B_LEN, B_SQRT, B_EXP, B_LOG, B_TANH, B_ABS, B_MIN, B_MAX, B_POW,
  B_FLOOR, B_NOW, B_RAND_SEED, B_RAND_F32, B_FMT, B_FAIL, B_ATTEMPT,
  B_NODE_ID, B_HOSTNAME, B_THREAD_ID, B_GROUP_RANK, B_GROUP_SIZE,
  B_ALLREDUCE_SUM, B_ALLREDUCE_MEAN, B_BROADCAST, B_ALLGATHER, B_BARRIER,
  B_ZEROS_F32, B_ZEROS_F64, B_ZEROS_I32, B_ZEROS_I64,
  B_CAST_BOOL, B_CAST_I32, B_CAST_I64, B_CAST_F32, B_CAST_F64, B_CAST_STR,
  B_SPLIT,   /* a.split(k) */
  B_MATMUL,
  B_FAILURE, /* failure(f): std.tune's await that does not raise */
  /* the data core (sema_data.c and codegen_data.c): math,
   * random numbers, sort/argsort/join, and the methods of str and arrays
   * (N_CALL.recv is the receiver); keep B_SIN first and B_POP last */
  B_SIN, B_COS, B_TAN, B_ATAN2, B_CEIL, B_ROUND, B_RAND_INT, B_RANDN_F32,
  B_SORT, B_ARGSORT, B_JOIN, B_ORD, B_CHR,
  B_STR_SPLIT, B_STR_SPLIT_WS, B_STR_FIND, B_STR_STRIP, B_STR_LOWER, B_STR_UPPER,
  B_STR_REPLACE, B_STR_STARTS_WITH, B_STR_ENDS_WITH, B_STR_CODEPOINTS, B_PUSH, B_POP,
  /* runtime-backed helpers used by std modules (names start with __) */
  B_RT_READ_FILE, B_RT_WRITE_FILE, B_RT_APPEND_FILE, B_RT_FILE_EXISTS,
  B_RT_READ_LINES,
  B__COUNT
} Builtin;

static inline bool builtin_is_data(Builtin b) { return b >= B_SIN && b <= B_POP; }

/* How a call was resolved by sema (N_CALL.callkind). */
typedef enum {
  CALL_UNRESOLVED,
  CALL_FN,        /* decl: D_FN */
  CALL_TASK,      /* decl: D_TASK; yields future */
  CALL_BUILTIN,   /* builtin */
  CALL_METHOD,    /* actor handle method: lhs of callee field = handle; decl: D_METHOD */
  CALL_GROUP_ALL, /* g.all.m(): decl D_METHOD; yields future<T[]> */
  CALL_GROUP_ANY, /* g.any.m() */
  CALL_GROUP_ONE, /* g[i].m() */
  CALL_SELF_METHOD, /* m() inside an actor calling its own method, synchronously */
  CALL_STRUCT_CTOR, /* not used: struct literals have their own node */
  CALL_MAP,       /* m.get/has/remove/keys/values: recv = the map, ival = MapOp */
  CALL_FN_VALUE,  /* f(x) of a function value: callee is the value's expression */
} CallKind;

/* The methods of map<K, V> (N_CALL.ival of CALL_MAP). */
typedef enum { MAP_GET, MAP_HAS, MAP_REMOVE, MAP_KEYS, MAP_VALUES } MapOp;

struct Node {
  NodeKind kind;
  Loc loc;
  Type *ty;   /* expressions: set by sema */
  Node *next; /* next in a list (arguments, statements, elements) */

  Node *lhs, *rhs;
  Node *cond, *then, *els, *body;
  Node *args;        /* list */
  Node *callee;      /* N_CALL */
  TypeExpr *texpr;   /* N_LET with a written type */
  const char *name;  /* N_NAME, N_FIELD, N_LET, N_FOR, N_COMPREH, N_STRUCT_LIT, N_LAUNCH */
  const char *argname; /* a named argument: f(lr = 0.1) */
  const char *qual;    /* N_STRUCT_LIT: the module of mod.Name { ... }, else NULL */
  Loc name_loc;      /* location of name where it differs from loc */
  int op;            /* N_BINARY, N_UNARY, N_ASSIGN */
  int64_t ival;
  double fval;
  char *sval;
  size_t slen;
  bool parenthesized; /* written in ( ) */
  bool multi_index;   /* N_INDEX: a later index of t[i, j, ...] (tensors only) */

  /* filled by sema */
  Var *var;          /* N_NAME of a local/param/field; N_LET; N_FOR; N_COMPREH */
  Decl *decl;        /* N_NAME of an item; N_CALL target; N_STRUCT_LIT struct; N_LAUNCH kernel */
  Builtin builtin;   /* N_CALL of a builtin */
  CallKind callkind; /* N_CALL */
  Node *recv;        /* N_CALL on a method: the receiver expression (handle, group, array) */
  Node *ordered_args;/* N_CALL: arguments in parameter order, defaults filled in (array of n) */
  Node **argv;       /* N_CALL after sema: argc entries in parameter order */
  int argc;
  int field_index;   /* N_FIELD on a struct; N_FIELD_INIT */
  Type *targ;        /* N_CALL of a generic @extern: what T stands for (texpr: as written) */
  Type *targ2;       /* ... and what its second type parameter R stands for */
  bool is_const;     /* expression is a compile-time constant */

  /* filled by settle.c: where sf_gpu_settle() goes */
  bool settle_before;  /* statement: settle before it runs */
  bool settle_after;   /* last statement of a block: settle after it, if it falls through */
  bool keep_on_device; /* matmul call: its result may stay on the device (SF_MATMUL_DEFER) */
};

typedef struct Annot Annot;
struct Annot {
  Loc loc;
  const char *name; /* without '@' */
  Node *args;       /* arguments (may carry argname) */
  Annot *next;
};

typedef enum {
  D_IMPORT,   /* name: local alias ("math" for std.math), path: "std.math" */
  D_CONST,    /* name, texpr, value */
  D_STRUCT,   /* name, fields (D_FIELD) */
  D_FN,       /* name, params, ret, body */
  D_KERNEL,   /* name, params, body */
  D_TASK,     /* name, params, ret, body */
  D_ACTOR,    /* name, fields (D_FIELD), init (D_INIT), methods (D_METHOD) */
  D_WORKFLOW, /* name, params, body */
  D_FIELD,    /* name, texpr, value (initializer or NULL), mutable */
  D_PARAM,    /* name, texpr, value (default or NULL) */
  D_INIT,     /* actor init: params, body */
  D_METHOD,   /* actor method: name, params, ret, body */
} DeclKind;

struct Decl {
  DeclKind kind;
  Loc loc;      /* the whole item's start (keyword) */
  Loc name_loc; /* the name */
  const char *name;
  const char *path; /* D_IMPORT: dotted path */
  Decl *next;
  Annot *annots;
  Decl *params;
  TypeExpr *ret;
  TypeExpr *texpr;
  Node *value;
  Node *body;
  Decl *fields;
  Decl *init;
  Decl *methods;
  Decl *parent; /* D_METHOD/D_INIT/D_FIELD: the actor or struct */
  bool mutable; /* D_FIELD declared with var */
  int index;    /* D_FIELD: position; D_PARAM: position */
  Loc end_loc;  /* closing brace */

  /* filled by sema */
  Type *type;         /* D_CONST, D_FIELD, D_PARAM: the value type; D_STRUCT/D_ACTOR: the nominal type */
  Type *ret_type;     /* D_FN, D_TASK, D_METHOD: result (TY_VOID if none) */
  Var *var;           /* D_PARAM, D_FIELD: its variable */
  Module *module;     /* the module that declares it */
  const char *mangled;/* symbol name in the object ("util.f", "Counter.add") */
  int nparams;
  /* annotation values after checking */
  double cpus, gpus, timeout;
  int retry, restarts, checkpoint_every, checkpoint_keep, replicas;
  bool checked;
  Decl *overload;     /* D_FN: the next function of the same name in the module */
  bool is_std;        /* declared in a std module */
  bool is_extern;     /* D_FN: @extern, no body; calls C sf_std_<module>_<name> */
  bool is_global;     /* D_FN of a std module: @global, also visible unqualified where imported */
  const char *tparam; /* D_FN: the type parameter of `fn name<T>(...)`, or NULL */
  Loc tparam_loc;
  const char *tparam2; /* D_FN: the second, R of `fn name<T, R>(...)`, or NULL */
  Loc tparam2_loc;
  bool reached;  /* reach.c: codegen lowers it (reachable from the workflow) */
  void *llvm;    /* codegen: LLVMValueRef of the function */
  void *llvm2;   /* codegen: a second function (e.g. the task's thunk) */
};

/* A variable: local (let/var/for/comprehension), parameter, actor field. */
typedef enum { V_LOCAL, V_PARAM, V_FIELD, V_CONST } VarKind;
struct Var {
  VarKind kind;
  const char *name;
  Type *ty;
  Loc loc;
  bool mutable;
  bool used;
  Decl *decl;  /* V_PARAM, V_FIELD, V_CONST: the declaring Decl */
  int depth;   /* scope depth, for shadowing checks */
  void *llvm;  /* codegen: its alloca (or global) */
};

/* One parsed file: the main program or an imported module. */
struct Module {
  const char *name; /* "" for main, "util", "std.math" */
  const char *alias;/* the name it is used by: "util", "math" */
  int file;
  Decl *decls;      /* items in source order */
  Module *next;     /* all modules of the program, imports first */
  bool checked;
  int state;        /* sema: 0 new, 1 loading, 2 loaded (cycle detection) */
  void *symtab;     /* sema: name -> item table */
};

typedef struct {
  Module *main;
  Module *modules; /* every module, dependencies before dependents, main last */
  Decl *workflow;  /* the workflow main, after sema */
} Program;

/* ast.c */
Node *node_new(NodeKind k, Loc loc);
Decl *decl_new(DeclKind k, Loc loc);
TypeExpr *texpr_new(TypeExprKind k, Loc loc);
Annot *annot_new(Loc loc, const char *name, Node *args);
Loc loc_span(Loc a, Loc b); /* from a's start to b's end (same file) */
/* The C function an @extern function of a std module binds to:
 * sf_std_<module>_<name> ("std.data", "csv_read" -> sf_std_data_csv_read). */
const char *extern_c_name(Decl *fn);
int list_len(Node *n);
/* Does the statement or expression list at n assign to the variable v
 * (after sema)?  Codegen gives such a parameter its own reference;
 * unroll.c treats it as no longer the parameter. */
bool ast_assigns(Node *n, Var *v);
/* --emit=ast: a stable, indented tree. */
void ast_dump(Module *m, Buf *out);

/* parser (grammar/sflow.y): parses one source into a module; reports syntax
 * errors through diag and recovers at statement and item boundaries. */
Module *parse_source(int file);

/* ---------------------------------------------------------------- sema.c */

/* Loads imports (std modules from the embedded table, others next to the
 * file), then checks the whole program.  Returns false on errors. */
bool sema_program(Program *p);
/* Embedded standard library sources (generated at build time). */
const char *stdlib_lookup(const char *name, size_t *len); /* "math" -> text */

/* -------------------------------------------------------------- settle.c */

/* Marks the GPU settle points of every block of the checked program (the
 * "filled by settle.c" fields of Node); codegen_program runs it before
 * lowering anything. */
void settle_program(Program *p);

/* --------------------------------------------------------------- reach.c */

/* Marks Decl.reached on every item codegen must lower: what the workflow
 * main reaches through calls, function values, spawns, launches and
 * constants, actors whole; everything when there is no workflow or
 * SFLOWC_EMIT_ALL is set.  codegen_program runs it before declaring. */
void reach_program(Program *p);

/* -------------------------------------------------------------- target.c */

/* What the command line asks for; NULLs mean the portable default. */
typedef struct {
  const char *cpu;      /* --target-cpu / -march: a CPU name, "native" or "help" */
  const char *features; /* --target-features, LLVM syntax: "+avx2,-fma" */
} TargetRequest;

/* The target machine codegen compiles with, and what the executable
 * records (sf_program.target_cpu / target_needs).  Strings are arena's. */
typedef struct {
  void *tm;             /* LLVMTargetMachineRef */
  const char *triple;
  const char *cpu;      /* the CPU LLVM compiles for ("x86-64-v2") */
  const char *features; /* the feature string it gets */
  const char *tune;     /* "tune-cpu" of every function (the build host), or NULL */
  const char *needs;    /* features a host must have, LLVM names: "cx16,popcnt,..." */
} Target;

/* Checks the names in r before anything is compiled: 0 when LLVM knows
 * them, 2 after a usage message naming the unknown one, -1 after printing
 * LLVM's CPU and feature list for --target-cpu=help, 1 on other errors. */
int target_check(const TargetRequest *r);
/* Writes the default target: the triple, the CPU and what it is tuned for. */
void target_describe(FILE *f);
/* Creates the target machine for r; 0, or non-zero after a message. */
int target_open(const TargetRequest *r, int opt_level, Target *out);
/* Gives every function defined in the module (an LLVMModuleRef) t's
 * "tune-cpu", when t has one. */
void target_tune(void *mod, const Target *t);

/* ------------------------------------------------------------- codegen.c */

typedef struct {
  int opt_level;    /* 0..3 */
  bool debug;       /* -g */
  const char *emit; /* NULL (link), "llvm", "obj", "cuda" */
  const char *out;  /* output path */
  const char *runtime_lib; /* libsflowrt.a to link with (the driver finds it) */
  TargetRequest target;
} CodegenOptions;

/* Lowers the checked program to LLVM IR and writes what opts asks for.
 * Returns 0 on success. */
int codegen_program(Program *p, const CodegenOptions *opts);

/* -------------------------------------------------------------- unroll.c */

/* How many copies of the fn d codegen emits for recursion unrolling at
 * opt_level: 0 for none (one plain function), else sflow.f and its copies.
 * *shared: the copies call each other from the start (twins); else each
 * copy is generated calling itself, for unroll_chains to link. */
int unroll_copies(Decl *d, int opt_level, bool *shared);

/* The copies of one chained fn, copies[0] being sflow.f (LLVMValueRefs). */
typedef struct {
  void **copies;
  int ncopies;
} UnrollChain;
/* After codegen, before the optimisation pipeline: eliminates tail calls,
 * then sends each copy's self calls left to the next copy and inlines the
 * chain, in the module mod (an LLVMModuleRef) for the target machine tm.
 * 0, or 1 after a message. */
int unroll_chains(void *mod, void *tm, const UnrollChain *chains, int n);

/* ------------------------------------------------------------- cudagen.c */

/* CUDA C text of one kernel (heap string), with the source line as a
 * comment before each statement. */
char *cudagen_kernel(Decl *kernel);
/* The kernel's entry symbol in that text ("sflow_saxpy", "sflow_util_k"). */
const char *cudagen_entry(Decl *kernel);

/* ---------------------------------------------------------------- link.c */

/* Optimises the module mod (an LLVMModuleRef, made for t) at
 * opts->opt_level, then writes what opts->emit asks for to opts->out: IR
 * text, an object, or an executable linked with opts->runtime_lib by the
 * system C compiler driver.  0, or non-zero after a message. */
int link_program(void *mod, const Target *t, const CodegenOptions *opts);

#endif
