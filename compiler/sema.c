/*
 * sema.c — semantic analysis, the pass: imports, items, annotations, the
 * checks of each kind of item, and sema_program.
 *
 * Design: one recursive walk over each module (dependencies first) that
 * resolves every name and gives every expression a concrete type, filling
 * the "filled by sema" fields of the AST so codegen never re-derives
 * anything.  Literals start untyped (as Go's constants do) and take the
 * type their context needs; an untyped literal that meets no context gets
 * i64 or f64.  Errors poison the expression's type with TY_ERROR, which is
 * accepted everywhere silently so one mistake gives one message.
 *
 * The walk is spread over files by what they check (sema_internal.h):
 * this file is the top and the only one that names the domain files, in
 * the table below that the generic checks call them through.
 */
#include "sema_internal.h"
#include "flagnames.h" /* runtime/: the flags every workflow executable parses */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where the generic checks meet a domain (sema_internal.h). */
static const SemaDomains domains = {
    .check_global_call = check_global_call,
    .check_global_name = check_global_name,
    .check_data_method = check_data_method,
    .call_map_method = call_map_method,
    .check_data_index = check_data_index,
    .data_index_assignable = data_index_assignable,
    .check_array_binary = check_array_binary,
    .check_data_name = check_data_name,
    .check_tensor_method = check_tensor_method,
    .check_tensor_index = check_tensor_index,
    .tensor_index_assignable = tensor_index_assignable,
    .check_tensor_binary = check_tensor_binary,
    .check_tensor_unary = check_tensor_unary,
    .check_tensor_assign = check_tensor_assign,
    .check_spawn = check_spawn,
    .check_await = check_await,
    .check_launch = check_launch,
};

/* -------------------------------------------------------------- imports */

static Module *load_module(const char *path, Loc at, Module *from);

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
  for (int i = 0; i < sema.nseen; i++)
    if (!strcmp(sema.seen[i]->name, name))
      return sema.seen[i];
  return NULL;
}

static void remember_loaded(Module *m) {
  if (sema.nseen == sema.capseen) {
    sema.capseen = sema.capseen ? sema.capseen * 2 : 16;
    Module **grown = arena_alloc(sizeof(Module *) * (size_t)sema.capseen);
    if (sema.nseen)
      memcpy(grown, sema.seen, sizeof(Module *) * (size_t)sema.nseen);
    sema.seen = grown;
  }
  sema.seen[sema.nseen++] = m;
}

/* Appends a module to the program's list once all of its imports have
 * loaded, so the list is a post-order of the import graph: every module
 * after everything it imports, whichever file imported it first.  Checking
 * walks this list, so a module's signatures are resolved before any body
 * that calls them is checked. */
static void link_module(Module *m) {
  Module **tail = &sema.prog->modules;
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


static void register_items(Module *m) {
  Module *saved = sema.mod;
  sema.mod = m;
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
  sema.mod = saved;
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
    /* Seen by lookup_global in the importers (sema_builtin.c). */
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
    sema.tparam = d->tparam; /* fn name<T, R>(...): T and R name the type parameters */
    sema.tparam2 = d->tparam2;
    resolve_params(d);
    d->ret_type = d->ret ? resolve_texpr(d->ret) : T_VOID;
    sema.tparam = sema.tparam2 = NULL;
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
  sema.fn = fn;
  sema.actor = actor;
  sema.ret = ret;
  sema.loops = 0;
  sema.in_kernel = fn->kind == D_KERNEL;
  sema.scope = NULL;
  scope_push();
  if (actor)
    for (Decl *f = actor->fields; f; f = f->next)
      f->var = declare_var(f->name, f->type, f->name_loc, f->mutable, V_FIELD), f->var->decl = f;
  scope_push();
  for (Decl *p = fn->params; p; p = p->next) {
    /* A repeated parameter was reported by resolve_params already. */
    Var *dup = scope_find_here(sema.scope, p->name);
    /* Inside a kernel a tensor parameter is the f32[] of its elements in
     * row-major order (the runtime passes its contiguous values, custom.c);
     * at the launch it is still a tensor. */
    Type *vt = sema.in_kernel && p->type && p->type->kind == TY_TENSOR ? ty_array(T_F32) : p->type;
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
  sema.scope = NULL;
  check_defaults(fn);
  begin_body(fn, actor, ret);
  check_block(fn->body);
  if (!is_err(ret) && ret->kind != TY_VOID && !terminates(fn->body)) {
    Loc end = fn->body->name_loc;
    diag_error(end, "%s '%s' must return a value of type %s on every path", decl_what(fn), fn->name, ty_str(ret));
  }
  sema.scope = NULL;
  sema.fn = NULL;
  sema.actor = NULL;
  sema.in_kernel = false;
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
  if (sema.mod != sema.prog->main) {
    diag_error(d->name_loc, "only the program's main file can declare a workflow (found one in module '%s')", sema.mod->name);
    return;
  }
  if (sema.prog->workflow) {
    diag_error(d->name_loc, "more than one workflow");
    diag_note(sema.prog->workflow->name_loc, "the first workflow is here");
    return;
  }
  sema.prog->workflow = d;
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
      sema.scope = NULL;
      scope_push();
      sema.fn = d;
      sema.actor = NULL;
      if (f->texpr) {
        expect_type(f->value, f->type, arena_printf("field '%s'", f->name));
      } else {
        check_expr(f->value, NULL);
        settle_default(f->value);
        f->type = f->value->ty;
      }
      sema.scope = NULL;
      sema.fn = NULL;
    }
  }
  for (Decl *m = d->methods; m; m = m->next) {
    resolve_signature(m);
    m->mangled = arena_printf("%s%s%s.%s", *sema.mod->name ? sema.mod->name : "", *sema.mod->name ? "." : "", d->name, m->name);
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
    d->init->mangled = arena_printf("%s%s%s.init", *sema.mod->name ? sema.mod->name : "", *sema.mod->name ? "." : "", d->name);
  }
}

static void mangle(Decl *d) {
  const char *prefix = *sema.mod->name ? sema.mod->name : "";
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
  Module *saved = sema.mod;
  sema.mod = m;
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
  sema.mod = saved;
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
  memset(&sema, 0, sizeof sema); /* the arena the last run pointed into is gone */
  sema.dom = &domains;
  sema.prog = p;
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
