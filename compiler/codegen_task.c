/*
 * codegen_task.c — lowering the expressions that start work elsewhere:
 * spawn of an actor or a group, await of a future or of an array of
 * futures, and launch of a kernel.
 */
#include "codegen_internal.h"

/* spawn A(args) [* n]: the init arguments in an argument block (args_block)
 * for sf_actor_spawn or sf_group_spawn; the handle it returns is owned. */
Val spawn_expr(Node *n) {
  Node *c = n->lhs;
  Decl *actor = c->decl;
  DInfo *ai = info(actor);
  DInfo *ii = info(ai->init_decl);
  LLVMValueRef blk = args_block(ii, c->argv, c->argc);
  LLVMValueRef d = LLVMConstPointerCast(ai->desc, cg.P), L = loc_const(n->loc);
  if (n->ty->kind == TY_GROUP) {
    LLVMValueRef cnt;
    if (n->rhs)
      cnt = to_i64(n->rhs->ty, expr(n->rhs).v);
    else
      cnt = ci64(actor->replicas > 0 ? actor->replicas : 1);
    return mkval(RT(sf_group_spawn, d, cnt, blk, L), true);
  }
  return mkval(RT(sf_actor_spawn, d, blk, L), true);
}


/* await fs on future<void>[]: wait for each; there is nothing to collect. */
typedef struct {
  Node *n;
  LLVMValueRef arr;
} AwaitEach;

static void await_each_body(void *ctx, LLVMValueRef i) {
  AwaitEach *a = ctx;
  Type *ft = a->n->lhs->ty->elem;
  LLVMValueRef fut = load_elem(ft, elem_ptr(a->arr, ft, i));
  RT(sf_future_get, fut, LLVMConstNull(cg.P), loc_const(a->n->loc));
}

Val await_expr(Node *n) {
  Val f = expr(n->lhs);
  LLVMValueRef L = loc_const(n->loc), r = NULL;
  if (n->lhs->ty->kind == TY_ARRAY && n->ty->kind == TY_VOID) {
    AwaitEach a = {n, f.v};
    counted_loop(arr_len(f.v), await_each_body, &a);
  } else if (n->lhs->ty->kind == TY_ARRAY) {
    r = RT(sf_future_get_all, f.v, desc_arg(n->ty->elem), L);
  } else if (n->ty->kind == TY_VOID) {
    RT(sf_future_get, f.v, LLVMConstNull(cg.P), L);
  } else {
    LLVMValueRef slot = entry_alloca(lt_mem(n->ty), "await");
    RT(sf_future_get, f.v, slot, L);
    r = load_mem(n->ty, slot);
  }
  drop(n->lhs->ty, f);
  return mkval(r, true);
}

/* A kernel with tensor parameters reaches them through the nn layer's
 * hooks (gpu.h), so the program links that layer even when it never
 * calls a tensor op (an unset tensor field passed to a kernel): an
 * external constant naming sf__nn_install pulls it in (main.c's own
 * reference is weak). */
static void link_nn_layer(void) {
  if (LLVMGetNamedGlobal(cg.mod, "sf__program_links_nn"))
    return;
  LLVMValueRef fn = rt(RT_sf__nn_install);
  LLVMValueRef g = LLVMAddGlobal(cg.mod, cg.P, "sf__program_links_nn");
  LLVMSetInitializer(g, LLVMConstPointerCast(fn, cg.P));
  LLVMSetGlobalConstant(g, 1);
}

/* launch k[n](args): the arguments go BORROWED into the kernel's argument
 * block (the launch ends before sf_launch returns) and the runtime picks
 * the GPU or the CPU version (gen_kernel_glue). */
void launch_expr(Node *n) {
  Decl *k = n->decl;
  DInfo *di = info(k);
  int argc = n->argc ? n->argc : list_len(n->args);
  Node **argv = n->argv;
  if (!argv) {
    argv = arena_alloc(sizeof(Node *) * (size_t)(argc + 1));
    int i = 0;
    for (Node *a = n->args; a; a = a->next)
      argv[i++] = a;
  }
  for (Decl *p = k->params; p; p = p->next)
    if (p->type->kind == TY_TENSOR)
      link_nn_layer();
  Val *vals = arena_alloc(sizeof(Val) * (size_t)(argc + 1));
  LLVMValueRef blk = argc ? entry_alloca(di->args_ty, "kargs") : LLVMConstNull(cg.P);
  for (int i = 0; i < argc; i++) {
    vals[i] = expr(argv[i]);
    store_mem(argv[i]->ty, vals[i].v, struct_gep(di->args_ty, blk, (unsigned)i));
  }
  LLVMValueRef cnt = to_i64(n->rhs->ty, expr(n->rhs).v);
  RT(sf_launch, LLVMConstPointerCast(di->desc, cg.P), cnt, blk, loc_const(n->loc));
  for (int j = 0; j < argc; j++)
    drop(argv[j]->ty, vals[j]);
}
