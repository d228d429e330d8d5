/*
 * codegen_data.c — lowering the data core (sema_data.c's checks): math,
 * random numbers, sort/argsort/join, the methods of str and arrays,
 * slices and string indexing, array concatenation, maps, and
 * `for w in s.split()` without the array.
 */
#include "codegen_internal.h"

#include <string.h>

/* ----------------------------------------------------- the data core */

/* Math, random numbers, sort/argsort/join and the methods of str and
 * arrays (sema_data.c).  Every runtime call borrows its
 * arguments, so operands are dropped after the call; results the runtime
 * makes are owned. */

/* A pointer-taking call's receiver and arguments, evaluated in order. */
typedef struct {
  Val v[3];
  Type *t[3];
  int n;
} Operands;

static Operands operands(Node *n) {
  Operands o = {.n = 0};
  if (n->recv) {
    o.t[o.n] = n->recv->ty;
    o.v[o.n++] = expr(n->recv);
  }
  for (int i = 0; i < n->argc && o.n < 3; i++) {
    o.t[o.n] = n->argv[i]->ty;
    o.v[o.n++] = expr(n->argv[i]);
  }
  return o;
}

static void drop_operands(Operands *o) {
  for (int i = 0; i < o->n; i++)
    drop(o->t[i], o->v[i]);
}

/* xs.push(v): the value, owned, goes through a slot the runtime copies. */
static Val push_call(Node *n) {
  Type *et = n->recv->ty->elem;
  Val a = expr(n->recv);
  Val v = expr(n->argv[0]);
  LLVMValueRef slot = entry_alloca(lt_mem(et), "push.v");
  store_mem(et, own(et, v), slot);
  RT(sf_array_push, a.v, as_P(slot), loc_const(n->loc));
  drop(n->recv->ty, a);
  return mkval(NULL, false);
}

/* xs.pop(): the runtime moves the last element out into a slot, so the
 * value read from it is owned. */
static Val pop_call(Node *n) {
  Type *et = n->ty;
  Val a = expr(n->recv);
  LLVMValueRef slot = entry_alloca(lt_mem(et), "pop.v");
  RT(sf_array_pop, a.v, as_P(slot), loc_const(n->loc));
  drop(n->recv->ty, a);
  return mkval(load_mem(et, slot), ty_has_refs(et));
}

Val data_builtin(Node *n) {
  Type *t = n->ty;
  LLVMValueRef L = loc_const(n->loc), r;
  switch (n->builtin) {
  case B_SIN: case B_COS: case B_TAN: case B_CEIL: case B_ROUND: {
    LLVMValueRef x = as_float(n->argv[0]->ty, t, expr(n->argv[0]).v);
    switch (n->builtin) {
    case B_SIN: return mkval(intrinsic1("sin", t, x), false);
    case B_COS: return mkval(intrinsic1("cos", t, x), false);
    case B_CEIL: return mkval(intrinsic1("ceil", t, x), false);
    case B_ROUND: return mkval(intrinsic1("roundeven", t, x), false); /* half to even */
    default: return mkval(libm1("tan", t, x), false); /* no llvm.tan before LLVM 19 */
    }
  }
  case B_ATAN2: {
    LLVMValueRef y = as_float(n->argv[0]->ty, t, expr(n->argv[0]).v);
    LLVMValueRef x = as_float(n->argv[1]->ty, t, expr(n->argv[1]).v);
    LLVMTypeRef ft = lt_val(t), ps[] = {ft, ft};
    LLVMValueRef args[] = {y, x};
    return mkval(call(get_fn(t->kind == TY_F32 ? "atan2f" : "atan2", ft, ps, 2, false), args, 2),
                 false);
  }
  case B_RAND_INT: {
    LLVMValueRef lo = expr(n->argv[0]).v, hi = expr(n->argv[1]).v;
    return mkval(RT(sf_rand_int, lo, hi, L), false);
  }
  case B_RANDN_F32: return mkval(RT0(sf_randn_f32), false);
  case B_PUSH: return push_call(n);
  case B_POP: return pop_call(n);
  default: break;
  }
  Operands o = operands(n);
  LLVMValueRef *v = (LLVMValueRef[]){o.v[0].v, o.n > 1 ? o.v[1].v : NULL, o.n > 2 ? o.v[2].v : NULL};
  bool owned = true;
  switch (n->builtin) {
  case B_SORT: r = RT(sf_array_sort, desc_arg(t->elem), v[0], L); break;
  case B_ARGSORT: r = RT(sf_array_argsort, desc_arg(n->argv[0]->ty->elem), v[0], L); break;
  case B_JOIN: r = RT(sf_str_join, v[0], v[1]); break;
  case B_ORD: r = RT(sf_str_ord, v[0], L); owned = false; break;
  case B_CHR: r = RT(sf_str_chr, v[0], L); break;
  case B_STR_CODEPOINTS: r = RT(sf_str_codepoints, v[0], L); break;
  case B_STR_SPLIT: r = RT(sf_str_split, v[0], v[1], L); break;
  case B_STR_SPLIT_WS: r = RT(sf_str_split_ws, v[0]); break;
  case B_STR_FIND: r = RT(sf_str_find, v[0], v[1]); owned = false; break;
  case B_STR_STRIP: r = RT(sf_str_strip, v[0]); break;
  case B_STR_LOWER: r = RT(sf_str_lower, v[0]); break;
  case B_STR_UPPER: r = RT(sf_str_upper, v[0]); break;
  case B_STR_REPLACE: r = RT(sf_str_replace, v[0], v[1], v[2], L); break;
  case B_STR_STARTS_WITH: r = RT(sf_str_starts_with, v[0], v[1]); owned = false; break;
  case B_STR_ENDS_WITH: r = RT(sf_str_ends_with, v[0], v[1]); owned = false; break;
  default: ice("codegen: data builtin %d", n->builtin);
  }
  drop_operands(&o);
  return mkval(r, owned);
}

