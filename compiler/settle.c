/*
 * settle.c — GPU settle points: where generated code calls sf_gpu_settle().
 *
 * Arrays that kernels or matmul wrote stay on the device while the code
 * runs only GPU statements; sf_gpu_settle() copies them back before the
 * next statement that may look at array data on the host (runtime/gpu/gpu.c
 * explains the protocol).  Generated host code indexes arrays inline, so
 * the runtime cannot see that moment: the compiler must mark it.  A GPU
 * statement is a launch, a matmul into a variable, a group collective
 * (allreduce_*, broadcast, allgather into a variable, barrier:
 * runtime/gpu/nccl.c runs them on device arrays), a scalar update, or a loop
 * of those, whose expressions read no array element on the host.
 *
 * Key design choice: this is a pass over the checked AST before codegen,
 * which marks three things on the nodes (the "filled by settle.c" fields
 * of sflowc.h): a statement that needs a settle before it, the last
 * statement of a block that needs one after it, and a matmul whose result
 * may stay on the device.  Codegen's block() only reads the marks.  Every
 * question is asked of one statement and what hangs below it, never of the
 * statements after it, so the pass is linear in the program (asking about
 * the rest of the block each time made 50k statements take minutes).
 */
#include "sflowc.h"

/* Reads no array data: literals, names, arithmetic, len and numeric casts. */
static bool host_safe(Node *e) {
  if (!e)
    return true;
  switch (e->kind) {
  case N_INT: case N_FLOAT: case N_BOOL: case N_NAME: return true;
  case N_BINARY: return host_safe(e->lhs) && host_safe(e->rhs);
  case N_UNARY: return host_safe(e->lhs);
  case N_CALL:
    if (e->callkind != CALL_BUILTIN)
      return false;
    switch (e->builtin) {
    case B_LEN: case B_MIN: case B_MAX: case B_ABS: case B_CAST_I32: case B_CAST_I64:
    case B_CAST_F32: case B_CAST_F64:
      for (int i = 0; i < e->argc; i++)
        if (!host_safe(e->argv[i]))
          return false;
      return true;
    default: return false;
    }
  default: return false;
  }
}

static bool is_matmul(Node *e) {
  return e && e->kind == N_CALL && e->callkind == CALL_BUILTIN && e->builtin == B_MATMUL;
}

/* The matmul of `let x = matmul(...)` / `x = matmul(...)`, or NULL. */
static Node *deferred_matmul(Node *s) {
  Node *v = s->kind == N_LET ? s->lhs : s->kind == N_ASSIGN && s->op == '=' ? s->rhs : NULL;
  return is_matmul(v) ? v : NULL;
}

/* A collective call whose arguments read no array data: it takes device
 * arrays as they are, so it does not end a run of GPU statements. */
static bool is_collective(Node *e) {
  if (!e || e->kind != N_CALL || e->callkind != CALL_BUILTIN)
    return false;
  switch (e->builtin) {
  case B_ALLREDUCE_SUM: case B_ALLREDUCE_MEAN: case B_BROADCAST: case B_ALLGATHER:
  case B_BARRIER:
    for (int i = 0; i < e->argc; i++)
      if (!host_safe(e->argv[i]))
        return false;
    return true;
  default: return false;
  }
}

static bool list_has_gpu_work(Node *n);

/* Does the node launch a kernel or call matmul?  The node n and what hangs
 * below it, not the statements after it: the callers ask once per
 * statement. */
static bool has_gpu_work(Node *n) {
  if (!n)
    return false;
  if (n->kind == N_LAUNCH || is_matmul(n))
    return true;
  return list_has_gpu_work(n->lhs) || list_has_gpu_work(n->rhs) ||
         list_has_gpu_work(n->cond) || list_has_gpu_work(n->then) ||
         list_has_gpu_work(n->els) || list_has_gpu_work(n->body) || list_has_gpu_work(n->args);
}

/* Any node of the list that starts at n (argument lists, statement lists). */
static bool list_has_gpu_work(Node *n) {
  for (; n; n = n->next)
    if (has_gpu_work(n))
      return true;
  return false;
}

static bool gpu_stmt(Node *s) {
  switch (s->kind) {
  case N_EXPR_STMT:
    if (is_collective(s->lhs))
      return true;
    if (s->lhs->kind != N_LAUNCH || !host_safe(s->lhs->rhs))
      return false;
    for (Node *a = s->lhs->args; a; a = a->next)
      if (!host_safe(a))
        return false;
    return true;
  case N_LET:
  case N_ASSIGN: {
    Node *target = s->kind == N_ASSIGN ? s->lhs : NULL;
    if (target && target->kind != N_NAME)
      return false;
    Node *m = deferred_matmul(s);
    if (is_collective(s->kind == N_LET ? s->lhs : s->rhs))
      return true; /* x = allgather(y) */
    if (m) {
      for (int i = 0; i < m->argc; i++)
        if (!host_safe(m->argv[i]))
          return false;
      return true;
    }
    Node *v = s->kind == N_LET ? s->lhs : s->rhs;
    return v->ty && ty_is_numeric(v->ty) && host_safe(v);
  }
  case N_FOR:
  case N_WHILE: {
    if (s->kind == N_FOR ? s->rhs->kind != N_RANGE || !host_safe(s->rhs->lhs) ||
                               !host_safe(s->rhs->rhs)
                         : !host_safe(s->cond))
      return false;
    bool any = false;
    for (Node *b = s->body && s->body->kind == N_BLOCK ? s->body->body : s->body; b; b = b->next) {
      if (!gpu_stmt(b))
        return false;
      any |= has_gpu_work(b);
    }
    return any; /* a loop with no GPU work needs no special treatment */
  }
  default: return false;
  }
}

static void mark_block(Node *n, bool gpu_body);

/* The blocks inside one statement, as codegen's stmt() reaches them: an
 * `else if` is a statement of its own, not a block. */
static void mark_inner(Node *s, bool gpu) {
  switch (s->kind) {
  case N_IF:
    mark_block(s->then, false);
    if (s->els && s->els->kind == N_IF)
      mark_inner(s->els, false);
    else if (s->els)
      mark_block(s->els, false);
    break;
  case N_WHILE:
  case N_FOR: mark_block(s->body, gpu); break;
  case N_BLOCK: mark_block(s, false); break;
  default: break;
  }
}

/* One block (an N_BLOCK or a bare statement list).  gpu_body: the body of
 * a GPU loop, which settles after the loop, not once per iteration. */
static void mark_block(Node *n, bool gpu_body) {
  bool pending = false; /* a GPU statement ran since the last settle point */
  Node *last = NULL;
  for (Node *s = n && n->kind == N_BLOCK ? n->body : n; s; s = s->next) {
    bool g = gpu_stmt(s);
    s->settle_before = pending && !g;
    if (s->settle_before)
      pending = false;
    Node *m = g ? deferred_matmul(s) : NULL;
    if (m)
      m->keep_on_device = true;
    mark_inner(s, g);
    pending |= has_gpu_work(s); /* a scalar update alone leaves nothing on the device */
    s->settle_after = false;
    last = s;
  }
  if (last)
    last->settle_after = pending && !gpu_body;
}

void settle_program(Program *p) {
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next) {
      mark_block(d->body, false);
      if (d->init)
        mark_block(d->init->body, false);
      for (Decl *meth = d->methods; meth; meth = meth->next)
        mark_block(meth->body, false);
    }
}
