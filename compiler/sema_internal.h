/*
 * sema_internal.h — what the files of semantic analysis share, and only
 * they: the checker's state, the predeclared types, and one section per
 * file in dependency order.
 *
 * Layering: sema_scope.c is the base (symbol tables, scopes, type
 * expressions, untyped literals); sema_expr.c the generic expression and
 * call checks over it; sema_stmt.c the statements over those.  The domain
 * files (sema_builtin.c, sema_data.c, sema_tensor.c, sema_task.c) call the
 * generic files, never the reverse: where a generic check meets a domain
 * (a method on a str, `+` between tensors, `spawn`), it calls through the
 * SemaDomains table that sema.c, the pass's top, fills.  So every direct
 * call goes one way, from sema.c down to sema_scope.c.
 */
#ifndef SEMA_INTERNAL_H
#define SEMA_INTERNAL_H

#include "sflowc.h"
#include "parser.h" /* TOK_EQ, TOK_LE, ... */

/* ---------------------------------------------------------- sema_scope.c */

/* A module's items by name (open addressing; Module.symtab). */
typedef struct {
  const char *name;
  Decl *decl;
} Sym;

typedef struct {
  Sym *slots;
  int cap, count;
} SymTab;

Decl *symtab_get(SymTab *t, const char *name);
void symtab_put(SymTab *t, const char *name, Decl *d);

typedef struct Scope Scope;
struct Scope {
  Scope *up;
  Var **vars;
  int n, cap;
  int depth;
  Var **tab; /* name -> latest Var, built once a scope holds many names */
  int tabcap;
};

/* The domain checks, as the generic files call them (filled by sema.c).
 * Each hook is one call out of check_expr's recursion; being out of line
 * keeps check_expr's frame small, which recurses once per level of a
 * 2000-deep expression (SEMA_MAX_EXPR_DEPTH).  A hook returning NULL
 * means "not mine": the generic check goes on. */
typedef struct {
  /* sema_builtin.c: a bare name no item of the module has */
  Type *(*check_global_call)(Node *call, const char *name);
  Type *(*check_global_name)(Node *e, Type *want);
  /* sema_data.c: the data core */
  Type *(*check_data_method)(Node *call, Node *recv, Type *rt, const char *name);
  Type *(*call_map_method)(Node *call, Node *recv, Type *mt, const char *name);
  Type *(*check_data_index)(Node *e, Type *t);
  bool (*data_index_assignable)(Node *e);
  Type *(*check_array_binary)(Node *e, Type *ta, Type *tb);
  Type *(*check_data_name)(Node *e);
  /* sema_tensor.c: std.nn's tensors */
  Type *(*check_tensor_method)(Node *call, Node *recv, const char *name);
  Type *(*check_tensor_index)(Node *e);
  bool (*tensor_index_assignable)(Node *e);
  Type *(*check_tensor_binary)(Node *e, Type *ta, Type *tb);
  Type *(*check_tensor_unary)(Node *e);
  void (*check_tensor_assign)(Node *s);
  /* sema_task.c: the expressions that start work elsewhere */
  Type *(*check_spawn)(Node *e);
  Type *(*check_await)(Node *e);
  Type *(*check_launch)(Node *e);
} SemaDomains;

typedef struct {
  Program *prog;
  Module *mod;     /* module being checked */
  Decl *fn;        /* function, task, kernel, method, init or workflow */
  Decl *actor;     /* enclosing actor, if any */
  Scope *scope;
  int loops;
  bool in_kernel;
  Type *ret;       /* expected return type */
  const char *tparam; /* resolving a generic @extern's signature: its T */
  const char *tparam2; /* ... and its R, or NULL */
  Module **seen;   /* every module loaded or loading (find_loaded) */
  int nseen, capseen;
  /* The std modules mod imports, in import order (sema_builtin.c). */
  struct {
    Module *of;
    Module **mods;
    int n;
  } std_imports;
  const SemaDomains *dom;
} Sema;

/* The one checker state (sema_scope.c), zeroed by sema_program. */
extern Sema sema;

/* The predeclared types (sema_scope.c), interned by sema_program. */
extern Type *T_ERR, *T_VOID, *T_BOOL, *T_I32, *T_I64, *T_F32, *T_F64, *T_STR;
extern Type *T_UINT, *T_UFLOAT, *T_MODULE, *T_TENSOR;

