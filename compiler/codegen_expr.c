/*
 * codegen_expr.c — lowering the generic expressions: lvalues, operators,
 * calls (direct, task, extern, method, function value), array literals
 * and comprehensions, function values, struct literals, fields, indexing.
 *
 * Design: expr yields a Val, OWNED or BORROWED (codegen.c says why);
 * where an expression belongs to a domain (a builtin, m[k], tensors,
 * spawn) it calls through cg.dom (codegen_internal.h), so this file names
 * no domain function.
 */
#include "codegen_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- lvalues */

/* &a[i], bounds-checked. */
static LLVMValueRef index_addr(LLVMValueRef a, Type *elem, Node *idxn, Loc l) {
  Val iv = expr(idxn);
  LLVMValueRef idx = to_i64(idxn->ty, iv.v);
  /* Both header loads come before the check, in the block that always
   * runs, so LICM can hoist them out of loops. */
  LLVMValueRef len = arr_len(a), data = arr_data(a);
  check_index(idx, len, l);
  return data_elem(data, elem, idx);
}


static LLVMValueRef var_addr(Var *v) {
  if (v->kind == V_FIELD) {
    if (!cg.fn->state)
      ice("codegen: actor field '%s' outside its actor", v->name);
    return struct_gep(cg.fn->state_ty, cg.fn->state, (unsigned)v->decl->index);
  }
  if (!v->llvm)
    ice("codegen: variable '%s' has no storage", v->name);
  return v->llvm;
}

bool addressable(Node *n) {
  if (n->kind == N_NAME)
    return n->var != NULL;
  if (n->kind == N_FIELD)
    return n->lhs->ty->kind == TY_STRUCT && !n->decl && addressable(n->lhs);
  return n->kind == N_INDEX;
}

LVal lvalue(Node *n) {
  switch (n->kind) {
  case N_NAME: return (LVal){var_addr(n->var), {0}, NULL};
  case N_FIELD: {
    LVal b = lvalue(n->lhs);
    b.ptr = struct_gep(lt_val(n->lhs->ty), b.ptr, (unsigned)n->field_index);
    return b;
  }
  case N_INDEX: {
    if (n->lhs->ty->kind == TY_MAP)
      return cg.dom->map_lvalue(n, false);
    Val a = expr(n->lhs);
    LLVMValueRef p = index_addr(a.v, n->ty, n->rhs, n->loc);
    return (LVal){p, a, n->lhs->ty};
  }
  default: ice("codegen: not an lvalue (node %d)", n->kind);
  }
}

void lvalue_done(LVal lv) {
  if (lv.basety)
    drop(lv.basety, lv.base);
}

/* Loads through an lvalue: element loads carry TBAA. */
LLVMValueRef lv_load(Node *n, LVal lv) {
  return n->kind == N_INDEX ? load_elem(n->ty, lv.ptr) : load_mem(n->ty, lv.ptr);
}
void lv_store(Node *n, LVal lv, LLVMValueRef v) {
  if (n->kind == N_INDEX)
    store_elem(n->ty, v, lv.ptr);
  else
    store_mem(n->ty, v, lv.ptr);
}

/* ----------------------------------------------------- operators */


static LLVMValueRef int_divrem(int op, LLVMValueRef l, LLVMValueRef r, Loc loc) {
  LLVMTypeRef t = LLVMTypeOf(l);
  LLVMValueRef zero = LLVMConstNull(t);
  LLVMBasicBlockRef ok = cold_if(LLVMBuildICmp(cg.b, LLVMIntEQ, r, zero, ""));
  RT(sf_div_zero, loc_const(loc));
  cold_end(ok);
  /* x / -1 is -x and x % -1 is 0, computed without the trapping sdiv. */
  LLVMValueRef m1 = LLVMBuildICmp(cg.b, LLVMIntEQ, r, LLVMConstAllOnes(t), "");
  LLVMValueRef rs = LLVMBuildSelect(cg.b, m1, LLVMConstInt(t, 1, 0), r, "");
  LLVMValueRef q = op == '/' ? LLVMBuildSDiv(cg.b, l, rs, "") : LLVMBuildSRem(cg.b, l, rs, "");
  LLVMValueRef alt = op == '/' ? LLVMBuildSub(cg.b, zero, l, "") : zero;
  return LLVMBuildSelect(cg.b, m1, alt, q, "");
}

