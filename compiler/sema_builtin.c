/*
 * sema_builtin.c — the calls of a bare name that no item of the module
 * declares: the builtins (print, len, math, the collectives, zeros_*,
 * casts, matmul, the runtime helpers of std modules), and the @global
 * functions of the std modules the current module imports.
 *
 * Design: one switch over the Builtin enum checks each builtin's
 * arguments and gives its result type; the data core's builtins (B_SIN ..
 * B_POP) go on to sema_data.c.  Reached from sema_expr.c only through
 * sema.dom->check_global_call and check_global_name.
 */
#include "sema_internal.h"

#include <string.h>

/* ----------------------------------------------------------- builtins */

/* The builtins a kernel body may call: CUDA C has each of them. */
static bool kernel_builtin_ok(Builtin b) {
  switch (b) {
  case B_LEN: case B_SQRT: case B_EXP: case B_LOG: case B_TANH: case B_ABS: case B_MIN:
  case B_MAX: case B_POW: case B_FLOOR: case B_THREAD_ID: case B_CAST_I32: case B_CAST_I64:
  case B_CAST_F32: case B_CAST_F64:
  case B_SIN: case B_COS: case B_TAN: case B_ATAN2: case B_CEIL: case B_ROUND:
    return true;
  default:
    return false;
  }
}

/* Whether a collective's argument is a tensor or a tensor[], which the
 * collectives reduce or broadcast in place (check_expr keeps the type,
 * so array_arg's check of another argument after this costs nothing). */
static bool tensor_coll_arg(Node *a) {
  Type *t = check_expr(a, NULL);
  return !is_err(t) && (t->kind == TY_TENSOR ||
                        (t->kind == TY_ARRAY && t->elem->kind == TY_TENSOR));
}

static bool in_actor_method(Node *call, const char *name) {
  if (sema.actor)
    return true;
  diag_error(call->loc, "'%s' can only be used inside an actor's methods", name);
  return false;
}

