/*
 * sema.c — semantic analysis: imports, scopes, name resolution, static
 * types, annotation checks and the kernel-body rules.
 *
 * Design: one recursive walk over each module (dependencies first) that
 * resolves every name and gives every expression a concrete type, filling
 * the "filled by sema" fields of the AST so codegen never re-derives
 * anything.  Literals start untyped (as Go's constants do) and take the
 * type their context needs; an untyped literal that meets no context gets
 * i64 or f64.  Errors poison the expression's type with TY_ERROR, which is
 * accepted everywhere silently so one mistake gives one message.
 */
#include "sflowc.h"
#include "parser.h"
#include "flagnames.h" /* runtime/: the flags every workflow executable parses */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- symbol table */

typedef struct {
  const char *name;
  Decl *decl;
} Sym;

typedef struct {
  Sym *slots;
  int cap, count;
} SymTab;

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

static Decl *symtab_get(SymTab *t, const char *name) {
  if (!t || !t->cap)
    return NULL;
  return symtab_slot(t, name)->decl;
}

static void symtab_put(SymTab *t, const char *name, Decl *d) {
  if ((t->count + 1) * 2 > t->cap)
    symtab_grow(t);
  Sym *s = symtab_slot(t, name);
  if (!s->name)
    t->count++;
  s->name = name;
  s->decl = d;
}

/* ---------------------------------------------------------------- state */

typedef struct Scope Scope;
struct Scope {
  Scope *up;
  Var **vars;
  int n, cap;
  int depth;
  Var **tab; /* name -> latest Var, built once a scope holds many names */
  int tabcap;
};

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
} Sema;

static Sema S;

static Type *T_ERR, *T_VOID, *T_BOOL, *T_I32, *T_I64, *T_F32, *T_F64, *T_STR;
static Type *T_UINT, *T_UFLOAT, *T_MODULE, *T_TENSOR;

static void scope_push(void) {
  Scope *s = arena_alloc(sizeof(Scope));
  s->up = S.scope;
  s->depth = S.scope ? S.scope->depth + 1 : 0;
  S.scope = s;
}

static void scope_pop(void) { S.scope = S.scope->up; }

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

