/*
 * unroll.c — recursion unrolling of small self-recursive fns.
 *
 * LLVM never inlines a function into itself (nor one that calls itself),
 * while gcc inlines a small recursive function into itself several levels
 * deep.  So a small fn (at most UNROLL_MAX_NODES
 * syntax nodes, at -O2 and above) that calls itself is emitted more than
 * once, sflow.f, sflow.f.rec, sflow.f.rec2, ..., each copy's self calls
 * going to the next copy and the last one's back to sflow.f, so that
 * inlining the copies into sflow.f makes one call do several levels of the
 * recursion.  Which calls go to the next copy depends on the fn:
 *
 * - Chained (the usual case): each copy is first generated calling itself,
 *   and unroll_chains runs SROA and tail-call elimination before the main
 *   pipeline, so that `return f(a) + f(b)` becomes a loop around f(a) with
 *   an accumulator.  The self calls left (those not in tail position) then
 *   go to the next copy.  With one left, UNROLL_CHAIN copies are kept, all
 *   but sflow.f marked alwaysinline, and the always-inline pass folds them
 *   into sflow.f: nested loops and one call to sflow.f every UNROLL_CHAIN
 *   levels, as gcc's code has (it stops at eight).  The copies are declared
 *   last to first, so that pass (which goes through the module in order)
 *   inlines each copy once, into the one before it.  With no self call
 *   left the other copies are deleted; with two or more, two copies are
 *   kept and left to the inliner's cost model, so the code doubles rather
 *   than growing as 2^UNROLL_CHAIN.
 * - Shared: the self calls' arguments are the parameters plus constants,
 *   and two levels of the recursion repeat a call, as fib(n-1) and fib(n-2)
 *   both call fib(n-3).  Two copies call each other for every self call, so
 *   that after the inliner inlines sflow.f.rec the repeated call sits twice
 *   in one body, where LLVM computes it once when the fn is pure (fib: three
 *   calls instead of four per two levels, compounding down the recursion).
 *   Eliminating the tail call first would put the repeats in different
 *   iterations of a loop, out of reach.
 *
 * Two steps, one entry point each: unroll_copies decides from the AST, for
 * codegen, how many copies of a fn to emit and how they call each other;
 * unroll_chains links the chained copies in the module codegen made, before
 * the optimisation pipeline of link.c runs.
 */
#include "sflowc.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <string.h>

enum { UNROLL_MAX_NODES = 64, UNROLL_CHAIN = 6, MAX_SELF_CALLS = 8, MAX_OFFSETS = 8 };

/* The nodes of a body, counted up to limit. */
static int body_size(Node *n, Decl *self, bool *calls_self, int limit) {
  int size = 0;
  for (; n && size <= limit; n = n->next) {
    size++;
    if (n->kind == N_CALL && n->callkind == CALL_FN && n->decl == self)
      *calls_self = true;
    Node *kids[] = {n->lhs, n->rhs, n->cond, n->then, n->els, n->body, n->args, n->recv};
    for (int i = 0; i < 8 && size <= limit; i++)
      size += body_size(kids[i], self, calls_self, limit - size);
  }
  return size;
}

static bool wants_unroll(Decl *d, int opt_level) {
  bool rec = false;
  return d->kind == D_FN && opt_level >= 2 &&
         body_size(d->body, d, &rec, UNROLL_MAX_NODES) <= UNROLL_MAX_NODES && rec;
}

/* The self calls of n, up to max (returns how many, max + 1 past it). */
static int self_calls(Node *n, Decl *self, Node **out, int k, int max) {
  for (; n && k <= max; n = n->next) {
    if (n->kind == N_CALL && n->callkind == CALL_FN && n->decl == self) {
      if (k < max)
        out[k] = n;
      k++;
    }
    Node *kids[] = {n->lhs, n->rhs, n->cond, n->then, n->els, n->body, n->args, n->recv};
    for (int i = 0; i < 8; i++)
      k = self_calls(kids[i], self, out, k, max);
  }
  return k;
}