LLVMValueRef arith(int op, Type *t, LLVMValueRef l, LLVMValueRef r, Loc loc) {
  LLVMBuilderRef b = cg.b;
  if (is_float(t)) {
    switch (op) {
    case '+': return LLVMBuildFAdd(b, l, r, "");
    case '-': return LLVMBuildFSub(b, l, r, "");
    case '*': return LLVMBuildFMul(b, l, r, "");
    case '/': return LLVMBuildFDiv(b, l, r, "");
    case '%': return LLVMBuildFRem(b, l, r, "");
    case '<': return LLVMBuildFCmp(b, LLVMRealOLT, l, r, "");
    case '>': return LLVMBuildFCmp(b, LLVMRealOGT, l, r, "");
    case TOK_LE: return LLVMBuildFCmp(b, LLVMRealOLE, l, r, "");
    case TOK_GE: return LLVMBuildFCmp(b, LLVMRealOGE, l, r, "");
    case TOK_EQ: return LLVMBuildFCmp(b, LLVMRealOEQ, l, r, "");
    case TOK_NE: return LLVMBuildFCmp(b, LLVMRealUNE, l, r, "");
    }
  } else {
    unsigned bits = LLVMGetIntTypeWidth(LLVMTypeOf(l));
    switch (op) {
    case '+': return LLVMBuildAdd(b, l, r, "");
    case '-': return LLVMBuildSub(b, l, r, "");
    case '*': return LLVMBuildMul(b, l, r, "");
    case '/':
    case '%': return int_divrem(op, l, r, loc);
    case '&': return LLVMBuildAnd(b, l, r, "");
    case '|': return LLVMBuildOr(b, l, r, "");
    case '^': return LLVMBuildXor(b, l, r, "");
    case TOK_SHL:
    case TOK_SHR: {
      if (LLVMTypeOf(r) != LLVMTypeOf(l))
        r = LLVMBuildIntCast2(b, r, LLVMTypeOf(l), 1, "");
      LLVMValueRef c = LLVMBuildAnd(b, r, LLVMConstInt(LLVMTypeOf(l), bits - 1, 0), "");
      return op == TOK_SHL ? LLVMBuildShl(b, l, c, "") : LLVMBuildAShr(b, l, c, "");
    }
    case '<': return LLVMBuildICmp(b, LLVMIntSLT, l, r, "");
    case '>': return LLVMBuildICmp(b, LLVMIntSGT, l, r, "");
    case TOK_LE: return LLVMBuildICmp(b, LLVMIntSLE, l, r, "");
    case TOK_GE: return LLVMBuildICmp(b, LLVMIntSGE, l, r, "");
    case TOK_EQ: return LLVMBuildICmp(b, LLVMIntEQ, l, r, "");
    case TOK_NE: return LLVMBuildICmp(b, LLVMIntNE, l, r, "");
    }
  }
  ice("codegen: operator %d on %s", op, ty_str(t));
}

LLVMValueRef str_op(int op, LLVMValueRef l, LLVMValueRef r) {
  switch (op) {
  case '+': return RT(sf_str_concat, l, r);
  case TOK_EQ: return RT(sf_str_eq, l, r);
  case TOK_NE: return LLVMBuildNot(cg.b, RT(sf_str_eq, l, r), "");
  default: {
    LLVMValueRef c = RT(sf_str_cmp, l, r);
    LLVMIntPredicate p = op == '<' ? LLVMIntSLT : op == '>' ? LLVMIntSGT
                         : op == TOK_LE ? LLVMIntSLE : LLVMIntSGE;
    return LLVMBuildICmp(cg.b, p, c, ci32(0), "");
  }
  }
}

static Val short_circuit(Node *n) {
  bool is_and = n->op == TOK_ANDAND;
  LLVMValueRef l = expr(n->lhs).v;
  LLVMBasicBlockRef from = LLVMGetInsertBlock(cg.b);
  LLVMBasicBlockRef rhs = new_block(is_and ? "and.rhs" : "or.rhs"), end = new_block("sc.end");
  if (is_and)
    LLVMBuildCondBr(cg.b, l, rhs, end);
  else
    LLVMBuildCondBr(cg.b, l, end, rhs);
  LLVMPositionBuilderAtEnd(cg.b, rhs);
  LLVMValueRef r = expr(n->rhs).v;
  LLVMBasicBlockRef rhs_end = LLVMGetInsertBlock(cg.b);
  LLVMBuildBr(cg.b, end);
  LLVMPositionBuilderAtEnd(cg.b, end);
  LLVMValueRef phi = LLVMBuildPhi(cg.b, cg.i1, "");
  LLVMValueRef vals[] = {LLVMConstInt(cg.i1, is_and ? 0 : 1, 0), r};
  LLVMBasicBlockRef bbs[] = {from, rhs_end};
  LLVMAddIncoming(phi, vals, bbs, 2);
  return mkval(phi, false);
}

