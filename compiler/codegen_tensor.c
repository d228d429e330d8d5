/*
 * codegen_tensor.c — lowering std.nn's tensor operators: + - * / and @
 * between tensors and with an f32, unary minus, t[i] and t[a..b].
 */
#include "codegen_internal.h"

/* ------------------------------------------------------- tensors */

/* The tensor operators (sema_tensor.c): each is one call of the nn
 * layer's ABI (sflow.h, "tensors"), which borrows its operands and returns
 * a new tensor (owned).  A scalar operand is an f32, passed with which
 * side it was written on, since - and / do not commute. */
static int32_t tensor_op(int op) {
  switch (op) {
  case '+': return SF_TOP_ADD;
  case '-': return SF_TOP_SUB;
  case '*': return SF_TOP_MUL;
  case '/': return SF_TOP_DIV;
  case '@': return SF_TOP_MATMUL;
  }
  ice("codegen: tensor operator %d", op);
}

/* l op r, of types lt and rty (one of them a tensor), both evaluated. */
LLVMValueRef tensor_apply(int op, Type *lt, LLVMValueRef l, Type *rty, LLVMValueRef r, Loc loc) {
  LLVMValueRef top = ci32(tensor_op(op)), L = loc_const(loc);
  if (lt->kind == TY_TENSOR && rty->kind == TY_TENSOR)
    return RT(sf_tensor_binop, top, l, r, L);
  bool scalar_left = lt->kind != TY_TENSOR;
  return RT(sf_tensor_scalar, top, scalar_left ? r : l, scalar_left ? l : r,
            LLVMConstInt(cg.i1, scalar_left, 0), L);
}

Val tensor_binary(Node *n) {
  Val l = expr(n->lhs), r = expr(n->rhs);
  LLVMValueRef v = tensor_apply(n->op, n->lhs->ty, l.v, n->rhs->ty, r.v, n->loc);
  drop(n->lhs->ty, l);
  drop(n->rhs->ty, r);
  return mkval(v, true);
}

/* t[i] and t[a..b]: views from the runtime, which checks the bounds. */
Val tensor_index(Node *n) {
  Val a = expr(n->lhs);
  LLVMValueRef L = loc_const(n->loc), r;
  if (n->rhs->kind == N_RANGE) {
    LLVMValueRef lo = to_i64(n->rhs->lhs->ty, expr(n->rhs->lhs).v);
    LLVMValueRef hi = to_i64(n->rhs->rhs->ty, expr(n->rhs->rhs).v);
    r = RT(sf_tensor_slice, a.v, lo, hi, L);
  } else {
    r = RT(sf_tensor_index, a.v, to_i64(n->rhs->ty, expr(n->rhs).v), L);
  }
  drop(n->lhs->ty, a);
  return mkval(r, true);
}

Val tensor_neg(Node *n) {
  Val a = expr(n->lhs);
  LLVMValueRef v = RT(sf_tensor_neg, a.v, loc_const(n->loc));
  drop(n->lhs->ty, a);
  return mkval(v, true);
}