/* a[i..j] on arrays and strings, and s[i]: new values from the runtime,
 * which checks the bounds (and UTF-8 boundaries) and names them. */
Val data_index_expr(Node *n) {
  Type *t = n->lhs->ty;
  Val a = expr(n->lhs);
  LLVMValueRef L = loc_const(n->loc), r;
  if (n->rhs->kind == N_RANGE) {
    LLVMValueRef lo = to_i64(n->rhs->lhs->ty, expr(n->rhs->lhs).v);
    LLVMValueRef hi = to_i64(n->rhs->rhs->ty, expr(n->rhs->rhs).v);
    r = t->kind == TY_STR ? RT(sf_str_slice, a.v, lo, hi, L)
                          : RT(sf_array_slice, desc_arg(t->elem), a.v, lo, hi, L);
  } else {
    r = RT(sf_str_at, a.v, to_i64(n->rhs->ty, expr(n->rhs).v), L);
  }
  drop(t, a);
  return mkval(r, true);
}

/* a + b on arrays: a new array holding both. */
Val array_concat(Node *n) {
  Type *t = n->ty;
  Val a = expr(n->lhs), b = expr(n->rhs);
  LLVMValueRef r = RT(sf_array_concat, desc_arg(t->elem), a.v, b.v, loc_const(n->loc));
  drop(t, a);
  drop(t, b);
  return mkval(r, true);
}

/* ------------------------------------------------------------ maps */

/* Map calls take keys and defaults by address (runtime/sflow.h): the
 * value's bytes in a slot of the entry block. */
static LLVMValueRef in_slot(Type *t, LLVMValueRef v, const char *name) {
  LLVMValueRef s = entry_alloca(lt_mem(t), name);
  store_mem(t, v, s);
  return as_P(s);
}

/* m[k] as a place: sf_map_at (a missing key is an error) or, for the
 * target of `m[k] = v`, sf_map_put (a missing key gets a zero slot).  The
 * slot is valid until the map next grows, so it is used at once. */
LVal map_lvalue(Node *n, bool put) {
  Val m = expr(n->lhs);
  Val k = expr(n->rhs);
  LLVMValueRef key = in_slot(n->rhs->ty, k.v, "map.key"), L = loc_const(n->loc);
  LLVMValueRef slot = put ? RT(sf_map_put, m.v, key, L) : RT(sf_map_at, m.v, key, L);
  drop(n->rhs->ty, k);
  return (LVal){slot, m, n->lhs->ty};
}

/* The value of m[k]: borrowed from the map, unless the map itself was a
 * temporary. */