static Val binary(Node *n) {
  if (n->op == TOK_ANDAND || n->op == TOK_OROR)
    return short_circuit(n);
  if (n->ty->kind == TY_TENSOR)
    return cg.dom->tensor_binary(n);
  Type *t = n->lhs->ty;
  if (t->kind == TY_ARRAY)
    return cg.dom->array_concat(n);
  Val l = expr(n->lhs);
  LLVMValueRef held = t->kind == TY_STR ? hold(t, l) : NULL; /* the right operand may fail */
  Val r = expr(n->rhs);
  if (t->kind == TY_STR) {
    LLVMValueRef v = str_op(n->op, l.v, r.v);
    unhold(t, held);
    drop(t, l);
    drop(t, r);
    return mkval(v, n->op == '+');
  }
  if (t->kind == TY_BOOL) {
    switch (n->op) {
    case TOK_EQ: return mkval(LLVMBuildICmp(cg.b, LLVMIntEQ, l.v, r.v, ""), false);
    case TOK_NE:
    case '^': return mkval(LLVMBuildXor(cg.b, l.v, r.v, ""), false);
    case '&': return mkval(LLVMBuildAnd(cg.b, l.v, r.v, ""), false);
    case '|': return mkval(LLVMBuildOr(cg.b, l.v, r.v, ""), false);
    }
  }
  return mkval(arith(n->op, t, l.v, r.v, n->loc), false);
}

static Val unary(Node *n) {
  if (n->ty->kind == TY_TENSOR)
    return cg.dom->tensor_neg(n);
  Val v = expr(n->lhs);
  if (n->op == '!')
    return mkval(LLVMBuildNot(cg.b, v.v, ""), false);
  if (is_float(n->ty))
    return mkval(LLVMBuildFNeg(cg.b, v.v, ""), false);
  return mkval(LLVMBuildSub(cg.b, LLVMConstNull(LLVMTypeOf(v.v)), v.v, ""), false);
}

/* ------------------------------------------------- calls and tasks */

/* What codegen holds for an item.  Only items reach.c marked are
 * declared, so asking for another function-like one is a bug of the walk. */
DInfo *info(Decl *d) {
  if (!d->llvm2) {
    bool fnlike = d->kind == D_FN || d->kind == D_TASK || d->kind == D_KERNEL ||
                  d->kind == D_ACTOR || d->kind == D_METHOD || d->kind == D_WORKFLOW;
    if (fnlike && !d->reached)
      ice("'%s' is used but reach.c did not reach it", d->mangled ? d->mangled : d->name);
    d->llvm2 = arena_alloc(sizeof(DInfo));
  }
  return d->llvm2;
}

/* Evaluates the arguments into an argument block (owned values moved in);
 * returns its address, or a null pointer when there are no parameters. */
LLVMValueRef args_block(DInfo *di, Node **argv, int argc) {
  if (!argc)
    return LLVMConstNull(cg.P);
  LLVMValueRef blk = entry_alloca(di->args_ty, "args");
  for (int i = 0; i < argc; i++) {
    Val v = expr(argv[i]);
    store_mem(argv[i]->ty, own(argv[i]->ty, v), struct_gep(di->args_ty, blk, (unsigned)i));
  }
  return as_P(blk);
}

/* Direct call of an sflow function: arguments are borrowed by the callee. */
static Val direct_call(DInfo *di, LLVMValueRef state, Node **argv, int argc, Type *ret) {
  LLVMValueRef *args = arena_alloc(sizeof(LLVMValueRef) * (size_t)(argc + 2));
  Val *vals = arena_alloc(sizeof(Val) * (size_t)(argc + 1));
  int k = 0;
  if (state)
    args[k++] = state;
  LLVMValueRef *held = arena_alloc(sizeof(LLVMValueRef) * (size_t)(argc + 1));
  for (int i = 0; i < argc; i++) {
    vals[i] = expr(argv[i]);
    args[k++] = vals[i].v;
    held[i] = hold(argv[i]->ty, vals[i]); /* the later arguments or the call may fail */
  }
  LLVMValueRef r = call(di->fn, args, k);
  for (int i = 0; i < argc; i++) {
    unhold(argv[i]->ty, held[i]);
    drop(argv[i]->ty, vals[i]);
  }
  return mkval(ret->kind == TY_VOID ? NULL : r, true);
}

/* @extern functions (docs/language.md, "Standard-library externs"): a
 * std module's declaration of the C function sf_std_<module>_<name>.  The
 * C form of each sflow type is fixed: scalars as themselves (bool
 * zero-extended, as C passes it), str and arrays as borrowed object
 * pointers, a struct as the address of its bytes followed by its
 * descriptor, then the call site.  A struct result is written by the callee
 * into zeroed memory whose address and descriptor come first. */
