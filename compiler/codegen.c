/*
 * codegen.c — lowers the checked AST to LLVM IR through the LLVM C API.
 *
 * Key design choice: reference counting is decided here, statically, by
 * tracking ownership of every value.  An expression yields a Val that is
 * either OWNED (+1: calls, concatenations, literals of arrays) or BORROWED
 * (a load from a variable, field or element).  Storing a borrowed value
 * retains it, storing an owned one moves it; an owned temporary that
 * nothing consumed is released right after its use.  Locals that hold
 * references are released at scope exit and on every return, break and
 * continue path (a stack of owned slots, unwound to a mark).  Values
 * without references (numbers, bool, structs of those) never cost a
 * retain/release, so numeric loops compile to plain loads and stores.
 * A runtime error inside a task or method longjmps past those releases, so
 * a function with owned locals also lists them in a frame (sf_frame,
 * emit_frame) on the thread's frame stack, which the runtime unwinds and
 * releases on such an error: the locals are zeroed at entry and again
 * where their scope releases them, so the frame never lists a stale value.
 *
 * Memory representation: bool is i1 in registers and i8 in memory (arrays,
 * struct fields, allocas); structs are LLVM structs of memory types passed
 * by value; every reference (str, array, future, actor, group) is one
 * pointer.  Pointers are built with explicit element types and cast where
 * typed pointers (LLVM 14) need it, so the same code runs with opaque
 * pointers (LLVM 15+), where the casts fold away.
 *
 * Integer semantics (the language reference): arithmetic wraps (no nsw/nuw);
 * `/` and `%` truncate toward zero, a zero divisor is a runtime error, and
 * INT_MIN / -1 wraps to INT_MIN with remainder 0 instead of trapping; the
 * shift count is taken modulo the bit width (as on x86 and in Java), so no
 * shift is undefined.
 *
 * Tasks and actors go through the descriptors and entry points of
 * runtime/sflow.h: each task gets a thunk `void(void *args, void *result)`
 * and each actor method `void(void *state, void *args, void *result)`, with
 * an argument block whose layout is described by an emitted sf_type, so the
 * scheduler can change without changing this file.  The runtime's kinds,
 * object tags and ABI version come from sflow.h itself, and every entry
 * point is called through its row of rtabi.h (RT(sf_name, ...)).
 *
 * codegen_program is the back end's pipeline: settle points (settle.c),
 * the target machine (target.c), lowering (functions, actors and the
 * program here; expressions, statements and the domains in the files
 * codegen_internal.h lists; with the copies of
 * recursion unrolling decided by unroll.c, and kernels' CUDA C from
 * cudagen.c), the verifier, unroll_chains (unroll.c), then optimisation,
 * object and linking (link.c).
 */
#include "codegen_internal.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm/Config/llvm-config.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the generic lowerings meet a domain (codegen_internal.h). */
static const CgDomains domains = {
    .builtin = builtin,
    .array_concat = array_concat,
    .data_index_expr = data_index_expr,
    .map_call = map_call,
    .map_index = map_index,
    .map_lvalue = map_lvalue,
    .map_put_stmt = map_put_stmt,
    .for_split = for_split,
    .tensor_binary = tensor_binary,
    .tensor_index = tensor_index,
    .tensor_neg = tensor_neg,
    .tensor_apply = tensor_apply,
    .spawn_expr = spawn_expr,
    .await_expr = await_expr,
    .launch_expr = launch_expr,
};

/* ------------------------------------------------------- functions */

/* Does a kernel body assign elements of the array v? */
static bool writes_elements(Node *n, Var *v) {
  for (; n; n = n->next) {
    if (n->kind == N_ASSIGN && n->lhs->kind == N_INDEX && n->lhs->lhs->kind == N_NAME &&
        n->lhs->lhs->var == v)
      return true;
    if (writes_elements(n->lhs, v) || writes_elements(n->rhs, v) || writes_elements(n->then, v) ||
        writes_elements(n->els, v) || writes_elements(n->body, v))
      return true;
  }
  return false;
}