/* Argument i of a self call as parameter i plus a constant: *off. */
static bool param_offset(Decl *d, Node *a, int i, int64_t *off) {
  Decl *p = d->params;
  for (int j = 0; p && j < i; j++)
    p = p->next;
  if (!p || !p->var || ast_assigns(d->body, p->var))
    return false;
  if (a->kind == N_NAME && a->var == p->var) {
    *off = 0;
    return true;
  }
  if (a->kind != N_BINARY || (a->op != '+' && a->op != '-') || !ty_is_int(a->ty))
    return false;
  if (a->lhs->kind == N_NAME && a->lhs->var == p->var && a->rhs->kind == N_INT) {
    *off = a->op == '+' ? a->rhs->ival : -a->rhs->ival;
    return true;
  }
  if (a->op == '+' && a->rhs->kind == N_NAME && a->rhs->var == p->var && a->lhs->kind == N_INT) {
    *off = a->lhs->ival;
    return true;
  }
  return false;
}

/* Whether two levels of d's recursion repeat a call: every self call passes
 * each parameter plus a constant, and two different pairs (first-level
 * call, second-level call) add up to the same offsets. */
static bool repeats_calls(Decl *d) {
  Node *calls[MAX_SELF_CALLS];
  int n = self_calls(d->body, d, calls, 0, MAX_SELF_CALLS);
  if (n < 2 || n > MAX_SELF_CALLS || d->nparams < 1 || d->nparams > MAX_OFFSETS)
    return false;
  int64_t off[MAX_SELF_CALLS][MAX_OFFSETS];
  for (int c = 0; c < n; c++) {
    if (calls[c]->argc != d->nparams)
      return false;
    for (int i = 0; i < d->nparams; i++)
      if (!param_offset(d, calls[c]->argv[i], i, &off[c][i]))
        return false;
  }
  for (int a = 0; a < n * n; a++)
    for (int b = a + 1; b < n * n; b++) {
      bool same = true;
      for (int i = 0; i < d->nparams && same; i++)
        same = (uint64_t)off[a / n][i] + (uint64_t)off[a % n][i] ==
               (uint64_t)off[b / n][i] + (uint64_t)off[b % n][i];
      if (same)
        return true;
    }
  return false;
}

int unroll_copies(Decl *d, int opt_level, bool *shared) {
  *shared = false;
  if (!wants_unroll(d, opt_level))
    return 0;
  *shared = repeats_calls(d);
  return *shared ? 2 : UNROLL_CHAIN;
}

/* ----------------------------------------------- linking the chains */

/* The calls in fn to callee; sends them to to (when not NULL). */
static int retarget_calls(LLVMValueRef fn, LLVMValueRef callee, LLVMValueRef to) {
  int n = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in))
      if (LLVMGetInstructionOpcode(in) == LLVMCall && LLVMGetCalledValue(in) == callee) {
        n++;
        if (to)
          LLVMSetOperand(in, (unsigned)LLVMGetNumOperands(in) - 1, to);
      }
  return n;
}

static int optimiser_error(LLVMErrorRef e) {
  char *m = LLVMGetErrorMessage(e);
  fprintf(stderr, "sflowc: internal compiler error: optimiser: %s\n", m);
  LLVMDisposeErrorMessage(m);
  return 1;
}

/* Chained unrolling, after codegen: eliminate tail calls while each copy
 * still calls itself, then link the copies by the self calls left. */
int unroll_chains(void *mod, void *tm, const UnrollChain *chains, int n) {
  if (!n)
    return 0;
  /* Default options: these passes read none of the tuning that link.c
   * sets for the main pipeline. */
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e = LLVMRunPasses(mod, "function(sroa,tailcallelim)", tm, po);
  if (e) {
    LLVMDisposePassBuilderOptions(po);
    return optimiser_error(e);
  }
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  unsigned always = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
  bool inline_chains = false;
  for (int c = 0; c < n; c++) {
    void *const *copies = chains[c].copies;
    int left = retarget_calls(copies[0], copies[0], NULL);
    int keep = left == 0 ? 1 : left == 1 ? chains[c].ncopies : 2;
    for (int i = keep; i < chains[c].ncopies; i++)
      LLVMDeleteFunction(copies[i]);
    for (int i = 0; i < keep && keep > 1; i++)
      retarget_calls(copies[i], copies[i], copies[(i + 1) % keep]);
    if (keep > 2) {
      for (int i = 1; i < keep; i++)
        LLVMAddAttributeAtIndex(copies[i], LLVMAttributeFunctionIndex,
                                LLVMCreateEnumAttribute(ctx, always, 0));
      inline_chains = true;
    }
  }
  if (inline_chains)
    e = LLVMRunPasses(mod, "always-inline", tm, po);
  LLVMDisposePassBuilderOptions(po);
  return e ? optimiser_error(e) : 0;
}