void declare_extern(Decl *d) {
  DInfo *di = info(d);
  Type *ret = d->ret_type ? d->ret_type : ty_prim(TY_VOID);
  /* A generic one's T goes as a struct does: the value's address and its
   * descriptor; a T result is written through the first two. */
  bool sret = ret->kind == TY_STRUCT || ret->kind == TY_TPARAM;
  int n = 0;
  for (Decl *p = d->params; p; p = p->next)
    n++;
  LLVMTypeRef *ps = arena_alloc(sizeof(LLVMTypeRef) * (size_t)(2 * n + 5));
  bool *zext = arena_alloc(sizeof(bool) * (size_t)(2 * n + 5));
  int k = 0;
  if (sret) {
    ps[k++] = cg.P;
    ps[k++] = cg.P;
  }
  for (Decl *p = d->params; p; p = p->next) {
    if (p->type->kind == TY_STRUCT || p->type->kind == TY_TPARAM) {
      ps[k++] = cg.P;
      ps[k++] = cg.P;
    } else {
      zext[k] = p->type->kind == TY_BOOL;
      ps[k++] = lt_val(p->type);
    }
  }
  /* A generic one also gets what each type parameter stands for. */
  if (d->tparam)
    ps[k++] = cg.P;
  if (d->tparam2)
    ps[k++] = cg.P;
  ps[k++] = cg.P;
  di->fn = get_fn(extern_c_name(d), sret ? cg.vd : lt_val(ret), ps, k, false);
  di->fnty = LLVMGlobalGetValueType(di->fn);
  d->llvm = di->fn;
  for (int i = 0; i < k; i++)
    if (zext[i])
      add_attr(di->fn, (unsigned)i + 1, "zeroext");
  if (ret->kind == TY_BOOL)
    add_attr(di->fn, LLVMAttributeReturnIndex, "zeroext");
  if (ret->kind == TY_ARRAY)
    mark_array_attrs(di->fn, LLVMAttributeReturnIndex);
}

static Val extern_call(Node *n) {
  Decl *d = n->decl;
  Type *ret = n->ty;
  LLVMValueRef *args = arena_alloc(sizeof(LLVMValueRef) * (size_t)(2 * n->argc + 5));
  Val *vals = arena_alloc(sizeof(Val) * (size_t)(n->argc + 1));
  int k = 0;
  LLVMValueRef out = NULL;
  bool generic_ret = d->ret_type && d->ret_type->kind == TY_TPARAM;
  if (ret->kind == TY_STRUCT || generic_ret) {
    out = entry_alloca(lt_mem(ret), "extern.out");
    store(LLVMConstNull(lt_mem(ret)), out);
    args[k++] = as_P(out);
    args[k++] = desc_arg(ret);
  }
  Decl *p = d->params;
  for (int i = 0; i < n->argc; i++, p = p ? p->next : NULL) {
    Type *t = n->argv[i]->ty;
    vals[i] = expr(n->argv[i]);
    if (t->kind == TY_STRUCT || (p && p->type->kind == TY_TPARAM)) {
      LLVMValueRef tmp = entry_alloca(lt_mem(t), "extern.arg");
      store_mem(t, vals[i].v, tmp);
      args[k++] = as_P(tmp);
      args[k++] = desc_arg(t);
    } else {
      args[k++] = vals[i].v;
    }
  }
  if (d->tparam)
    args[k++] = desc_arg(n->targ);
  if (d->tparam2)
    args[k++] = desc_arg(n->targ2);
  args[k++] = loc_const(n->loc);
  LLVMValueRef r = call(info(d)->fn, args, k);
  for (int i = 0; i < n->argc; i++)
    drop(n->argv[i]->ty, vals[i]);
  if (out)
    return mkval(load_mem(ret, out), true);
  return mkval(ret->kind == TY_VOID ? NULL : r, true);
}

static Val fn_value_call(Node *n);

