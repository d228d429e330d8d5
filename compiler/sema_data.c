/*
 * sema_data.c — the data core: math and random builtins, sort, argsort
 * and join, the methods of str, arrays and maps, slices a[i..j], string
 * indexing s[i], array concatenation and the constant PI.
 *
 * Design: each place where a generic check meets the data core is one
 * hook of sema.dom (sema_internal.h), so the generic files do not know
 * the details, and this file calls only the generic ones.
 */
#include "sema_internal.h"

#include <string.h>

/* m.get(k, d), m.has(k), m.remove(k), m.keys(), m.values(). */
Type *call_map_method(Node *call, Node *recv, Type *mt, const char *name) {
  static const struct {
    const char *name;
    MapOp op;
    int nargs;
  } ms[] = {{"get", MAP_GET, 2}, {"has", MAP_HAS, 1}, {"remove", MAP_REMOVE, 1},
            {"keys", MAP_KEYS, 0}, {"values", MAP_VALUES, 0}};
  int k = -1;
  const char *names[5];
  for (int i = 0; i < 5; i++) {
    names[i] = ms[i].name;
    if (!strcmp(ms[i].name, name))
      k = i;
  }
  if (k < 0) {
    const char *s = suggest(name, names, 5);
    if (s)
      return err_at(call->callee->name_loc, "%s has no method '%s'; did you mean '%s'?", ty_str(mt), name, s);
    return err_at(call->callee->name_loc, "%s has no method '%s' (it has get, has, remove, keys and values)",
                  ty_str(mt), name);
  }
  if (kernel_forbid(call->loc, "a map"))
    return T_ERR;
  int n = list_len(call->args);
  Node **argv = arena_alloc(sizeof(Node *) * 3);
  int i = 0;
  for (Node *a = call->args; a && i < 2; a = a->next)
    argv[i++] = a;
  if (n != ms[k].nargs || (n && (argv[0]->argname || (n > 1 && argv[1]->argname)))) {
    static const char *const want[] = {"a key and a default value", "a key", "a key", "no arguments",
                                       "no arguments"};
    return err_at(call->loc, "'%s' of a map takes %s", name, want[k]);
  }
  if (n >= 1)
    expect_type(argv[0], mt->key, arena_printf("the key of '%s'", name));
  if (n >= 2)
    expect_type(argv[1], mt->elem, "the default of 'get'");
  set_argv(call, argv, n);
  call->callkind = CALL_MAP;
  call->ival = ms[k].op;
  call->recv = recv;
  switch (ms[k].op) {
  case MAP_GET: return mt->elem;
  case MAP_HAS: case MAP_REMOVE: return T_BOOL;
  case MAP_KEYS: return ty_array(mt->key);
  default: return ty_array(mt->elem);
  }
}

/* ----------------------------------------------------------- data core */

/* The data-language additions of the design sketch (docs/language.md).
 * The hooks are called through sema.dom, never inlined: inlined, their
 * locals would grow the frame of check_expr, which recurses once per level
 * of a 2000-deep expression (SEMA_MAX_EXPR_DEPTH). */

/* An element type sort/argsort can order: numbers and strings. */
static Type *sortable_arg(Node *a, const char *fname) {
  Type *t = check_expr(a, NULL);
  if (is_err(t))
    return T_ERR;
  if (t->kind != TY_ARRAY || !(ty_is_gpu_elem(t->elem) || t->elem->kind == TY_STR))
    return err_at(a->loc, "'%s' needs an array of numbers or strings (i32[], i64[], f32[], f64[] or str[]), found %s",
                  fname, ty_str(t));
  return t;
}

