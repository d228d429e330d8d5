/*
 * sema_scope.c — the base of semantic analysis: module symbol tables,
 * block scopes, the shared diagnostics, type expressions, the untyped
 * literals, the builtin names and the embedded standard library.
 *
 * Design: everything here is a lookup or a rule about types; nothing
 * checks an expression, so every other sema file may call this one and
 * this one calls none of them.  The checker's state (sema) and the
 * predeclared types live here; sema_program (sema.c) resets them.
 */
#include "sema_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

Sema sema;

Type *T_ERR, *T_VOID, *T_BOOL, *T_I32, *T_I64, *T_F32, *T_F64, *T_STR;
Type *T_UINT, *T_UFLOAT, *T_MODULE, *T_TENSOR;

/* --------------------------------------------------------- symbol table */

static unsigned hash_str(const char *s) {
  unsigned h = 2166136261u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static Sym *symtab_slot(SymTab *t, const char *name) {
  unsigned i = hash_str(name) & (unsigned)(t->cap - 1);
  while (t->slots[i].name && strcmp(t->slots[i].name, name) != 0)
    i = (i + 1) & (unsigned)(t->cap - 1);
  return &t->slots[i];
}

static void symtab_grow(SymTab *t) {
  Sym *old = t->slots;
  int oldcap = t->cap;
  t->cap = oldcap ? oldcap * 2 : 64;
  t->slots = arena_alloc(sizeof(Sym) * (size_t)t->cap);
  for (int i = 0; i < oldcap; i++)
    if (old[i].name)
      *symtab_slot(t, old[i].name) = old[i];
}

Decl *symtab_get(SymTab *t, const char *name) {
  if (!t || !t->cap)
    return NULL;
  return symtab_slot(t, name)->decl;
}

void symtab_put(SymTab *t, const char *name, Decl *d) {
  if ((t->count + 1) * 2 > t->cap)
    symtab_grow(t);
  Sym *s = symtab_slot(t, name);
  if (!s->name)
    t->count++;
  s->name = name;
  s->decl = d;
}

void scope_push(void) {
  Scope *s = arena_alloc(sizeof(Scope));
  s->up = sema.scope;
  s->depth = sema.scope ? sema.scope->depth + 1 : 0;
  sema.scope = s;
}

void scope_pop(void) { sema.scope = sema.scope->up; }

/* Scopes start as a short list; past SCOPE_LIST_MAX names they also get a
 * hash index, so a block of 100k lets or a function of 50k parameters is
 * checked in linear time. */
#define SCOPE_LIST_MAX 16

static void scope_index_put(Scope *s, Var *v) {
  unsigned i = hash_str(v->name) & (unsigned)(s->tabcap - 1);
  while (s->tab[i] && strcmp(s->tab[i]->name, v->name) != 0)
    i = (i + 1) & (unsigned)(s->tabcap - 1);
  s->tab[i] = v; /* a redeclaration (an error) replaces the older one */
}

static void scope_index(Scope *s, Var *v) {
  if (s->n <= SCOPE_LIST_MAX)
    return;
  if (s->n * 2 > s->tabcap) {
    s->tabcap = s->tabcap ? s->tabcap * 2 : 4 * SCOPE_LIST_MAX;
    s->tab = arena_alloc(sizeof(Var *) * (size_t)s->tabcap);
    for (int i = 0; i < s->n; i++)
      scope_index_put(s, s->vars[i]);
  } else {
    scope_index_put(s, v);
  }
}

Var *scope_find_here(Scope *s, const char *name) {
  if (s->tab) {
    unsigned i = hash_str(name) & (unsigned)(s->tabcap - 1);
    for (; s->tab[i]; i = (i + 1) & (unsigned)(s->tabcap - 1))
      if (!strcmp(s->tab[i]->name, name))
        return s->tab[i];
    return NULL;
  }
  for (int i = s->n - 1; i >= 0; i--)
    if (!strcmp(s->vars[i]->name, name))
      return s->vars[i];
  return NULL;
}

Var *lookup_var(const char *name) {
  for (Scope *s = sema.scope; s; s = s->up) {
    Var *v = scope_find_here(s, name);
    if (v)
      return v;
  }
  return NULL;
}

Var *declare_var(const char *name, Type *ty, Loc loc, bool mutable, VarKind kind) {
  Var *old = scope_find_here(sema.scope, name);
  if (old && strcmp(name, "_") != 0) {
    diag_error(loc, "'%s' is already declared in this scope", name);
    diag_note(old->loc, "'%s' was declared here", name);
  }
  Var *v = arena_alloc(sizeof(Var));
  v->kind = kind;
  v->name = name;
  v->ty = ty;
  v->loc = loc;
  v->mutable = mutable;
  v->depth = sema.scope->depth;
  Scope *s = sema.scope;
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 8;
    Var **nv = arena_alloc(sizeof(Var *) * (size_t)cap);
    if (s->n)
      memcpy(nv, s->vars, sizeof(Var *) * (size_t)s->n);
    s->vars = nv;
    s->cap = cap;
  }
  s->vars[s->n++] = v;
  scope_index(s, v);
  return v;
}