static Val call_expr(Node *n) {
  LLVMValueRef L;
  switch (n->callkind) {
  case CALL_BUILTIN: return cg.dom->builtin(n);
  case CALL_MAP: return cg.dom->map_call(n);
  case CALL_FN_VALUE: return fn_value_call(n);
  case CALL_FN:
    if (n->decl->is_extern)
      return extern_call(n);
    if (n->decl == cg.redirect_of) {
      DInfo t = *info(n->decl);
      t.fn = cg.redirect_fn;
      return direct_call(&t, NULL, n->argv, n->argc, n->ty);
    }
    return direct_call(info(n->decl), NULL, n->argv, n->argc, n->ty);
  case CALL_SELF_METHOD:
    return direct_call(info(n->decl), cg.fn->state, n->argv, n->argc, n->ty);
  case CALL_TASK: {
    DInfo *di = info(n->decl);
    LLVMValueRef blk = args_block(di, n->argv, n->argc);
    return mkval(RT(sf_task_call, LLVMConstPointerCast(di->desc, cg.P), blk,
                    loc_const(n->loc)),
                 true);
  }
  case CALL_METHOD:
  case CALL_GROUP_ALL:
  case CALL_GROUP_ANY:
  case CALL_GROUP_ONE: {
    DInfo *di = info(n->decl);
    Node *recv = n->callkind == CALL_GROUP_ONE && n->recv->kind == N_INDEX ? n->recv->lhs : n->recv;
    Val h = expr(recv);
    Val idx = {0};
    if (n->callkind == CALL_GROUP_ONE)
      idx = expr(n->recv->rhs);
    LLVMValueRef blk = args_block(di, n->argv, n->argc);
    LLVMValueRef md = LLVMConstPointerCast(di->desc, cg.P);
    L = loc_const(n->loc);
    LLVMValueRef r;
    switch (n->callkind) {
    case CALL_METHOD: r = RT(sf_actor_call, h.v, md, blk, L); break;
    case CALL_GROUP_ALL: r = RT(sf_group_call_all, h.v, md, blk, L); break;
    case CALL_GROUP_ANY: r = RT(sf_group_call_any, h.v, md, blk, L); break;
    default:
      r = RT(sf_group_call_one, h.v, to_i64(n->recv->rhs->ty, idx.v), md, blk, L);
      break;
    }
    drop(recv->ty, h);
    return mkval(r, true);
  }
  default: ice("codegen: unresolved call");
  }
}

/* ------------------------------------------------- array literals */

static Val array_lit(Node *n) {
  Type *et = n->ty->elem;
  int cnt = list_len(n->args);
  LLVMValueRef a = RT(sf_array_new, desc_arg(et), ci64(cnt), loc_const(n->loc));
  int i = 0;
  for (Node *e = n->args; e; e = e->next, i++) {
    Val v = expr(e);
    store_elem(et, own(et, v), elem_ptr(a, et, ci64(i)));
  }
  return mkval(a, true);
}

/* A counted loop i in [0, len) around body(i); returns after the loop. */

void counted_loop(LLVMValueRef len, LoopBody fnb, void *ctx) {
  LLVMValueRef ctr = entry_alloca(cg.i64, "i");
  store(ci64(0), ctr);
  LLVMBasicBlockRef cond = new_block("loop.cond"), body = new_block("loop.body"),
                    end = new_block("loop.end");
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, cond);
  LLVMValueRef i = load(cg.i64, ctr);
  LLVMBuildCondBr(cg.b, LLVMBuildICmp(cg.b, LLVMIntSLT, i, len, ""), body, end);
  LLVMPositionBuilderAtEnd(cg.b, body);
  fnb(ctx, i);
  store(LLVMBuildAdd(cg.b, i, ci64(1), ""), ctr);
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, end);
}

typedef struct {
  Node *n;
  LLVMValueRef src, dst, start; /* src: array (or NULL for ranges), start: range start */
  Type *vty;
} Comp;

static void comp_body(void *ctx, LLVMValueRef i) {
  Comp *c = ctx;
  Var *v = c->n->var;
  int mark = cg.nowned;
  LLVMValueRef x;
  if (c->src) {
    Type *et = c->n->rhs->ty->elem;
    /* The result has the source's length at the start: a source that the
     * element expression shrinks (xs.pop()) is an index error here. */
    check_index(i, arr_len(c->src), c->n->rhs->loc);
    x = load_elem(et, elem_ptr(c->src, et, i));
    retain_value(et, x);
  } else {
    x = LLVMBuildAdd(cg.b, c->start, LLVMBuildIntCast2(cg.b, i, LLVMTypeOf(c->start), 1, ""), "");
  }
  store_mem(v->ty, x, v->llvm);
  push_owned(v->llvm, v->ty);
  Type *rt_ = c->n->ty->elem;
  Val r = expr(c->n->lhs);
  store_elem(rt_, own(rt_, r), elem_ptr(c->dst, rt_, i));
  scope_end(mark);
}