Type *check_data_builtin(Node *call, Builtin b, const char *name, Node **argv, int argc) {
  Type *t;
  switch (b) {
  case B_SIN: case B_COS: case B_TAN: case B_CEIL: case B_ROUND:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    return float_arg(argv[0], name);
  case B_ATAN2:
    if (!builtin_arity(call, name, 2, argc))
      return T_ERR;
    set_argv(call, argv, 2);
    return float_pair(call, argv, "atan2");
  case B_RAND_INT:
    if (!builtin_arity(call, name, 2, argc))
      return T_ERR;
    set_argv(call, argv, 2);
    expect_type(argv[0], T_I64, "the low bound of 'rand_int'");
    expect_type(argv[1], T_I64, "the high bound of 'rand_int'");
    return T_I64;
  case B_RANDN_F32:
    if (!builtin_arity(call, name, 0, argc))
      return T_ERR;
    set_argv(call, argv, 0);
    return T_F32;
  case B_SORT: case B_ARGSORT:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    t = sortable_arg(argv[0], name);
    if (is_err(t))
      return T_ERR;
    return b == B_SORT ? t : ty_array(T_I64);
  case B_ORD:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    expect_type(argv[0], T_STR, "the character of 'ord'");
    return T_I64;
  case B_CHR:
    if (!builtin_arity(call, name, 1, argc))
      return T_ERR;
    set_argv(call, argv, 1);
    expect_type(argv[0], T_I64, "the code point of 'chr'");
    return T_STR;
  case B_JOIN:
    if (!builtin_arity(call, name, 2, argc))
      return T_ERR;
    set_argv(call, argv, 2);
    expect_type(argv[0], T_STR, "the separator of 'join'");
    expect_type(argv[1], ty_array(T_STR), "the parts of 'join'");
    return T_STR;
  default:
    ice("data builtin %s not handled", name);
  }
}

/* The methods, by receiver type: what a call checks and what it yields. */
typedef struct {
  const char *name;
  Builtin b;
  int nargs; /* -1: 0 or 1 (split) */
} DataMethod;

static const DataMethod str_methods[] = {
    {"split", B_STR_SPLIT, -1},     {"find", B_STR_FIND, 1},
    {"strip", B_STR_STRIP, 0},      {"lower", B_STR_LOWER, 0},
    {"upper", B_STR_UPPER, 0},      {"replace", B_STR_REPLACE, 2},
    {"starts_with", B_STR_STARTS_WITH, 1}, {"ends_with", B_STR_ENDS_WITH, 1},
    {"codepoints", B_STR_CODEPOINTS, 0},
};
static const DataMethod array_methods[] = {
    {"push", B_PUSH, 1}, {"pop", B_POP, 0}, {"split", B_SPLIT, 1},
};

static Type *no_data_method(Node *call, Type *rt, const DataMethod *ms, int n, const char *name) {
  const char *names[16];
  for (int i = 0; i < n; i++)
    names[i] = ms[i].name;
  const char *s = suggest(name, names, n);
  for (Node *a = call->args; a; a = a->next)
    check_expr(a, NULL);
  if (s)
    return err_at(call->callee->name_loc, "type %s has no method '%s'; did you mean '%s'?", ty_str(rt), name, s);
  return err_at(call->callee->name_loc, "type %s has no method '%s'", ty_str(rt), name);
}

/* recv.name(args) where recv is a str or an array (not a.split(k), which
 * check_call handles).  Returns NULL when rt has no such methods at all. */