static void declare_fn(Decl *d, const char *name, LLVMTypeRef first, bool has_first) {
  DInfo *di = info(d);
  int n = 0;
  for (Decl *p = d->params; p; p = p->next)
    n++;
  LLVMTypeRef *ps = arena_alloc(sizeof(LLVMTypeRef) * (size_t)(n + 2));
  int k = 0;
  if (has_first)
    ps[k++] = first;
  for (Decl *p = d->params; p; p = p->next)
    ps[k++] = lt_val(p->type);
  Type *ret = d->ret_type ? d->ret_type : ty_prim(TY_VOID);
  if (d->kind == D_KERNEL || d->kind == D_INIT || d->kind == D_WORKFLOW)
    ret = ty_prim(TY_VOID);
  di->fnty = LLVMFunctionType(lt_val(ret), ps, (unsigned)k, 0);
  di->fn = LLVMAddFunction(cg.mod, name, di->fnty);
  LLVMSetLinkage(di->fn, LLVMInternalLinkage);
  add_attr(di->fn, LLVMAttributeFunctionIndex, "nounwind");
  d->llvm = di->fn;
  if (ret->kind == TY_ARRAY)
    mark_array_attrs(di->fn, LLVMAttributeReturnIndex);
  k = has_first ? 1 : 0;
  for (Decl *p = d->params; p; p = p->next, k++)
    if (p->type->kind == TY_ARRAY)
      mark_array_attrs(di->fn, (unsigned)k + 1);
  /* The argument block of tasks, methods and init: owned parameters. */
  if (d->kind == D_TASK || d->kind == D_METHOD || d->kind == D_INIT || d->kind == D_KERNEL) {
    LLVMTypeRef *ms = arena_alloc(sizeof(LLVMTypeRef) * (size_t)(n + 1));
    const char **names = arena_alloc(sizeof(char *) * (size_t)(n + 1));
    Type **types = arena_alloc(sizeof(Type *) * (size_t)(n + 1));
    k = 0;
    for (Decl *p = d->params; p; p = p->next, k++) {
      ms[k] = lt_mem(p->type);
      names[k] = p->name;
      types[k] = p->type;
    }
    di->args_ty = LLVMStructCreateNamed(cg.ctx, arena_printf("%s.args", name));
    LLVMStructSetBody(di->args_ty, ms, (unsigned)n, 0);
    di->args_desc = new_desc_global(".args.type");
    set_struct_desc(di->args_desc, arena_printf("%s(args)", d->mangled ? d->mangled : d->name),
                    di->args_ty, n, names, types);
  }
}

/* Starts a function body: entry block, params in slots. */
static void begin_fn(Fn *f, Decl *d, LLVMValueRef fn, Type *ret, int first) {
  memset(f, 0, sizeof *f);
  f->fn = fn;
  f->ret = ret;
  f->base = cg.nowned;
  cg.fn = f;
  f->entry = LLVMAppendBasicBlockInContext(cg.ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(cg.b, f->entry);
  LLVMSetCurrentDebugLocation2(cg.b, NULL);
  if (cg.dib && d) {
    LLVMMetadataRef file = di_file(d->loc.file);
    LLVMMetadataRef sty = LLVMDIBuilderCreateSubroutineType(cg.dib, file, NULL, 0, LLVMDIFlagZero);
    const char *nm = d->mangled ? d->mangled : d->name ? d->name : "init";
    const char *link = LLVMGetValueName(fn);
    f->sp = LLVMDIBuilderCreateFunction(cg.dib, file, nm, strlen(nm), link, strlen(link), file,
                                        (unsigned)d->loc.line, sty, 1, 1, (unsigned)d->loc.line,
                                        LLVMDIFlagZero, cg.opts->opt_level > 0);
    LLVMSetSubprogram(fn, f->sp);
    di_set_loc(d->loc);
  }
  int argno = 1;
  for (Decl *p = d ? d->params : NULL; p; p = p->next, argno++) {
    Var *v = p->var;
    LLVMValueRef pv = LLVMGetParam(fn, (unsigned)(first + argno - 1));
    LLVMValueRef slot = entry_alloca(lt_mem(p->type), p->name);
    store_mem(p->type, pv, slot);
    if (v) {
      v->llvm = slot;
      di_declare(v, slot, argno);
      /* Parameters are borrowed; one the body reassigns gets its own
       * reference so that the assignment may release the old value. */
      if (ty_has_refs(p->type) && ast_assigns(d->body, v)) {
        retain_value(p->type, pv);
        push_owned(slot, p->type);
      }
    }
  }
}

/* sf_frames, the thread's frame stack (sflow.h): initial-exec, as the
 * runtime that defines it is linked into the same executable. */
static LLVMValueRef frames_top(void) {
  LLVMValueRef g = LLVMGetNamedGlobal(cg.mod, "sf_frames");
  if (!g) {
    g = LLVMAddGlobal(cg.mod, cg.P, "sf_frames");
    LLVMSetThreadLocal(g, 1);
    LLVMSetThreadLocalMode(g, LLVMInitialExecTLSModel);
  }
  return g;
}

/* The frame of f, once its body is complete: an sf_frame listing every
 * owned slot with its type, pushed on sf_frames at entry (the slots zeroed
 * first) and popped before every return.  A runtime error that ends a task
 * attempt or a method releases the slots of the frames it unwinds (error.c);
 * the ordinary releases stay as they are, inline. */
static void emit_frame(Fn *f) {
  int n = f->nframe;
  if (n == 0)
    return;
  LLVMValueRef *tys = arena_alloc(sizeof(LLVMValueRef) * (size_t)n);
  for (int i = 0; i < n; i++)
    tys[i] = desc_arg(f->frame[i].ty);
  LLVMValueRef dv[] = {ci64(n), LLVMConstArray(cg.P, tys, (unsigned)n)};
  LLVMValueRef desc = const_global(LLVMConstStructInContext(cg.ctx, dv, 2, 0), "frame.desc");
  LLVMTypeRef ft[] = {cg.P, cg.P, LLVMArrayType(cg.P, (unsigned)n)};
  LLVMTypeRef fty = LLVMStructTypeInContext(cg.ctx, ft, 3, 0);
  LLVMValueRef fr = entry_alloca(fty, "frame");
  LLVMValueRef top = frames_top();
  LLVMValueRef first = LLVMGetFirstInstruction(f->entry);
  while (first && LLVMIsAAllocaInst(first))
    first = LLVMGetNextInstruction(first);
  if (first)
    LLVMPositionBuilderBefore(cg.b, first);
  else
    LLVMPositionBuilderAtEnd(cg.b, f->entry);
  LLVMSetCurrentDebugLocation2(cg.b, NULL);
  LLVMValueRef slots = struct_gep(fty, fr, 2);
  for (int i = 0; i < n; i++) {
    LLVMValueRef s = f->frame[i].slot;
    store(LLVMConstNull(lt_mem(f->frame[i].ty)), s);
    LLVMValueRef idx[] = {ci64(0), ci64(i)};
    store(as_P(s), LLVMBuildInBoundsGEP2(cg.b, ft[2], slots, idx, 2, ""));
  }
  store(load(cg.P, top), struct_gep(fty, fr, 0));
  store(LLVMConstPointerCast(desc, cg.P), struct_gep(fty, fr, 1));
  store(as_P(fr), top);
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f->fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
    LLVMValueRef t = LLVMGetBasicBlockTerminator(bb);
    if (t && LLVMGetInstructionOpcode(t) == LLVMRet) {
      LLVMPositionBuilderBefore(cg.b, t);
      store(load(cg.P, struct_gep(fty, fr, 0)), top);
    }
  }
  free(f->frame);
  f->frame = NULL;
}