static Type *check_builtin(Node *call, Builtin b, const char *name) {
  Node *argv[8];
  int argc = 0;
  for (Node *a = call->args; a; a = a->next) {
    if (a->argname) {
      diag_error(a->name_loc, "'%s' takes no named arguments", name);
      return T_ERR;
    }
    if (argc < 8)
      argv[argc] = a;
    argc++;
  }
  call->callkind = CALL_BUILTIN;
  call->builtin = b;
  if (sema.in_kernel && !kernel_builtin_ok(b)) {
    kernel_forbid(call->loc, arena_printf("'%s'", name));
    return T_ERR;
  }
  if (b == B_PRINT) {
    /* print takes any number of arguments: keep them all. */
    int n = list_len(call->args);
    Node **all = arena_alloc(sizeof(Node *) * (size_t)(n ? n : 1));
    int i = 0;
    for (Node *a = call->args; a; a = a->next) {
      Type *t = check_expr(a, NULL);
      settle_default(a);
      if (!is_err(t) && t->kind == TY_VOID)
        diag_error(a->loc, "cannot print a value of type void");
      all[i++] = a;
    }
    call->argv = all;
    call->argc = n;
    return T_VOID;
  }
  if (argc > 8)
    argc = 9; /* reported as wrong arity below */
  if (builtin_is_data(b))
    return check_data_builtin(call, b, name, argv, argc);
  Type *t;
  switch (b) {
  case B_LEN:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    t = check_expr(argv[0], NULL);
    if (!is_err(t) && t->kind != TY_ARRAY && t->kind != TY_STR && t->kind != TY_GROUP &&
        t->kind != TY_MAP)
      return err_at(argv[0]->loc, "'len' needs an array, a string or a map, found %s", ty_str(t));
    set_argv(call, argv, 1);
    return T_I64;
  case B_SQRT: case B_EXP: case B_LOG: case B_TANH: case B_FLOOR:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    return float_arg(argv[0], name);
  case B_POW:
    if (!builtin_arity(call, name, 2, argc))
      return T_ERR;
    set_argv(call, argv, 2);
    return float_pair(call, argv, "pow");
  case B_ABS:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    t = check_expr(argv[0], NULL);
    if (is_err(t))
      return T_ERR;
    if (!ty_is_numeric(t))
      return err_at(argv[0]->loc, "'abs' needs a number, found %s", ty_str(t));
    settle_default(argv[0]);
    return argv[0]->ty;
  case B_MIN: case B_MAX:
    if (!builtin_arity(call, name, 2, argc))
      return T_ERR;
    set_argv(call, argv, 2);
    t = unify_numeric(argv[0], argv[1], arena_printf("'%s'", name), call->loc);
    if (ty_is_untyped(t)) {
      t = default_type(t);
      settle(argv[0], t);
      settle(argv[1], t);
    }
    return t;
  case B_NOW: case B_RAND_F32: case B_ATTEMPT: case B_NODE_ID: case B_HOSTNAME:
  case B_THREAD_ID: case B_GROUP_RANK: case B_GROUP_SIZE: case B_BARRIER:
    if (!builtin_arity(call, name, 0, argc))
      return T_ERR;
    set_argv(call, argv, 0);
    if (b == B_THREAD_ID && !sema.in_kernel)
      return err_at(call->loc, "'thread_id' can only be used inside a kernel");
    if ((b == B_GROUP_RANK || b == B_GROUP_SIZE || b == B_BARRIER) && !in_actor_method(call, name))
      return T_ERR;
    return b == B_NOW ? T_F64 : b == B_RAND_F32 ? T_F32 : b == B_HOSTNAME ? T_STR
         : b == B_BARRIER ? T_VOID : T_I64;
  case B_FAILURE:
    /* failure(f): waits for f and gives its error, "" when it succeeded,
     * without raising: std.tune reports a failed trial and goes on. */
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    t = check_expr(argv[0], NULL);
    if (!is_err(t) && t->kind != TY_FUTURE)
      return err_at(argv[0]->loc, "'failure' needs a future, found %s", ty_str(t));
    return T_STR;
  case B_RAND_SEED:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    expect_type(argv[0], T_I64, "the seed of 'rand_seed'");
    return T_VOID;
  case B_FMT:
    if (!builtin_arity(call, name, 2, argc))
      return T_ERR;
    set_argv(call, argv, 2);
    float_arg(argv[0], "fmt");
    expect_type(argv[1], T_I64, "the digits of 'fmt'");
    return T_STR;
  case B_FAIL:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    expect_type(argv[0], T_STR, "the message of 'fail'");
    return T_VOID;
  case B_ZEROS_F32: case B_ZEROS_F64: case B_ZEROS_I32: case B_ZEROS_I64:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    expect_type(argv[0], T_I64, arena_printf("the length of '%s'", name));
    return ty_array(b == B_ZEROS_F32 ? T_F32 : b == B_ZEROS_F64 ? T_F64 : b == B_ZEROS_I32 ? T_I32 : T_I64);
  case B_CAST_BOOL: case B_CAST_I32: case B_CAST_I64: case B_CAST_F32: case B_CAST_F64: case B_CAST_STR: {
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    Type *to = b == B_CAST_BOOL ? T_BOOL : b == B_CAST_I32 ? T_I32 : b == B_CAST_I64 ? T_I64
             : b == B_CAST_F32 ? T_F32 : b == B_CAST_F64 ? T_F64 : T_STR;
    t = check_expr(argv[0], to);
    if (is_err(t))
      return to;
    if (ty_is_untyped(t))
      settle(argv[0], ty_is_numeric(to) ? (t->kind == TY_UNTYPED_INT && ty_is_int(to) ? to : default_type(t)) : default_type(t));
    t = argv[0]->ty;
    bool scalar = ty_is_numeric(t) || t->kind == TY_BOOL;
    bool ok = b == B_CAST_STR ? (scalar || t->kind == TY_STR)
            : b == B_CAST_BOOL ? (t->kind == TY_STR || t->kind == TY_BOOL)
            : (scalar || t->kind == TY_STR);
    if (sema.in_kernel && t->kind == TY_STR)
      ok = false;
    if (!ok)
      diag_error(argv[0]->loc, "cannot convert %s to %s", ty_str(t), ty_str(to));
    return to;
  }
  case B_ALLREDUCE_SUM: case B_ALLREDUCE_MEAN: case B_ALLGATHER:
    if (!builtin_arity(call, name, 1, argc) || !in_actor_method(call, name))
      return T_ERR;
    set_argv(call, argv, 1);
    if (b != B_ALLGATHER && tensor_coll_arg(argv[0]))
      return T_VOID; /* in place on the tensors (docs/nn.md) */
    t = array_arg(argv[0], name, true);
    if (b == B_ALLREDUCE_MEAN && !is_err(t) && !ty_is_float(t->elem))
      return err_at(argv[0]->loc, "'allreduce_mean' needs a float array (f32[] or f64[]), found %s", ty_str(t));
    return b == B_ALLGATHER ? t : T_VOID;
  case B_BROADCAST:
    if (!builtin_arity(call, name, 2, argc) || !in_actor_method(call, name))
      return T_ERR;
    set_argv(call, argv, 2);
    if (!tensor_coll_arg(argv[0]))
      array_arg(argv[0], name, true);
    expect_type(argv[1], T_I64, "the root of 'broadcast'");
    return T_VOID;
  case B_MATMUL: {
    if (!builtin_arity(call, name, 5, argc))
      return T_ERR;
    set_argv(call, argv, 5);
    Type *ta = array_arg(argv[0], name, true);
    Type *tb = check_expr(argv[1], ta);
    if (!is_err(ta) && !is_err(tb) && ta != tb)
      diag_error(argv[1]->loc, "mismatched types: 'matmul' needs both matrices of one type, found %s and %s", ty_str(ta), ty_str(tb));
    if (!is_err(ta) && !ty_is_float(ta->elem))
      diag_error(argv[0]->loc, "'matmul' needs f32[] or f64[] matrices, found %s", ty_str(ta));
    for (int i = 2; i < 5; i++)
      expect_type(argv[i], T_I64, "a dimension of 'matmul'");
    return ta;
  }
  case B_RT_READ_FILE: case B_RT_READ_LINES: case B_RT_FILE_EXISTS:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    expect_type(argv[0], T_STR, "the path");
    return b == B_RT_READ_FILE ? T_STR : b == B_RT_FILE_EXISTS ? T_BOOL : ty_array(T_STR);
  case B_RT_WRITE_FILE: case B_RT_APPEND_FILE:
    if (!builtin_arity(call, name, 2, argc))
      return T_ERR;
    set_argv(call, argv, 2);
    expect_type(argv[0], T_STR, "the path");
    expect_type(argv[1], T_STR, "the text");
    return T_VOID;
  default:
    break;
  }
  ice("builtin %s not handled", name);
}