static Val comprehension(Node *n) {
  Var *v = n->var;
  v->llvm = entry_alloca(lt_mem(v->ty), v->name);
  Comp c = {.n = n, .vty = v->ty};
  Val src = {0};
  LLVMValueRef len;
  if (n->rhs->kind == N_RANGE) {
    LLVMValueRef lo = expr(n->rhs->lhs).v, hi = expr(n->rhs->rhs).v;
    c.start = lo;
    LLVMValueRef d = LLVMBuildSub(cg.b, to_i64(n->rhs->lhs->ty, hi), to_i64(n->rhs->lhs->ty, lo), "");
    len = LLVMBuildSelect(cg.b, LLVMBuildICmp(cg.b, LLVMIntSLT, d, ci64(0), ""), ci64(0), d, "");
  } else {
    /* Held (+1) for the loop, as in for_array: the element expression may
     * call a method that reassigns the variable the source came from. */
    src = expr(n->rhs);
    src = mkval(own(n->rhs->ty, src), true);
    c.src = src.v;
    len = arr_len(src.v);
  }
  c.dst = RT(sf_array_new, desc_arg(n->ty->elem), len, loc_const(n->loc));
  counted_loop(len, comp_body, &c);
  if (c.src)
    drop(n->rhs->ty, src);
  return mkval(c.dst, true);
}

/* ------------------------------------------------- function values */

/* The index of d in the function-value table, 1-based (0 is no
 * function); the table is built by gen_fn_table once all are known. */
static int64_t fn_index(Decl *d) {
  for (int i = 0; i < cg.nfnvals; i++)
    if (cg.fnvals[i] == d)
      return i + 1;
  if (cg.nfnvals == cg.capfnvals) {
    cg.capfnvals = cg.capfnvals ? 2 * cg.capfnvals : 16;
    cg.fnvals = realloc(cg.fnvals, sizeof(Decl *) * (size_t)cg.capfnvals);
    if (!cg.fnvals)
      ice("out of memory");
  }
  cg.fnvals[cg.nfnvals++] = d;
  return cg.nfnvals;
}

/* The LLVM type of the functions a value of type ft calls: a function's
 * own type (declare_fn), or a task's value function (task_value_fn). */
static LLVMTypeRef fn_llvm_type(Type *ft) {
  LLVMTypeRef *ps = arena_alloc(sizeof(LLVMTypeRef) * (size_t)(ft->nparams + 1));
  for (int i = 0; i < ft->nparams; i++)
    ps[i] = lt_val(ft->params[i]);
  return LLVMFunctionType(lt_val(ft->elem), ps, (unsigned)ft->nparams, 0);
}

/* f(x): the table entry at f's index, called with borrowed arguments like
 * a direct call. */
static Val fn_value_call(Node *n) {
  Type *ft = n->callee->ty;
  Val f = expr(n->callee);
  LLVMBasicBlockRef ok = cold_if(LLVMBuildICmp(cg.b, LLVMIntEQ, f.v, ci64(0), ""));
  RT(sf_fn_unset, loc_const(n->loc));
  cold_end(ok);
  if (!cg.fntab)
    cg.fntab = LLVMAddGlobal(cg.mod, LLVMArrayType(cg.P, 0), "sflow.fns.pending");
  LLVMValueRef idx = f.v;
  LLVMValueRef slot = LLVMBuildGEP2(cg.b, cg.P, ptr_as(cg.fntab, cg.P), &idx, 1, "");
  LLVMTypeRef fty = fn_llvm_type(ft);
  LLVMValueRef fp = LLVMBuildPointerCast(cg.b, load(cg.P, slot), ptr_to(fty), "");
  LLVMValueRef *args = arena_alloc(sizeof(LLVMValueRef) * (size_t)(n->argc + 1));
  Val *vals = arena_alloc(sizeof(Val) * (size_t)(n->argc + 1));
  for (int i = 0; i < n->argc; i++) {
    vals[i] = expr(n->argv[i]);
    args[i] = vals[i].v;
  }
  LLVMValueRef r = LLVMBuildCall2(cg.b, fty, fp, args, (unsigned)n->argc, "");
  for (int i = 0; i < n->argc; i++)
    drop(n->argv[i]->ty, vals[i]);
  return mkval(ft->elem->kind == TY_VOID ? NULL : r, true);
}

/* A task used as a value is called through a function of the task's
 * parameters that makes the call and returns its future: the argument
 * block takes its own references to the borrowed arguments. */

