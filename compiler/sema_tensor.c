/*
 * sema_tensor.c — std.nn's tensor type in the checker: operators, unary
 * minus and matmul between tensors and with an f32, t[i] and t[a..b], and
 * tensor methods (x.name(args) being std.nn's name(x, args)).
 */
#include "sema_internal.h"

#include <string.h>

/* ------------------------------------------------------------- tensors */

/* The tensor type of std.nn (docs/language.md, "Tensors"): the operators
 * + - * / between tensors and with an f32 on either side, unary minus and
 * `@` (matmul), and tensor methods, x.name(args) being std.nn's
 * name(x, args) (UFCS).  As with the data core, each hook is called
 * through sema.dom, out of line, so that check_expr's frame stays small. */

/* t[i] (row i; negative from the end) and t[a..b] (rows a to b-1): both
 * tensors, views the runtime checks against the length. */
Type *check_tensor_index(Node *e) {
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
bool tensor_index_assignable(Node *e) {
  diag_error(e->loc, "cannot assign to %s of a tensor: tensors are values; build a new one "
             "instead (nn.stack or nn.cat of rows, or nn.tensor(data, shape) from an array)",
             e->rhs->kind == N_RANGE ? "a slice" : "a row");
  return false;
}

/* x.name(args) on a tensor x: std.nn's name(x, args...).  The receiver is
 * bound as the first argument; call->args is given back unchanged so the
 * AST dump and the language server see the call as written. */
Type *check_tensor_method(Node *call, Node *recv, const char *name) {
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
Type *check_tensor_binary(Node *e, Type *ta, Type *tb) {
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
Type *check_tensor_unary(Node *e) {
  if (kernel_forbid(e->loc, "a tensor"))
    return T_ERR;
  return T_TENSOR;
}

/* t op= x on a tensor variable or field: t = t op x, a new tensor. */
void check_tensor_assign(Node *s) {
  Type *t = check_expr(s->rhs, NULL);
  if (is_err(t))
    return;
  if (!is_tensor(t) && !tensor_scalar_ok(s->rhs, t))
    diag_error(s->rhs->loc, "mismatched types: '%c=' on a tensor needs a tensor or an f32, found %s%s",
               s->op, ty_str(t), ty_is_numeric(t) ? "; convert it with f32(x)" : "");
}