static void end_fn(Fn *f) {
  scope_end(f->base);
  if (!terminated()) {
    if (f->ret->kind == TY_VOID)
      LLVMBuildRetVoid(cg.b);
    else
      LLVMBuildUnreachable(cg.b); /* sema rejects a missing return */
  }
  /* Dead blocks may lack terminators. */
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f->fn); bb; bb = LLVMGetNextBasicBlock(bb))
    if (!LLVMGetBasicBlockTerminator(bb)) {
      LLVMPositionBuilderAtEnd(cg.b, bb);
      LLVMBuildUnreachable(cg.b);
    }
  emit_frame(f);
  cg.fn = NULL;
}

static void gen_fn(Decl *d) {
  DInfo *di = info(d);
  Fn f;
  Type *ret = d->ret_type ? d->ret_type : ty_prim(TY_VOID);
  if (d->kind == D_WORKFLOW || d->kind == D_KERNEL)
    ret = ty_prim(TY_VOID);
  begin_fn(&f, d, di->fn, ret, d->kind == D_KERNEL ? 1 : 0);
  if (d->kind == D_KERNEL)
    f.tid = LLVMGetParam(di->fn, 0);
  block(d->body);
  end_fn(&f);
}

/* Recursion unrolling (unroll.c): the ncopies copies of a small
 * self-recursive fn, declared last to first so that the always-inline pass
 * (which goes through the module in order) inlines each copy once, into
 * the one before it. */
static void declare_unrolled(Decl *d, int ncopies, bool shared) {
  DInfo *di = info(d);
  di->shared = shared;
  di->ncopies = ncopies;
  di->copies = arena_alloc(sizeof(void *) * (size_t)ncopies);
  for (int i = ncopies - 1; i >= 0; i--) {
    declare_fn(d, sym(d, i == 0 ? "" : i == 1 ? ".rec" : arena_printf(".rec%d", i)), NULL, false);
    di->copies[i] = di->fn;
  }
  if (!shared) {
    if (cg.nchains % 16 == 0) {
      UnrollChain *c = arena_alloc(sizeof(UnrollChain) * (size_t)(cg.nchains + 16));
      if (cg.nchains)
        memcpy(c, cg.chains, sizeof(UnrollChain) * (size_t)cg.nchains);
      cg.chains = c;
    }
    cg.chains[cg.nchains++] = (UnrollChain){di->copies, ncopies};
  }
}

/* Each copy's body; shared twins call each other, chained copies call
 * themselves until unroll_chains links them. */
static void gen_unrolled(Decl *d) {
  DInfo *di = info(d);
  cg.redirect_of = di->shared ? d : NULL;
  for (int i = 0; i < di->ncopies; i++) {
    di->fn = di->copies[i];
    cg.redirect_fn = di->copies[(i + 1) % di->ncopies];
    gen_fn(d);
  }
  di->fn = di->copies[0];
  cg.redirect_of = NULL;
}