static LLVMValueRef task_value_fn(Decl *d) {
  DInfo *di = info(d);
  if (di->value_fn)
    return di->value_fn;
  LLVMTypeRef *ps = arena_alloc(sizeof(LLVMTypeRef) * (size_t)(d->nparams + 1));
  int k = 0;
  for (Decl *p = d->params; p; p = p->next)
    ps[k++] = lt_val(p->type);
  di->value_fn = LLVMAddFunction(cg.mod, sym(d, ".value"), LLVMFunctionType(cg.P, ps, (unsigned)k, 0));
  LLVMSetLinkage(di->value_fn, LLVMInternalLinkage);
  Fn f;
  memset(&f, 0, sizeof f);
  f.fn = di->value_fn;
  f.ret = ty_future(d->ret_type);
  f.base = cg.nowned;
  cg.fn = &f;
  f.entry = LLVMAppendBasicBlockInContext(cg.ctx, f.fn, "entry");
  LLVMPositionBuilderAtEnd(cg.b, f.entry);
  LLVMSetCurrentDebugLocation2(cg.b, NULL);
  LLVMValueRef blk = LLVMConstNull(cg.P);
  if (k) {
    LLVMValueRef a = entry_alloca(di->args_ty, "args");
    k = 0;
    for (Decl *p = d->params; p; p = p->next, k++) {
      LLVMValueRef v = LLVMGetParam(f.fn, (unsigned)k);
      retain_value(p->type, v);
      store_mem(p->type, v, struct_gep(di->args_ty, a, (unsigned)k));
    }
    blk = as_P(a);
  }
  LLVMBuildRet(cg.b, RT(sf_task_call, LLVMConstPointerCast(di->desc, cg.P), blk, loc_const(d->loc)));
  cg.fn = NULL;
  return di->value_fn;
}


/* "sq", "util.score": a function value's printed name. */
static const char *fn_value_name(Decl *d) {
  if (d->module && d->module->name && *d->module->name)
    return arena_printf("%s.%s", d->module->name, d->name);
  return d->name;
}

/* After every body: the table of function values (entry 0 empty) that
 * calls go through, and their names for the runtime (sf_program). */
void gen_fn_table(void) {
  int n = cg.nfnvals + 1;
  LLVMValueRef *fns = arena_alloc(sizeof(LLVMValueRef) * (size_t)n);
  LLVMValueRef *names = arena_alloc(sizeof(LLVMValueRef) * (size_t)n);
  LLVMValueRef *tasks = arena_alloc(sizeof(LLVMValueRef) * (size_t)n);
  fns[0] = names[0] = tasks[0] = LLVMConstNull(cg.P);
  for (int i = 1; i < n; i++) {
    Decl *d = cg.fnvals[i - 1];
    LLVMValueRef f = d->kind == D_TASK ? task_value_fn(d) : info(d)->fn;
    fns[i] = LLVMConstPointerCast(f, cg.P);
    names[i] = LLVMConstPointerCast(cstr(fn_value_name(d)), cg.P);
    tasks[i] = d->kind == D_TASK ? LLVMConstPointerCast(info(d)->desc, cg.P) : LLVMConstNull(cg.P);
  }
  cg.fn_tasks = const_global(LLVMConstArray(cg.P, tasks, (unsigned)n), "sflow.fn_tasks");
  LLVMValueRef tab = const_global(LLVMConstArray(cg.P, fns, (unsigned)n), "sflow.fns");
  cg.fns = tab;
  cg.fn_names = const_global(LLVMConstArray(cg.P, names, (unsigned)n), "sflow.fn_names");
  if (cg.fntab) {
    LLVMReplaceAllUsesWith(cg.fntab, LLVMConstPointerCast(tab, LLVMTypeOf(cg.fntab)));
    LLVMDeleteGlobal(cg.fntab);
    cg.fntab = NULL;
  }
}

/* ---------------------------------------------------- expressions */

/* Fields are evaluated in the order they are written, then placed. */
static Val struct_lit(Node *n) {
  Type *t = n->ty;
  LLVMValueRef v = LLVMGetUndef(lt_val(t));
  for (Node *a = n->args; a; a = a->next) {
    Node *e = a->lhs;
    Val fv = expr(e);
    v = LLVMBuildInsertValue(cg.b, v, to_mem(e->ty, own(e->ty, fv)), (unsigned)a->field_index, "");
  }
  return mkval(v, true);
}

static Val const_value(Decl *d) { return expr(d->value); }

/* Does n, or anything after it in its list (statements, arguments), call a
 * method of its own actor, which could assign the actor's fields? */
bool calls_own_method(Node *n) {
  for (; n; n = n->next) {
    if (n->kind == N_CALL && n->callkind == CALL_SELF_METHOD)
      return true;
    if (calls_own_method(n->lhs) || calls_own_method(n->rhs) || calls_own_method(n->cond) ||
        calls_own_method(n->then) || calls_own_method(n->els) || calls_own_method(n->body) ||
        calls_own_method(n->callee) || calls_own_method(n->args))
      return true;
  }
  return false;
}