static Var *scope_find_here(Scope *s, const char *name) {
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

static Var *lookup_var(const char *name) {
  for (Scope *s = S.scope; s; s = s->up) {
    Var *v = scope_find_here(s, name);
    if (v)
      return v;
  }
  return NULL;
}

static Var *declare_var(const char *name, Type *ty, Loc loc, bool mutable, VarKind kind) {
  Var *old = scope_find_here(S.scope, name);
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
  v->depth = S.scope->depth;
  Scope *s = S.scope;
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

static Type *err_at(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static Type *err_at(Loc loc, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(loc, "%s", msg);
  return T_ERR;
}

static bool is_err(Type *t) { return !t || t->kind == TY_ERROR; }

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
  for (Scope *s = S.scope; s; s = s->up)
    for (int i = 0; i < s->n; i++)
      ADD(s->vars[i]->name);
  SymTab *t = S.mod->symtab;
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

static void undefined_name(Loc loc, const char *name, const char *what) {
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

static const char *decl_what(Decl *d) {
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
static const char *a_what(Decl *d) {
  const char *w = decl_what(d);
  return arena_printf("%s %s", strchr("aeiou", w[0]) ? "an" : "a", w);
}

/* ---------------------------------------------------------------- types */

static Module *module_by_alias(Module *from, const char *alias);

static Decl *lookup_item(Module *m, const char *name) { return symtab_get(m->symtab, name); }

static Type *resolve_map_texpr(TypeExpr *t);
static Type *resolve_fn_texpr(TypeExpr *t);

static Type *resolve_texpr(TypeExpr *t) {
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
  if (S.tparam && !t->module && !strcmp(t->name, S.tparam))
    return ty_tparam(0);
  if (S.tparam2 && !t->module && !strcmp(t->name, S.tparam2))
    return ty_tparam(1);
  Module *m = S.mod;
  if (t->module) {
    m = module_by_alias(S.mod, t->module);
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
static void settle(Node *e, Type *t) {
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

static Type *default_type(Type *t) {
  if (t->kind == TY_UNTYPED_INT)
    return T_I64;
  if (t->kind == TY_UNTYPED_FLOAT)
    return T_F64;
  return t;
}

static void settle_default(Node *e) {
  if (e && e->ty && ty_is_untyped(e->ty))
    settle(e, default_type(e->ty));
}

/* Can an expression of type from be used where want is expected (after
 * literals adapt)?  Untyped ints fit any numeric type, untyped floats any
 * float type. */
static bool compatible(Type *from, Type *want) {
  if (is_err(from) || is_err(want) || from == want)
    return true;
  if (from->kind == TY_UNTYPED_INT)
    return ty_is_numeric(want) && !ty_is_untyped(want);
  if (from->kind == TY_UNTYPED_FLOAT)
    return want->kind == TY_F32 || want->kind == TY_F64;
  return false;
}

static Type *check_expr(Node *e, Type *want);

/* Checks e against the type want and settles its literals; reports a
 * mismatch in the words of what (e.g. "argument 'x' of 'f'"). */
static bool expect_type(Node *e, Type *want, const char *what) {
  Type *t = check_expr(e, want);
  if (is_err(t) || is_err(want))
    return !is_err(t);
  if (!compatible(t, want)) {
    if (t->kind == TY_UNTYPED_FLOAT && ty_is_int(want))
      diag_error(e->loc, "mismatched types: %s needs %s, found a float literal", what, ty_str(want));
    else if (t->kind == TY_FUTURE && compatible(t->elem, want))
      diag_error(e->loc, "mismatched types: %s needs %s, found %s; use 'await' to get the value",
                 what, ty_str(want), ty_str(t));
    else
      diag_error(e->loc, "mismatched types: %s needs %s, found %s", what, ty_str(want), ty_str(t));
    return false;
  }
  settle(e, want);
  return true;
}

/* -------------------------------------------------------------- imports */

static Module *load_module(const char *path, Loc at, Module *from);

static Module *module_by_alias(Module *from, const char *alias) {
  Decl *d = lookup_item(from, alias);
  if (d && d->kind == D_IMPORT)
    return (Module *)d->llvm2; /* the loaded module is kept on the import */
  return NULL;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return arena_strdup(".");
  return arena_strndup(path, (size_t)(slash - path));
}

static void register_items(Module *m);
static void check_module(Module *m);

/* Every module loaded so far, in the order loading began, including those
 * still loading (state 1) so that a cycle is seen.  The program's module
 * list is a different order (see link_module) and is only complete once
 * every import has loaded. */
static Module *find_loaded(const char *name) {
  for (int i = 0; i < S.nseen; i++)
    if (!strcmp(S.seen[i]->name, name))
      return S.seen[i];
  return NULL;
}

static void remember_loaded(Module *m) {
  if (S.nseen == S.capseen) {
    S.capseen = S.capseen ? S.capseen * 2 : 16;
    Module **grown = arena_alloc(sizeof(Module *) * (size_t)S.capseen);
    if (S.nseen)
      memcpy(grown, S.seen, sizeof(Module *) * (size_t)S.nseen);
    S.seen = grown;
  }
  S.seen[S.nseen++] = m;
}

/* Appends a module to the program's list once all of its imports have
 * loaded, so the list is a post-order of the import graph: every module
 * after everything it imports, whichever file imported it first.  Checking
 * walks this list, so a module's signatures are resolved before any body
 * that calls them is checked. */
static void link_module(Module *m) {
  Module **tail = &S.prog->modules;
  while (*tail)
    tail = &(*tail)->next;
  m->next = NULL;
  *tail = m;
}

static Module *load_module(const char *path, Loc at, Module *from) {
  Module *m = find_loaded(path);
  if (m) {
    if (m->state == 1) {
      diag_error(at, "import cycle: '%s' imports itself through its imports", path);
      return NULL;
    }
    return m;
  }
  const char *text;
  size_t len;
  char *heap = NULL;
  const char *file_path;
  if (!strncmp(path, "std.", 4)) {
    text = stdlib_lookup(path + 4, &len);
    if (!text) {
      diag_error(at, "unknown standard library module '%s'", path);
      return NULL;
    }
    file_path = arena_printf("<std>/%s.sflow", path + 4);
  } else {
    if (strchr(path, '.')) {
      diag_error(at, "cannot import '%s': only std.NAME or a NAME.sflow next to this file", path);
      return NULL;
    }
    Source *src = src_get(from->file);
    file_path = arena_printf("%s/%s.sflow", dir_of(src->path), path);
    char why[128];
    heap = read_file(file_path, &len, why, sizeof why);
    if (!heap && errno == ENOENT) {
      diag_error(at, "cannot find module '%s' (looked for %s)", path, file_path);
      return NULL;
    }
    if (!heap) {
      diag_error(at, "cannot read module '%s': %s %s", path, file_path, why);
      return NULL;
    }
    text = heap;
  }
  int file = src_add(file_path, text, len, path);
  free(heap);
  m = parse_source(file);
  m->name = arena_strdup(path);
  m->state = 1;
  remember_loaded(m);
  register_items(m); /* loads its imports, which link before it */
  m->state = 2;
  link_module(m);
  return m;
}

/* --------------------------------------------------------------- items */

static bool std_internal_ok(void) { return !strncmp(S.mod->name, "std.", 4); }

static void register_items(Module *m) {
  Module *saved = S.mod;
  S.mod = m;
  SymTab *t = arena_alloc(sizeof(SymTab));
  m->symtab = t;
  for (Decl *d = m->decls; d; d = d->next) {
    d->module = m;
    d->is_std = !strncmp(m->name, "std.", 4);
    if (d->kind == D_IMPORT) {
      Module *im = load_module(d->path, d->name_loc, m);
      d->llvm2 = im;
    }
    Decl *old = symtab_get(t, d->name);
    if (old && old->kind == D_FN && d->kind == D_FN) {
      Decl *last = old;
      while (last->overload)
        last = last->overload;
      last->overload = d;
      continue;
    }
    if (old) {
      /* A second workflow is reported once, as "more than one workflow". */
      if (old->kind != D_WORKFLOW || d->kind != D_WORKFLOW) {
        diag_error(d->name_loc, "'%s' is already defined", d->name);
        diag_note(old->name_loc, "the first definition of '%s' is here", d->name);
      }
      continue;
    }
    symtab_put(t, d->name, d);
  }
  S.mod = saved;
}

/* ---------------------------------------------------------- annotations */

typedef struct {
  const char *name;
  unsigned where; /* bit per DeclKind */
  const char *where_text;
} AnnotInfo;

#define BIT(k) (1u << (k))
static const AnnotInfo annot_table[] = {
    {"cpus", BIT(D_TASK) | BIT(D_ACTOR), "tasks and actors"},
    {"gpus", BIT(D_TASK) | BIT(D_ACTOR), "tasks and actors"},
    {"retry", BIT(D_TASK), "tasks"},
    {"restarts", BIT(D_ACTOR), "actors"},
    {"checkpoint", BIT(D_ACTOR), "actors"},
    {"replicas", BIT(D_ACTOR), "actors"},
    {"timeout", BIT(D_TASK) | BIT(D_METHOD), "tasks and actor methods"},
    {"extern", BIT(D_FN), "functions of the standard library"},
    {"global", BIT(D_FN), "functions of the standard library"},
};

/* The numeric value of a constant annotation argument, or NAN. */
static double const_number(Node *e, bool *is_int) {
  *is_int = false;
  if (e->kind == N_UNARY && e->op == '-') /* so @retry(-1) says "at least 0" */
    return -const_number(e->lhs, is_int);
  if (e->kind == N_INT) {
    *is_int = true;
    return (double)e->ival;
  }
  if (e->kind == N_FLOAT)
    return e->fval;
  return NAN;
}

static bool annot_number(Annot *a, Node *arg, bool want_int, double lo, double hi, double *out) {
  bool is_int;
  check_expr(arg, NULL);
  settle_default(arg);
  double v = const_number(arg, &is_int);
  if (isnan(v)) {
    diag_error(arg->loc, "@%s needs a number literal", a->name);
    return false;
  }
  if (want_int && !is_int) {
    diag_error(arg->loc, "@%s needs a whole number, found %g", a->name, v);
    return false;
  }
  if (v < lo || v > hi) {
    if (hi >= 1e9)
      diag_error(arg->loc, "@%s must be at least %g, found %g", a->name, lo, v);
    else
      diag_error(arg->loc, "@%s must be between %g and %g, found %g", a->name, lo, hi, v);
    return false;
  }
  *out = v;
  return true;
}

static void check_annot(Decl *d, Annot *a) {
  const AnnotInfo *info = NULL;
  for (size_t i = 0; i < sizeof annot_table / sizeof *annot_table; i++)
    if (!strcmp(annot_table[i].name, a->name))
      info = &annot_table[i];
  if (!info) {
    const char *names[sizeof annot_table / sizeof *annot_table];
    for (size_t i = 0; i < sizeof annot_table / sizeof *annot_table; i++)
      names[i] = annot_table[i].name;
    const char *s = suggest(a->name, names, (int)(sizeof names / sizeof *names));
    if (s)
      diag_error(a->loc, "unknown annotation '@%s'; did you mean '@%s'?", a->name, s);
    else
      diag_error(a->loc, "unknown annotation '@%s'", a->name);
    return;
  }
  if (!(info->where & BIT(d->kind))) {
    diag_error(a->loc, "@%s is not allowed on %s (only on %s)", a->name, a_what(d), info->where_text);
    return;
  }
  for (Annot *b = d->annots; b != a; b = b->next)
    if (!strcmp(b->name, a->name)) {
      diag_error(a->loc, "duplicate annotation '@%s'", a->name);
      diag_note(b->loc, "first given here");
      return;
    }
  if (!strcmp(a->name, "extern")) {
    if (a->args)
      diag_error(a->loc, "@extern takes no arguments");
    else if (!d->is_std)
      diag_error(a->loc, "@extern is only for the standard library's modules (it binds a "
                         "declaration to a C function of the runtime)");
    else
      d->is_extern = true;
    return;
  }
  if (!strcmp(a->name, "global")) {
    /* Seen by lookup_global in the importers (sema's "tensors" section). */
    if (a->args)
      diag_error(a->loc, "@global takes no arguments");
    else if (!d->is_std)
      diag_error(a->loc, "@global is only for the standard library's modules (it makes a "
                         "function visible unqualified wherever its module is imported)");
    else
      d->is_global = true;
    return;
  }
  int nargs = list_len(a->args);
  double v = 0;
  if (!strcmp(a->name, "checkpoint")) {
    if (!a->args) {
      diag_error(a->loc, "@checkpoint needs 'every = k', as in @checkpoint(every = 10)");
      return;
    }
    for (Node *x = a->args; x; x = x->next) {
      const char *n = x->argname ? x->argname : "every";
      if (!strcmp(n, "every")) {
        if (annot_number(a, x, true, 1, 1e12, &v))
          d->checkpoint_every = (int)v;
      } else if (!strcmp(n, "keep")) {
        if (annot_number(a, x, true, 1, 1e6, &v))
          d->checkpoint_keep = (int)v;
      } else {
        diag_error(x->name_loc, "@checkpoint has no argument '%s' (expected 'every' or 'keep')", n);
      }
    }
    bool every = false;
    for (Node *x = a->args; x; x = x->next)
      every |= !x->argname || !strcmp(x->argname, "every");
    if (!every)
      diag_error(a->loc, "@checkpoint needs 'every = k', as in @checkpoint(every = 10)");
    return;
  }
  if (nargs != 1) {
    diag_error(a->loc, "@%s takes exactly one argument, found %d", a->name, nargs);
    return;
  }
  Node *x = a->args;
  if (x->argname) {
    diag_error(x->name_loc, "@%s takes no named argument '%s'", a->name, x->argname);
    return;
  }
  if (!strcmp(a->name, "cpus")) {
    if (annot_number(a, x, false, 0.001, 4096, &v))
      d->cpus = v;
  } else if (!strcmp(a->name, "gpus")) {
    if (annot_number(a, x, false, 0.0, 1024, &v)) {
      if (v <= 0)
        diag_error(x->loc, "@gpus must be more than 0, found %g", v);
      else if (v > 1 && v != floor(v))
        diag_error(x->loc, "@gpus above 1 must be a whole number of GPUs, found %g", v);
      else
        d->gpus = v;
    }
  } else if (!strcmp(a->name, "retry")) {
    if (annot_number(a, x, true, 0, 1000, &v))
      d->retry = (int)v;
  } else if (!strcmp(a->name, "restarts")) {
    if (annot_number(a, x, true, 0, 1000, &v))
      d->restarts = (int)v;
  } else if (!strcmp(a->name, "replicas")) {
    if (annot_number(a, x, true, 1, 100000, &v))
      d->replicas = (int)v;
  } else if (!strcmp(a->name, "timeout")) {
    if (annot_number(a, x, false, 0.001, 1e9, &v))
      d->timeout = v;
    if (d->kind == D_METHOD)
      diag_warning(a->loc, "@timeout on an actor method is not enforced yet (it bounds task "
                   "attempts only)");
  }
}

static void check_annots(Decl *d) {
  for (Annot *a = d->annots; a; a = a->next)
    check_annot(d, a);
}

/* ------------------------------------------------------------- kernels */

static bool kernel_forbid(Loc loc, const char *what) {
  if (!S.in_kernel)
    return false;
  diag_error(loc, "%s cannot be used in a kernel (kernels may use scalars, numeric arrays, "
                  "arithmetic, control flow and math builtins)", what);
  return true;
}

/* ----------------------------------------------------------- builtins */

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
    {"argsort", B_ARGSORT}, {"join", B_JOIN}, {"failure", B_FAILURE},
};

static Builtin builtin_of(const char *name) {
  for (size_t i = 0; i < sizeof builtin_table / sizeof *builtin_table; i++)
    if (!strcmp(builtin_table[i].name, name))
      return builtin_table[i].b;
  return B_NONE;
}

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

static void set_argv(Node *call, Node **argv, int argc) {
  call->argv = arena_alloc(sizeof(Node *) * (size_t)(argc ? argc : 1));
  memcpy(call->argv, argv, sizeof(Node *) * (size_t)argc);
  call->argc = argc;
}

static bool builtin_arity(Node *call, const char *name, int want, int have) {
  if (want == have)
    return true;
  diag_error(call->loc, "'%s' takes %d argument%s, found %d", name, want, want == 1 ? "" : "s", have);
  return false;
}

/* A float math argument: f32 or f64, untyped becomes f64. */
static Type *float_arg(Node *a, const char *fname) {
  Type *t = check_expr(a, NULL);
  if (is_err(t))
    return T_ERR;
  if (ty_is_untyped(t)) {
    settle(a, T_F64);
    return T_F64;
  }
  if (t->kind == TY_F32 || t->kind == TY_F64)
    return t;
  return err_at(a->loc, "'%s' needs a float (f32 or f64), found %s; convert with f64(x)", fname, ty_str(t));
}

/* Two operands of one numeric type, literals adapting to the other. */
static Type *unify_numeric(Node *a, Node *b, const char *what, Loc at) {
  Type *ta = check_expr(a, NULL), *tb = check_expr(b, NULL);
  if (is_err(ta) || is_err(tb))
    return T_ERR;
  if (!ty_is_numeric(ta) || !ty_is_numeric(tb)) {
    diag_error(at, "%s needs numbers, found %s and %s", what, ty_str(ta), ty_str(tb));
    return T_ERR;
  }
  if (ty_is_untyped(ta) && ty_is_untyped(tb))
    return ta->kind == TY_UNTYPED_FLOAT || tb->kind == TY_UNTYPED_FLOAT ? T_UFLOAT : T_UINT;
  Type *t = ty_is_untyped(ta) ? tb : ta;
  Node *other = ty_is_untyped(ta) ? a : b;
  Type *to = ty_is_untyped(ta) ? ta : tb;
  if (!compatible(to, t) || (!ty_is_untyped(ta) && !ty_is_untyped(tb) && ta != tb)) {
    (void)other;
    diag_error(at, "mismatched types in %s: %s and %s", what, ty_str(ta), ty_str(tb));
    return T_ERR;
  }
  settle(a, t);
  settle(b, t);
  return t;
}

static Type *array_arg(Node *a, const char *fname, bool numeric) {
  Type *t = check_expr(a, NULL);
  if (is_err(t))
    return T_ERR;
  if (t->kind != TY_ARRAY || (numeric && !ty_is_gpu_elem(t->elem)))
    return err_at(a->loc, "'%s' needs a numeric array (f32[], f64[], i32[] or i64[]), found %s", fname, ty_str(t));
  return t;
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
  if (S.actor)
    return true;
  diag_error(call->loc, "'%s' can only be used inside an actor's methods", name);
  return false;
}

static Type *check_data_builtin(Node *call, Builtin b, const char *name, Node **argv, int argc);
static Type *check_data_method(Node *call, Node *recv, Type *rt, const char *name);
static Type *check_global_call(Node *call, const char *name);
static Type *check_tensor_method(Node *call, Node *recv, const char *name);


/* Two floats of one type (pow, atan2): untyped literals become f64. */
static Type *float_pair(Node *call, Node **argv, const char *name) {
  const char *q = arena_printf("'%s'", name);
  Type *t = unify_numeric(argv[0], argv[1], q, call->loc);
  if (is_err(t))
    return T_ERR;
  if (ty_is_untyped(t)) {
    settle(argv[0], T_F64);
    settle(argv[1], T_F64);
    return T_F64;
  }
  if (!ty_is_float(t))
    return err_at(call->loc, "%s needs floats (f32 or f64), found %s", q, ty_str(t));
  return t;
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
  if (S.in_kernel && !kernel_builtin_ok(b)) {
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
    if (b == B_THREAD_ID && !S.in_kernel)
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
    if (S.in_kernel && t->kind == TY_STR)
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

/* ---------------------------------------------------------- call binding */

/* Matches call arguments to params (positional, then named), filling in
 * defaults; checks types when check_types.  Returns false on mismatch. */
static bool bind_args(Node *call, Decl *params, const char *what, bool report) {
  int np = 0;
  for (Decl *p = params; p; p = p->next)
    np++;
  Node **argv = arena_alloc(sizeof(Node *) * (size_t)(np ? np : 1));
  Decl **pv = arena_alloc(sizeof(Decl *) * (size_t)(np ? np : 1));
  int i = 0;
  for (Decl *p = params; p; p = p->next)
    pv[i++] = p;
  int pos = 0;
  bool named_seen = false, ok = true;
  for (Node *a = call->args; a; a = a->next) {
    if (!a->argname) {
      if (named_seen) {
        if (report)
          diag_error(a->loc, "positional argument after a named one");
        return false;
      }
      if (pos >= np) {
        if (report) {
          diag_error(a->loc, "too many arguments to %s: expected %d, found %d", what, np, list_len(call->args));
        }
        return false;
      }
      argv[pos++] = a;
      continue;
    }
    named_seen = true;
    int k = -1;
    for (int j = 0; j < np; j++)
      if (!strcmp(pv[j]->name, a->argname))
        k = j;
    if (k < 0) {
      if (report) {
        const char *names[64];
        int n = 0;
        for (int j = 0; j < np && n < 64; j++)
          names[n++] = pv[j]->name;
        const char *s = suggest(a->argname, names, n);
        if (s)
          diag_error(a->name_loc, "%s has no parameter named '%s'; did you mean '%s'?", what, a->argname, s);
        else
          diag_error(a->name_loc, "%s has no parameter named '%s'", what, a->argname);
      }
      return false;
    }
    if (argv[k]) {
      if (report)
        diag_error(a->name_loc, "parameter '%s' of %s is given twice", a->argname, what);
      return false;
    }
    argv[k] = a;
  }
  for (int j = 0; j < np; j++) {
    if (argv[j])
      continue;
    if (pv[j]->value) {
      argv[j] = pv[j]->value;
      continue;
    }
    if (report)
      diag_error(call->loc, "missing argument '%s' in call to %s", pv[j]->name, what);
    ok = false;
  }
  if (!ok)
    return false;
  set_argv(call, argv, np);
  return true;
}

static void check_call_args(Node *call, Decl *params, const char *what) {
  int j = 0;
  for (Decl *p = params; p; p = p->next, j++) {
    Node *a = call->argv[j];
    if (a == p->value)
      continue; /* a default: checked with the declaration */
    expect_type(a, p->type, arena_printf("argument '%s' of %s", p->name, what));
  }
}

/* Is every argument of call acceptable for the overload f?  Used to pick
 * among overloads without reporting. */
static bool overload_fits(Node *call, Decl *f) {
  if (!bind_args(call, f->params, "", false))
    return false;
  int j = 0;
  for (Decl *p = f->params; p; p = p->next, j++) {
    Node *a = call->argv[j];
    if (a == p->value)
      continue;
    Type *t = a->ty ? a->ty : check_expr(a, NULL);
    if (!compatible(t, p->type))
      return false;
  }
  return true;
}

/* Does t mention a type parameter of a generic @extern? */
static bool has_tparam(Type *t) {
  if (!t)
    return false;
  switch (t->kind) {
  case TY_TPARAM: return true;
  case TY_ARRAY: case TY_FUTURE: return has_tparam(t->elem);
  case TY_MAP: return has_tparam(t->key) || has_tparam(t->elem);
  case TY_FN:
    for (int i = 0; i < t->nparams; i++)
      if (has_tparam(t->params[i]))
        return true;
    return has_tparam(t->elem);
  default: return false;
  }
}

/* Matches a parameter's type pattern against an argument's type, binding
 * T and R (bind[0], bind[1]) where they are still unbound; false when the
 * shapes differ (the argument check that follows says how). */
static bool match_tparams(Type *pat, Type *t, Type **bind) {
  if (!pat || !t)
    return false;
  if (pat->kind == TY_TPARAM) {
    Type **b = &bind[pat->nparams ? 1 : 0];
    if (!*b && !ty_is_untyped(t))
      *b = t;
    return true;
  }
  if (pat->kind != t->kind)
    return false;
  switch (pat->kind) {
  case TY_ARRAY: case TY_FUTURE: return match_tparams(pat->elem, t->elem, bind);
  case TY_MAP: return match_tparams(pat->key, t->key, bind) && match_tparams(pat->elem, t->elem, bind);
  case TY_FN:
    if (pat->nparams != t->nparams)
      return false;
    for (int i = 0; i < pat->nparams; i++)
      if (!match_tparams(pat->params[i], t->params[i], bind))
        return false;
    return match_tparams(pat->elem, t->elem, bind);
  default: return true;
  }
}

/* The pattern with T and R replaced by what they stand for. */
static Type *subst_tparams(Type *t, Type **bind) {
  if (!has_tparam(t))
    return t;
  switch (t->kind) {
  case TY_TPARAM: return bind[t->nparams ? 1 : 0];
  case TY_ARRAY: return ty_array(subst_tparams(t->elem, bind));
  case TY_FUTURE: return ty_future(subst_tparams(t->elem, bind));
  case TY_MAP: return ty_map(subst_tparams(t->key, bind), subst_tparams(t->elem, bind));
  case TY_FN: {
    Type **ps = arena_alloc(sizeof(Type *) * (size_t)(t->nparams + 1));
    for (int i = 0; i < t->nparams; i++)
      ps[i] = subst_tparams(t->params[i], bind);
    return ty_fn(ps, t->nparams, subst_tparams(t->elem, bind));
  }
  default: return t;
  }
}

/* A call of a generic @extern function: T is written (f<Batch>(...)) or,
 * like R, taken from the arguments, matching each parameter's type against
 * its argument's (`fn(T) -> future<R>` against a task's value type binds
 * both).  The call records them (call->targ, targ2) for codegen, which
 * passes their descriptors. */
static Type *call_generic(Node *call, Decl *f, const char *what) {
  if (!bind_args(call, f->params, what, true))
    return T_ERR;
  Type *bind[2] = {NULL, NULL};
  if (call->texpr) {
    bind[0] = resolve_texpr(call->texpr);
    if (is_err(bind[0]))
      return T_ERR;
  }
  int j = 0;
  for (Decl *p = f->params; p; p = p->next, j++)
    if (has_tparam(p->type) && call->argv[j] != p->value && (!bind[0] || (f->tparam2 && !bind[1]))) {
      Type *t = check_expr(call->argv[j], NULL);
      if (is_err(t))
        return T_ERR;
      if (p->type->kind == TY_TPARAM)
        settle_default(call->argv[j]);
      if (!match_tparams(p->type, call->argv[j]->ty, bind)) {
        err_at(call->argv[j]->loc, "argument '%s' of %s must be %s, found %s", p->name, what,
               ty_str(p->type), ty_str(call->argv[j]->ty));
        if (p->type->kind == TY_FN && p->type->elem && p->type->elem->kind == TY_FUTURE)
          diag_note(call->argv[j]->loc, "a task used as a value has type fn(...) -> future<...>; "
                                        "a function's result is not a future");
        return T_ERR;
      }
    }
  const char *names[2] = {f->tparam, f->tparam2};
  for (int i = 0; i < (f->tparam2 ? 2 : 1); i++) {
    if (!bind[i])
      return err_at(call->loc, "what %s stands for in this call of '%s' is not known; write it, as in %s<Batch>(...)",
                    names[i], f->name, f->name);
    if (bind[i]->kind == TY_VOID || bind[i]->kind == TY_MODULE || bind[i]->kind == TY_TPARAM)
      return err_at(call->texpr && !i ? call->texpr->loc : call->loc, "%s of '%s' cannot be %s", names[i],
                    f->name, ty_str(bind[i]));
  }
  j = 0;
  for (Decl *p = f->params; p; p = p->next, j++) {
    Node *a = call->argv[j];
    if (a == p->value)
      continue;
    expect_type(a, subst_tparams(p->type, bind), arena_printf("argument '%s' of %s", p->name, what));
  }
  call->targ = bind[0];
  call->targ2 = bind[1];
  call->decl = f;
  return subst_tparams(f->ret_type ? f->ret_type : T_VOID, bind);
}

static Type *call_function(Node *call, Decl *f) {
  const char *what = arena_printf("%s '%s'", decl_what(f), f->name);
  if (f->kind == D_FN && f->tparam)
    return call_generic(call, f, what);
  if (call->texpr)
    return err_at(call->texpr->loc, "%s takes no type argument", what);
  if (f->kind == D_FN && f->overload) {
    /* Check arguments once without a context, then pick the overload. */
    for (Node *a = call->args; a; a = a->next)
      check_expr(a, NULL);
    Decl *pick = NULL;
    int n = 0;
    for (Decl *g = f; g; g = g->overload)
      if (overload_fits(call, g)) {
        pick = pick ? pick : g;
        n++;
      }
    if (n == 0) {
      Buf b = {0};
      for (Node *a = call->args; a; a = a->next)
        buf_printf(&b, "%s%s", b.len ? ", " : "", ty_str(default_type(a->ty)));
      diag_error(call->loc, "no version of '%s' takes (%s)", f->name, b.data ? b.data : "");
      for (Decl *g = f; g; g = g->overload) {
        Buf p = {0};
        for (Decl *x = g->params; x; x = x->next)
          buf_printf(&p, "%s%s", p.len ? ", " : "", ty_str(x->type));
        diag_note(g->name_loc, "candidate: %s(%s)", g->name, p.data ? p.data : "");
        buf_free(&p);
      }
      buf_free(&b);
      return T_ERR;
    }
    f = pick;
  }
  if (!bind_args(call, f->params, what, true))
    return T_ERR;
  check_call_args(call, f->params, what);
  call->decl = f;
  return f->ret_type ? f->ret_type : T_VOID;
}

static Decl *find_method(Decl *actor, const char *name) {
  for (Decl *m = actor->methods; m; m = m->next)
    if (!strcmp(m->name, name))
      return m;
  return NULL;
}

static Type *no_method(Node *at, Decl *actor, const char *name) {
  const char *names[128];
  int n = 0;
  for (Decl *m = actor->methods; m && n < 128; m = m->next)
    names[n++] = m->name;
  const char *s = suggest(name, names, n);
  if (s)
    diag_error(at->name_loc, "actor '%s' has no method '%s'; did you mean '%s'?", actor->name, name, s);
  else
    diag_error(at->name_loc, "actor '%s' has no method '%s'", actor->name, name);
  return T_ERR;
}

static Type *call_method(Node *call, Node *recv, Decl *actor, const char *name, CallKind kind) {
  Decl *m = find_method(actor, name);
  if (!m)
    return no_method(call->callee, actor, name);
  call->callkind = kind;
  call->recv = recv;
  Type *r = call_function(call, m);
  if (is_err(r))
    return T_ERR;
  call->callkind = kind;
  /* g.all.m(): one result per member, in order; a void method has none. */
  return ty_future(kind == CALL_GROUP_ALL && r->kind != TY_VOID ? ty_array(r) : r);
}

/* ------------------------------------------------ maps and function values */

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

/* The type of the function or task d used as a value: a task's result is
 * the future its call returns. */
static Type *fn_value_type(Decl *d) {
  Type **ps = arena_alloc(sizeof(Type *) * (size_t)(d->nparams + 1));
  int n = 0;
  for (Decl *p = d->params; p; p = p->next) {
    if (!p->type || is_err(p->type))
      return T_ERR;
    ps[n++] = p->type;
  }
  Type *r = d->ret_type ? d->ret_type : T_VOID;
  if (is_err(r))
    return T_ERR;
  return ty_fn(ps, n, d->kind == D_TASK ? ty_future(r) : r);
}

/* A named function or task used as a value (e: its N_NAME or mod.name
 * N_FIELD).  An overloaded name needs the expected type to pick one. */
static Type *fn_value(Node *e, Decl *d, Type *want) {
  if (S.in_kernel)
    return err_at(e->loc, "a kernel cannot use function values");
  if (d->is_extern)
    return err_at(e->kind == N_FIELD ? e->name_loc : e->loc,
                  "@extern function '%s' cannot be used as a value; pass a function that calls it",
                  d->name);
  if (d->kind == D_FN && d->overload) {
    Decl *pick = NULL;
    for (Decl *g = d; g && want; g = g->overload)
      if (fn_value_type(g) == want)
        pick = g;
    if (!pick) {
      diag_error(e->loc, "'%s' has several versions; which one is meant must follow from where it goes "
                         "(a parameter or a variable of a fn(...) type)", d->name);
      for (Decl *g = d; g; g = g->overload)
        diag_note(g->name_loc, "candidate: %s", ty_str(fn_value_type(g)));
      return T_ERR;
    }
    d = pick;
  }
  e->decl = d;
  return fn_value_type(d);
}

/* A method or kernel named where a value goes. */
static Type *not_a_value(Node *e, Decl *d) {
  Loc at = e->kind == N_FIELD ? e->name_loc : e->loc;
  if (d->kind == D_KERNEL)
    return err_at(at, "kernel '%s' is not a value: kernels are started with launch, as in 'launch %s[n](...)'",
                  d->name, d->name);
  diag_error(at, "method '%s' of actor '%s' is not a value: only functions and tasks can be passed",
             d->name, d->parent ? d->parent->name : "?");
  diag_note(at, "call it (as in '%s(...)'), or pass a function that calls it", d->name);
  return T_ERR;
}

/* f(x) where f is a function value: positional arguments of its types. */
static Type *call_fn_value(Node *call, Type *ft) {
  if (kernel_forbid(call->loc, "a call of a function value"))
    return T_ERR;
  int n = list_len(call->args);
  Node **argv = arena_alloc(sizeof(Node *) * (size_t)(n + 1));
  int i = 0;
  for (Node *a = call->args; a; a = a->next)
    argv[i++] = a;
  for (i = 0; i < n; i++)
    if (argv[i]->argname) {
      diag_error(argv[i]->name_loc, "a function value takes its arguments by position, not by name");
      return T_ERR;
    }
  if (n != ft->nparams) {
    diag_error(call->loc, "the function value of type %s takes %d argument%s, found %d", ty_str(ft),
               ft->nparams, ft->nparams == 1 ? "" : "s", n);
    for (i = 0; i < n; i++)
      check_expr(argv[i], NULL);
    return T_ERR;
  }
  for (i = 0; i < n; i++)
    expect_type(argv[i], ft->params[i], arena_printf("argument %d of %s", i + 1, ty_str(ft)));
  set_argv(call, argv, n);
  call->callkind = CALL_FN_VALUE;
  return ft->elem;
}

/* m.get(k, d), m.has(k), m.remove(k), m.keys(), m.values(). */
static Type *call_map_method(Node *call, Node *recv, Type *mt, const char *name) {
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

static Type *check_call(Node *call) {
  Node *c = call->callee;
  /* f<T>(...) names a generic function: anything else is refused by
   * call_function, or here when the callee is not a named function. */
  if (call->texpr && c->kind != N_NAME && !(c->kind == N_FIELD && c->lhs->kind == N_NAME))
    return err_at(call->texpr->loc, "only a generic function takes a type argument");
  if (c->kind == N_NAME) {
    const char *name = c->name;
    Var *v = lookup_var(name);
    if (v && !is_err(v->ty) && v->ty->kind == TY_FN) {
      check_expr(c, NULL);
      return call_fn_value(call, v->ty);
    }
    if (v && is_err(v->ty)) { /* its declaration was reported */
      for (Node *a = call->args; a; a = a->next)
        check_expr(a, NULL);
      return T_ERR;
    }
    if (v) {
      diag_error(c->loc, "'%s' is a variable of type %s, not a function", name, ty_str(v->ty));
      return T_ERR;
    }
    /* An actor's own methods by bare name, called synchronously. */
    if (S.actor) {
      Decl *m = find_method(S.actor, name);
      if (m) {
        call->callkind = CALL_SELF_METHOD;
        return call_function(call, m);
      }
    }
    Decl *d = lookup_item(S.mod, name);
    if (!d) {
      Type *gt = check_global_call(call, name); /* builtins, then @global functions */
      if (gt)
        return gt;
      undefined_name(c->loc, name, "function");
      for (Node *a = call->args; a; a = a->next)
        check_expr(a, NULL);
      return T_ERR;
    }
    c->decl = d;
    switch (d->kind) {
    case D_FN:
      if (kernel_forbid(call->loc, "a function call"))
        return T_ERR;
      call->callkind = CALL_FN;
      return call_function(call, d);
    case D_TASK: {
      if (kernel_forbid(call->loc, "a task call"))
        return T_ERR;
      call->callkind = CALL_TASK;
      Type *r = call_function(call, d);
      return is_err(r) ? T_ERR : ty_future(r);
    }
    case D_KERNEL:
      return err_at(call->loc, "kernel '%s' is started with launch, as in 'launch %s[n](...)'", name, name);
    case D_ACTOR:
      return err_at(call->loc, "actor '%s' is created with spawn, as in 'spawn %s(...)'", name, name);
    case D_STRUCT:
      return err_at(call->loc, "struct '%s' is built with a literal, as in '%s { field: value }'", name, name);
    case D_WORKFLOW:
      return err_at(call->loc, "the workflow '%s' cannot be called", name);
    default:
      return err_at(call->loc, "'%s' is %s, not a function", name, a_what(d));
    }
  }
  if (c->kind == N_FIELD) {
    Node *recv = c->lhs;
    /* module.function(...) */
    if (recv->kind == N_NAME && !lookup_var(recv->name)) {
      Module *m = module_by_alias(S.mod, recv->name);
      if (m) {
        Decl *d = lookup_item(m, c->name);
        if (!d) {
          diag_error(c->name_loc, "module '%s' has no '%s'", recv->name, c->name);
          return T_ERR;
        }
        if (d->kind == D_FN || d->kind == D_TASK) {
          if (kernel_forbid(call->loc, "a function call"))
            return T_ERR;
          call->callkind = d->kind == D_FN ? CALL_FN : CALL_TASK;
          Type *r = call_function(call, d);
          return is_err(r) || d->kind == D_FN ? r : ty_future(r);
        }
        return err_at(c->name_loc, "'%s' in module '%s' is not a function", c->name, recv->name);
      }
    }
    /* g.all.m(...) and g.any.m(...) */
    if (recv->kind == N_FIELD && (!strcmp(recv->name, "all") || !strcmp(recv->name, "any"))) {
      Type *gt = check_expr(recv->lhs, NULL);
      if (is_err(gt))
        return T_ERR;
      if (gt->kind == TY_GROUP) {
        if (kernel_forbid(call->loc, "an actor call"))
          return T_ERR;
        recv->ty = gt;
        return call_method(call, recv->lhs, gt->decl, c->name,
                           !strcmp(recv->name, "all") ? CALL_GROUP_ALL : CALL_GROUP_ANY);
      }
    }
    Type *rt;
    /* g[i].m(...) */
    if (recv->kind == N_INDEX) {
      Type *gt = check_expr(recv->lhs, NULL);
      if (!is_err(gt) && gt->kind == TY_GROUP) {
        expect_type(recv->rhs, T_I64, "a group index");
        recv->ty = ty_actor(gt->decl);
        return call_method(call, recv, gt->decl, c->name, CALL_GROUP_ONE);
      }
      rt = check_expr(recv, NULL);
    } else {
      rt = check_expr(recv, NULL);
    }
    if (is_err(rt))
      return T_ERR;
    if (rt->kind == TY_ACTOR) {
      if (kernel_forbid(call->loc, "an actor call"))
        return T_ERR;
      return call_method(call, recv, rt->decl, c->name, CALL_METHOD);
    }
    if (rt->kind == TY_GROUP)
      return err_at(c->name_loc, "call a group's members with .all, .any or [i], as in g.all.%s(...)", c->name);
    if (rt->kind == TY_ARRAY && !strcmp(c->name, "split")) {
      if (kernel_forbid(call->loc, "'split'"))
        return T_ERR;
      if (list_len(call->args) != 1 || call->args->argname) {
        diag_error(call->loc, "'split' takes one argument, the number of chunks");
        return T_ERR;
      }
      call->callkind = CALL_BUILTIN;
      call->builtin = B_SPLIT;
      call->recv = recv;
      Node *k = call->args;
      expect_type(k, T_I64, "the chunk count of 'split'");
      set_argv(call, &k, 1);
      return ty_array(rt);
    }
    if (rt->kind == TY_MODULE)
      return T_ERR;
    if (rt->kind == TY_MAP)
      return call_map_method(call, recv, rt, c->name);
    if (rt->kind == TY_TENSOR)
      return check_tensor_method(call, recv, c->name);
    Type *dm = check_data_method(call, recv, rt, c->name);
    if (dm)
      return dm;
    if (rt->kind == TY_STRUCT) {
      Type *ft = check_expr(c, NULL); /* s.f(x): a field holding a function */
      if (is_err(ft))
        return T_ERR;
      if (ft->kind == TY_FN)
        return call_fn_value(call, ft);
      return err_at(c->name_loc, "field '%s' of %s has type %s, not a function", c->name, ty_str(rt),
                    ty_str(ft));
    }
    return err_at(c->name_loc, "type %s has no method '%s'", ty_str(rt), c->name);
  }
  Type *ct = check_expr(c, NULL);
  if (is_err(ct))
    return T_ERR;
  if (ct->kind == TY_FN)
    return call_fn_value(call, ct);
  diag_error(c->loc, "this expression cannot be called: its type is %s, not a function", ty_str(ct));
  return T_ERR;
}

/* --------------------------------------------------------- expressions */

static bool is_comparison(int op) {
  return op == TOK_EQ || op == TOK_NE || op == '<' || op == '>' || op == TOK_LE || op == TOK_GE;
}

static const char *op_name(int op) {
  switch (op) {
  case TOK_OROR: return "'||'";
  case TOK_ANDAND: return "'&&'";
  case TOK_EQ: return "'=='";
  case TOK_NE: return "'!='";
  case TOK_LE: return "'<='";
  case TOK_GE: return "'>='";
  case TOK_SHL: return "'<<'";
  case TOK_SHR: return "'>>'";
  }
  return arena_printf("'%c'", op);
}

/* ----------------------------------------------------------- data core */

/* The data-language additions of the design sketch (docs/language.md):
 * math and random builtins, sort/argsort/join, the methods of str and
 * arrays, slices a[i..j], string indexing s[i], array concatenation and
 * the constant PI.  Each hook in the general checks above and below is one
 * call into this section, so the rest of sema does not know the details.
 * The hooks are DATA_HOOK (noinline): inlined, their locals would grow the
 * frame of check_expr, which recurses once per level of a 2000-deep
 * expression (SEMA_MAX_EXPR_DEPTH) and must stay as small as it was. */
#define DATA_HOOK __attribute__((noinline)) static

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

DATA_HOOK Type *check_data_builtin(Node *call, Builtin b, const char *name, Node **argv, int argc) {
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
DATA_HOOK Type *check_data_method(Node *call, Node *recv, Type *rt, const char *name) {
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
static void slice_bound(Node *b) {
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
DATA_HOOK Type *check_data_index(Node *e, Type *t) {
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
DATA_HOOK bool data_index_assignable(Node *e) {
  if (e->rhs->kind == N_RANGE)
    diag_error(e->loc, "cannot assign to a slice: it is a copy (assign its elements through the array)");
  else
    diag_error(e->loc, "cannot assign to a character of a string: strings are immutable (build a new one)");
  return false;
}

/* a + b on arrays: both of one array type, a new array. */
DATA_HOOK Type *check_array_binary(Node *e, Type *ta, Type *tb) {
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
DATA_HOOK Type *check_data_name(Node *e) {
  if (strcmp(e->name, "PI") != 0)
    return NULL;
  e->kind = N_FLOAT;
  e->fval = 3.14159265358979323846;
  e->is_const = true;
  return T_UFLOAT;
}

/* ------------------------------------------------------------- tensors */

/* The tensor type of std.nn (docs/language.md, "Tensors"): the operators
 * + - * / between tensors and with an f32 on either side, unary minus and
 * `@` (matmul); @global functions, which a std module's importers see
 * unqualified; and tensor methods, x.name(args) being std.nn's
 * name(x, args) (UFCS).  As with the data core, each hook in the general
 * checks is one call into this section, noinline so that check_expr's
 * frame stays small. */
#define TENSOR_HOOK __attribute__((noinline)) static

static bool is_tensor(Type *t) { return t && t->kind == TY_TENSOR; }

/* t[i] (row i; negative from the end) and t[a..b] (rows a to b-1): both
 * tensors, views the runtime checks against the length. */
TENSOR_HOOK Type *check_tensor_index(Node *e) {
  if (kernel_forbid(e->loc, "a tensor index"))
    return T_ERR;
  if (e->rhs->kind == N_RANGE) {
    slice_bound(e->rhs->lhs);
    slice_bound(e->rhs->rhs);
    e->rhs->ty = T_I64;
  } else if (!expect_type(e->rhs, T_I64, "a tensor index")) {
    return T_ERR;
  }
  return T_TENSOR;
}

/* A row of a tensor is no place: tensors are values, as strings are. */
TENSOR_HOOK bool tensor_index_assignable(Node *e) {
  diag_error(e->loc, "cannot assign to %s of a tensor: tensors are values; build a new one "
             "instead (nn.stack or nn.cat of rows, or nn.tensor(data, shape) from an array)",
             e->rhs->kind == N_RANGE ? "a slice" : "a row");
  return false;
}

static bool has_annot(Decl *d, const char *name) {
  for (Annot *a = d->annots; a; a = a->next)
    if (!strcmp(a->name, name))
      return true;
  return false;
}

/* The std modules the current module imports, in import order: found
 * once per module (every builtin call asks, and a module may have 100k
 * items). */
static struct {
  Module *of;
  Module **mods;
  int n;
} std_imports;

static void find_std_imports(void) {
  if (std_imports.of == S.mod)
    return;
  int n = 0;
  for (Decl *d = S.mod->decls; d; d = d->next)
    n += d->kind == D_IMPORT && d->llvm2 && !strncmp(d->path, "std.", 4);
  std_imports.of = S.mod;
  std_imports.mods = arena_alloc(sizeof(Module *) * (size_t)(n + 1));
  std_imports.n = 0;
  for (Decl *d = S.mod->decls; d; d = d->next)
    if (d->kind == D_IMPORT && d->llvm2 && !strncmp(d->path, "std.", 4))
      std_imports.mods[std_imports.n++] = (Module *)d->llvm2;
}

/* std.nn as the current module sees it: itself, or its import of it. */
static Module *nn_module(void) {
  if (!strcmp(S.mod->name, "std.nn"))
    return S.mod;
  find_std_imports();
  for (int i = 0; i < std_imports.n; i++)
    if (!strcmp(std_imports.mods[i]->name, "std.nn"))
      return std_imports.mods[i];
  return NULL;
}

/* The @global function `name` of a std module the current one imports
 * (the first import that has one), or NULL.  The annotation is read from
 * the declaration itself, so the answer does not depend on whether that
 * module's annotations were checked yet. */
static Decl *lookup_global(const char *name) {
  find_std_imports();
  for (int i = 0; i < std_imports.n; i++) {
    Decl *f = lookup_item(std_imports.mods[i], name);
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
TENSOR_HOOK Type *check_global_call(Node *call, const char *name) {
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
TENSOR_HOOK Type *check_global_name(Node *e, Type *want) {
  Decl *g = lookup_global(e->name);
  if (!g)
    return NULL;
  e->decl = g;
  return fn_value(e, g, want);
}

/* x.name(args) on a tensor x: std.nn's name(x, args...).  The receiver is
 * bound as the first argument; call->args is given back unchanged so the
 * AST dump and the language server see the call as written. */
TENSOR_HOOK Type *check_tensor_method(Node *call, Node *recv, const char *name) {
  Node *c = call->callee;
  Module *nn = nn_module();
  if (!nn) {
    for (Node *a = call->args; a; a = a->next)
      check_expr(a, NULL);
    return err_at(c->name_loc, "tensor methods come from std.nn: add 'import std.nn' to call '%s'", name);
  }
  Decl *f = lookup_item(nn, name);
  bool method = false;
  for (Decl *g = f; g && g->kind == D_FN; g = g->overload)
    method |= g->params && is_tensor(g->params->type);
  if (!method) {
    const char *names[256];
    int n = 0;
    SymTab *t = nn->symtab;
    for (int i = 0; t && i < t->cap && n < 256; i++) {
      Decl *d = t->slots[i].decl;
      if (t->slots[i].name && d->kind == D_FN && d->params && is_tensor(d->params->type))
        names[n++] = t->slots[i].name;
    }
    const char *s = suggest(name, names, n);
    for (Node *a = call->args; a; a = a->next)
      check_expr(a, NULL);
    if (s)
      return err_at(c->name_loc, "type tensor has no method '%s'; did you mean '%s'?", name, s);
    return err_at(c->name_loc, "type tensor has no method '%s' (std.nn has no function '%s' "
                  "taking a tensor first)", name, name);
  }
  if (kernel_forbid(call->loc, "a tensor method"))
    return T_ERR;
  Node *args = call->args;
  recv->next = args;
  call->args = recv;
  call->callkind = CALL_FN;
  call->recv = recv;
  c->decl = f;
  Type *r = call_function(call, f);
  call->args = args;
  recv->next = NULL;
  return r;
}

/* The scalar side of a tensor operator: an f32, or a literal (which
 * becomes one). */
static bool tensor_scalar_ok(Node *e, Type *t) {
  if (t->kind == TY_F32)
    return true;
  if (!ty_is_untyped(t))
    return false;
  settle(e, T_F32);
  return true;
}

/* a op b where a or b is a tensor: + - * / between tensors or with an f32
 * on either side, @ between tensors.  Tensors have no order and, being
 * references to mutable storage, no value equality: == is refused rather
 * than comparing addresses. */
TENSOR_HOOK Type *check_tensor_binary(Node *e, Type *ta, Type *tb) {
  int op = e->op;
  if (kernel_forbid(e->loc, "a tensor"))
    return T_ERR;
  if (op == TOK_EQ || op == TOK_NE)
    return err_at(e->loc, "tensors cannot be compared with %s; compare the numbers taken out "
                  "of them (item(), data())", op_name(op));
  if (op == '@') {
    if (is_tensor(ta) && is_tensor(tb))
      return ta;
    return err_at(e->loc, "operator '@' needs tensors, found %s and %s", ty_str(ta), ty_str(tb));
  }
  if (op != '+' && op != '-' && op != '*' && op != '/')
    return err_at(e->loc, "operator %s cannot be applied to tensors", op_name(op));
  if (is_tensor(ta) && is_tensor(tb))
    return ta;
  Node *s = is_tensor(ta) ? e->rhs : e->lhs;
  Type *st = is_tensor(ta) ? tb : ta;
  if (tensor_scalar_ok(s, st))
    return T_TENSOR;
  return err_at(e->loc, "operator %s needs a tensor or an f32 beside a tensor, found %s%s", op_name(op),
                ty_str(st), ty_is_numeric(st) ? "; convert it with f32(x)" : "");
}

/* -t (the '!' of a tensor was refused before: it needs bool) */
TENSOR_HOOK Type *check_tensor_unary(Node *e) {
  if (kernel_forbid(e->loc, "a tensor"))
    return T_ERR;
  return T_TENSOR;
}

/* t op= x on a tensor variable or field: t = t op x, a new tensor. */
TENSOR_HOOK void check_tensor_assign(Node *s) {
  Type *t = check_expr(s->rhs, NULL);
  if (is_err(t))
    return;
  if (!is_tensor(t) && !tensor_scalar_ok(s->rhs, t))
    diag_error(s->rhs->loc, "mismatched types: '%c=' on a tensor needs a tensor or an f32, found %s%s",
               s->op, ty_str(t), ty_is_numeric(t) ? "; convert it with f32(x)" : "");
}

static Type *check_binary(Node *e) {
  int op = e->op;
  if (op == TOK_ANDAND || op == TOK_OROR) {
    expect_type(e->lhs, T_BOOL, arena_printf("the left side of %s", op_name(op)));
    expect_type(e->rhs, T_BOOL, arena_printf("the right side of %s", op_name(op)));
    return T_BOOL;
  }
  Type *ta = check_expr(e->lhs, NULL);
  Type *tb = check_expr(e->rhs, !is_err(ta) && ta->kind == TY_ARRAY ? ta : NULL);
  if (is_err(ta) || is_err(tb))
    return T_ERR;
  if (ta->kind == TY_TENSOR || tb->kind == TY_TENSOR || op == '@')
    return check_tensor_binary(e, ta, tb);
  if (ta->kind == TY_ARRAY || tb->kind == TY_ARRAY)
    return check_array_binary(e, ta, tb);
  if (ta->kind == TY_STR || tb->kind == TY_STR) {
    if (kernel_forbid(e->loc, "a string"))
      return T_ERR;
    if (ta != tb)
      return err_at(e->loc, "mismatched types: %s and %s (convert with str(x))", ty_str(ta), ty_str(tb));
    if (op == '+')
      return T_STR;
    if (is_comparison(op))
      return T_BOOL;
    return err_at(e->loc, "operator %s cannot be applied to strings", op_name(op));
  }
  if (ta->kind == TY_BOOL || tb->kind == TY_BOOL) {
    if (ta != tb)
      return err_at(e->loc, "mismatched types: %s and %s", ty_str(ta), ty_str(tb));
    if (op == TOK_EQ || op == TOK_NE)
      return T_BOOL;
    if (op == '&' || op == '|' || op == '^')
      return T_BOOL;
    return err_at(e->loc, "operator %s cannot be applied to bool", op_name(op));
  }
  if (!ty_is_numeric(ta) || !ty_is_numeric(tb)) {
    if ((op == TOK_EQ || op == TOK_NE) && ta == tb && (ta->kind == TY_ACTOR))
      return T_BOOL;
    bool fut = ta->kind == TY_FUTURE || tb->kind == TY_FUTURE;
    diag_error(e->loc, "operator %s cannot be applied to %s and %s%s", op_name(op), ty_str(ta), ty_str(tb),
               fut ? "; use 'await' to get the value" : "");
    return T_ERR;
  }
  Type *t = unify_numeric(e->lhs, e->rhs, arena_printf("operator %s", op_name(op)), e->loc);
  if (is_err(t))
    return T_ERR;
  bool int_only = op == '%' || op == '&' || op == '|' || op == '^' || op == TOK_SHL || op == TOK_SHR;
  if (int_only && ty_is_float(t)) {
    if (ty_is_untyped(t))
      return err_at(e->loc, "operator %s needs integers, found a float literal", op_name(op));
    return err_at(e->loc, "operator %s needs integers, found %s", op_name(op), ty_str(t));
  }
  if (is_comparison(op)) {
    if (ty_is_untyped(t)) {
      settle(e->lhs, default_type(t));
      settle(e->rhs, default_type(t));
    }
    return T_BOOL;
  }
  return t;
}

static Type *fn_value(Node *e, Decl *d, Type *want);
static Type *not_a_value(Node *e, Decl *d);

static Type *check_name(Node *e, Type *want) {
  Var *v = lookup_var(e->name);
  if (v) {
    e->var = v;
    v->used = true;
    if (S.in_kernel && v->kind == V_FIELD)
      return err_at(e->loc, "actor field '%s' cannot be used in a kernel", e->name);
    return v->ty;
  }
  if (S.actor && find_method(S.actor, e->name))
    return not_a_value(e, find_method(S.actor, e->name));
  Decl *d = lookup_item(S.mod, e->name);
  if (d) {
    e->decl = d;
    switch (d->kind) {
    case D_FN:
    case D_TASK:
      return fn_value(e, d, want);
    case D_KERNEL:
      return not_a_value(e, d);
    case D_CONST:
      if (!d->type)
        return err_at(e->loc, "constant '%s' is used before its value is known", e->name);
      if (S.in_kernel && !ty_is_numeric(d->type) && d->type->kind != TY_BOOL)
        return err_at(e->loc, "constant '%s' of type %s cannot be used in a kernel", e->name, ty_str(d->type));
      return d->type;
    case D_IMPORT:
      return T_MODULE;
    default:
      return err_at(e->loc, "'%s' is %s, not a value", e->name, a_what(d));
    }
  }
  Type *dt = check_data_name(e);
  if (dt)
    return dt;
  Type *gt = check_global_name(e, want);
  if (gt)
    return gt;
  if (builtin_of(e->name) != B_NONE)
    return err_at(e->loc, "builtin '%s' must be called, as in %s(...)", e->name, e->name);
  undefined_name(e->loc, e->name, "name");
  return T_ERR;
}

static Type *check_field(Node *e, Type *want) {
  Node *recv = e->lhs;
  if (recv->kind == N_NAME && !lookup_var(recv->name)) {
    Module *m = module_by_alias(S.mod, recv->name);
    if (m) {
      Decl *d = lookup_item(m, e->name);
      if (!d)
        return err_at(e->name_loc, "module '%s' has no '%s'", recv->name, e->name);
      if (d->kind == D_CONST) {
        e->decl = d;
        return d->type ? d->type : T_ERR;
      }
      if (d->kind == D_FN || d->kind == D_TASK)
        return fn_value(e, d, want);
      return err_at(e->name_loc, "'%s.%s' is not a value", recv->name, e->name);
    }
  }
  Type *t = check_expr(recv, NULL);
  if (is_err(t))
    return T_ERR;
  if (t->kind == TY_STRUCT) {
    int i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++)
      if (!strcmp(f->name, e->name)) {
        e->field_index = i;
        e->decl = f;
        return f->type ? f->type : T_ERR;
      }
    const char *names[128];
    int n = 0;
    for (Decl *f = t->decl->fields; f && n < 128; f = f->next)
      names[n++] = f->name;
    const char *s = suggest(e->name, names, n);
    if (s)
      diag_error(e->name_loc, "struct '%s' has no field '%s'; did you mean '%s'?", t->decl->name, e->name, s);
    else
      diag_error(e->name_loc, "struct '%s' has no field '%s'", t->decl->name, e->name);
    return T_ERR;
  }
  if (t->kind == TY_GROUP && (!strcmp(e->name, "all") || !strcmp(e->name, "any")))
    return err_at(e->loc, "'%s' on a group must be followed by a method call, as in g.%s.m()", e->name, e->name);
  if (t->kind == TY_ACTOR && find_method(t->decl, e->name))
    return not_a_value(e, find_method(t->decl, e->name));
  if (t->kind == TY_ACTOR)
    return err_at(e->name_loc, "actor fields are private: '%s' can only be read by the actor's methods", e->name);
  return err_at(e->name_loc, "type %s has no field '%s'", ty_str(t), e->name);
}

static Type *check_index(Node *e) {
  Type *t = check_expr(e->lhs, NULL);
  if (!is_err(t) && t->kind == TY_MAP) {
    expect_type(e->rhs, t->key, arena_printf("a key of %s", ty_str(t)));
    return t->elem;
  }
  Node *first = e; /* t[i, j] is t[i][j] on tensors only: the chain's base must be one */
  while (first->multi_index)
    first = first->lhs;
  Type *base = e->multi_index ? first->lhs->ty : NULL;
  if (base && !is_err(t) && !is_err(base) && !is_tensor(base)) {
    check_expr(e->rhs, NULL);
    return first == e->lhs ? err_at(e->loc, "x[i, j] indexes tensors, not a value of type %s: "
                                    "write x[i][j]", ty_str(base))
                           : T_ERR;
  }
  if (is_tensor(t))
    return check_tensor_index(e);
  Type *dt = check_data_index(e, t);
  if (dt)
    return dt;
  expect_type(e->rhs, T_I64, "an array index");
  if (is_err(t))
    return T_ERR;
  if (t->kind == TY_ARRAY)
    return t->elem;
  if (t->kind == TY_GROUP)
    return err_at(e->loc, "a group member can only be called, as in g[i].m()");
  return err_at(e->lhs->loc, "cannot index a value of type %s", ty_str(t));
}

static Type *check_array_lit(Node *e, Type *want) {
  Type *elem = want && want->kind == TY_ARRAY ? want->elem : NULL;
  if (kernel_forbid(e->loc, "an array literal"))
    return T_ERR;
  if (!e->args) {
    if (!elem)
      return err_at(e->loc, "cannot infer the type of an empty array literal; give it a type, as in 'let xs: i64[] = []'");
    return ty_array(elem);
  }
  if (!elem) {
    /* The first element with a concrete type decides; literals adapt. */
    for (Node *a = e->args; a; a = a->next) {
      Type *t = check_expr(a, NULL);
      if (is_err(t))
        return T_ERR;
      if (!ty_is_untyped(t) && !elem)
        elem = t;
    }
    if (!elem) {
      bool any_float = false;
      for (Node *a = e->args; a; a = a->next)
        any_float |= a->ty->kind == TY_UNTYPED_FLOAT;
      elem = any_float ? T_F64 : T_I64;
    }
  }
  int i = 0;
  for (Node *a = e->args; a; a = a->next, i++)
    if (!expect_type(a, elem, arena_printf("element %d of the array", i)))
      return T_ERR;
  if (elem->kind == TY_VOID)
    return err_at(e->loc, "an array cannot hold void values");
  return ty_array(elem);
}

static Type *check_for_source(Node *src, const char *var, Loc at);

static Type *check_comprehension(Node *e, Type *want) {
  if (kernel_forbid(e->loc, "an array comprehension"))
    return T_ERR;
  scope_push();
  Type *vt = check_for_source(e->rhs, e->name, e->name_loc);
  e->var = declare_var(e->name, vt, e->name_loc, false, V_LOCAL);
  Type *elem_want = want && want->kind == TY_ARRAY ? want->elem : NULL;
  Type *t = check_expr(e->lhs, elem_want);
  if (!is_err(t)) {
    if (elem_want && compatible(t, elem_want))
      settle(e->lhs, elem_want);
    else
      settle_default(e->lhs);
    t = e->lhs->ty;
  }
  scope_pop();
  if (is_err(t) || is_err(vt))
    return T_ERR;
  if (t->kind == TY_VOID)
    return err_at(e->lhs->loc, "a comprehension's element cannot be void");
  return ty_array(t);
}

static Type *check_struct_lit(Node *e) {
  Module *m = S.mod;
  if (e->qual) {
    m = module_by_alias(S.mod, e->qual);
    if (!m)
      return err_at(e->loc, "unknown module '%s'", e->qual);
  }
  Decl *d = lookup_item(m, e->name);
  if (!d || d->kind != D_STRUCT) {
    if (d)
      return err_at(e->name_loc, "'%s' is %s, not a struct", e->name, a_what(d));
    undefined_name(e->name_loc, e->name, "struct");
    return T_ERR;
  }
  if (kernel_forbid(e->loc, "a struct literal"))
    return T_ERR;
  e->decl = d;
  int nf = 0;
  for (Decl *f = d->fields; f; f = f->next)
    nf++;
  Node **argv = arena_alloc(sizeof(Node *) * (size_t)(nf ? nf : 1));
  for (Node *a = e->args; a; a = a->next) {
    int i = 0;
    Decl *f = d->fields;
    for (; f && strcmp(f->name, a->name); f = f->next)
      i++;
    if (!f) {
      const char *names[128];
      int n = 0;
      for (Decl *x = d->fields; x && n < 128; x = x->next)
        names[n++] = x->name;
      const char *s = suggest(a->name, names, n);
      if (s)
        diag_error(a->name_loc, "struct '%s' has no field '%s'; did you mean '%s'?", d->name, a->name, s);
      else
        diag_error(a->name_loc, "struct '%s' has no field '%s'", d->name, a->name);
      check_expr(a->lhs, NULL);
      continue;
    }
    if (argv[i]) {
      diag_error(a->name_loc, "field '%s' is given twice", a->name);
      continue;
    }
    a->field_index = i;
    argv[i] = a->lhs;
    expect_type(a->lhs, f->type, arena_printf("field '%s' of '%s'", f->name, d->name));
  }
  int i = 0;
  for (Decl *f = d->fields; f; f = f->next, i++)
    if (!argv[i]) {
      diag_error(e->loc, "missing field '%s' in literal of struct '%s'", f->name, d->name);
      return T_ERR;
    }
  set_argv(e, argv, nf);
  return ty_struct(d);
}

static Type *check_spawn(Node *e) {
  if (kernel_forbid(e->loc, "spawn"))
    return T_ERR;
  Node *call = e->lhs;
  if (call->kind != N_CALL) {
    diag_error(call->loc, "spawn needs an actor constructor call, as in 'spawn Counter(0)'");
    return T_ERR;
  }
  Node *c = call->callee;
  Decl *d = NULL;
  if (c->kind == N_NAME) {
    d = lookup_item(S.mod, c->name);
    if (!d) {
      undefined_name(c->loc, c->name, "actor");
      return T_ERR;
    }
  } else if (c->kind == N_FIELD && c->lhs->kind == N_NAME) {
    Module *m = module_by_alias(S.mod, c->lhs->name);
    d = m ? lookup_item(m, c->name) : NULL;
  }
  if (!d || d->kind != D_ACTOR) {
    diag_error(c->loc, "spawn needs an actor, found %s", d ? a_what(d) : "an expression");
    return T_ERR;
  }
  call->decl = d;
  call->callkind = CALL_UNRESOLVED;
  const char *what = arena_printf("the init of actor '%s'", d->name);
  Decl *params = d->init ? d->init->params : NULL;
  if (!bind_args(call, params, what, true))
    return T_ERR;
  check_call_args(call, params, what);
  call->ty = ty_actor(d);
  if (e->rhs) {
    expect_type(e->rhs, T_I64, "the size of a group");
    return ty_group(d);
  }
  return d->replicas > 0 ? ty_group(d) : ty_actor(d);
}

static Type *check_await(Node *e) {
  if (kernel_forbid(e->loc, "await"))
    return T_ERR;
  Type *t = check_expr(e->lhs, NULL);
  if (is_err(t))
    return T_ERR;
  if (t->kind == TY_FUTURE)
    return t->elem;
  if (t->kind == TY_ARRAY && t->elem->kind == TY_FUTURE) {
    if (t->elem->elem->kind == TY_VOID)
      return T_VOID;
    return ty_array(t->elem->elem);
  }
  return err_at(e->lhs->loc, "await needs a future or an array of futures, found %s", ty_str(t));
}

static Type *check_launch(Node *e) {
  if (S.in_kernel) {
    diag_error(e->loc, "a kernel cannot launch another kernel");
    return T_ERR;
  }
  Decl *d = lookup_item(S.mod, e->name);
  if (!d || d->kind != D_KERNEL) {
    if (d)
      diag_error(e->name_loc, "launch needs a kernel, but '%s' is %s", e->name, a_what(d));
    else
      undefined_name(e->name_loc, e->name, "kernel");
    for (Node *a = e->args; a; a = a->next)
      check_expr(a, NULL);
    return T_ERR;
  }
  e->decl = d;
  expect_type(e->rhs, T_I64, "the thread count of launch");
  const char *what = arena_printf("kernel '%s'", d->name);
  if (!bind_args(e, d->params, what, true))
    return T_ERR;
  check_call_args(e, d->params, what);
  return T_VOID;
}

static Type *check_expr_inner(Node *e, Type *want) {
  switch (e->kind) {
  case N_INT:
    if (e->ival == INT64_MIN && !e->is_const)
      return err_at(e->loc, "integer literal is too large for i64");
    return T_UINT;
  case N_FLOAT:
    return T_UFLOAT;
  case N_BOOL:
    return T_BOOL;
  case N_STR:
    if (kernel_forbid(e->loc, "a string"))
      return T_ERR;
    return T_STR;
  case N_NAME:
    return check_name(e, want);
  case N_BINARY:
    return check_binary(e);
  case N_UNARY: {
    if (e->op == '-' && e->lhs->kind == N_INT && e->lhs->ival == INT64_MIN)
      e->lhs->is_const = true; /* -9223372036854775808 is fine */
    Type *t = check_expr(e->lhs, want);
    if (is_err(t))
      return T_ERR;
    if (e->op == '!') {
      if (t->kind != TY_BOOL)
        return err_at(e->loc, "operator '!' needs bool, found %s", ty_str(t));
      return T_BOOL;
    }
    if (t->kind == TY_TENSOR)
      return check_tensor_unary(e);
    if (!ty_is_numeric(t))
      return err_at(e->loc, "unary '-' needs a number, found %s", ty_str(t));
    return t;
  }
  case N_CALL:
    return check_call(e);
  case N_INDEX:
    return check_index(e);
  case N_FIELD:
    return check_field(e, want);
  case N_MAP_NEW:
    if (kernel_forbid(e->loc, "a map"))
      return T_ERR;
    return resolve_texpr(e->texpr);
  case N_ARRAY_LIT:
    return check_array_lit(e, want);
  case N_COMPREH:
    return check_comprehension(e, want);
  case N_RANGE:
    check_expr(e->lhs, NULL);
    check_expr(e->rhs, NULL);
    return err_at(e->loc, "a range 'a..b' can only be used in a for loop or a comprehension");
  case N_STRUCT_LIT:
    return check_struct_lit(e);
  case N_AWAIT:
    return check_await(e);
  case N_SPAWN:
    return check_spawn(e);
  case N_LAUNCH:
    return check_launch(e);
  default:
    ice("not an expression: kind %d", e->kind);
  }
}

/* Expressions deeper than this are refused, so a 100k-term chain like
 * `1 + 1 + ...` or `a.b.b...` (no brackets, so the lexer's nesting limit
 * does not apply) gives a diagnostic instead of overflowing the stack. */
#define SEMA_MAX_EXPR_DEPTH 2000
static int expr_depth;
static bool expr_depth_reported;

static Type *check_expr(Node *e, Type *want) {
  if (e->ty && !ty_is_untyped(e->ty))
    return e->ty; /* already checked (overload resolution checks twice) */
  if (expr_depth >= SEMA_MAX_EXPR_DEPTH) {
    if (!expr_depth_reported)
      diag_error(e->loc, "expression is nested too deeply (more than %d levels)", SEMA_MAX_EXPR_DEPTH);
    expr_depth_reported = true;
    return e->ty = T_ERR;
  }
  expr_depth++;
  Type *t = check_expr_inner(e, want);
  if (--expr_depth == 0)
    expr_depth_reported = false;
  e->ty = t ? t : T_ERR;
  if (e->ty == T_MODULE && e->kind != N_NAME)
    e->ty = T_ERR;
  return e->ty;
}

/* ---------------------------------------------------------- statements */

static void check_block(Node *b);
static void check_stmt(Node *s);

/* The element type a for loop or comprehension walks. */
static Type *check_for_source(Node *src, const char *var, Loc at) {
  (void)var;
  (void)at;
  if (src->kind == N_RANGE) {
    Type *t = unify_numeric(src->lhs, src->rhs, "a range", src->loc);
    if (is_err(t))
      return T_ERR;
    if (ty_is_untyped(t)) {
      t = default_type(t);
      settle(src->lhs, t);
      settle(src->rhs, t);
    }
    if (!ty_is_int(t)) {
      diag_error(src->loc, "a range needs integers, found %s", ty_str(t));
      return T_ERR;
    }
    src->ty = t;
    return t;
  }
  Type *t = check_expr(src, NULL);
  if (is_err(t))
    return T_ERR;
  if (S.in_kernel) {
    diag_error(src->loc, "a kernel can only loop over a range 'a..b'");
    return T_ERR;
  }
  if (t->kind == TY_MAP) {
    diag_error(src->loc, "cannot loop over a map directly; loop over its keys() or values()");
    return T_ERR;
  }
  if (t->kind != TY_ARRAY) {
    if (t->kind == TY_FUTURE && t->elem->kind == TY_ARRAY)
      diag_error(src->loc, "cannot loop over %s; await it first", ty_str(t));
    else
      diag_error(src->loc, "cannot loop over a value of type %s (expected an array or a range 'a..b')", ty_str(t));
    return T_ERR;
  }
  return t->elem;
}

/* Is an expression something that can be assigned to?  Reports why not. */
static bool check_assignable(Node *e) {
  switch (e->kind) {
  case N_NAME:
    if (e->var) {
      Var *v = e->var;
      if (v->mutable)
        return true;
      if (v->kind == V_PARAM)
        diag_error(e->loc, "cannot assign to parameter '%s'; copy it into a var first ('var %s = %s')", v->name, v->name, v->name);
      else if (v->kind == V_FIELD)
        diag_error(e->loc, "cannot assign to field '%s': it was declared with let", v->name);
      else
        diag_error(e->loc, "cannot assign to '%s': it was declared with let (use var to make it mutable)", v->name);
      diag_note(v->loc, "'%s' is declared here", v->name);
      return false;
    }
    if (e->decl)
      diag_error(e->loc, "cannot assign to %s '%s'", decl_what(e->decl), e->name);
    return false;
  case N_INDEX:
    if (is_tensor(e->lhs->ty))
      return tensor_index_assignable(e);
    if (e->rhs->kind == N_RANGE || (e->lhs->ty && e->lhs->ty->kind == TY_STR))
      return data_index_assignable(e);
    if (e->lhs->ty && (e->lhs->ty->kind == TY_ARRAY || e->lhs->ty->kind == TY_MAP)) {
      return true; /* arrays and maps are shared objects: elements are mutable */
    }
    return false;
  case N_FIELD:
    if (e->lhs->ty && e->lhs->ty->kind == TY_STRUCT) {
      /* A struct is a value: its field is assignable when the struct is. */
      Node *root = e->lhs;
      if (root->kind == N_INDEX)
        return true;
      if (root->kind == N_NAME || root->kind == N_FIELD)
        return check_assignable(root);
      diag_error(e->loc, "cannot assign to a field of a temporary value");
      return false;
    }
    return false;
  default:
    diag_error(e->loc, "cannot assign to this expression");
    return false;
  }
}

static void check_assign(Node *s) {
  Type *t = check_expr(s->lhs, NULL);
  if (is_err(t)) {
    check_expr(s->rhs, NULL);
    return;
  }
  if (!check_assignable(s->lhs)) {
    check_expr(s->rhs, NULL);
    return;
  }
  if (S.in_kernel && t->kind == TY_ARRAY) {
    diag_error(s->loc, "a kernel cannot replace an array, only its elements");
    return;
  }
  if (s->op == '=') {
    expect_type(s->rhs, t, arena_printf("assignment to %s", ty_str(t)));
    return;
  }
  if (s->op == '+' && t->kind == TY_STR) {
    expect_type(s->rhs, T_STR, "'+=' on a string");
    return;
  }
  if (t->kind == TY_TENSOR) {
    check_tensor_assign(s);
    return;
  }
  if (!ty_is_numeric(t)) {
    diag_error(s->name_loc, "operator '%c=' cannot be applied to %s", s->op, ty_str(t));
    check_expr(s->rhs, NULL);
    return;
  }
  expect_type(s->rhs, t, arena_printf("'%c=' on %s", s->op, ty_str(t)));
}

static void check_let(Node *s) {
  Type *t = NULL;
  if (s->texpr)
    t = resolve_texpr(s->texpr);
  if (s->lhs) {
    if (t) {
      expect_type(s->lhs, t, arena_printf("'%s'", s->name));
    } else {
      t = check_expr(s->lhs, NULL);
      settle_default(s->lhs);
      t = s->lhs->ty;
      if (!is_err(t) && t->kind == TY_VOID) {
        diag_error(s->lhs->loc, "'%s' cannot hold a value of type void (the expression returns nothing)", s->name);
        t = T_ERR;
      }
      if (!is_err(t) && t->kind == TY_MODULE) {
        diag_error(s->lhs->loc, "a module is not a value");
        t = T_ERR;
      }
    }
  }
  if (!t)
    t = T_ERR;
  if (S.in_kernel && !is_err(t) && !ty_is_numeric(t) && t->kind != TY_BOOL)
    diag_error(s->loc, "a kernel's local variables must be scalars, found %s", ty_str(t));
  s->var = declare_var(s->name, t, s->name_loc, s->ival != 0, V_LOCAL);
}

static void check_stmt(Node *s) {
  switch (s->kind) {
  case N_LET:
    check_let(s);
    return;
  case N_ASSIGN:
    check_assign(s);
    return;
  case N_EXPR_STMT: {
    Node *e = s->lhs;
    Type *t = check_expr(e, NULL);
    settle_default(e);
    bool effect = e->kind == N_CALL || e->kind == N_LAUNCH || e->kind == N_AWAIT || e->kind == N_SPAWN;
    if (!effect && !is_err(t))
      diag_warning(e->loc, "expression result is unused");
    return;
  }
  case N_IF:
    expect_type(s->cond, T_BOOL, "the condition of 'if'");
    check_block(s->then);
    if (s->els) {
      if (s->els->kind == N_IF)
        check_stmt(s->els);
      else
        check_block(s->els);
    }
    return;
  case N_WHILE:
    expect_type(s->cond, T_BOOL, "the condition of 'while'");
    S.loops++;
    check_block(s->body);
    S.loops--;
    return;
  case N_FOR: {
    scope_push();
    Type *vt = check_for_source(s->rhs, s->name, s->name_loc);
    s->var = declare_var(s->name, vt, s->name_loc, false, V_LOCAL);
    S.loops++;
    check_block(s->body);
    S.loops--;
    scope_pop();
    return;
  }
  case N_BREAK:
  case N_CONTINUE:
    if (!S.loops)
      diag_error(s->loc, "'%s' outside of a loop", s->kind == N_BREAK ? "break" : "continue");
    return;
  case N_RETURN:
    if (s->lhs) {
      if (S.ret->kind == TY_VOID) {
        check_expr(s->lhs, NULL);
        diag_error(s->lhs->loc, "%s '%s' returns no value; remove the value or declare a result type ('-> T')",
                   decl_what(S.fn), S.fn->name);
        return;
      }
      expect_type(s->lhs, S.ret, "the returned value");
    } else if (S.ret->kind != TY_VOID && !is_err(S.ret)) {
      diag_error(s->loc, "%s '%s' must return a value of type %s", decl_what(S.fn), S.fn->name, ty_str(S.ret));
    }
    return;
  case N_BLOCK:
    check_block(s);
    return;
  default:
    ice("not a statement: kind %d", s->kind);
  }
}

static void check_block(Node *b) {
  scope_push();
  for (Node *s = b->body; s; s = s->next)
    check_stmt(s);
  scope_pop();
}

/* Does control never fall off the end of this statement? */
static bool terminates(Node *s) {
  if (!s)
    return false;
  switch (s->kind) {
  case N_RETURN:
    return true;
  case N_EXPR_STMT:
    return s->lhs->kind == N_CALL && s->lhs->callkind == CALL_BUILTIN && s->lhs->builtin == B_FAIL;
  case N_BLOCK: {
    Node *last = s->body;
    if (!last)
      return false;
    while (last->next)
      last = last->next;
    return terminates(last);
  }
  case N_IF:
    return s->els && terminates(s->then) && terminates(s->els);
  case N_WHILE:
    return s->cond->kind == N_BOOL && s->cond->ival == 1;
  default:
    return false;
  }
}

/* ---------------------------------------------------------------- items */

/* The earlier Decl of d's name in a list being walked, through a table so
 * that a list of 50k parameters or fields is checked in linear time. */
static Decl *seen_before(SymTab *seen, Decl *d) {
  if (!d->name)
    return NULL;
  Decl *old = symtab_get(seen, d->name);
  if (!old)
    symtab_put(seen, d->name, d);
  return old;
}

static void resolve_params(Decl *fn) {
  int i = 0;
  SymTab seen = {0};
  for (Decl *p = fn->params; p; p = p->next, i++) {
    p->index = i;
    Decl *q = seen_before(&seen, p);
    if (q) {
      diag_error(p->name_loc, "parameter '%s' is declared twice", p->name);
      diag_note(q->name_loc, "first declared here");
    }
    p->type = resolve_texpr(p->texpr);
    if (!is_err(p->type) && p->type->kind == TY_VOID)
      diag_error(p->texpr->loc, "a parameter cannot have type void");
  }
  fn->nparams = i;
}

/* Signature pass: parameter and result types, before any body is checked,
 * so items can be used before their definition. */
static void resolve_signature(Decl *d) {
  switch (d->kind) {
  case D_FN: case D_TASK: case D_KERNEL: case D_WORKFLOW: case D_METHOD: case D_INIT:
    S.tparam = d->tparam; /* fn name<T, R>(...): T and R name the type parameters */
    S.tparam2 = d->tparam2;
    resolve_params(d);
    d->ret_type = d->ret ? resolve_texpr(d->ret) : T_VOID;
    S.tparam = S.tparam2 = NULL;
    break;
  default:
    break;
  }
  if (d->kind == D_KERNEL) {
    if (d->ret) {
      diag_error(d->ret->loc, "a kernel returns nothing; write results into an array parameter");
      d->ret_type = T_VOID; /* no follow-on "must return a value" */
    }
    for (Decl *p = d->params; p; p = p->next) {
      Type *t = p->type;
      bool ok = is_err(t) || ty_is_numeric(t) || t->kind == TY_BOOL || t->kind == TY_TENSOR ||
                (t->kind == TY_ARRAY && ty_is_gpu_elem(t->elem));
      if (!ok)
        diag_error(p->texpr->loc, "kernel parameter '%s' has type %s; kernels take scalars, arrays of f32, f64, i32 or i64, and tensors",
                   p->name, ty_str(t));
      if (p->value)
        diag_error(p->value->loc, "kernel parameters cannot have default values");
    }
  }
  if (d->kind == D_TASK && !is_err(d->ret_type) && d->ret_type->kind == TY_FUTURE)
    diag_error(d->ret->loc, "a task cannot return a future; return the value and let callers await");
}

static void check_struct_fields(Decl *d) {
  int i = 0;
  SymTab seen = {0};
  for (Decl *f = d->fields; f; f = f->next, i++) {
    f->index = i;
    Decl *g = seen_before(&seen, f);
    if (g) {
      diag_error(f->name_loc, "field '%s' is declared twice", f->name);
      diag_note(g->name_loc, "first declared here");
    }
    if (!f->texpr)
      continue; /* an actor field typed by its initial value */
    f->type = resolve_texpr(f->texpr);
    if (!is_err(f->type) && f->type->kind == TY_VOID)
      diag_error(f->texpr->loc, "a field cannot have type void");
  }
}

/* A struct that contains itself by value has no finite size. */
static bool struct_contains(Decl *outer, Type *t, int depth) {
  if (depth > 64 || !t || t->kind != TY_STRUCT)
    return false;
  if (t->decl == outer)
    return true;
  for (Decl *f = t->decl->fields; f; f = f->next)
    if (struct_contains(outer, f->type, depth + 1))
      return true;
  return false;
}

static bool is_const_expr(Node *e) {
  switch (e->kind) {
  case N_INT: case N_FLOAT: case N_BOOL: case N_STR:
    return true;
  case N_UNARY:
    return is_const_expr(e->lhs);
  case N_BINARY:
    return is_const_expr(e->lhs) && is_const_expr(e->rhs);
  case N_NAME:
    return e->decl && e->decl->kind == D_CONST;
  default:
    return false;
  }
}

static void check_const(Decl *d) {
  if (d->checked)
    return;
  d->checked = true;
  Type *t = d->texpr ? resolve_texpr(d->texpr) : NULL;
  if (t) {
    expect_type(d->value, t, arena_printf("constant '%s'", d->name));
  } else {
    check_expr(d->value, NULL);
    settle_default(d->value);
    t = d->value->ty;
  }
  if (!is_err(d->value->ty) && !is_const_expr(d->value))
    diag_error(d->value->loc, "the value of constant '%s' must be known at compile time (literals, operators and other constants)", d->name);
  if (!is_err(t) && !(ty_is_numeric(t) || t->kind == TY_BOOL || t->kind == TY_STR))
    diag_error(d->name_loc, "constant '%s' has type %s; constants are numbers, bools or strings", d->name, ty_str(t));
  d->type = t;
  d->value->is_const = true;
}

static void begin_body(Decl *fn, Decl *actor, Type *ret) {
  S.fn = fn;
  S.actor = actor;
  S.ret = ret;
  S.loops = 0;
  S.in_kernel = fn->kind == D_KERNEL;
  S.scope = NULL;
  scope_push();
  if (actor)
    for (Decl *f = actor->fields; f; f = f->next)
      f->var = declare_var(f->name, f->type, f->name_loc, f->mutable, V_FIELD), f->var->decl = f;
  scope_push();
  for (Decl *p = fn->params; p; p = p->next) {
    /* A repeated parameter was reported by resolve_params already. */
    Var *dup = scope_find_here(S.scope, p->name);
    /* Inside a kernel a tensor parameter is the f32[] of its elements in
     * row-major order (the runtime passes its contiguous values, custom.c);
     * at the launch it is still a tensor. */
    Type *vt = S.in_kernel && p->type && p->type->kind == TY_TENSOR ? ty_array(T_F32) : p->type;
    p->var = dup ? dup : declare_var(p->name, vt, p->name_loc, false, V_PARAM);
    if (!dup)
      p->var->decl = p;
  }
}

static void check_defaults(Decl *fn) {
  for (Decl *p = fn->params; p; p = p->next)
    if (p->value && !is_err(p->type)) {
      expect_type(p->value, p->type, arena_printf("the default of '%s'", p->name));
      if (!is_const_expr(p->value))
        diag_error(p->value->loc, "the default of '%s' must be a constant (a literal or a named constant)", p->name);
    }
}

static void check_body(Decl *fn, Decl *actor) {
  Type *ret = fn->ret_type ? fn->ret_type : T_VOID;
  S.scope = NULL;
  check_defaults(fn);
  begin_body(fn, actor, ret);
  check_block(fn->body);
  if (!is_err(ret) && ret->kind != TY_VOID && !terminates(fn->body)) {
    Loc end = fn->body->name_loc;
    diag_error(end, "%s '%s' must return a value of type %s on every path", decl_what(fn), fn->name, ty_str(ret));
  }
  S.scope = NULL;
  S.fn = NULL;
  S.actor = NULL;
  S.in_kernel = false;
}

/* @extern functions: a std module's declaration of a C function of the
 * runtime (sf_std_<module>_<name>, see docs/language.md "Standard-library
 * externs").  Only types whose C form is fixed may cross: numbers, bool,
 * str, arrays (sf_array *), tensors (sf_tensor *) and structs (by
 * address, with their descriptor, which the C side reads fields from by
 * name). */
static bool extern_type_ok(Type *t) {
  switch (t->kind) {
  case TY_BOOL: case TY_I32: case TY_I64: case TY_F32: case TY_F64: case TY_STR:
  case TY_ARRAY: case TY_STRUCT: case TY_ERROR:
  case TY_MAP:    /* sf_map * */
  case TY_TPARAM: /* const void *, const sf_type * (a result: void *out, const sf_type *) */
  case TY_FN:     /* int64_t: an index into sf_program.fn_names */
  case TY_TENSOR: /* sf_tensor *: borrowed as a parameter, owned (+1) as a result */
    return true;
  default:
    return false;
  }
}

static void check_extern(Decl *fn) {
  if (fn->tparam && !fn->is_extern) {
    diag_error(fn->tparam_loc, "only @extern functions of the standard library take a type parameter");
    return; /* the body is not checked: T means nothing in it */
  }
  if (!fn->is_extern) {
    diag_error(fn->name_loc, "function '%s' has no body", fn->name);
    diag_note(fn->name_loc, "only @extern functions of the standard library are declared without one");
    return;
  }
  if (fn->body) {
    diag_error(fn->name_loc, "@extern function '%s' must not have a body (its body is the C "
                             "function %s)", fn->name, extern_c_name(fn));
    return;
  }
  Decl *first = symtab_get(fn->module->symtab, fn->name);
  if (first != fn || fn->overload)
    diag_error(fn->name_loc, "@extern function '%s' cannot be overloaded (each C function has "
                             "one name)", fn->name);
  check_defaults(fn);
  for (Decl *p = fn->params; p; p = p->next)
    if (p->type && !extern_type_ok(p->type))
      diag_error(p->name_loc, "parameter '%s' of @extern function '%s' has type %s, which "
                 "cannot be passed to C", p->name, fn->name, ty_str(p->type));
  if (fn->ret_type && fn->ret_type->kind != TY_VOID && !extern_type_ok(fn->ret_type))
    diag_error(fn->name_loc, "@extern function '%s' returns %s, which C cannot return",
               fn->name, ty_str(fn->ret_type));
}

/* The runtime flag that a workflow parameter's flag (--NAME, the name as
 * written: flags.c matches it byte for byte) would collide with, or NULL.
 * A name that differs only in '_' for '-' ("checkpoint_dir") does not
 * shadow but would sit next to its twin in --help, one typo apart, so it is
 * refused too; *exact says which. */
static const char *reserved_flag(const char *param, bool *exact) {
  static const char *const names[] = {
#define X(id, name, arg, help) name,
      SF__RUNTIME_FLAGS(X)
#undef X
#define X(name, help) name,
      SF__INFO_FLAGS(X)
#undef X
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *a = param, *b = names[i];
    while (*a && (*a == *b || (*a == '_' && *b == '-')))
      a++, b++;
    if (!*a && !*b) {
      *exact = !strcmp(param, names[i]);
      return names[i];
    }
  }
  return NULL;
}

static void check_param_flag(Decl *p) {
  bool exact;
  const char *flag = reserved_flag(p->name, &exact);
  if (!flag)
    return;
  if (exact)
    diag_error(p->name_loc, "parameter '%s' would shadow the runtime flag --%s; rename it", p->name, flag);
  else
    diag_error(p->name_loc, "parameter '%s' would read as the runtime flag --%s (only '_' and '-' differ); rename it",
               p->name, flag);
}

static void check_workflow(Decl *d) {
  if (strcmp(d->name, "main") != 0)
    diag_error(d->name_loc, "a workflow must be named 'main', found '%s'", d->name);
  if (S.mod != S.prog->main) {
    diag_error(d->name_loc, "only the program's main file can declare a workflow (found one in module '%s')", S.mod->name);
    return;
  }
  if (S.prog->workflow) {
    diag_error(d->name_loc, "more than one workflow");
    diag_note(S.prog->workflow->name_loc, "the first workflow is here");
    return;
  }
  S.prog->workflow = d;
  if (d->ret)
    diag_error(d->ret->loc, "a workflow returns nothing");
  for (Decl *p = d->params; p; p = p->next) {
    Type *t = p->type;
    check_param_flag(p);
    if (!is_err(t) && !(ty_is_numeric(t) || t->kind == TY_BOOL || t->kind == TY_STR))
      diag_error(p->texpr->loc, "workflow parameter '%s' has type %s; flags are bool, i32, i64, f32, f64 or str",
                 p->name, ty_str(t));
  }
}

static void check_actor(Decl *d) {
  check_struct_fields(d);
  for (Decl *f = d->fields; f; f = f->next) {
    if (f->value) {
      S.scope = NULL;
      scope_push();
      S.fn = d;
      S.actor = NULL;
      if (f->texpr) {
        expect_type(f->value, f->type, arena_printf("field '%s'", f->name));
      } else {
        check_expr(f->value, NULL);
        settle_default(f->value);
        f->type = f->value->ty;
      }
      S.scope = NULL;
      S.fn = NULL;
    }
  }
  for (Decl *m = d->methods; m; m = m->next) {
    resolve_signature(m);
    m->mangled = arena_printf("%s%s%s.%s", *S.mod->name ? S.mod->name : "", *S.mod->name ? "." : "", d->name, m->name);
    for (Decl *o = d->methods; o != m; o = o->next)
      if (!strcmp(o->name, m->name)) {
        diag_error(m->name_loc, "method '%s' is declared twice in actor '%s'", m->name, d->name);
        diag_note(o->name_loc, "first declared here");
      }
    for (Decl *f = d->fields; f; f = f->next)
      if (!strcmp(f->name, m->name))
        diag_error(m->name_loc, "method '%s' has the name of a field of actor '%s'", m->name, d->name);
    check_annots(m);
  }
  if (d->init) {
    resolve_signature(d->init);
    d->init->mangled = arena_printf("%s%s%s.init", *S.mod->name ? S.mod->name : "", *S.mod->name ? "." : "", d->name);
  }
}

static void mangle(Decl *d) {
  const char *prefix = *S.mod->name ? S.mod->name : "";
  d->mangled = *prefix ? arena_printf("%s.%s", prefix, d->name) : d->name;
}

/* Overloads need distinct symbols: add the parameter types. */
static void mangle_overloads(Decl *f) {
  if (!f->overload)
    return;
  for (Decl *g = f; g; g = g->overload) {
    Buf b = {0};
    buf_puts(&b, g->mangled);
    for (Decl *p = g->params; p; p = p->next)
      buf_printf(&b, "$%s", ty_str(p->type));
    g->mangled = arena_strdup(b.data);
    buf_free(&b);
  }
  for (Decl *g = f; g; g = g->overload)
    for (Decl *h = g->overload; h; h = h->overload)
      if (!strcmp(g->mangled, h->mangled)) {
        diag_error(h->name_loc, "function '%s' is already defined with the same parameter types", h->name);
        diag_note(g->name_loc, "the first definition is here");
      }
}

static void check_module(Module *m) {
  if (m->checked)
    return;
  m->checked = true;
  Module *saved = S.mod;
  S.mod = m;
  /* Pass 1: constants, struct fields and signatures. */
  for (Decl *d = m->decls; d; d = d->next)
    if (d->kind == D_STRUCT)
      check_struct_fields(d);
  for (Decl *d = m->decls; d; d = d->next) {
    if (d->kind == D_STRUCT) {
      for (Decl *f = d->fields; f; f = f->next)
        if (struct_contains(d, f->type, 0)) {
          diag_error(f->name_loc, "struct '%s' contains itself through field '%s'; use an array to refer to another value",
                     d->name, f->name);
          f->type = T_ERR;
        }
    }
  }
  /* Signatures before constants, so that 'const N: i64 = f()' sees f's
   * result type and reports only that a call is not constant. */
  for (Decl *d = m->decls; d; d = d->next)
    resolve_signature(d);
  for (Decl *d = m->decls; d; d = d->next)
    if (d->kind == D_CONST)
      check_const(d);
  for (Decl *d = m->decls; d; d = d->next) {
    mangle(d);
    if (d->kind == D_ACTOR)
      check_actor(d);
    if (d->kind != D_IMPORT && d->kind != D_CONST)
      check_annots(d);
    else if (d->annots)
      diag_error(d->annots->loc, "annotations are not allowed on %s", a_what(d));
  }
  for (Decl *d = m->decls; d; d = d->next)
    if (d->kind == D_FN && symtab_get(m->symtab, d->name) == d)
      mangle_overloads(d);
  /* Pass 2: bodies. */
  for (Decl *d = m->decls; d; d = d->next) {
    switch (d->kind) {
    case D_FN:
      if (d->is_extern || !d->body || d->tparam)
        check_extern(d);
      else
        check_body(d, NULL);
      break;
    case D_TASK: case D_KERNEL:
      check_body(d, NULL);
      break;
    case D_WORKFLOW:
      check_workflow(d);
      check_body(d, NULL);
      break;
    case D_ACTOR:
      if (d->init)
        check_body(d->init, d);
      for (Decl *x = d->methods; x; x = x->next)
        check_body(x, d);
      break;
    default:
      break;
    }
  }
  S.mod = saved;
}

bool sema_program(Program *p) {
  T_ERR = ty_prim(TY_ERROR);
  T_VOID = ty_prim(TY_VOID);
  T_BOOL = ty_prim(TY_BOOL);
  T_I32 = ty_prim(TY_I32);
  T_I64 = ty_prim(TY_I64);
  T_F32 = ty_prim(TY_F32);
  T_F64 = ty_prim(TY_F64);
  T_STR = ty_prim(TY_STR);
  T_UINT = ty_prim(TY_UNTYPED_INT);
  T_UFLOAT = ty_prim(TY_UNTYPED_FLOAT);
  T_MODULE = ty_prim(TY_MODULE);
  T_TENSOR = ty_prim(TY_TENSOR);
  memset(&S, 0, sizeof S);
  memset(&std_imports, 0, sizeof std_imports); /* the arena it pointed into is gone */
  S.prog = p;
  p->modules = NULL;
  p->workflow = NULL;
  Module *m = p->main;
  m->name = "";
  m->state = 1;
  remember_loaded(m);
  register_items(m);
  m->state = 2;
  link_module(m); /* after every import: main goes last */
  for (Module *x = p->modules; x; x = x->next)
    check_module(x);
  return diag_error_count() == 0;
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