static inline bool is_err(Type *t) { return !t || t->kind == TY_ERROR; }
static inline bool is_tensor(Type *t) { return t && t->kind == TY_TENSOR; }

void scope_push(void);
void scope_pop(void);
Var *scope_find_here(Scope *s, const char *name);
Var *lookup_var(const char *name);
Var *declare_var(const char *name, Type *ty, Loc loc, bool mutable, VarKind kind);

/* Reports an error and returns T_ERR, the poison type. */
Type *err_at(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void undefined_name(Loc loc, const char *name, const char *what);
const char *decl_what(Decl *d); /* "function", "task", ... */
const char *a_what(Decl *d);    /* "a function", "an actor", ... */
/* Refuses what a kernel body may not hold; true when in a kernel. */
bool kernel_forbid(Loc loc, const char *what);
/* The current module is a std module (may use the __ builtins). */
bool std_internal_ok(void);

Module *module_by_alias(Module *from, const char *alias);
Decl *lookup_item(Module *m, const char *name);
Type *resolve_texpr(TypeExpr *t);
Builtin builtin_of(const char *name);

/* Untyped literals: settle gives one the type t; settle_default its
 * default (i64, f64); compatible says whether from may be used as want. */
void settle(Node *e, Type *t);
Type *default_type(Type *t);
void settle_default(Node *e);
bool compatible(Type *from, Type *want);

/* ----------------------------------------------------------- sema_expr.c */

Type *check_expr(Node *e, Type *want);
/* Checks e against want and settles its literals; reports a mismatch in
 * the words of what ("argument 'x' of 'f'"). */
bool expect_type(Node *e, Type *want, const char *what);
/* The element type a for loop or comprehension walks. */
Type *check_for_source(Node *src, const char *var, Loc at);
const char *op_name(int op);

/* Calls: binding arguments to parameters, and the callee kinds. */
bool bind_args(Node *call, Decl *params, const char *what, bool report);
void check_call_args(Node *call, Decl *params, const char *what);
Type *call_function(Node *call, Decl *f);
Type *fn_value(Node *e, Decl *d, Type *want);

/* The argument helpers of builtins and domain methods. */
void set_argv(Node *call, Node **argv, int argc);
bool builtin_arity(Node *call, const char *name, int want, int have);
Type *float_arg(Node *a, const char *fname);
Type *unify_numeric(Node *a, Node *b, const char *what, Loc at);
Type *array_arg(Node *a, const char *fname, bool numeric);
Type *float_pair(Node *call, Node **argv, const char *name);

/* ----------------------------------------------------------- sema_stmt.c */

void check_block(Node *b);
/* Does the statement always end in return (or fail)? */
bool terminates(Node *s);

/* -------------------------------------------------------- sema_builtin.c */

Type *check_global_call(Node *call, const char *name);
Type *check_global_name(Node *e, Type *want);
/* std.nn as the current module sees it: itself, its import, or NULL. */
Module *nn_module(void);

/* ----------------------------------------------------------- sema_data.c */

Type *check_data_builtin(Node *call, Builtin b, const char *name, Node **argv, int argc);
Type *check_data_method(Node *call, Node *recv, Type *rt, const char *name);
Type *call_map_method(Node *call, Node *recv, Type *mt, const char *name);
Type *check_data_index(Node *e, Type *t);
bool data_index_assignable(Node *e);
Type *check_array_binary(Node *e, Type *ta, Type *tb);
Type *check_data_name(Node *e);
void slice_bound(Node *b); /* a bound of a[i..j]: an integer */

/* --------------------------------------------------------- sema_tensor.c */

Type *check_tensor_method(Node *call, Node *recv, const char *name);
Type *check_tensor_index(Node *e);
bool tensor_index_assignable(Node *e);
Type *check_tensor_binary(Node *e, Type *ta, Type *tb);
Type *check_tensor_unary(Node *e);
void check_tensor_assign(Node *s);

/* ----------------------------------------------------------- sema_task.c */

Type *check_spawn(Node *e);
Type *check_await(Node *e);
Type *check_launch(Node *e);

#endif