Type *check_data_method(Node *call, Node *recv, Type *rt, const char *name) {
  const DataMethod *ms = rt->kind == TY_STR ? str_methods : rt->kind == TY_ARRAY ? array_methods : NULL;
  int n = rt->kind == TY_STR ? (int)(sizeof str_methods / sizeof *str_methods)
                             : (int)(sizeof array_methods / sizeof *array_methods);
  if (!ms)
    return NULL;
  const DataMethod *m = NULL;
  for (int i = 0; i < n; i++)
    if (!strcmp(ms[i].name, name))
      m = &ms[i];
  if (!m)
    return no_data_method(call, rt, ms, n, name);
  if (kernel_forbid(call->loc, arena_printf("'%s'", name)))
    return T_ERR;
  Node *argv[2];
  int argc = 0;
  for (Node *a = call->args; a; a = a->next, argc++) {
    if (a->argname)
      return err_at(a->name_loc, "'%s' takes no named arguments", name);
    if (argc < 2)
      argv[argc] = a;
  }
  if (m->nargs >= 0 ? argc != m->nargs : argc > 1) {
    diag_error(call->loc, "'%s' takes %s, found %d", name,
               m->nargs < 0 ? "0 or 1 arguments (a separator)"
               : m->nargs == 0 ? "no arguments" : m->nargs == 1 ? "1 argument" : "2 arguments", argc);
    return T_ERR;
  }
  call->callkind = CALL_BUILTIN;
  call->builtin = m->b == B_STR_SPLIT && argc == 0 ? B_STR_SPLIT_WS : m->b;
  call->recv = recv;
  set_argv(call, argv, argc);
  switch (m->b) {
  case B_STR_SPLIT:
    if (argc)
      expect_type(argv[0], T_STR, "the separator of 'split'");
    return ty_array(T_STR);
  case B_STR_FIND:
    expect_type(argv[0], T_STR, "the argument of 'find'");
    return T_I64;
  case B_STR_STRIP: case B_STR_LOWER: case B_STR_UPPER:
    return T_STR;
  case B_STR_REPLACE:
    expect_type(argv[0], T_STR, "the text 'replace' looks for");
    expect_type(argv[1], T_STR, "the replacement of 'replace'");
    return T_STR;
  case B_STR_STARTS_WITH: case B_STR_ENDS_WITH:
    expect_type(argv[0], T_STR, arena_printf("the argument of '%s'", name));
    return T_BOOL;
  case B_STR_CODEPOINTS:
    return ty_array(T_I64);
  case B_PUSH:
    expect_type(argv[0], rt->elem, arena_printf("the value pushed onto %s", ty_str(rt)));
    return T_VOID;
  case B_POP:
    return rt->elem;
  default: /* B_SPLIT: a.split(k), chunks */
    expect_type(argv[0], T_I64, "the chunk count of 'split'");
    return ty_array(rt);
  }
}

/* A bound of a slice a[i..j]: any integer type; literals become i64. */
void slice_bound(Node *b) {
  Type *t = check_expr(b, T_I64);
  if (is_err(t))
    return;
  if (ty_is_untyped(t) && t->kind == TY_UNTYPED_INT)
    settle(b, T_I64);
  else if (!ty_is_int(t) || ty_is_untyped(t))
    diag_error(b->loc, "mismatched types: a slice bound needs an integer, found %s", ty_str(t));
}

/* a[i..j] (a copy of elements i to j-1, or bytes i to j-1 of a str) and
 * s[i] (the character at byte i, as a str).  Returns NULL when e is a
 * plain array index for check_index. */
Type *check_data_index(Node *e, Type *t) {
  bool slice = e->rhs->kind == N_RANGE;
  if (!slice && (is_err(t) || t->kind != TY_STR))
    return NULL;
  if (kernel_forbid(e->loc, slice ? "a slice" : "a string"))
    return T_ERR;
  if (slice) {
    slice_bound(e->rhs->lhs);
    slice_bound(e->rhs->rhs);
    e->rhs->ty = T_I64;
  } else {
    expect_type(e->rhs, T_I64, "a string index");
  }
  if (is_err(t))
    return T_ERR;
  if (t->kind == TY_STR || t->kind == TY_ARRAY)
    return t;
  return err_at(e->lhs->loc, "cannot slice a value of type %s (only arrays and strings have slices)", ty_str(t));
}

/* A slice or a string character is a new value, not a place. */
bool data_index_assignable(Node *e) {
  if (e->rhs->kind == N_RANGE)
    diag_error(e->loc, "cannot assign to a slice: it is a copy (assign its elements through the array)");
  else
    diag_error(e->loc, "cannot assign to a character of a string: strings are immutable (build a new one)");
  return false;
}

/* a + b on arrays: both of one array type, a new array. */
Type *check_array_binary(Node *e, Type *ta, Type *tb) {
  if (e->op != '+')
    return err_at(e->loc, "operator %s cannot be applied to %s and %s", op_name(e->op), ty_str(ta), ty_str(tb));
  if (kernel_forbid(e->loc, "an array concatenation"))
    return T_ERR;
  if (ta != tb)
    return err_at(e->loc, "mismatched types: '+' concatenates arrays of one type, found %s and %s", ty_str(ta), ty_str(tb));
  return ta;
}

/* PI: an untyped float constant, as if written as a literal, so it adapts
 * to f32 and f64 and works in kernels.  A user's own PI shadows it. */
Type *check_data_name(Node *e) {
  if (strcmp(e->name, "PI") != 0)
    return NULL;
  e->kind = N_FLOAT;
  e->fval = 3.14159265358979323846;
  e->is_const = true;
  return T_UFLOAT;
}
