/*
 * codegen_stmt.c — lowering statements: let, assignment (in place where
 * it can be: s += t appends, xs[i] op= v), if, while, for over ranges and
 * arrays, return, and blocks with their owned slots released at exit.
 */
#include "codegen_internal.h"

#include <string.h>

static void stmt(Node *n);

/* ----------------------------------------------------- statements */

static void let_stmt(Node *n) {
  Var *v = n->var;
  Val x = expr(n->lhs);
  LLVMValueRef slot = entry_alloca(lt_mem(v->ty), v->name);
  v->llvm = slot;
  store_mem(v->ty, own(v->ty, x), slot);
  di_declare(v, slot, 0);
  push_owned(slot, v->ty);
}

/* A variable or a field path of one (`s`, `d.body`, an actor's `buf`), not
 * an array element: the string an array holds is never grown in place, as
 * the array may be shared with code that read the element and then called
 * a function that appends to it. */
static bool var_path(Node *n) {
  while (n->kind == N_FIELD && addressable(n))
    n = n->lhs;
  return n->kind == N_NAME && n->var;
}

/* Do a and b name the same variable or the same field path of one
 * (`s`, `d.body`, an actor's `buf`)?  Indexing is left out: its index
 * would be evaluated twice. */
static bool same_place(Node *a, Node *b) {
  if (a->kind != b->kind)
    return false;
  if (a->kind == N_NAME)
    return a->var && a->var == b->var;
  if (a->kind == N_FIELD)
    return addressable(a) && addressable(b) && a->field_index == b->field_index &&
           same_place(a->lhs, b->lhs);
  return false;
}

/* The e of `x = x + e` on a str, when it may be appended to x in place:
 * evaluating e first must not change x (only a self method call can, and
 * only an actor's fields). */
static Node *append_operand(Node *n) {
  Node *r = n->rhs;
  if (n->op != '=' || n->lhs->ty->kind != TY_STR || r->kind != N_BINARY || r->op != '+' ||
      !var_path(n->lhs) || !same_place(n->lhs, r->lhs))
    return NULL;
  Node *base = n->lhs;
  while (base->kind == N_FIELD)
    base = base->lhs;
  if (base->var->kind == V_FIELD && calls_own_method(r->rhs))
    return NULL;
  return r->rhs;
}

/* `x += e` and `x = x + e` on a str: sf_str_append takes the slot's
 * reference and grows the string in place when it was the only one, so a
 * loop of appends is linear, not quadratic. */
static void append_stmt(Node *n, Node *operand) {
  Type *t = n->lhs->ty;
  Val r = expr(operand);
  LVal lv = lvalue(n->lhs);
  LLVMValueRef old = lv_load(n->lhs, lv);
  lv_store(n->lhs, lv, RT(sf_str_append, old, r.v));
  drop(t, r);
  lvalue_done(lv);
}

static void assign_stmt(Node *n) {
  Type *t = n->lhs->ty;
  if (n->op == '=' && n->lhs->kind == N_INDEX && n->lhs->lhs->ty->kind == TY_MAP) {
    cg.dom->map_put_stmt(n);
    return;
  }
  Node *operand = n->op == '+' && t->kind == TY_STR && var_path(n->lhs) ? n->rhs : append_operand(n);
  if (operand) {
    append_stmt(n, operand);
    return;
  }
  Val r = expr(n->rhs);
  LVal lv = lvalue(n->lhs);
  if (n->op == '=') {
    LLVMValueRef nv = own(t, r);
    if (ty_has_refs(t)) {
      LLVMValueRef old = lv_load(n->lhs, lv);
      lv_store(n->lhs, lv, nv);
      release_value(t, old);
    } else {
      lv_store(n->lhs, lv, nv);
    }
  } else if (t->kind == TY_TENSOR) {
    /* t op= x is t = t op x: a new tensor replaces the old one. */
    LLVMValueRef old = lv_load(n->lhs, lv);
    lv_store(n->lhs, lv, cg.dom->tensor_apply(n->op, t, old, n->rhs->ty, r.v, n->loc));
    release_value(t, old);
    drop(n->rhs->ty, r);
  } else if (t->kind == TY_STR) {
    /* An array element: a new string, never the old one grown (var_path). */
    LLVMValueRef old = lv_load(n->lhs, lv);
    lv_store(n->lhs, lv, str_op('+', old, r.v));
    release_value(t, old);
    drop(t, r);
  } else {
    LLVMValueRef old = lv_load(n->lhs, lv);
    lv_store(n->lhs, lv, arith(n->op, t, old, r.v, n->loc));
  }
  lvalue_done(lv);
}

