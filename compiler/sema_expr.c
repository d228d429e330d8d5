/*
 * sema_expr.c — the generic expression checks: operators, names, fields,
 * indexing, literals and comprehensions, and calls (binding named and
 * default arguments, overloads, generic @extern functions, actor methods,
 * function values).
 *
 * Design: check_expr gives every expression a concrete type, or poisons it
 * with TY_ERROR so one mistake gives one message.  Where an expression
 * belongs to a domain (a str method, a tensor operator, spawn) the check
 * calls through sema.dom (sema_internal.h), so this file names no domain
 * function; the domains call back into check_expr for their operands.
 */
#include "sema_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ expected types */

/* Checks e against the type want and settles its literals; reports a
 * mismatch in the words of what (e.g. "argument 'x' of 'f'"). */
bool expect_type(Node *e, Type *want, const char *what) {
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

void set_argv(Node *call, Node **argv, int argc) {
  call->argv = arena_alloc(sizeof(Node *) * (size_t)(argc ? argc : 1));
  memcpy(call->argv, argv, sizeof(Node *) * (size_t)argc);
  call->argc = argc;
}

bool builtin_arity(Node *call, const char *name, int want, int have) {
  if (want == have)
    return true;
  diag_error(call->loc, "'%s' takes %d argument%s, found %d", name, want, want == 1 ? "" : "s", have);
  return false;
}

/* A float math argument: f32 or f64, untyped becomes f64. */
Type *float_arg(Node *a, const char *fname) {
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
Type *unify_numeric(Node *a, Node *b, const char *what, Loc at) {
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

Type *array_arg(Node *a, const char *fname, bool numeric) {
  Type *t = check_expr(a, NULL);
  if (is_err(t))
    return T_ERR;
  if (t->kind != TY_ARRAY || (numeric && !ty_is_gpu_elem(t->elem)))
    return err_at(a->loc, "'%s' needs a numeric array (f32[], f64[], i32[] or i64[]), found %s", fname, ty_str(t));
  return t;
}

/* Two floats of one type (pow, atan2): untyped literals become f64. */
Type *float_pair(Node *call, Node **argv, const char *name) {
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

/* ---------------------------------------------------------- call binding */

/* Matches call arguments to params (positional, then named), filling in
 * defaults; checks types when check_types.  Returns false on mismatch. */
bool bind_args(Node *call, Decl *params, const char *what, bool report) {
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

void check_call_args(Node *call, Decl *params, const char *what) {
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

Type *call_function(Node *call, Decl *f) {
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
Type *fn_value(Node *e, Decl *d, Type *want) {
  if (sema.in_kernel)
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
    if (sema.actor) {
      Decl *m = find_method(sema.actor, name);
      if (m) {
        call->callkind = CALL_SELF_METHOD;
        return call_function(call, m);
      }
    }
    Decl *d = lookup_item(sema.mod, name);
    if (!d) {
      Type *gt = sema.dom->check_global_call(call, name); /* builtins, then @global functions */
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
      Module *m = module_by_alias(sema.mod, recv->name);
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
      return sema.dom->call_map_method(call, recv, rt, c->name);
    if (rt->kind == TY_TENSOR)
      return sema.dom->check_tensor_method(call, recv, c->name);
    Type *dm = sema.dom->check_data_method(call, recv, rt, c->name);
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

const char *op_name(int op) {
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
    return sema.dom->check_tensor_binary(e, ta, tb);
  if (ta->kind == TY_ARRAY || tb->kind == TY_ARRAY)
    return sema.dom->check_array_binary(e, ta, tb);
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

static Type *not_a_value(Node *e, Decl *d);

static Type *check_name(Node *e, Type *want) {
  Var *v = lookup_var(e->name);
  if (v) {
    e->var = v;
    v->used = true;
    if (sema.in_kernel && v->kind == V_FIELD)
      return err_at(e->loc, "actor field '%s' cannot be used in a kernel", e->name);
    return v->ty;
  }
  if (sema.actor && find_method(sema.actor, e->name))
    return not_a_value(e, find_method(sema.actor, e->name));
  Decl *d = lookup_item(sema.mod, e->name);
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
      if (sema.in_kernel && !ty_is_numeric(d->type) && d->type->kind != TY_BOOL)
        return err_at(e->loc, "constant '%s' of type %s cannot be used in a kernel", e->name, ty_str(d->type));
      return d->type;
    case D_IMPORT:
      return T_MODULE;
    default:
      return err_at(e->loc, "'%s' is %s, not a value", e->name, a_what(d));
    }
  }
  Type *dt = sema.dom->check_data_name(e);
  if (dt)
    return dt;
  Type *gt = sema.dom->check_global_name(e, want);
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
    Module *m = module_by_alias(sema.mod, recv->name);
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
    return sema.dom->check_tensor_index(e);
  Type *dt = sema.dom->check_data_index(e, t);
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
  Module *m = sema.mod;
  if (e->qual) {
    m = module_by_alias(sema.mod, e->qual);
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
      return sema.dom->check_tensor_unary(e);
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
    return sema.dom->check_await(e);
  case N_SPAWN:
    return sema.dom->check_spawn(e);
  case N_LAUNCH:
    return sema.dom->check_launch(e);
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

Type *check_expr(Node *e, Type *want) {
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

/* The element type a for loop or comprehension walks. */
Type *check_for_source(Node *src, const char *var, Loc at) {
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
  if (sema.in_kernel) {
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