static void gen_method(Decl *actor, Decl *m) {
  DInfo *ai = info(actor), *di = info(m);
  Fn f;
  Type *ret = m->kind == D_INIT ? ty_prim(TY_VOID) : m->ret_type ? m->ret_type : ty_prim(TY_VOID);
  begin_fn(&f, m, di->fn, ret, 1);
  f.state = LLVMGetParam(di->fn, 0);
  f.state_ty = ai->state_ty;
  f.own_fields = calls_own_method(m->body);
  if (m->kind == D_INIT) {
    /* Field initialisers in order, zero values for the others. */
    unsigned i = 0;
    for (Decl *fd = actor->fields; fd; fd = fd->next, i++) {
      LLVMValueRef v;
      if (fd->value)
        v = own(fd->type, expr(fd->value));
      else
        v = zero_value(fd->type, fd->loc);
      store_mem(fd->type, v, struct_gep(ai->state_ty, f.state, i));
    }
  }
  if (m->body)
    block(m->body);
  end_fn(&f);
}

/* void thunk([state,] args, result): unpacks the argument block, calls the
 * function with borrowed arguments, stores its owned result. */
static void gen_thunk(Decl *d, bool has_state) {
  DInfo *di = info(d);
  LLVMTypeRef ps[] = {cg.P, cg.P, cg.P};
  int np = has_state ? 3 : 2;
  di->thunk = LLVMAddFunction(cg.mod, sym(d, ".thunk"), LLVMFunctionType(cg.vd, ps, (unsigned)np, 0));
  LLVMSetLinkage(di->thunk, LLVMInternalLinkage);
  Fn f;
  begin_fn(&f, NULL, di->thunk, ty_prim(TY_VOID), 0);
  LLVMValueRef args = LLVMGetParam(di->thunk, has_state ? 1 : 0);
  LLVMValueRef res = LLVMGetParam(di->thunk, has_state ? 2 : 1);
  LLVMValueRef *cargs = arena_alloc(sizeof(LLVMValueRef) * (size_t)(d->nparams + 8));
  int k = 0;
  if (has_state)
    cargs[k++] = LLVMGetParam(di->thunk, 0);
  unsigned i = 0;
  for (Decl *p = d->params; p; p = p->next, i++)
    cargs[k++] = load_mem(p->type, struct_gep(di->args_ty, args, i));
  LLVMValueRef r = call(di->fn, cargs, k);
  Type *ret = d->kind == D_INIT ? ty_prim(TY_VOID) : d->ret_type ? d->ret_type : ty_prim(TY_VOID);
  if (ret->kind != TY_VOID)
    store_mem(ret, r, res);
  LLVMBuildRetVoid(cg.b);
  cg.fn = NULL;
}

static LLVMValueRef method_desc(Decl *m) {
  DInfo *di = info(m);
  Type *ret = m->kind == D_INIT ? ty_prim(TY_VOID) : m->ret_type ? m->ret_type : ty_prim(TY_VOID);
  LLVMValueRef f[] = {cstr(m->mangled ? m->mangled : m->name ? m->name : "init"),
                      LLVMConstPointerCast(di->thunk, cg.P),
                      LLVMConstPointerCast(di->args_desc, cg.P), desc_arg(ret)};
  return const_global(LLVMConstStructInContext(cg.ctx, f, 4, 0), ".method");
}

static void task_desc(Decl *d) {
  DInfo *di = info(d);
  LLVMValueRef f[] = {cstr(d->mangled ? d->mangled : d->name), LLVMConstPointerCast(di->thunk, cg.P),
                      LLVMConstPointerCast(di->args_desc, cg.P), desc_arg(d->ret_type),
                      ci32(d->retry), ci32(0), LLVMConstReal(cg.f64, d->cpus),
                      LLVMConstReal(cg.f64, d->gpus), LLVMConstReal(cg.f64, d->timeout)};
  LLVMSetInitializer(di->desc, LLVMConstStructInContext(cg.ctx, f, 9, 0));
}

static void declare_actor(Decl *a) {
  DInfo *ai = info(a);
  const char *an = a->mangled ? a->mangled : a->name;
  ai->state_ty = struct_of_fields(arena_printf("%s.state", an), a->fields);
  int n;
  const char **names;
  Type **types;
  fields_of(a->fields, &n, &names, &types);
  ai->state_desc = new_desc_global(".state.type");
  set_struct_desc(ai->state_desc, an, ai->state_ty, n, names, types);
  if (a->init) {
    ai->init_decl = a->init;
  } else {
    Decl *in = decl_new(D_INIT, a->loc);
    in->name = "init";
    in->parent = a;
    in->module = a->module;
    in->reached = true;
    ai->init_decl = in;
  }
  Decl *in = ai->init_decl;
  if (!in->mangled)
    in->mangled = arena_printf("%s.init", an);
  declare_fn(in, sym(in, ""), cg.P, true);
  for (Decl *m = a->methods; m; m = m->next)
    declare_fn(m, sym(m, ""), cg.P, true);
}