static void if_stmt(Node *n) {
  LLVMValueRef c = expr(n->cond).v;
  LLVMBasicBlockRef th = new_block("then"), el = n->els ? new_block("else") : NULL,
                    end = new_block("endif");
  LLVMBuildCondBr(cg.b, c, th, el ? el : end);
  LLVMPositionBuilderAtEnd(cg.b, th);
  block(n->then);
  LLVMBuildBr(cg.b, end);
  if (el) {
    LLVMPositionBuilderAtEnd(cg.b, el);
    if (n->els->kind == N_IF)
      stmt(n->els);
    else
      block(n->els);
    LLVMBuildBr(cg.b, end);
  }
  LLVMPositionBuilderAtEnd(cg.b, end);
}

static void while_stmt(Node *n) {
  LLVMBasicBlockRef cond = new_block("while.cond"), body = new_block("while.body"),
                    end = new_block("while.end");
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, cond);
  LLVMBuildCondBr(cg.b, expr(n->cond).v, body, end);
  LLVMPositionBuilderAtEnd(cg.b, body);
  Loop lp = {end, cond, cg.nowned, cg.fn->loop};
  cg.fn->loop = &lp;
  block(n->body);
  cg.fn->loop = lp.up;
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, end);
}

/* for v in a..b: a hidden counter drives the loop, so the body cannot
 * change the iteration even if it could assign v. */
static void for_range(Node *n) {
  Var *v = n->var;
  Type *it = n->rhs->lhs->ty;
  LLVMValueRef lo = expr(n->rhs->lhs).v, hi = expr(n->rhs->rhs).v;
  LLVMValueRef ctr = entry_alloca(lt_val(it), "for.i");
  v->llvm = entry_alloca(lt_mem(v->ty), v->name);
  di_declare(v, v->llvm, 0);
  store(lo, ctr);
  LLVMBasicBlockRef cond = new_block("for.cond"), body = new_block("for.body"),
                    step = new_block("for.step"), end = new_block("for.end");
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, cond);
  LLVMValueRef i = load(lt_val(it), ctr);
  LLVMBuildCondBr(cg.b, LLVMBuildICmp(cg.b, LLVMIntSLT, i, hi, ""), body, end);
  LLVMPositionBuilderAtEnd(cg.b, body);
  store(i, v->llvm);
  Loop lp = {end, step, cg.nowned, cg.fn->loop};
  cg.fn->loop = &lp;
  block(n->body);
  cg.fn->loop = lp.up;
  LLVMBuildBr(cg.b, step);
  LLVMPositionBuilderAtEnd(cg.b, step);
  store(LLVMBuildAdd(cg.b, load(lt_val(it), ctr), LLVMConstInt(lt_val(it), 1, 0), ""), ctr);
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, end);
}

/* for v in array: the array is held (+1) for the loop, and v holds its own
 * reference to each element, so the body may reassign both freely. */
