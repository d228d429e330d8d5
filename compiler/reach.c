/*
 * reach.c — which items codegen lowers: those reachable from the workflow.
 *
 * A program imports std modules with hundreds of functions and calls a
 * few of them; lowering all of them to IR and letting LLVM's global DCE
 * delete them cost two thirds of a -O2 compile (docs/performance.md,
 * "Compile time").  This pass marks Decl.reached on the checked AST
 * instead, as clang emits a static function only once something uses it.
 *
 * Key design choice: the walk follows every Decl an expression names
 * (Node.decl: calls, names of functions used as values, constants, struct
 * literals, spawns, launches) and every actor a type names, and it keeps
 * an actor whole: the runtime runs its init and any method through the
 * descriptor, so a spawned actor's methods are all entry points.  The
 * roots are the workflow (sf_program.main_fn) and nothing else: everything
 * else the runtime calls (thunks, method descriptors, kernel glue, the
 * function-value table) hangs off an item the walk reaches, so the set
 * is a superset of what LLVM's global DCE would keep.  info() in
 * codegen_expr.c refuses an item the walk missed as an internal error
 * rather than emitting a call to a function that was never declared.
 * Without a workflow (--emit=llvm of a module) everything is reached.
 */
#include "sflowc.h"

#include <stdlib.h>

static void reach_decl(Decl *d);
static void reach_list(Node *n);

/* The actors a type names (a handle, a group, inside arrays, maps,
 * futures and function types). */
static void reach_type(Type *t) {
  for (; t; t = t->elem) {
    switch (t->kind) {
    case TY_ACTOR:
    case TY_GROUP:
      if (t->decl)
        reach_decl(t->decl);
      return;
    case TY_MAP: reach_type(t->key); break;
    case TY_FN:
      for (int i = 0; i < t->nparams; i++)
        reach_type(t->params[i]);
      break;
    case TY_ARRAY:
    case TY_FUTURE: break;
    default: return; /* no actor below (TY_TPARAM's fields mean other things) */
    }
  }
}

/* One expression or statement and what hangs below it. */
static void reach_node(Node *n) {
  if (!n)
    return;
  if (n->decl)
    reach_decl(n->decl);
  reach_type(n->ty);
  reach_type(n->targ);
  reach_type(n->targ2);
  reach_list(n->lhs);
  reach_list(n->rhs);
  reach_list(n->cond);
  reach_list(n->then);
  reach_list(n->els);
  reach_list(n->body);
  reach_list(n->args);
  reach_list(n->callee);
  reach_list(n->recv);
  /* argv holds the arguments in parameter order with the defaults filled
   * in: a default is a parameter's expression, not in n->args. */
  for (int i = 0; i < n->argc; i++)
    reach_node(n->argv[i]);
}

static void reach_list(Node *n) {
  for (; n; n = n->next)
    reach_node(n);
}

static void reach_fields(Decl *f) {
  for (; f; f = f->next) {
    reach_type(f->type);
    reach_node(f->value);
  }
}

/* A function-like item: its body, its defaults and the types it takes. */
static void reach_body(Decl *d) {
  d->reached = true;
  reach_fields(d->params);
  reach_type(d->ret_type);
  reach_list(d->body);
}

static void reach_actor(Decl *a) {
  reach_fields(a->fields);
  if (a->init)
    reach_body(a->init);
  for (Decl *m = a->methods; m; m = m->next)
    reach_body(m);
}

static void reach_decl(Decl *d) {
  if (d->reached)
    return;
  d->reached = true;
  switch (d->kind) {
  case D_FN:
  case D_TASK:
  case D_KERNEL:
  case D_WORKFLOW: reach_body(d); break;
  case D_ACTOR: reach_actor(d); break;
  case D_STRUCT: reach_fields(d->fields); break;
  case D_CONST: reach_node(d->value); break;
  case D_METHOD:
  case D_INIT:
  case D_FIELD:
  case D_PARAM:
    if (d->parent)
      reach_decl(d->parent);
    reach_node(d->value);
    break;
  default: break;
  }
}

static void reach_all(Program *p) {
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next) {
      d->reached = true;
      for (Decl *s = d->init; s; s = s->next)
        s->reached = true;
      for (Decl *s = d->methods; s; s = s->next)
        s->reached = true;
    }
}

void reach_program(Program *p) {
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next)
      d->reached = false;
  if (getenv("SFLOWC_EMIT_ALL") || !p->workflow) {
    reach_all(p);
    return;
  }
  reach_decl(p->workflow);
}
