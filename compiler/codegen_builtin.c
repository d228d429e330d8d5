/*
 * codegen_builtin.c — lowering the builtin calls: math through LLVM
 * intrinsics or libm, print, the casts, collectives, zeros_*, matmul and
 * the runtime helpers of std modules; the data core's builtins go on to
 * codegen_data.c.  Reached through cg.dom->builtin.
 */
#include "codegen_internal.h"

#include <string.h>

/* ------------------------------------------------------ builtins */

static void print_value(Type *t, LLVMValueRef v) {
  switch (t->kind) {
  case TY_BOOL: RT(sf_print_bool, v); return;
  case TY_I32: RT(sf_print_i64, LLVMBuildSExt(cg.b, v, cg.i64, "")); return;
  case TY_I64: RT(sf_print_i64, v); return;
  case TY_F32: RT(sf_print_f32, v); return;
  case TY_F64: RT(sf_print_f64, v); return;
  case TY_STR: RT(sf_print_str, v); return;
  default: {
    LLVMValueRef slot = entry_alloca(lt_mem(t), "print.tmp");
    store_mem(t, v, slot);
    RT(sf_print_value, desc_arg(t), slot);
  }
  }
}

static LLVMValueRef cast_to_str(Type *from, LLVMValueRef v) {
  switch (from->kind) {
  case TY_BOOL: return RT(sf_str_from_bool, v);
  case TY_I32: return RT(sf_str_from_i64, LLVMBuildSExt(cg.b, v, cg.i64, ""));
  case TY_I64: return RT(sf_str_from_i64, v);
  case TY_F32: return RT(sf_str_from_f32, v);
  case TY_F64: return RT(sf_str_from_f64, v);
  default: ice("codegen: str() of %s", ty_str(from));
  }
}

/* Numeric/bool/str casts; the result is owned only for str results. */
static Val cast(Builtin bi, Node *arg, Loc loc) {
  Type *from = arg->ty;
  Val a = expr(arg);
  LLVMValueRef v = a.v, L = loc_const(loc);
  LLVMValueRef r;
  switch (bi) {
  case B_CAST_STR:
    if (from->kind == TY_STR)
      return a;
    return mkval(cast_to_str(from, v), true);
  case B_CAST_I64:
  case B_CAST_I32: {
    LLVMTypeRef to = bi == B_CAST_I64 ? cg.i64 : cg.i32;
    if (from->kind == TY_STR) {
      r = bi == B_CAST_I64 ? RT(sf_str_to_i64, v, L) : RT(sf_str_to_i32, v, L);
      drop(from, a);
      return mkval(r, false);
    }
    if (is_float(from)) {
      LLVMValueRef d = from->kind == TY_F32 ? LLVMBuildFPExt(cg.b, v, cg.f64, "") : v;
      return mkval(bi == B_CAST_I64 ? RT(sf_f64_to_i64, d, L)
                                    : RT(sf_f64_to_i32, d, L), false);
    }
    if (from->kind == TY_BOOL)
      return mkval(LLVMBuildZExt(cg.b, v, to, ""), false);
    return mkval(LLVMBuildIntCast2(cg.b, v, to, 1, ""), false); /* wraps */
  }
  case B_CAST_F32:
  case B_CAST_F64: {
    Type *to = ty_prim(bi == B_CAST_F32 ? TY_F32 : TY_F64);
    if (from->kind == TY_STR) {
      r = bi == B_CAST_F64 ? RT(sf_str_to_f64, v, L) : RT(sf_str_to_f32, v, L);
      drop(from, a);
      return mkval(r, false);
    }
    return mkval(as_float(from, to, v), false);
  }
  case B_CAST_BOOL:
    if (from->kind == TY_STR) {
      r = RT(sf_str_to_bool, v, L);
      drop(from, a);
      return mkval(r, false);
    }
    if (from->kind == TY_BOOL)
      return a;
    if (is_float(from))
      return mkval(LLVMBuildFCmp(cg.b, LLVMRealUNE, v, LLVMConstNull(LLVMTypeOf(v)), ""), false);
    return mkval(LLVMBuildICmp(cg.b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), ""), false);
  default: ice("codegen: cast %d", bi);
  }
}

/* A collective over tensors (a tensor or a tensor[]): the nn layer's
 * entry points, in place (docs/nn.md, "Collectives over tensors"). */
static bool is_tensor_coll(Type *t) {
  return t->kind == TY_TENSOR || (t->kind == TY_ARRAY && t->elem->kind == TY_TENSOR);
}