static bool has_annot(Decl *d, const char *name) {
  for (Annot *a = d->annots; a; a = a->next)
    if (!strcmp(a->name, name))
      return true;
  return false;
}

/* The std modules the current module imports, in import order, into
 * sema.std_imports: found once per module (every builtin call asks, and a
 * module may have 100k items). */
static void find_std_imports(void) {
  if (sema.std_imports.of == sema.mod)
    return;
  int n = 0;
  for (Decl *d = sema.mod->decls; d; d = d->next)
    n += d->kind == D_IMPORT && d->llvm2 && !strncmp(d->path, "std.", 4);
  sema.std_imports.of = sema.mod;
  sema.std_imports.mods = arena_alloc(sizeof(Module *) * (size_t)(n + 1));
  sema.std_imports.n = 0;
  for (Decl *d = sema.mod->decls; d; d = d->next)
    if (d->kind == D_IMPORT && d->llvm2 && !strncmp(d->path, "std.", 4))
      sema.std_imports.mods[sema.std_imports.n++] = (Module *)d->llvm2;
}

/* std.nn as the current module sees it: itself, or its import of it. */
Module *nn_module(void) {
  if (!strcmp(sema.mod->name, "std.nn"))
    return sema.mod;
  find_std_imports();
  for (int i = 0; i < sema.std_imports.n; i++)
    if (!strcmp(sema.std_imports.mods[i]->name, "std.nn"))
      return sema.std_imports.mods[i];
  return NULL;
}

/* The @global function `name` of a std module the current one imports
 * (the first import that has one), or NULL.  The annotation is read from
 * the declaration itself, so the answer does not depend on whether that
 * module's annotations were checked yet. */
static Decl *lookup_global(const char *name) {
  find_std_imports();
  for (int i = 0; i < sema.std_imports.n; i++) {
    Decl *f = lookup_item(sema.std_imports.mods[i], name);
    for (Decl *g = f; g && g->kind == D_FN; g = g->overload)
      if (has_annot(g, "global"))
        return f; /* the head of the overloads: call_function picks one */
  }
  return NULL;
}

/* The call of a @global function by its bare name. */
static Type *call_global(Node *call, Decl *g) {
  if (kernel_forbid(call->loc, "a function call"))
    return T_ERR;
  call->callee->decl = g;
  call->callkind = CALL_FN;
  return call_function(call, g);
}

/* A bare call name no module item has: a builtin, unless a @global
 * namesake exists and the first argument is a tensor (tanh(t) is
 * std.nn's tanh); else a @global function.  NULL when neither exists. */
Type *check_global_call(Node *call, const char *name) {
  Builtin b = builtin_of(name);
  if (b != B_NONE && !strncmp(name, "__", 2) && !std_internal_ok())
    b = B_NONE;
  Decl *g = lookup_global(name);
  if (g && b != B_NONE) {
    Node *a = call->args;
    Type *t = a && !a->argname ? check_expr(a, NULL) : NULL;
    return is_tensor(t) ? call_global(call, g) : check_builtin(call, b, name);
  }
  if (b != B_NONE)
    return check_builtin(call, b, name);
  if (g)
    return call_global(call, g);
  if (!strcmp(name, "tensor")) {
    for (Node *a = call->args; a; a = a->next)
      check_expr(a, NULL);
    return err_at(call->callee->loc, "'tensor(...)' makes a tensor with std.nn: add 'import std.nn'");
  }
  return NULL;
}

/* A bare name used as a value: a @global function of an imported module. */
Type *check_global_name(Node *e, Type *want) {
  Decl *g = lookup_global(e->name);
  if (!g)
    return NULL;
  e->decl = g;
  return fn_value(e, g, want);
}
