/*
 * sema_task.c — the expressions that start work elsewhere: spawn (an
 * actor, or a group of them with `* n`), await (of a future, or of an
 * array of futures) and launch (a kernel over n threads).
 */
#include "sema_internal.h"

#include <string.h>

/* ----------------------------------------------------- spawn and await */

Type *check_spawn(Node *e) {
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
    d = lookup_item(sema.mod, c->name);
    if (!d) {
      undefined_name(c->loc, c->name, "actor");
      return T_ERR;
    }
  } else if (c->kind == N_FIELD && c->lhs->kind == N_NAME) {
    Module *m = module_by_alias(sema.mod, c->lhs->name);
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

Type *check_await(Node *e) {
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

Type *check_launch(Node *e) {
  if (sema.in_kernel) {
    diag_error(e->loc, "a kernel cannot launch another kernel");
    return T_ERR;
  }
  Decl *d = lookup_item(sema.mod, e->name);
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