/* Is n a read of an actor field (or a field of one) that must be owned
 * (Fn.own_fields)? */
static bool owned_field_read(Node *n) {
  Node *base = n;
  while (base->kind == N_FIELD)
    base = base->lhs;
  return base->kind == N_NAME && base->var && base->var->kind == V_FIELD && cg.fn &&
         cg.fn->own_fields && ty_has_refs(n->ty);
}

static Val field_expr(Node *n) {
  if (n->decl && n->decl->kind == D_CONST)
    return const_value(n->decl);
  if (n->decl && (n->decl->kind == D_FN || n->decl->kind == D_TASK))
    return mkval(ci64(fn_index(n->decl)), false); /* module.f as a value */
  if (addressable(n)) {
    LVal lv = lvalue(n);
    LLVMValueRef v = load_mem(n->ty, lv.ptr);
    if ((lv.basety && lv.base.owned && ty_has_refs(n->ty)) || owned_field_read(n)) {
      retain_value(n->ty, v);
      lvalue_done(lv);
      return mkval(v, true);
    }
    lvalue_done(lv);
    return mkval(v, false);
  }
  Val s = expr(n->lhs);
  Decl *f = n->lhs->ty->decl->fields;
  for (int i = 0; i < n->field_index; i++)
    f = f->next;
  LLVMValueRef v = from_mem(n->ty, LLVMBuildExtractValue(cg.b, s.v, (unsigned)n->field_index, ""));
  if (s.owned && ty_has_refs(n->lhs->ty)) {
    retain_value(n->ty, v);
    drop(n->lhs->ty, s);
    return mkval(v, ty_has_refs(n->ty));
  }
  return mkval(v, false);
}

static Val index_expr(Node *n) {
  if (n->lhs->ty->kind == TY_MAP)
    return cg.dom->map_index(n);
  if (n->lhs->ty->kind == TY_TENSOR)
    return cg.dom->tensor_index(n);
  if (n->rhs->kind == N_RANGE || n->lhs->ty->kind == TY_STR)
    return cg.dom->data_index_expr(n);
  Val a = expr(n->lhs);
  LLVMValueRef p = index_addr(a.v, n->ty, n->rhs, n->loc);
  LLVMValueRef v = load_elem(n->ty, p);
  if (a.owned) {
    retain_value(n->ty, v);
    drop(n->lhs->ty, a);
    return mkval(v, ty_has_refs(n->ty));
  }
  return mkval(v, false);
}

Val expr(Node *n) {
  Type *t = n->ty;
  switch (n->kind) {
  case N_INT:
    if (is_float(t))
      return mkval(LLVMConstReal(lt_val(t), (double)n->ival), false);
    return mkval(LLVMConstInt(lt_val(t), (unsigned long long)n->ival, 1), false);
  case N_FLOAT: return mkval(LLVMConstReal(lt_val(t), n->fval), false);
  case N_BOOL: return mkval(LLVMConstInt(cg.i1, n->ival ? 1 : 0, 0), false);
  case N_STR: return mkval(str_literal(n->sval, n->slen), false);
  case N_NAME:
    if (n->var && owned_field_read(n)) {
      LLVMValueRef v = load_mem(t, var_addr(n->var));
      retain_value(t, v);
      return mkval(v, true);
    }
    if (n->var)
      return mkval(load_mem(t, var_addr(n->var)), false);
    if (n->decl && n->decl->kind == D_CONST)
      return const_value(n->decl);
    if (n->decl && (n->decl->kind == D_FN || n->decl->kind == D_TASK))
      return mkval(ci64(fn_index(n->decl)), false);
    ice("codegen: name '%s' has no value", n->name);
  case N_BINARY: return binary(n);
  case N_UNARY: return unary(n);
  case N_CALL: di_set_loc(n->loc); return call_expr(n);
  case N_INDEX: return index_expr(n);
  case N_FIELD: return field_expr(n);
  case N_ARRAY_LIT: return array_lit(n);
  case N_COMPREH: return comprehension(n);
  case N_STRUCT_LIT: return struct_lit(n);
  case N_AWAIT: return cg.dom->await_expr(n);
  case N_SPAWN: return cg.dom->spawn_expr(n);
  case N_LAUNCH: cg.dom->launch_expr(n); return mkval(NULL, false);
  case N_MAP_NEW: return mkval(RT(sf_map_new, desc_arg(t)), true);
  default: ice("codegen: expression node %d", n->kind);
  }
}