/* --------------------------------------------------------- diagnostics */

Type *err_at(Loc loc, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(loc, "%s", msg);
  return T_ERR;
}


/* Collects the names visible at this point, for "did you mean". */
static const char **visible_names(int *n) {
  int cap = 64, k = 0;
  const char **names = malloc(sizeof(char *) * (size_t)cap);
  if (!names)
    ice("out of memory");
#define ADD(s)                                                      \
  do {                                                              \
    if (k == cap) {                                                 \
      cap *= 2;                                                     \
      const char **nn = realloc(names, sizeof(char *) * (size_t)cap); \
      if (!nn)                                                      \
        ice("out of memory");                                       \
      names = nn;                                                   \
    }                                                               \
    names[k++] = (s);                                               \
  } while (0)
  for (Scope *s = sema.scope; s; s = s->up)
    for (int i = 0; i < s->n; i++)
      ADD(s->vars[i]->name);
  SymTab *t = sema.mod->symtab;
  for (int i = 0; t && i < t->cap; i++)
    if (t->slots[i].name)
      ADD(t->slots[i].name);
  for (int i = 0; i < sflow_nbuiltin_names; i++)
    ADD(sflow_builtin_names[i]);
  for (int i = 0; i < sflow_ntype_names; i++)
    ADD(sflow_type_names[i]);
#undef ADD
  *n = k;
  return names;
}

/* Whether name is the stem of a standard library module (nn, data, ...). */
static bool is_std_module(const char *name) {
  size_t len;
  return stdlib_lookup(name, &len) != NULL;
}

void undefined_name(Loc loc, const char *name, const char *what) {
  /* `nn.Linear(...)` without its import: say which import it needs rather
   * than guess at a similar local name. */
  if (!strcmp(what, "name") && is_std_module(name)) {
    diag_error(loc, "undefined name '%s'; did you mean 'import std.%s'?", name, name);
    return;
  }
  int n;
  const char **names = visible_names(&n);
  const char *s = suggest(name, names, n);
  if (s)
    diag_error(loc, "undefined %s '%s'; did you mean '%s'?", what, name, s);
  else
    diag_error(loc, "undefined %s '%s'", what, name);
  free(names);
}

const char *decl_what(Decl *d) {
  switch (d->kind) {
  case D_IMPORT: return "module";
  case D_CONST: return "constant";
  case D_STRUCT: return "struct";
  case D_FN: return "function";
  case D_KERNEL: return "kernel";
  case D_TASK: return "task";
  case D_ACTOR: return "actor";
  case D_WORKFLOW: return "workflow";
  case D_FIELD: return "field";
  case D_PARAM: return "parameter";
  case D_INIT: return "init";
  case D_METHOD: return "method";
  }
  return "item";
}