Val map_index(Node *n) {
  LVal lv = map_lvalue(n, false);
  LLVMValueRef v = load_mem(n->ty, lv.ptr);
  if (lv.base.owned && ty_has_refs(n->ty)) {
    retain_value(n->ty, v);
    lvalue_done(lv);
    return mkval(v, true);
  }
  lvalue_done(lv);
  return mkval(v, false);
}

/* m[k] = v: the value first (it may read m), then the slot. */
void map_put_stmt(Node *n) {
  Type *t = n->lhs->ty;
  Val r = expr(n->rhs);
  LLVMValueRef nv = own(t, r);
  LVal lv = map_lvalue(n->lhs, true);
  if (ty_has_refs(t)) {
    LLVMValueRef old = load_mem(t, lv.ptr);
    store_mem(t, nv, lv.ptr);
    release_value(t, old);
  } else {
    store_mem(t, nv, lv.ptr);
  }
  lvalue_done(lv);
}

/* m.get(k, d), m.has(k), m.remove(k), m.keys(), m.values(). */
Val map_call(Node *n) {
  Type *mt = n->recv->ty;
  Val m = expr(n->recv);
  Val out = {0}, k = {0};
  LLVMValueRef key = NULL;
  if (n->argc >= 1) {
    k = expr(n->argv[0]);
    key = in_slot(mt->key, k.v, "map.key");
  }
  switch ((MapOp)n->ival) {
  case MAP_GET: {
    Val d = expr(n->argv[1]);
    LLVMValueRef p = RT(sf_map_get, m.v, key, in_slot(mt->elem, d.v, "map.default"));
    LLVMValueRef v = load_mem(mt->elem, p);
    retain_value(mt->elem, v); /* the default may be a temporary released below */
    drop(mt->elem, d);
    out = mkval(v, ty_has_refs(mt->elem));
    break;
  }
  case MAP_HAS: out = mkval(RT(sf_map_has, m.v, key), false); break;
  case MAP_REMOVE: out = mkval(RT(sf_map_remove, m.v, key), false); break;
  case MAP_KEYS: out = mkval(RT(sf_map_keys, m.v, loc_const(n->loc)), true); break;
  case MAP_VALUES: out = mkval(RT(sf_map_values, m.v, loc_const(n->loc)), true); break;
  }
  if (n->argc >= 1)
    drop(mt->key, k);
  drop(mt, m);
  return out;
}

/* `for w in s.split(sep)` / `for w in s.split()`: the parts one at a time
 * (sf_str_split_next), never the whole array; the same words in the same
 * order as iterating the array would give.  The string is evaluated once
 * and held for the loop. */
void for_split(Node *n) {
  Var *v = n->var;
  Node *c = n->rhs;
  int outer = cg.nowned;
  Operands o = operands(c);
  Type *st = ty_prim(TY_STR);
  LLVMValueRef sslot = entry_alloca(cg.P, "for.text");
  store(own(st, o.v[0]), sslot);
  push_owned(sslot, st);
  LLVMValueRef sep = LLVMConstNull(cg.P);
  if (c->builtin == B_STR_SPLIT) {
    LLVMValueRef pslot = entry_alloca(cg.P, "for.sep");
    store(own(st, o.v[1]), pslot);
    push_owned(pslot, st);
    sep = load(cg.P, pslot);
  }
  LLVMValueRef pos = entry_alloca(cg.i64, "for.pos");
  store(ci64(0), pos);
  v->llvm = entry_alloca(lt_mem(v->ty), v->name);
  di_declare(v, v->llvm, 0);
  LLVMBasicBlockRef cond = new_block("for.cond"), body = new_block("for.body"),
                    end = new_block("for.end");
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, cond);
  LLVMValueRef w = RT(sf_str_split_next, load(cg.P, sslot), sep, pos, loc_const(c->loc));
  LLVMBuildCondBr(cg.b, LLVMBuildIsNotNull(cg.b, w, ""), body, end);
  LLVMPositionBuilderAtEnd(cg.b, body);
  int mark = cg.nowned;
  store_mem(v->ty, w, v->llvm);
  Loop lp = {end, cond, mark, cg.fn->loop};
  cg.fn->loop = &lp;
  push_owned(v->llvm, v->ty);
  block(n->body);
  scope_end(mark);
  cg.fn->loop = lp.up;
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, end);
  scope_end(outer);
}