static void gen_actor(Decl *a) {
  DInfo *ai = info(a);
  Decl *in = ai->init_decl;
  gen_method(a, in);
  gen_thunk(in, true);
  info(in)->desc = method_desc(in);
  for (Decl *m = a->methods; m; m = m->next) {
    gen_method(a, m);
    gen_thunk(m, true);
  }
  for (Decl *m = a->methods; m; m = m->next)
    if (!info(m)->desc)
      info(m)->desc = method_desc(m);
  LLVMValueRef f[] = {cstr(a->mangled ? a->mangled : a->name),
                      LLVMConstPointerCast(ai->state_desc, cg.P),
                      LLVMConstPointerCast(info(in)->desc, cg.P), ci32(a->restarts),
                      ci32(a->checkpoint_every), ci32(a->replicas), ci32(a->checkpoint_keep),
                      LLVMConstReal(cg.f64, a->cpus), LLVMConstReal(cg.f64, a->gpus)};
  LLVMSetInitializer(ai->desc, LLVMConstStructInContext(cg.ctx, f, 9, 0));
}

/* ---------------------------------------------------- the program */

static int param_kind(Type *t) {
  switch (t->kind) {
  case TY_BOOL: return SF_BOOL;
  case TY_I32: return SF_I32;
  case TY_I64: return SF_I64;
  case TY_F32: return SF_F32;
  case TY_F64: return SF_F64;
  case TY_STR: return SF_STR;
  default: return SF_VOID;
  }
}

/* A flag default: a literal, a negated literal or a string (sema checks). */
static LLVMValueRef default_bits(Type *t, Node *v) {
  bool neg = false;
  while (v->kind == N_UNARY && v->op == '-') {
    neg = !neg;
    v = v->lhs;
  }
  if (t->kind == TY_STR)
    return LLVMConstPtrToInt(str_literal(v->sval, v->slen), cg.i64);
  double d = v->kind == N_FLOAT ? v->fval : (double)v->ival;
  int64_t i = v->ival;
  if (neg)
    d = -d, i = (int64_t)(0 - (uint64_t)i);
  union {
    double d;
    float f;
    int64_t i;
    int32_t i32;
    uint8_t b;
  } u = {.i = 0};
  switch (t->kind) {
  case TY_BOOL: u.b = v->ival != 0; break;
  case TY_I32: u.i32 = (int32_t)i; break;
  case TY_I64: u.i = i; break;
  case TY_F32: u.f = (float)d; break;
  default: u.d = d; break;
  }
  return ci64(u.i);
}

static const char *stem(const char *path) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  char *s = arena_strdup(b);
  char *dot = strrchr(s, '.');
  if (dot && dot != s)
    *dot = 0;
  return s;
}

/* The start of the line before the one that starts at off (off > 0). */
static int prev_line(const char *t, int off) {
  int i = off - 1;
  while (i > 0 && t[i - 1] != '\n')
    i--;
  return i;
}

/* A workflow parameter's --help text: the `//` comment lines right above
 * it, without their slashes, joined by spaces ("" if none).  It applies
 * only to a parameter that starts its line, so a comment is never read as
 * the description of a parameter written after another one. */
static const char *param_doc(const Decl *p) {
  const Source *s = src_get(p->loc.file);
  const char *t = s->text;
  int line = p->loc.off;
  while (line > 0 && t[line - 1] != '\n')
    line--;
  for (int i = line; i < p->loc.off; i++)
    if (t[i] != ' ' && t[i] != '\t')
      return "";
  int first = line; /* the start of the first comment line */
  while (first > 0) {
    int l = prev_line(t, first), i = l;
    while (t[i] == ' ' || t[i] == '\t')
      i++;
    if (t[i] != '/' || t[i + 1] != '/')
      break;
    first = l;
  }
  Buf b = {0};
  for (int l = first; l < line;) {
    int e = l;
    while (t[e] != '\n')
      e++;
    const char *c = strstr(t + l, "//") + 2;
    while (*c == ' ' || *c == '\t')
      c++;
    int n = (int)(t + e - c);
    while (n > 0 && (c[n - 1] == ' ' || c[n - 1] == '\t' || c[n - 1] == '\r'))
      n--;
    if (n > 0) {
      if (b.len)
        buf_putc(&b, ' ');
      buf_putn(&b, c, (size_t)n);
    }
    l = e + 1;
  }
  const char *doc = arena_strndup(b.data ? b.data : "", b.len);
  buf_free(&b);
  return doc;
}

/* The absolute folder of the source at path ("" if it cannot be known):
 * sf_program.source_dir, where io.resolve looks for relative paths. */
static const char *source_dir(const char *path) {
  char *abs = realpath(path, NULL);
  if (!abs)
    return "";
  char *slash = strrchr(abs, '/');
  const char *dir = arena_strndup(abs, slash && slash != abs ? (size_t)(slash - abs) : 1);
  free(abs);
  return dir;
}