static void for_array(Node *n) {
  Var *v = n->var;
  Type *at = n->rhs->ty, *et = at->elem;
  int outer = cg.nowned;
  Val a = expr(n->rhs);
  LLVMValueRef arr = own(at, a);
  LLVMValueRef aslot = entry_alloca(cg.P, "for.arr");
  store(arr, aslot);
  push_owned(aslot, at);
  LLVMValueRef len = arr_len(arr);
  LLVMValueRef ctr = entry_alloca(cg.i64, "for.i");
  v->llvm = entry_alloca(lt_mem(v->ty), v->name);
  di_declare(v, v->llvm, 0);
  store(ci64(0), ctr);
  LLVMBasicBlockRef cond = new_block("for.cond"), body = new_block("for.body"),
                    step = new_block("for.step"), end = new_block("for.end");
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, cond);
  LLVMValueRef i = load(cg.i64, ctr);
  /* The elements the array had at the start, fewer if the body pops some
   * (xs.pop() moved them out).  With no call in the body LICM hoists the
   * second length load, so numeric loops pay nothing for it. */
  LLVMValueRef more = LLVMBuildAnd(cg.b, LLVMBuildICmp(cg.b, LLVMIntSLT, i, len, ""),
                                   LLVMBuildICmp(cg.b, LLVMIntSLT, i, arr_len(arr), ""), "");
  LLVMBuildCondBr(cg.b, more, body, end);
  LLVMPositionBuilderAtEnd(cg.b, body);
  int mark = cg.nowned;
  LLVMValueRef x = load_elem(et, elem_ptr(arr, et, i));
  retain_value(et, x);
  store_mem(et, x, v->llvm);
  Loop lp = {end, step, mark, cg.fn->loop};
  cg.fn->loop = &lp;
  push_owned(v->llvm, et);
  block(n->body);
  scope_end(mark);
  cg.fn->loop = lp.up;
  LLVMBuildBr(cg.b, step);
  LLVMPositionBuilderAtEnd(cg.b, step);
  store(LLVMBuildAdd(cg.b, load(cg.i64, ctr), ci64(1), ""), ctr);
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, end);
  scope_end(outer);
}

static void return_stmt(Node *n) {
  LLVMValueRef rv = NULL;
  if (n->lhs) {
    Val v = expr(n->lhs);
    if (n->lhs->ty->kind != TY_VOID)
      rv = own(n->lhs->ty, v);
  }
  release_slots(cg.fn->base, true);
  if (terminated()) {
    start_dead_block();
    return;
  }
  if (rv && cg.fn->ret->kind != TY_VOID)
    LLVMBuildRet(cg.b, rv);
  else
    LLVMBuildRetVoid(cg.b);
  start_dead_block();
}

static void stmt(Node *n) {
  di_set_loc(n->loc);
  switch (n->kind) {
  case N_LET: let_stmt(n); break;
  case N_ASSIGN: assign_stmt(n); break;
  case N_EXPR_STMT: {
    Val v = expr(n->lhs);
    if (n->lhs->ty && n->lhs->ty->kind != TY_VOID)
      drop(n->lhs->ty, v);
    break;
  }
  case N_IF: if_stmt(n); break;
  case N_WHILE: while_stmt(n); break;
  case N_FOR:
    if (n->rhs->kind == N_RANGE)
      for_range(n);
    else if (is_split_call(n->rhs))
      cg.dom->for_split(n);
    else
      for_array(n);
    break;
  case N_BREAK:
  case N_CONTINUE: {
    Loop *lp = cg.fn->loop;
    if (!lp)
      ice("codegen: break outside a loop");
    release_to(lp->mark);
    LLVMBuildBr(cg.b, n->kind == N_BREAK ? lp->brk : lp->cont);
    start_dead_block();
    break;
  }
  case N_RETURN: return_stmt(n); break;
  case N_BLOCK: block(n); break;
  default: {
    Val v = expr(n);
    if (n->ty && n->ty->kind != TY_VOID)
      drop(n->ty, v);
  }
  }
}

/* A block, with the settle points settle.c marked around its statements. */
void block(Node *n) {
  int mark = cg.nowned;
  for (Node *s = n && n->kind == N_BLOCK ? n->body : n; s; s = s->next) {
    if (s->settle_before)
      RT0(sf_gpu_settle);
    stmt(s);
    if (s->settle_after && !terminated())
      RT0(sf_gpu_settle);
  }
  scope_end(mark);
}
