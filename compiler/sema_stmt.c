/*
 * sema_stmt.c — the statement checks: let and var, assignment (which
 * places are assignable, and why not), if, while, for, break, continue,
 * return, blocks, and whether a statement always returns.
 */
#include "sema_internal.h"

#include <string.h>

/* ---------------------------------------------------------- statements */

static void check_stmt(Node *s);

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
      return sema.dom->tensor_index_assignable(e);
    if (e->rhs->kind == N_RANGE || (e->lhs->ty && e->lhs->ty->kind == TY_STR))
      return sema.dom->data_index_assignable(e);
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
  if (sema.in_kernel && t->kind == TY_ARRAY) {
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
    sema.dom->check_tensor_assign(s);
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
  if (sema.in_kernel && !is_err(t) && !ty_is_numeric(t) && t->kind != TY_BOOL)
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
    sema.loops++;
    check_block(s->body);
    sema.loops--;
    return;
  case N_FOR: {
    scope_push();
    Type *vt = check_for_source(s->rhs, s->name, s->name_loc);
    s->var = declare_var(s->name, vt, s->name_loc, false, V_LOCAL);
    sema.loops++;
    check_block(s->body);
    sema.loops--;
    scope_pop();
    return;
  }
  case N_BREAK:
  case N_CONTINUE:
    if (!sema.loops)
      diag_error(s->loc, "'%s' outside of a loop", s->kind == N_BREAK ? "break" : "continue");
    return;
  case N_RETURN:
    if (s->lhs) {
      if (sema.ret->kind == TY_VOID) {
        check_expr(s->lhs, NULL);
        diag_error(s->lhs->loc, "%s '%s' returns no value; remove the value or declare a result type ('-> T')",
                   decl_what(sema.fn), sema.fn->name);
        return;
      }
      expect_type(s->lhs, sema.ret, "the returned value");
    } else if (sema.ret->kind != TY_VOID && !is_err(sema.ret)) {
      diag_error(s->loc, "%s '%s' must return a value of type %s", decl_what(sema.fn), sema.fn->name, ty_str(sema.ret));
    }
    return;
  case N_BLOCK:
    check_block(s);
    return;
  default:
    ice("not a statement: kind %d", s->kind);
  }
}

void check_block(Node *b) {
  scope_push();
  for (Node *s = b->body; s; s = s->next)
    check_stmt(s);
  scope_pop();
}

/* Does control never fall off the end of this statement? */
bool terminates(Node *s) {
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