/* decl_what with its article: "an actor", "a task". */
const char *a_what(Decl *d) {
  const char *w = decl_what(d);
  return arena_printf("%s %s", strchr("aeiou", w[0]) ? "an" : "a", w);
}

/* ---------------------------------------------------------------- types */


Decl *lookup_item(Module *m, const char *name) { return symtab_get(m->symtab, name); }

static Type *resolve_map_texpr(TypeExpr *t);
static Type *resolve_fn_texpr(TypeExpr *t);

Type *resolve_texpr(TypeExpr *t) {
  if (!t)
    return T_ERR;
  switch (t->kind) {
  case TE_FN:
    return resolve_fn_texpr(t);
  case TE_ARRAY: {
    Type *e = resolve_texpr(t->arg);
    if (is_err(e))
      return T_ERR;
    if (e->kind == TY_VOID)
      return err_at(t->loc, "arrays of void are not allowed");
    return ty_array(e);
  }
  case TE_GENERIC: {
    if (!strcmp(t->name, "map"))
      return resolve_map_texpr(t);
    if (!strcmp(t->name, "future")) {
      Type *e = resolve_texpr(t->arg);
      return is_err(e) ? T_ERR : ty_future(e);
    }
    if (!strcmp(t->name, "group")) {
      Type *e = resolve_texpr(t->arg);
      if (is_err(e))
        return T_ERR;
      if (e->kind != TY_ACTOR)
        return err_at(t->arg->loc, "group<...> needs an actor type, found '%s'", ty_str(e));
      return ty_group(e->decl);
    }
    return err_at(t->loc, "unknown generic type '%s' (only future<T>, group<A> and map<K, V> exist)", t->name);
  }
  case TE_NAME:
    break;
  }
  if (sema.tparam && !t->module && !strcmp(t->name, sema.tparam))
    return ty_tparam(0);
  if (sema.tparam2 && !t->module && !strcmp(t->name, sema.tparam2))
    return ty_tparam(1);
  Module *m = sema.mod;
  if (t->module) {
    m = module_by_alias(sema.mod, t->module);
    if (!m)
      return err_at(t->loc, "unknown module '%s'", t->module);
  } else {
    static const struct { const char *n; TypeKind k; } prims[] = {
        {"bool", TY_BOOL}, {"i32", TY_I32}, {"i64", TY_I64}, {"f32", TY_F32},
        {"f64", TY_F64}, {"str", TY_STR}, {"void", TY_VOID}, {"tensor", TY_TENSOR}};
    for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
      if (!strcmp(t->name, prims[i].n))
        return ty_prim(prims[i].k);
    if (!strcmp(t->name, "future") || !strcmp(t->name, "group"))
      return err_at(t->loc, "'%s' needs a type argument, as in %s<i64>", t->name,
                    !strcmp(t->name, "future") ? "future" : "group");
    if (!strcmp(t->name, "map"))
      return err_at(t->loc, "'map' needs a key and a value type, as in map<str, i64>");
  }
  Decl *d = lookup_item(m, t->name);
  if (d && d->kind == D_STRUCT)
    return ty_struct(d);
  if (d && d->kind == D_ACTOR)
    return ty_actor(d);
  if (d)
    return err_at(t->loc, "'%s' is %s, not a type", t->name, a_what(d));
  const char *cands[64];
  int n = 0;
  for (int i = 0; i < sflow_ntype_names && n < 64; i++)
    cands[n++] = sflow_type_names[i];
  SymTab *tab = m->symtab;
  for (int i = 0; tab && i < tab->cap && n < 64; i++)
    if (tab->slots[i].name && (tab->slots[i].decl->kind == D_STRUCT || tab->slots[i].decl->kind == D_ACTOR))
      cands[n++] = tab->slots[i].name;
  const char *s = suggest(t->name, cands, n);
  if (s)
    diag_error(t->loc, "unknown type '%s'; did you mean '%s'?", t->name, s);
  else
    diag_error(t->loc, "unknown type '%s'", t->name);
  return T_ERR;
}