Val builtin(Node *n) {
  Node **av = n->argv;
  LLVMValueRef L;
  Val a, b;
  Type *t = n->ty;
  switch (n->builtin) {
  case B_PRINT: {
    RT0(sf_print_begin);
    for (int i = 0; i < n->argc; i++) {
      a = expr(av[i]);
      print_value(av[i]->ty, a.v);
      drop(av[i]->ty, a);
    }
    RT0(sf_print_end);
    return mkval(NULL, false);
  }
  case B_LEN:
    a = expr(av[0]);
    if (av[0]->ty->kind == TY_STR) {
      LLVMValueRef r = RT(sf_str_len, a.v);
      drop(av[0]->ty, a);
      return mkval(r, false);
    } else if (av[0]->ty->kind == TY_MAP) {
      LLVMValueRef r = RT(sf_map_len, a.v);
      drop(av[0]->ty, a);
      return mkval(r, false);
    } else if (av[0]->ty->kind == TY_GROUP) {
      LLVMValueRef r = RT(sf_group_len, a.v);
      drop(av[0]->ty, a);
      return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(cg.b, r, cg.i32, "") : r, false);
    } else {
      LLVMValueRef r = arr_len(a.v);
      drop(av[0]->ty, a);
      return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(cg.b, r, cg.i32, "") : r, false);
    }
  case B_SQRT:
  case B_EXP:
  case B_LOG:
  case B_FLOOR:
  case B_TANH: {
    a = expr(av[0]);
    LLVMValueRef x = as_float(av[0]->ty, t, a.v);
    static const char *nm[] = {[B_SQRT] = "sqrt", [B_EXP] = "exp", [B_LOG] = "log",
                               [B_FLOOR] = "floor"};
    if (n->builtin == B_TANH)
      return mkval(libm1("tanh", t, x), false);
    return mkval(intrinsic1(nm[n->builtin], t, x), false);
  }
  case B_POW:
    a = expr(av[0]);
    b = expr(av[1]);
    return mkval(intrinsic2("pow", t, as_float(av[0]->ty, t, a.v), as_float(av[1]->ty, t, b.v)),
                 false);
  case B_ABS:
    a = expr(av[0]);
    if (is_float(t))
      return mkval(intrinsic1("fabs", t, a.v), false);
    return mkval(LLVMBuildSelect(cg.b, LLVMBuildICmp(cg.b, LLVMIntSLT, a.v,
                                                    LLVMConstNull(LLVMTypeOf(a.v)), ""),
                                 LLVMBuildSub(cg.b, LLVMConstNull(LLVMTypeOf(a.v)), a.v, ""), a.v,
                                 ""),
                 false);
  case B_MIN:
  case B_MAX: {
    a = expr(av[0]);
    b = expr(av[1]);
    bool mn = n->builtin == B_MIN;
    if (is_float(t)) /* fmin/fmax: a NaN operand yields the other one */
      return mkval(intrinsic2(mn ? "minnum" : "maxnum", t, a.v, b.v), false);
    LLVMValueRef c = LLVMBuildICmp(cg.b, mn ? LLVMIntSLT : LLVMIntSGT, a.v, b.v, "");
    return mkval(LLVMBuildSelect(cg.b, c, a.v, b.v, ""), false);
  }
  case B_NOW: return mkval(RT0(sf_now), false);
  case B_RAND_SEED:
    a = expr(av[0]);
    RT(sf_rand_seed, to_i64(av[0]->ty, a.v));
    return mkval(NULL, false);
  case B_RAND_F32: return mkval(RT0(sf_rand_f32), false);
  case B_FMT: {
    a = expr(av[0]);
    b = expr(av[1]);
    LLVMValueRef x = as_float(av[0]->ty, ty_prim(TY_F64), a.v);
    return mkval(RT(sf_fmt_f64, x, to_i64(av[1]->ty, b.v), loc_const(n->loc)), true);
  }
  case B_FAIL:
    a = expr(av[0]);
    hold(av[0]->ty, a); /* a message built here: the frame releases it */
    RT(sf_fail, a.v, loc_const(n->loc));
    LLVMBuildUnreachable(cg.b);
    start_dead_block();
    return mkval(t->kind == TY_VOID ? NULL : LLVMGetUndef(lt_val(t)), false);
  case B_ATTEMPT: return mkval(RT0(sf_attempt), false);
  case B_NODE_ID: return mkval(RT0(sf_node_id), false);
  case B_HOSTNAME: return mkval(RT0(sf_hostname), true);
  case B_FAILURE: {
    a = expr(av[0]);
    LLVMValueRef r = RT(sf_future_error, a.v, loc_const(n->loc));
    drop(av[0]->ty, a);
    return mkval(r, true);
  }
  case B_THREAD_ID:
    if (!cg.fn->tid)
      return mkval(ci64(0), false);
    return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(cg.b, cg.fn->tid, cg.i32, "") : cg.fn->tid,
                 false);
  case B_GROUP_RANK:
  case B_GROUP_SIZE: {
    LLVMValueRef r = n->builtin == B_GROUP_RANK ? RT0(sf_group_rank) : RT0(sf_group_size);
    return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(cg.b, r, cg.i32, "") : r, false);
  }
  case B_ALLREDUCE_SUM:
  case B_ALLREDUCE_MEAN:
    a = expr(av[0]);
    if (is_tensor_coll(av[0]->ty)) {
      LLVMValueRef mean = LLVMConstInt(cg.i1, n->builtin == B_ALLREDUCE_MEAN, 0);
      if (av[0]->ty->kind == TY_TENSOR)
        RT(sf_allreduce_tensor, a.v, mean, loc_const(n->loc));
      else
        RT(sf_allreduce_tensors, a.v, mean, loc_const(n->loc));
    } else if (n->builtin == B_ALLREDUCE_SUM)
      RT(sf_allreduce_sum, a.v, loc_const(n->loc));
    else
      RT(sf_allreduce_mean, a.v, loc_const(n->loc));
    drop(av[0]->ty, a);
    return mkval(NULL, false);
  case B_BROADCAST:
    a = expr(av[0]);
    b = expr(av[1]);
    if (av[0]->ty->kind == TY_TENSOR)
      RT(sf_broadcast_tensor, a.v, to_i64(av[1]->ty, b.v), loc_const(n->loc));
    else if (is_tensor_coll(av[0]->ty))
      RT(sf_broadcast_tensors, a.v, to_i64(av[1]->ty, b.v), loc_const(n->loc));
    else
      RT(sf_broadcast, a.v, to_i64(av[1]->ty, b.v), loc_const(n->loc));
    drop(av[0]->ty, a);
    return mkval(NULL, false);
  case B_ALLGATHER: {
    a = expr(av[0]);
    LLVMValueRef r = RT(sf_allgather, a.v, loc_const(n->loc));
    drop(av[0]->ty, a);
    return mkval(r, true);
  }
  case B_BARRIER: RT(sf_barrier, loc_const(n->loc)); return mkval(NULL, false);
  case B_ZEROS_F32:
  case B_ZEROS_F64:
  case B_ZEROS_I32:
  case B_ZEROS_I64:
    a = expr(av[0]);
    return mkval(RT(sf_array_new, desc_arg(t->elem), to_i64(av[0]->ty, a.v),
                    loc_const(n->loc)),
                 true);
  case B_CAST_BOOL:
  case B_CAST_I32:
  case B_CAST_I64:
  case B_CAST_F32:
  case B_CAST_F64:
  case B_CAST_STR: return cast(n->builtin, av[0], n->loc);
  case B_SPLIT: {
    Node *arr = n->recv ? n->recv : av[0];
    Node *k = n->recv ? av[0] : av[1];
    a = expr(arr);
    b = expr(k);
    LLVMValueRef r = RT(sf_array_split, a.v, to_i64(k->ty, b.v), loc_const(n->loc));
    drop(arr->ty, a);
    return mkval(r, true);
  }
  case B_RT_READ_FILE:
  case B_RT_READ_LINES: {
    a = expr(av[0]);
    L = loc_const(n->loc);
    LLVMValueRef r = n->builtin == B_RT_READ_FILE ? RT(sf_read_file, a.v, L)
                                                  : RT(sf_read_lines, a.v, L);
    drop(av[0]->ty, a);
    return mkval(r, true);
  }
  case B_RT_WRITE_FILE:
  case B_RT_APPEND_FILE:
    a = expr(av[0]);
    b = expr(av[1]);
    if (n->builtin == B_RT_WRITE_FILE)
      RT(sf_write_file, a.v, b.v, loc_const(n->loc));
    else
      RT(sf_append_file, a.v, b.v, loc_const(n->loc));
    drop(av[0]->ty, a);
    drop(av[1]->ty, b);
    return mkval(NULL, false);
  case B_RT_FILE_EXISTS: {
    a = expr(av[0]);
    LLVMValueRef r = RT(sf_file_exists, a.v);
    drop(av[0]->ty, a);
    return mkval(r, false);
  }
  case B_MATMUL: {
    Val v[5];
    for (int i = 0; i < 5; i++)
      v[i] = expr(av[i]);
    LLVMValueRef r = RT(sf_matmul, v[0].v, v[1].v, to_i64(av[2]->ty, v[2].v),
                        to_i64(av[3]->ty, v[3].v), to_i64(av[4]->ty, v[4].v),
                        ci32(n->keep_on_device ? SF_MATMUL_DEFER : 0), loc_const(n->loc));
    drop(av[0]->ty, v[0]);
    drop(av[1]->ty, v[1]);
    return mkval(r, true);
  }
  default:
    if (builtin_is_data(n->builtin))
      return data_builtin(n);
    ice("codegen: builtin %d", n->builtin);
  }
}