static void gen_program_desc(Decl *wf) {
  /* main_fn(sf_value *args): unpack the slots, run the workflow. */
  LLVMTypeRef ps[] = {cg.P};
  LLVMValueRef mainfn = LLVMAddFunction(cg.mod, "sflow.main_fn", LLVMFunctionType(cg.vd, ps, 1, 0));
  LLVMSetLinkage(mainfn, LLVMInternalLinkage);
  Fn f;
  begin_fn(&f, NULL, mainfn, ty_prim(TY_VOID), 0);
  LLVMValueRef args = LLVMGetParam(mainfn, 0);
  int n = 0;
  for (Decl *p = wf->params; p; p = p->next)
    n++;
  LLVMValueRef *cargs = arena_alloc(sizeof(LLVMValueRef) * (size_t)(n + 1));
  LLVMValueRef *params = arena_alloc(sizeof(LLVMValueRef) * (size_t)(n + 1));
  LLVMTypeRef param_ty =
      LLVMStructTypeInContext(cg.ctx, (LLVMTypeRef[]){cg.P, cg.i32, cg.i32, cg.i64, cg.P, cg.P}, 6, 0);
  int i = 0;
  for (Decl *p = wf->params; p; p = p->next, i++) {
    LLVMValueRef idx = ci64(i);
    LLVMValueRef slot = LLVMBuildGEP2(cg.b, cg.i64, ptr_as(args, cg.i64), &idx, 1, "");
    cargs[i] = load_mem(p->type, slot);
    const char *def_text = "";
    if (p->value) {
      Source *s = src_get(p->value->loc.file);
      def_text = arena_strndup(s->text + p->value->loc.off, (size_t)p->value->loc.len);
    }
    LLVMValueRef pf[] = {cstr(p->name), ci32(param_kind(p->type)), ci32(p->value ? 1 : 0),
                         p->value ? default_bits(p->type, p->value) : ci64(0), cstr(def_text),
                         cstr(param_doc(p))};
    params[i] = LLVMConstNamedStruct(param_ty, pf, 6);
  }
  call(info(wf)->fn, cargs, n);
  LLVMBuildRetVoid(cg.b);
  cg.fn = NULL;

  LLVMValueRef parr = NULL;
  if (n)
    parr = const_global(LLVMConstArray(param_ty, params, (unsigned)n), ".params");
  Source *main_src = src_get(cg.prog->main->file);
  /* What a host's CPU must have (target.c), checked by the head of a
   * --nodes run before it deploys this executable anywhere. */
  LLVMValueRef pd[] = {ci32(SF_ABI_VERSION), cstr(stem(main_src->path)), cstr(main_src->path),
                       ci32(n), parr ? LLVMConstPointerCast(parr, cg.P) : LLVMConstNull(cg.P),
                       LLVMConstPointerCast(mainfn, cg.P), cstr(cg.target.cpu),
                       cstr(cg.target.needs), ci64(cg.nfnvals + 1),
                       LLVMConstPointerCast(cg.fn_names, cg.P),
                       LLVMConstPointerCast(cg.fn_tasks, cg.P), LLVMConstPointerCast(cg.fns, cg.P),
                       cstr(source_dir(main_src->path))};
  LLVMValueRef init = LLVMConstStructInContext(cg.ctx, pd, 13, 0);
  LLVMValueRef g = LLVMAddGlobal(cg.mod, LLVMTypeOf(init), "sf_program_desc");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
}

/* Declares every item reach.c marked: nothing else is lowered. */
static void declare_all(Program *p) {
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next) {
      if (!d->reached)
        continue;
      switch (d->kind) {
      case D_FN: {
        if (d->is_extern) {
          declare_extern(d);
          break;
        }
        bool shared;
        int ncopies = unroll_copies(d, cg.opts->opt_level, &shared);
        if (ncopies)
          declare_unrolled(d, ncopies, shared);
        else
          declare_fn(d, sym(d, ""), NULL, false);
        break;
      }
      case D_WORKFLOW: declare_fn(d, sym(d, ""), NULL, false); break;
      case D_KERNEL:
        declare_fn(d, sym(d, ".cpu"), cg.i64, true);
        info(d)->desc = LLVMAddGlobal(
            cg.mod, LLVMStructTypeInContext(cg.ctx, (LLVMTypeRef[]){cg.P, cg.P, cg.P, cg.P, cg.P, cg.P, cg.i64}, 7, 0),
            ".kernel");
        LLVMSetLinkage(info(d)->desc, LLVMPrivateLinkage);
        LLVMSetGlobalConstant(info(d)->desc, 1);
        break;
      case D_TASK:
        declare_fn(d, sym(d, ""), NULL, false);
        info(d)->desc = LLVMAddGlobal(
            cg.mod,
            LLVMStructTypeInContext(cg.ctx,
                                    (LLVMTypeRef[]){cg.P, cg.P, cg.P, cg.P, cg.i32, cg.i32, cg.f64,
                                                    cg.f64, cg.f64},
                                    9, 0),
            ".task");
        LLVMSetLinkage(info(d)->desc, LLVMPrivateLinkage);
        LLVMSetGlobalConstant(info(d)->desc, 1);
        break;
      case D_ACTOR:
        declare_actor(d);
        info(d)->desc = LLVMAddGlobal(
            cg.mod,
            LLVMStructTypeInContext(cg.ctx,
                                    (LLVMTypeRef[]){cg.P, cg.P, cg.P, cg.i32, cg.i32, cg.i32, cg.i32,
                                                    cg.f64, cg.f64},
                                    9, 0),
            ".actor");
        LLVMSetLinkage(info(d)->desc, LLVMPrivateLinkage);
        LLVMSetGlobalConstant(info(d)->desc, 1);
        break;
      default: break;
      }
    }
}