/* ------------------------------------------------------ untyped values */

static bool int_fits(int64_t v, TypeKind k) {
  return k != TY_I32 || (v >= INT32_MIN && v <= INT32_MAX);
}

/* Gives an untyped expression tree the concrete type t (numeric). */
void settle(Node *e, Type *t) {
  if (!e || !e->ty || !ty_is_untyped(e->ty))
    return;
  e->ty = t;
  switch (e->kind) {
  case N_INT:
    if (ty_is_int(t) && !int_fits(e->ival, t->kind))
      diag_error(e->loc, "integer literal %lld does not fit in %s", (long long)e->ival, ty_str(t));
    break;
  case N_UNARY:
    /* A negated literal is checked as the negative value, so that
     * -2147483648 fits in i32 like -9223372036854775808 fits in i64. */
    if (e->op == '-' && e->lhs->kind == N_INT && e->lhs->ty && ty_is_untyped(e->lhs->ty) &&
        ty_is_int(t)) {
      int64_t v = e->lhs->ival;
      e->lhs->ty = t;
      if (!int_fits(v == INT64_MIN ? v : -v, t->kind))
        diag_error(e->loc, "integer literal -%lld does not fit in %s", (long long)e->lhs->ival, ty_str(t));
      break;
    }
    settle(e->lhs, t);
    break;
  case N_BINARY:
    settle(e->lhs, t);
    settle(e->rhs, t);
    break;
  default:
    break;
  }
}

Type *default_type(Type *t) {
  if (t->kind == TY_UNTYPED_INT)
    return T_I64;
  if (t->kind == TY_UNTYPED_FLOAT)
    return T_F64;
  return t;
}

void settle_default(Node *e) {
  if (e && e->ty && ty_is_untyped(e->ty))
    settle(e, default_type(e->ty));
}

/* Can an expression of type from be used where want is expected (after
 * literals adapt)?  Untyped ints fit any numeric type, untyped floats any
 * float type. */
bool compatible(Type *from, Type *want) {
  if (is_err(from) || is_err(want) || from == want)
    return true;
  if (from->kind == TY_UNTYPED_INT)
    return ty_is_numeric(want) && !ty_is_untyped(want);
  if (from->kind == TY_UNTYPED_FLOAT)
    return want->kind == TY_F32 || want->kind == TY_F64;
  return false;
}

Module *module_by_alias(Module *from, const char *alias) {
  Decl *d = lookup_item(from, alias);
  if (d && d->kind == D_IMPORT)
    return (Module *)d->llvm2; /* the loaded module is kept on the import */
  return NULL;
}

bool std_internal_ok(void) { return !strncmp(sema.mod->name, "std.", 4); }
/* ------------------------------------------------------------- kernels */

bool kernel_forbid(Loc loc, const char *what) {
  if (!sema.in_kernel)
    return false;
  diag_error(loc, "%s cannot be used in a kernel (kernels may use scalars, numeric arrays, "
                  "arithmetic, control flow and math builtins)", what);
  return true;
}

/* ------------------------------------------------------ builtin names */