/* A kernel's runtime face: `k.range(lo, hi, args)` runs the CPU version
 * over thread ids [lo, hi) from an argument block, and the sf_kernel_desc
 * carries it beside the CUDA C (cudagen.c) that NVRTC compiles on a GPU. */
static void gen_kernel_glue(Decl *d) {
  DInfo *di = info(d);
  LLVMTypeRef ps[] = {cg.i64, cg.i64, cg.P};
  LLVMValueRef fn = LLVMAddFunction(cg.mod, sym(d, ".range"), LLVMFunctionType(cg.vd, ps, 3, 0));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  add_attr(fn, LLVMAttributeFunctionIndex, "nounwind");
  Fn f;
  begin_fn(&f, NULL, fn, ty_prim(TY_VOID), 0);
  LLVMValueRef lo = LLVMGetParam(fn, 0), hi = LLVMGetParam(fn, 1), args = LLVMGetParam(fn, 2);
  LLVMValueRef *cargs = arena_alloc(sizeof(LLVMValueRef) * (size_t)(d->nparams + 2));
  int k = 1;
  uint64_t writes = 0;
  for (Decl *p = d->params; p; p = p->next, k++) {
    cargs[k] = load_mem(p->type, struct_gep(di->args_ty, args, (unsigned)(k - 1)));
    bool elems = p->type->kind == TY_ARRAY || p->type->kind == TY_TENSOR;
    if (elems && (k - 1 >= 64 || writes_elements(d->body, p->var)))
      writes |= k - 1 < 64 ? 1ull << (k - 1) : 0;
  }
  LLVMValueRef ctr = entry_alloca(cg.i64, "tid");
  store(lo, ctr);
  LLVMBasicBlockRef cond = new_block("cond"), body = new_block("body"), end = new_block("end");
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, cond);
  LLVMValueRef i = load(cg.i64, ctr);
  LLVMBuildCondBr(cg.b, LLVMBuildICmp(cg.b, LLVMIntSLT, i, hi, ""), body, end);
  LLVMPositionBuilderAtEnd(cg.b, body);
  cargs[0] = i;
  call(di->fn, cargs, k);
  store(LLVMBuildAdd(cg.b, i, ci64(1), ""), ctr);
  LLVMBuildBr(cg.b, cond);
  LLVMPositionBuilderAtEnd(cg.b, end);
  LLVMBuildRetVoid(cg.b);
  cg.fn = NULL;
  char *cuda = cudagen_kernel(d);
  Source *src = src_get(d->loc.file);
  LLVMValueRef fs[] = {cstr(d->mangled ? d->mangled : d->name), cstr(src->path), cstr(cuda),
                       cstr(cudagen_entry(d)), LLVMConstPointerCast(di->args_desc, cg.P),
                       LLVMConstPointerCast(fn, cg.P), LLVMConstInt(cg.i64, writes, 0)};
  free(cuda);
  LLVMSetInitializer(di->desc, LLVMConstStructInContext(cg.ctx, fs, 7, 0));
}

static void gen_all(Program *p) {
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next) {
      if (!d->reached)
        continue;
      switch (d->kind) {
      case D_FN:
        if (d->is_extern)
          break;
        if (info(d)->copies) {
          gen_unrolled(d);
          break;
        }
        /* fall through */
      case D_WORKFLOW: gen_fn(d); break;
      case D_KERNEL:
        gen_fn(d);
        gen_kernel_glue(d);
        break;
      case D_TASK:
        gen_fn(d);
        gen_thunk(d, false);
        task_desc(d);
        break;
      case D_ACTOR: gen_actor(d); break;
      default: break;
      }
    }
}

/* ------------------------------------------------------ the module */

static void init_types(void) {
  cg.i1 = LLVMInt1TypeInContext(cg.ctx);
  cg.i8 = LLVMInt8TypeInContext(cg.ctx);
  cg.i32 = LLVMInt32TypeInContext(cg.ctx);
  cg.i64 = LLVMInt64TypeInContext(cg.ctx);
  cg.f32 = LLVMFloatTypeInContext(cg.ctx);
  cg.f64 = LLVMDoubleTypeInContext(cg.ctx);
  cg.vd = LLVMVoidTypeInContext(cg.ctx);
  cg.P = ptr_to(cg.i8);
  /* sf_array: {rc, tag, flags, len, elem, data, dev, where, gpu, cap} */
  cg.arr_ty = LLVMStructCreateNamed(cg.ctx, "sf_array");
  LLVMTypeRef at[] = {cg.i64, cg.i32, cg.i32, cg.i64, cg.P, cg.P, cg.P, cg.i32, cg.i32, cg.i64};
  LLVMStructSetBody(cg.arr_ty, at, 10, 0);
  cg.loc_ty = LLVMStructCreateNamed(cg.ctx, "sf_loc");
  LLVMTypeRef lt[] = {cg.P, cg.i32, cg.i32};
  LLVMStructSetBody(cg.loc_ty, lt, 3, 0);
  cg.type_ty = LLVMStructCreateNamed(cg.ctx, "sf_type");
  LLVMTypeRef tt[] = {cg.i32, cg.i32, cg.i32, cg.i32, cg.P, cg.P, cg.P};
  LLVMStructSetBody(cg.type_ty, tt, 7, 0);
  cg.field_ty = LLVMStructCreateNamed(cg.ctx, "sf_field");
  LLVMTypeRef ft[] = {cg.P, cg.i32, cg.P};
  LLVMStructSetBody(cg.field_ty, ft, 3, 0);
}

static int make_target(void) {
  if (target_open(&cg.opts->target, cg.opts->opt_level, &cg.target)) {
    if (cg.target.tm)
      LLVMDisposeTargetMachine(cg.target.tm);
    return 1;
  }
  cg.tm = cg.target.tm;
  cg.td = LLVMCreateTargetDataLayout(cg.tm);
  LLVMSetTarget(cg.mod, cg.target.triple);
  LLVMSetModuleDataLayout(cg.mod, cg.td);
  return 0;
}

static void finish(void) {
  if (cg.dib)
    LLVMDisposeDIBuilder(cg.dib);
  LLVMDisposeBuilder(cg.b);
  LLVMDisposeModule(cg.mod);
  LLVMDisposeTargetData(cg.td);
  LLVMDisposeTargetMachine(cg.tm);
  LLVMContextDispose(cg.ctx);
  free(cg.owned);
  free(cg.fnvals);
  free(cg.file_names);
  free(cg.difiles);
  memset(&cg, 0, sizeof cg);
}

int codegen_program(Program *p, const CodegenOptions *opts) {
  memset(&cg, 0, sizeof cg);
  cg.dom = &domains;
  cg.prog = p;
  cg.opts = opts;
  bool linking = !opts->emit;
  if (linking && !p->workflow) {
    fprintf(stderr, "sflowc: error: no 'workflow main' to run\n");
    return 1;
  }
  cg.ctx = LLVMContextCreate();
  Source *ms = src_get(p->main->file);
  cg.mod = LLVMModuleCreateWithNameInContext(ms->path, cg.ctx);
  cg.b = LLVMCreateBuilderInContext(cg.ctx);
  cg.file_names = calloc((size_t)src_count() + 1, sizeof(LLVMValueRef));
  cg.difiles = calloc((size_t)src_count() + 1, sizeof(LLVMMetadataRef));
  if (make_target()) {
    LLVMDisposeBuilder(cg.b);
    LLVMDisposeModule(cg.mod);
    LLVMContextDispose(cg.ctx);
    return 1;
  }
  init_types();
  tbaa_init();
  if (opts->debug) {
    cg.dib = LLVMCreateDIBuilder(cg.mod);
    LLVMMetadataRef f = di_file(p->main->file);
    cg.cu = LLVMDIBuilderCreateCompileUnit(cg.dib, LLVMDWARFSourceLanguageC, f, "sflowc", 6,
                                          opts->opt_level > 0, "", 0, 0, "", 0,
                                          LLVMDWARFEmissionFull, 0, 0, 0, "", 0, "", 0);
    LLVMAddModuleFlag(cg.mod, LLVMModuleFlagBehaviorWarning, "Debug Info Version", 18,
                      LLVMValueAsMetadata(ci32((int32_t)LLVMDebugMetadataVersion())));
    LLVMAddModuleFlag(cg.mod, LLVMModuleFlagBehaviorWarning, "Dwarf Version", 13,
                      LLVMValueAsMetadata(ci32(4)));
  }
  /* Reset caches that live in the (interned) types. */
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next) {
      d->llvm = d->llvm2 = NULL;
      if (d->type)
        d->type->llvm = NULL;
    }

  settle_program(p);
  reach_program(p);
  declare_all(p);
  gen_all(p);
  gen_fn_table();
  if (p->workflow)
    gen_program_desc(p->workflow);
  if (cg.dib)
    LLVMDIBuilderFinalize(cg.dib);
  if (diag_error_count()) {
    finish();
    return 1;
  }
  char *msg = NULL;
  if (LLVMVerifyModule(cg.mod, LLVMReturnStatusAction, &msg)) {
    fprintf(stderr, "sflowc: internal compiler error: invalid LLVM IR:\n%s\n", msg);
    LLVMDisposeMessage(msg);
    if (getenv("SFLOWC_DUMP_IR"))
      LLVMDumpModule(cg.mod);
    finish();
    return 101;
  }
  LLVMDisposeMessage(msg);
  target_tune(cg.mod, &cg.target);
  int rc = unroll_chains(cg.mod, cg.tm, cg.chains, cg.nchains);
  if (!rc)
    rc = link_program(cg.mod, &cg.target, opts);
  finish();
  return rc;
}