static const struct {
  const char *name;
  Builtin b;
} builtin_table[] = {
    {"print", B_PRINT}, {"len", B_LEN}, {"sqrt", B_SQRT}, {"exp", B_EXP}, {"log", B_LOG},
    {"tanh", B_TANH}, {"abs", B_ABS}, {"min", B_MIN}, {"max", B_MAX}, {"pow", B_POW},
    {"floor", B_FLOOR}, {"now", B_NOW}, {"rand_seed", B_RAND_SEED}, {"rand_f32", B_RAND_F32},
    {"fmt", B_FMT}, {"fail", B_FAIL}, {"attempt", B_ATTEMPT}, {"node_id", B_NODE_ID},
    {"hostname", B_HOSTNAME}, {"thread_id", B_THREAD_ID}, {"group_rank", B_GROUP_RANK},
    {"group_size", B_GROUP_SIZE}, {"allreduce_sum", B_ALLREDUCE_SUM},
    {"allreduce_mean", B_ALLREDUCE_MEAN}, {"broadcast", B_BROADCAST},
    {"allgather", B_ALLGATHER}, {"barrier", B_BARRIER}, {"zeros_f32", B_ZEROS_F32},
    {"zeros_f64", B_ZEROS_F64}, {"zeros_i32", B_ZEROS_I32}, {"zeros_i64", B_ZEROS_I64},
    {"bool", B_CAST_BOOL}, {"i32", B_CAST_I32}, {"i64", B_CAST_I64}, {"f32", B_CAST_F32},
    {"f64", B_CAST_F64}, {"str", B_CAST_STR}, {"matmul", B_MATMUL},
    {"__read_file", B_RT_READ_FILE}, {"__write_file", B_RT_WRITE_FILE},
    {"__append_file", B_RT_APPEND_FILE}, {"__file_exists", B_RT_FILE_EXISTS},
    {"__read_lines", B_RT_READ_LINES},
    /* the data core */
    {"sin", B_SIN}, {"cos", B_COS}, {"tan", B_TAN}, {"atan2", B_ATAN2}, {"ceil", B_CEIL},
    {"round", B_ROUND}, {"rand_int", B_RAND_INT}, {"randn_f32", B_RANDN_F32}, {"sort", B_SORT},
    {"argsort", B_ARGSORT}, {"join", B_JOIN}, {"ord", B_ORD}, {"chr", B_CHR},
    {"failure", B_FAILURE},
};

Builtin builtin_of(const char *name) {
  for (size_t i = 0; i < sizeof builtin_table / sizeof *builtin_table; i++)
    if (!strcmp(builtin_table[i].name, name))
      return builtin_table[i].b;
  return B_NONE;
}
/* ------------------------------------- type expressions of maps and fns */

static Type *resolve_map_texpr(TypeExpr *t) {
  Type *k = resolve_texpr(t->arg), *v = resolve_texpr(t->arg2);
  if (is_err(k) || is_err(v))
    return T_ERR;
  if (!ty_is_map_key(k))
    return err_at(t->arg->loc, "a map key must be str, i64, i32 or bool, found %s", ty_str(k));
  if (v->kind == TY_VOID)
    return err_at(t->arg2->loc, "a map value cannot have type void");
  return ty_map(k, v);
}

static Type *resolve_fn_texpr(TypeExpr *t) {
  int n = 0;
  for (TypeExpr *p = t->arg; p; p = p->next)
    n++;
  Type **ps = arena_alloc(sizeof(Type *) * (size_t)(n + 1));
  bool bad = false;
  n = 0;
  for (TypeExpr *p = t->arg; p; p = p->next) {
    Type *pt = resolve_texpr(p);
    if (!is_err(pt) && pt->kind == TY_VOID)
      pt = err_at(p->loc, "a parameter cannot have type void");
    bad |= is_err(pt);
    ps[n++] = pt;
  }
  Type *r = t->ret ? resolve_texpr(t->ret) : T_VOID;
  return bad || is_err(r) ? T_ERR : ty_fn(ps, n, r);
}

/* ------------------------------------------------------- embedded stdlib */

extern const struct {
  const char *name;
  const char *file;
  const char *text;
  size_t len;
} sflow_stdlib_sources[];

const char *stdlib_lookup(const char *name, size_t *len) {
  for (int i = 0; sflow_stdlib_sources[i].name; i++)
    if (!strcmp(sflow_stdlib_sources[i].name, name)) {
      *len = sflow_stdlib_sources[i].len;
      return sflow_stdlib_sources[i].text;
    }
  return NULL;
}
