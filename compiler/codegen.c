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
 * the target machine (target.c), lowering here (with the copies of
 * recursion unrolling decided by unroll.c, and kernels' CUDA C from
 * cudagen.c), the verifier, unroll_chains (unroll.c), then optimisation,
 * object and linking (link.c).
 */
#include "sflowc.h"
#include "parser.h"
#include "rtabi.h" /* and runtime/sflow.h: sf_kind, the object tags, SF_ABI_VERSION */

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm/Config/llvm-config.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* The rows of rtabi.h by number, and each one's argument count. */
#define RT_ID(name, sig, attrs) RT_##name,
#define RT_NARGS(name, sig, attrs) RT_NARGS_##name = (int)sizeof(sig) - 2,
enum { SF_RUNTIME_ENTRY_POINTS(RT_ID) RT__COUNT };
enum { SF_RUNTIME_ENTRY_POINTS(RT_NARGS) };
#undef RT_ID
#undef RT_NARGS

/* A value and whether this code owns a reference to it. */
typedef struct {
  LLVMValueRef v;
  bool owned;
} Val;

/* A slot whose references the current function owns (a local). */
typedef struct {
  LLVMValueRef slot;
  Type *ty;
} Owned;

typedef struct Loop Loop;
struct Loop {
  LLVMBasicBlockRef brk, cont;
  int mark; /* owned slots below this survive break/continue */
  Loop *up;
};

/* Per-callable information, hung on Decl.llvm2. */
typedef struct {
  LLVMValueRef fn;
  LLVMTypeRef fnty;
  LLVMValueRef thunk;
  LLVMTypeRef args_ty; /* argument block (tasks, methods, init) */
  LLVMValueRef args_desc;
  LLVMValueRef desc;    /* sf_task_desc / sf_method_desc / sf_actor_desc */
  LLVMTypeRef state_ty; /* actors */
  LLVMValueRef state_desc;
  LLVMValueRef init_fn; /* actors: field initialisers + init body */
  Decl *init_decl;      /* a synthetic D_INIT when the actor has none */
  /* Small self-recursive fns (unroll.c): copies of the fn (LLVMValueRefs),
   * copies[0] being fn itself; shared: the two copies call each other from
   * the start, else each copy calls itself until unroll_chains. */
  void **copies;
  int ncopies;
  bool shared;
  LLVMValueRef value_fn; /* tasks used as values: the function that calls the task */
} DInfo;

/* The function being generated. */
typedef struct {
  LLVMValueRef fn;
  Type *ret;
  LLVMValueRef state; /* actor methods and init: the state pointer */
  LLVMTypeRef state_ty;
  LLVMValueRef tid; /* kernels: thread_id() */
  LLVMBasicBlockRef entry;
  int base; /* owned-slot mark at function entry */
  Loop *loop;
  LLVMMetadataRef sp; /* debug info: the subprogram */
  /* Actor methods that call their own methods: a field read is retained
   * (owned), because the call may assign the field, and a string field
   * with no other holder grows in place (see append_stmt), while the
   * expression still holds the value read before the call. */
  bool own_fields;
  /* Every owned slot of the function, each once: its frame (emit_frame). */
  Owned *frame;
  int nframe;
} Fn;

typedef struct DescEntry DescEntry;
struct DescEntry {
  Type *ty;
  LLVMValueRef g;
  DescEntry *next;
};

static struct {
  Program *prog;
  const CodegenOptions *opts;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTargetMachineRef tm;
  LLVMTargetDataRef td;
  Target target;
  LLVMTypeRef i1, i8, i32, i64, f32, f64, vd, P;
  LLVMTypeRef arr_ty, str_hdr_ty, loc_ty, type_ty, field_ty;
  Fn *fn;
  Owned *owned;
  int nowned, capowned;
  DescEntry *descs;
  LLVMValueRef *file_names; /* per source file */
  /* TBAA tags */
  unsigned md_tbaa, md_prof;
  LLVMValueRef tbaa_root, tbaa_len, tbaa_data, tbaa_elem[TY_STR + 1];
  /* debug info */
  LLVMDIBuilderRef dib;
  LLVMMetadataRef cu, *difiles;
  int nstr;
  /* While a self-recursive fn's body is generated, its calls to itself go
   * to redirect_fn (the twin, or from the twin back to the original). */
  Decl *redirect_of;
  LLVMValueRef redirect_fn;
  /* Fns whose copies unroll_chains links after tail-call elimination. */
  UnrollChain *chains;
  int nchains;
  LLVMValueRef rtfn[RT__COUNT]; /* runtime entry points declared so far */
  /* Function values: the functions and tasks used as values, in the order
   * of their indices (1-based: 0 is no function), and the table codegen
   * calls through, a placeholder until gen_fn_table builds it. */
  Decl **fnvals;
  int nfnvals, capfnvals;
  LLVMValueRef fntab;
  LLVMValueRef fn_names; /* the names, for sf_program.fn_names */
  LLVMValueRef fn_tasks; /* their task descriptors (NULL: a function), for sf_program.fn_tasks */
  LLVMValueRef fns;      /* the table itself, for sf_program.fns */
} G;

static Val expr(Node *n);
static Val array_concat(Node *n); /* the data core */
static void mark_array_attrs(LLVMValueRef fn, unsigned idx);
static void stmt(Node *n);
static void block(Node *n);
static LLVMTypeRef lt_val(Type *t);
static LLVMValueRef type_desc(Type *t);

/* ----------------------------------------------------------- basics */

static Val mkval(LLVMValueRef v, bool owned) { return (Val){v, owned}; }

static LLVMValueRef ci64(int64_t v) { return LLVMConstInt(G.i64, (unsigned long long)v, 1); }
static LLVMValueRef ci32(int32_t v) { return LLVMConstInt(G.i32, (unsigned long long)v, 1); }

static LLVMTypeRef ptr_to(LLVMTypeRef t) { return LLVMPointerType(t, 0); }

/* p cast to "pointer to t" (a no-op with opaque pointers). */
static LLVMValueRef ptr_as(LLVMValueRef p, LLVMTypeRef t) {
  return LLVMBuildPointerCast(G.b, p, ptr_to(t), "");
}
static LLVMValueRef as_P(LLVMValueRef p) { return LLVMBuildPointerCast(G.b, p, G.P, ""); }

static LLVMValueRef load(LLVMTypeRef t, LLVMValueRef p) {
  return LLVMBuildLoad2(G.b, t, ptr_as(p, t), "");
}
static LLVMValueRef store(LLVMValueRef v, LLVMValueRef p) {
  return LLVMBuildStore(G.b, v, ptr_as(p, LLVMTypeOf(v)));
}

static LLVMValueRef struct_gep(LLVMTypeRef sty, LLVMValueRef p, unsigned i) {
  return LLVMBuildStructGEP2(G.b, sty, ptr_as(p, sty), i, "");
}

static bool terminated(void) {
  return LLVMGetBasicBlockTerminator(LLVMGetInsertBlock(G.b)) != NULL;
}

static LLVMBasicBlockRef new_block(const char *name) {
  return LLVMAppendBasicBlockInContext(G.ctx, G.fn->fn, name);
}

/* After return/break/continue/noreturn calls: keep emitting into a block
 * nothing jumps to (the optimiser drops it). */
static void start_dead_block(void) { LLVMPositionBuilderAtEnd(G.b, new_block("dead")); }

/* An alloca in the entry block, so mem2reg turns it into registers. */
static LLVMValueRef entry_alloca(LLVMTypeRef t, const char *name) {
  LLVMBuilderRef eb = LLVMCreateBuilderInContext(G.ctx);
  LLVMValueRef first = LLVMGetFirstInstruction(G.fn->entry);
  if (first)
    LLVMPositionBuilderBefore(eb, first);
  else
    LLVMPositionBuilderAtEnd(eb, G.fn->entry);
  LLVMValueRef a = LLVMBuildAlloca(eb, t, name);
  LLVMDisposeBuilder(eb);
  return a;
}

static LLVMValueRef get_fn(const char *name, LLVMTypeRef ret, LLVMTypeRef *ps, int n,
                           bool vararg) {
  LLVMValueRef f = LLVMGetNamedFunction(G.mod, name);
  if (!f) {
    f = LLVMAddFunction(G.mod, name, LLVMFunctionType(ret, ps, (unsigned)n, vararg));
    LLVMAddAttributeAtIndex(
        f, LLVMAttributeFunctionIndex,
        LLVMCreateEnumAttribute(G.ctx, LLVMGetEnumAttributeKindForName("nounwind", 8), 0));
  }
  return f;
}

static void add_attr(LLVMValueRef f, unsigned idx, const char *name) {
  unsigned k = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(f, idx, LLVMCreateEnumAttribute(G.ctx, k, 0));
}

static LLVMValueRef call(LLVMValueRef f, LLVMValueRef *args, int n) {
  LLVMTypeRef fty = LLVMGlobalGetValueType(f);
  /* Match pointer argument types (typed pointers on LLVM 14). */
  LLVMTypeRef ps[16];
  unsigned np = LLVMCountParamTypes(fty);
  if (np <= 16) {
    LLVMGetParamTypes(fty, ps);
    for (unsigned i = 0; i < np && i < (unsigned)n; i++)
      if (LLVMGetTypeKind(ps[i]) == LLVMPointerTypeKind &&
          LLVMGetTypeKind(LLVMTypeOf(args[i])) == LLVMPointerTypeKind)
        args[i] = LLVMBuildPointerCast(G.b, args[i], ps[i], "");
  }
  LLVMValueRef c = LLVMBuildCall2(G.b, fty, f, args, (unsigned)n, "");
  /* LLVM reads a call's return dereferenceability from the call site, not
   * the callee: copy it, so loops over fresh arrays hoist header loads. */
  unsigned dk = LLVMGetEnumAttributeKindForName("dereferenceable", 15);
  if (LLVMGetEnumAttributeAtIndex(f, LLVMAttributeReturnIndex, dk)) {
    static const char *const ks[] = {"nonnull", "align", "dereferenceable"};
    for (int i = 0; i < 3; i++) {
      LLVMAttributeRef a = LLVMGetEnumAttributeAtIndex(
          f, LLVMAttributeReturnIndex, LLVMGetEnumAttributeKindForName(ks[i], strlen(ks[i])));
      if (a)
        LLVMAddCallSiteAttribute(c, LLVMAttributeReturnIndex, a);
    }
  }
  return c;
}

/* Runtime entry points, declared on first use from their row of
 * rtabi.h: RT(sf_name, args...) is a call.  A name without a row does not
 * compile, nor does a call with another number of arguments than the row's
 * signature has letters after the return type's. */

static const struct {
  const char *name, *sig;
  int attrs;
} rt_rows[] = {
#define RT_ROW(name, sig, attrs) {#name, sig, attrs},
    SF_RUNTIME_ENTRY_POINTS(RT_ROW)
#undef RT_ROW
};

/* One letter of a row's signature as an LLVM type. */
static LLVMTypeRef sig_type(char c) {
  switch (c) {
  case 'v': return G.vd;
  case 'b': return G.i1;
  case 'i': return G.i32;
  case 'l': return G.i64;
  case 'f': return G.f32;
  case 'd': return G.f64;
  case 'p': return G.P;
  default: ice("codegen: signature letter '%c' in compiler/rtabi.h", c);
  }
}

static LLVMValueRef rt(int id) {
  if (G.rtfn[id])
    return G.rtfn[id];
  const char *name = rt_rows[id].name, *sig = rt_rows[id].sig;
  LLVMTypeRef ps[16];
  int n = 0;
  for (const char *s = sig + 1; *s; s++)
    ps[n++] = sig_type(*s);
  LLVMValueRef f = get_fn(name, sig_type(sig[0]), ps, n, false);
  /* C passes bool zero-extended. */
  if (sig[0] == 'b')
    add_attr(f, LLVMAttributeReturnIndex, "zeroext");
  for (int i = 0; i < n; i++)
    if (sig[i + 1] == 'b')
      add_attr(f, (unsigned)i + 1, "zeroext");
  if (rt_rows[id].attrs & RTA_ARRAY)
    mark_array_attrs(f, LLVMAttributeReturnIndex);
  if (rt_rows[id].attrs & RTA_NORETURN) {
    add_attr(f, LLVMAttributeFunctionIndex, "noreturn");
    add_attr(f, LLVMAttributeFunctionIndex, "cold");
  }
  return G.rtfn[id] = f;
}

#define RT_ARGV(...) ((LLVMValueRef[]){__VA_ARGS__})
#define RT_ARGC(...) ((int)(sizeof RT_ARGV(__VA_ARGS__) / sizeof(LLVMValueRef)))
#define RT(name, ...)                                                                   \
  ({                                                                                    \
    _Static_assert(RT_NARGS_##name == RT_ARGC(__VA_ARGS__),                             \
                   #name ": not the argument count of its row in compiler/rtabi.h");    \
    call(rt(RT_##name), RT_ARGV(__VA_ARGS__), RT_ARGC(__VA_ARGS__));                    \
  })
#define RT0(name)                                                                       \
  ({                                                                                    \
    _Static_assert(RT_NARGS_##name == 0,                                                \
                   #name ": not the argument count of its row in compiler/rtabi.h");    \
    call(rt(RT_##name), NULL, 0);                                                       \
  })

static LLVMValueRef const_str_global(const char *s, size_t n) {
  LLVMValueRef init = LLVMConstStringInContext(G.ctx, s, (unsigned)n, 0);
  LLVMValueRef g = LLVMAddGlobal(G.mod, LLVMTypeOf(init), ".str");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return LLVMConstPointerCast(g, G.P);
}
static LLVMValueRef cstr(const char *s) { return const_str_global(s, strlen(s)); }

/* A runtime error location constant (sf_loc). */
static LLVMValueRef loc_const(Loc l) {
  if (!G.file_names[l.file]) {
    Source *s = src_get(l.file);
    G.file_names[l.file] = cstr(s->path);
  }
  LLVMValueRef f[] = {G.file_names[l.file], ci32(l.line), ci32(l.col)};
  LLVMValueRef init = LLVMConstNamedStruct(G.loc_ty, f, 3);
  LLVMValueRef g = LLVMAddGlobal(G.mod, G.loc_ty, ".loc");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return LLVMConstPointerCast(g, G.P);
}

/* An immortal string object (rc -1) for a literal. */
static LLVMValueRef str_literal(const char *s, size_t n) {
  LLVMValueRef bytes = LLVMConstStringInContext(G.ctx, s ? s : "", (unsigned)n, 0);
  LLVMValueRef hdr[] = {ci64(-1), ci32(SF_OBJ_STR), ci32(0), ci64((int64_t)n), bytes};
  LLVMValueRef init = LLVMConstStructInContext(G.ctx, hdr, 5, 0);
  LLVMValueRef g = LLVMAddGlobal(G.mod, LLVMTypeOf(init), ".sfstr");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetAlignment(g, 8);
  return LLVMConstPointerCast(g, G.P);
}

/* Marks a branch as almost never taken. */
static void set_unlikely(LLVMValueRef br, bool then_unlikely) {
  LLVMValueRef w[] = {LLVMMDStringInContext(G.ctx, "branch_weights", 14),
                      LLVMConstInt(G.i32, then_unlikely ? 1 : 1u << 20, 0),
                      LLVMConstInt(G.i32, then_unlikely ? 1u << 20 : 1, 0)};
  LLVMSetMetadata(br, G.md_prof, LLVMMDNodeInContext(G.ctx, w, 3));
}

/* Branches to a new cold block when failcond holds; the builder is left in
 * the cold block and the returned block is where the normal path goes on. */
static LLVMBasicBlockRef cold_if(LLVMValueRef failcond) {
  LLVMBasicBlockRef fail = new_block("fail"), ok = new_block("ok");
  set_unlikely(LLVMBuildCondBr(G.b, failcond, fail, ok), true);
  LLVMPositionBuilderAtEnd(G.b, fail);
  return ok;
}
static void cold_end(LLVMBasicBlockRef ok) {
  LLVMBuildUnreachable(G.b);
  LLVMPositionBuilderAtEnd(G.b, ok);
}

/* ------------------------------------------------------------ TBAA */

static LLVMValueRef tbaa_scalar(const char *name) {
  LLVMValueRef v[] = {LLVMMDStringInContext(G.ctx, name, (unsigned)strlen(name)), G.tbaa_root,
                      ci64(0)};
  LLVMValueRef ty = LLVMMDNodeInContext(G.ctx, v, 3);
  LLVMValueRef tag[] = {ty, ty, ci64(0)};
  return LLVMMDNodeInContext(G.ctx, tag, 3);
}

static void tbaa_init(void) {
  G.md_tbaa = LLVMGetMDKindIDInContext(G.ctx, "tbaa", 4);
  G.md_prof = LLVMGetMDKindIDInContext(G.ctx, "prof", 4);
  LLVMValueRef r = LLVMMDStringInContext(G.ctx, "sflow tbaa", 10);
  G.tbaa_root = LLVMMDNodeInContext(G.ctx, &r, 1);
  G.tbaa_len = tbaa_scalar("sf_array.len");
  G.tbaa_data = tbaa_scalar("sf_array.data");
  G.tbaa_elem[TY_BOOL] = tbaa_scalar("bool");
  G.tbaa_elem[TY_I32] = tbaa_scalar("i32");
  G.tbaa_elem[TY_I64] = tbaa_scalar("i64");
  G.tbaa_elem[TY_F32] = tbaa_scalar("f32");
  G.tbaa_elem[TY_F64] = tbaa_scalar("f64");
  G.tbaa_elem[TY_STR] = tbaa_scalar("ref");
}

static LLVMValueRef tag(LLVMValueRef inst, LLVMValueRef t) {
  if (t)
    LLVMSetMetadata(inst, G.md_tbaa, t);
  return inst;
}

static LLVMValueRef elem_tbaa(Type *t) {
  if (t->kind <= TY_STR)
    return G.tbaa_elem[t->kind];
  if (ty_is_ref(t))
    return G.tbaa_elem[TY_STR];
  return NULL;
}

/* ------------------------------------------------------------- types */

static LLVMTypeRef lt_mem(Type *t) { return t->kind == TY_BOOL ? G.i8 : lt_val(t); }

static LLVMTypeRef struct_of_fields(const char *name, Decl *fields) {
  LLVMTypeRef st = LLVMStructCreateNamed(G.ctx, name);
  int n = 0;
  for (Decl *f = fields; f; f = f->next)
    n++;
  LLVMTypeRef *ts = arena_alloc(sizeof(LLVMTypeRef) * (size_t)(n + 1));
  int i = 0;
  for (Decl *f = fields; f; f = f->next)
    ts[i++] = lt_mem(f->type);
  LLVMStructSetBody(st, ts, (unsigned)n, 0);
  return st;
}

static LLVMTypeRef lt_val(Type *t) {
  switch (t->kind) {
  case TY_VOID: return G.vd;
  case TY_BOOL: return G.i1;
  case TY_I32: return G.i32;
  case TY_I64: return G.i64;
  case TY_F32: return G.f32;
  case TY_F64: return G.f64;
  case TY_STR:
  case TY_ARRAY:
  case TY_FUTURE:
  case TY_ACTOR:
  case TY_GROUP:
  case TY_MAP:
  case TY_TENSOR: return G.P;
  case TY_FN: return G.i64; /* an index into the function table (fn_value_call) */
  case TY_STRUCT:
    if (!t->llvm)
      t->llvm = struct_of_fields(t->decl->mangled ? t->decl->mangled : t->decl->name,
                                 t->decl->fields);
    return t->llvm;
  default: ice("codegen: value of type %s", ty_str(t));
  }
}

/* Register value <-> memory value (bool only differs). */
static LLVMValueRef to_mem(Type *t, LLVMValueRef v) {
  return t->kind == TY_BOOL ? LLVMBuildZExt(G.b, v, G.i8, "") : v;
}
static LLVMValueRef from_mem(Type *t, LLVMValueRef v) {
  return t->kind == TY_BOOL ? LLVMBuildTrunc(G.b, v, G.i1, "") : v;
}
/* Every array value is a valid object (never NULL: the zero value of an
 * array is an empty array), which LLVM is told so that it may load the
 * header speculatively: that is what lets it hoist `len` and `data` out of
 * index loops and vectorise them. */
static void mark_array_load(LLVMValueRef ld) {
  LLVMValueRef none = LLVMMDNodeInContext(G.ctx, NULL, 0);
  LLVMValueRef sz = ci64((int64_t)LLVMABISizeOfType(G.td, G.arr_ty)), al = ci64(8);
  LLVMSetMetadata(ld, LLVMGetMDKindIDInContext(G.ctx, "nonnull", 7), none);
  LLVMSetMetadata(ld, LLVMGetMDKindIDInContext(G.ctx, "dereferenceable", 15),
                  LLVMMDNodeInContext(G.ctx, &sz, 1));
  LLVMSetMetadata(ld, LLVMGetMDKindIDInContext(G.ctx, "align", 5),
                  LLVMMDNodeInContext(G.ctx, &al, 1));
}

static void mark_array_attrs(LLVMValueRef fn, unsigned idx) {
  LLVMAttributeRef a[] = {
      LLVMCreateEnumAttribute(G.ctx, LLVMGetEnumAttributeKindForName("nonnull", 7), 0),
      LLVMCreateEnumAttribute(G.ctx, LLVMGetEnumAttributeKindForName("align", 5), 8),
      LLVMCreateEnumAttribute(G.ctx, LLVMGetEnumAttributeKindForName("dereferenceable", 15),
                              LLVMABISizeOfType(G.td, G.arr_ty))};
  for (int i = 0; i < 3; i++)
    LLVMAddAttributeAtIndex(fn, idx, a[i]);
}

static LLVMValueRef load_mem(Type *t, LLVMValueRef p) {
  LLVMValueRef v = load(lt_mem(t), p);
  if (t->kind == TY_ARRAY)
    mark_array_load(v);
  return from_mem(t, v);
}
static LLVMValueRef store_mem(Type *t, LLVMValueRef v, LLVMValueRef p) {
  return store(to_mem(t, v), p);
}

/* ------------------------------------------------------ descriptors */

static const char *kind_names[] = {[TY_BOOL] = "sf_type_bool", [TY_I32] = "sf_type_i32",
                                   [TY_I64] = "sf_type_i64",   [TY_F32] = "sf_type_f32",
                                   [TY_F64] = "sf_type_f64",   [TY_STR] = "sf_type_str"};

static LLVMValueRef new_desc_global(const char *name) {
  LLVMValueRef g = LLVMAddGlobal(G.mod, G.type_ty, name);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetGlobalConstant(g, 1);
  return g;
}

static void set_desc(LLVMValueRef g, int kind, int64_t size, int64_t align, int nfields,
                     LLVMValueRef elem, LLVMValueRef fields, const char *name) {
  LLVMValueRef nul = LLVMConstNull(G.P);
  LLVMValueRef f[] = {ci32(kind), ci32((int32_t)size), ci32((int32_t)align), ci32(nfields),
                      elem ? LLVMConstPointerCast(elem, G.P) : nul,
                      fields ? LLVMConstPointerCast(fields, G.P) : nul, cstr(name)};
  LLVMSetInitializer(g, LLVMConstNamedStruct(G.type_ty, f, 7));
}

/* The sf_type of a struct laid out as sty, with the given fields. */
static void set_struct_desc(LLVMValueRef g, const char *name, LLVMTypeRef sty, int n,
                            const char **names, Type **types) {
  LLVMValueRef *fs = arena_alloc(sizeof(LLVMValueRef) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    LLVMValueRef d = type_desc(types[i]);
    LLVMValueRef f[] = {cstr(names[i]), ci32((int32_t)LLVMOffsetOfElement(G.td, sty, (unsigned)i)),
                        d ? LLVMConstPointerCast(d, G.P) : LLVMConstNull(G.P)};
    fs[i] = LLVMConstNamedStruct(G.field_ty, f, 3);
  }
  LLVMValueRef arr = NULL;
  if (n) {
    LLVMValueRef init = LLVMConstArray(G.field_ty, fs, (unsigned)n);
    arr = LLVMAddGlobal(G.mod, LLVMTypeOf(init), ".fields");
    LLVMSetInitializer(arr, init);
    LLVMSetLinkage(arr, LLVMPrivateLinkage);
    LLVMSetGlobalConstant(arr, 1);
  }
  set_desc(g, SF_STRUCT, (int64_t)LLVMABISizeOfType(G.td, sty),
           (int64_t)LLVMABIAlignmentOfType(G.td, sty), n, NULL, arr, name);
}

static void fields_of(Decl *fields, int *n, const char ***names, Type ***types) {
  int k = 0;
  for (Decl *f = fields; f; f = f->next)
    k++;
  *names = arena_alloc(sizeof(char *) * (size_t)(k + 1));
  *types = arena_alloc(sizeof(Type *) * (size_t)(k + 1));
  k = 0;
  for (Decl *f = fields; f; f = f->next, k++) {
    (*names)[k] = f->name;
    (*types)[k] = f->type;
  }
  *n = k;
}

/* SF_MAP: the value in elem, the key as the one field (runtime/sflow.h). */
static void map_desc(LLVMValueRef g, Type *t, const char *name) {
  LLVMValueRef f[] = {cstr("key"), ci32(0), LLVMConstPointerCast(type_desc(t->key), G.P)};
  LLVMValueRef init = LLVMConstArray(G.field_ty, (LLVMValueRef[]){LLVMConstNamedStruct(G.field_ty, f, 3)}, 1);
  LLVMValueRef arr = LLVMAddGlobal(G.mod, LLVMTypeOf(init), ".fields");
  LLVMSetInitializer(arr, init);
  LLVMSetLinkage(arr, LLVMPrivateLinkage);
  LLVMSetGlobalConstant(arr, 1);
  set_desc(g, SF_MAP, 8, 8, 1, type_desc(t->elem), arr, name);
}

/* The runtime descriptor of t (NULL for void). */
static LLVMValueRef type_desc(Type *t) {
  if (t->kind == TY_VOID)
    return NULL;
  if (t->kind <= TY_STR) {
    LLVMValueRef g = LLVMGetNamedGlobal(G.mod, kind_names[t->kind]);
    if (!g) {
      g = LLVMAddGlobal(G.mod, G.type_ty, kind_names[t->kind]);
      LLVMSetGlobalConstant(g, 1);
    }
    return g;
  }
  for (DescEntry *e = G.descs; e; e = e->next)
    if (e->ty == t)
      return e->g;
  DescEntry *e = arena_alloc(sizeof *e);
  e->ty = t;
  e->g = new_desc_global(".type");
  e->next = G.descs;
  G.descs = e; /* before recursing: struct S { kids: S[] } */
  const char *name = ty_str(t);
  switch (t->kind) {
  case TY_ARRAY: set_desc(e->g, SF_ARRAY, 8, 8, 0, type_desc(t->elem), NULL, name); break;
  case TY_FUTURE: set_desc(e->g, SF_FUTURE, 8, 8, 0, type_desc(t->elem), NULL, name); break;
  case TY_ACTOR: set_desc(e->g, SF_ACTOR, 8, 8, 0, NULL, NULL, name); break;
  case TY_GROUP: set_desc(e->g, SF_GROUP, 8, 8, 0, NULL, NULL, name); break;
  case TY_MAP: map_desc(e->g, t, name); break;
  case TY_FN: set_desc(e->g, SF_FN, 8, 8, 0, NULL, NULL, name); break;
  case TY_TENSOR: set_desc(e->g, SF_TENSOR, 8, 8, 0, NULL, NULL, name); break;
  case TY_STRUCT: {
    int n;
    const char **names;
    Type **types;
    fields_of(t->decl->fields, &n, &names, &types);
    set_struct_desc(e->g, name, lt_val(t), n, names, types);
    break;
  }
  default: ice("codegen: descriptor of %s", ty_str(t));
  }
  return e->g;
}

static LLVMValueRef desc_arg(Type *t) {
  LLVMValueRef d = type_desc(t);
  return d ? LLVMConstPointerCast(d, G.P) : LLVMConstNull(G.P);
}

/* ------------------------------------------------------ debug info */

static LLVMMetadataRef di_file(int file) {
  if (!G.difiles[file]) {
    const char *path = src_get(file)->path;
    const char *slash = strrchr(path, '/');
    char dir[4096] = ".";
    const char *base = path;
    if (slash) {
      snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
      base = slash + 1;
    }
    if (dir[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof cwd)) {
        char full[8200];
        snprintf(full, sizeof full, "%s/%s", cwd, slash ? dir : "");
        size_t l = strlen(full);
        if (l > 1 && full[l - 1] == '/')
          full[l - 1] = 0;
        snprintf(dir, sizeof dir, "%s", full);
      }
    }
    G.difiles[file] = LLVMDIBuilderCreateFile(G.dib, base, strlen(base), dir, strlen(dir));
  }
  return G.difiles[file];
}

static LLVMMetadataRef di_type(Type *t) {
  const char *name = ty_str(t);
  switch (t->kind) {
  case TY_BOOL: return LLVMDIBuilderCreateBasicType(G.dib, "bool", 4, 8, 0x02, LLVMDIFlagZero);
  case TY_I32: return LLVMDIBuilderCreateBasicType(G.dib, "i32", 3, 32, 0x05, LLVMDIFlagZero);
  case TY_I64: return LLVMDIBuilderCreateBasicType(G.dib, "i64", 3, 64, 0x05, LLVMDIFlagZero);
  case TY_F32: return LLVMDIBuilderCreateBasicType(G.dib, "f32", 3, 32, 0x04, LLVMDIFlagZero);
  case TY_F64: return LLVMDIBuilderCreateBasicType(G.dib, "f64", 3, 64, 0x04, LLVMDIFlagZero);
  case TY_STRUCT: {
    LLVMTypeRef st = lt_val(t);
    int n = 0;
    for (Decl *f = t->decl->fields; f; f = f->next)
      n++;
    LLVMMetadataRef *ms = arena_alloc(sizeof(LLVMMetadataRef) * (size_t)(n + 1));
    LLVMMetadataRef file = di_file(t->decl->loc.file);
    int i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++) {
      LLVMTypeRef ft = lt_mem(f->type);
      ms[i] = LLVMDIBuilderCreateMemberType(
          G.dib, file, f->name, strlen(f->name), file, (unsigned)f->loc.line,
          LLVMABISizeOfType(G.td, ft) * 8, LLVMABIAlignmentOfType(G.td, ft) * 8,
          LLVMOffsetOfElement(G.td, st, (unsigned)i) * 8, LLVMDIFlagZero, di_type(f->type));
    }
    return LLVMDIBuilderCreateStructType(G.dib, file, name, strlen(name), file,
                                         (unsigned)t->decl->loc.line,
                                         LLVMABISizeOfType(G.td, st) * 8,
                                         LLVMABIAlignmentOfType(G.td, st) * 8, LLVMDIFlagZero,
                                         NULL, ms, (unsigned)n, 0, NULL, name, strlen(name));
  }
  default: {
    /* References: a pointer to an opaque object named for the type. */
    LLVMMetadataRef obj = LLVMDIBuilderCreateBasicType(G.dib, name, strlen(name), 8, 0x08,
                                                       LLVMDIFlagZero);
    return LLVMDIBuilderCreatePointerType(G.dib, obj, 64, 64, 0, name, strlen(name));
  }
  }
}

static void di_set_loc(Loc l) {
  if (!G.dib || !G.fn || !G.fn->sp)
    return;
  LLVMMetadataRef dl =
      LLVMDIBuilderCreateDebugLocation(G.ctx, (unsigned)l.line, (unsigned)l.col, G.fn->sp, NULL);
  LLVMSetCurrentDebugLocation2(G.b, dl);
}

/* Describes a variable living in slot (a let/var/for variable or param). */
static void di_declare(Var *v, LLVMValueRef slot, int argno) {
  if (!G.dib || !G.fn->sp || !v->name)
    return;
  LLVMMetadataRef file = di_file(v->loc.file), dv;
  if (argno)
    dv = LLVMDIBuilderCreateParameterVariable(G.dib, G.fn->sp, v->name, strlen(v->name),
                                              (unsigned)argno, file, (unsigned)v->loc.line,
                                              di_type(v->ty), 1, LLVMDIFlagZero);
  else
    dv = LLVMDIBuilderCreateAutoVariable(G.dib, G.fn->sp, v->name, strlen(v->name), file,
                                         (unsigned)v->loc.line, di_type(v->ty), 1,
                                         LLVMDIFlagZero, 0);
  LLVMMetadataRef dl = LLVMDIBuilderCreateDebugLocation(G.ctx, (unsigned)v->loc.line,
                                                        (unsigned)v->loc.col, G.fn->sp, NULL);
  LLVMMetadataRef ex = LLVMDIBuilderCreateExpression(G.dib, NULL, 0);
#if LLVM_VERSION_MAJOR >= 19
  LLVMDIBuilderInsertDeclareRecordAtEnd(G.dib, slot, dv, ex, dl, LLVMGetInsertBlock(G.b));
#else
  LLVMDIBuilderInsertDeclareAtEnd(G.dib, slot, dv, ex, dl, LLVMGetInsertBlock(G.b));
#endif
}

/* ------------------------------------------------- reference counts */

static void retain_value(Type *t, LLVMValueRef v) {
  if (ty_is_ref(t)) {
    RT(sf_retain, v);
  } else if (t->kind == TY_STRUCT) {
    unsigned i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++)
      if (ty_has_refs(f->type))
        retain_value(f->type, LLVMBuildExtractValue(G.b, v, i, ""));
  }
}

static void release_value(Type *t, LLVMValueRef v) {
  if (ty_is_ref(t)) {
    RT(sf_release, v);
  } else if (t->kind == TY_STRUCT) {
    unsigned i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++)
      if (ty_has_refs(f->type))
        release_value(f->type, LLVMBuildExtractValue(G.b, v, i, ""));
  }
}

/* The value as owned (+1), retaining it if it was borrowed. */
static LLVMValueRef own(Type *t, Val v) {
  if (!v.owned && ty_has_refs(t))
    retain_value(t, v.v);
  return v.v;
}

/* Releases an owned temporary nothing consumed. */
static void drop(Type *t, Val v) {
  if (v.owned && v.v && ty_has_refs(t))
    release_value(t, v.v);
}

/* Lists slot in the function's frame (emit_frame), once. */
static void frame_add(LLVMValueRef slot, Type *t) {
  Fn *f = G.fn;
  for (int i = 0; i < f->nframe; i++)
    if (f->frame[i].slot == slot)
      return;
  if ((f->nframe & (f->nframe - 1)) == 0) { /* 0, 1, 2, 4, ...: full, double it */
    f->frame = realloc(f->frame, sizeof(Owned) * (size_t)(f->nframe ? 2 * f->nframe : 1));
    if (!f->frame)
      ice("out of memory");
  }
  f->frame[f->nframe++] = (Owned){slot, t};
}

/* An owned temporary beside code that may fail (the call it is an
 * argument of, the other operand): held in a frame slot until unhold, so
 * that a failure there releases it too.  NULL when there is nothing to
 * hold.  Each site has its own slot, which only that site fills. */
static LLVMValueRef hold(Type *t, Val v) {
  if (!v.owned || !v.v || !ty_has_refs(t) || !G.fn)
    return NULL;
  LLVMValueRef slot = entry_alloca(lt_mem(t), "held");
  store_mem(t, v.v, slot);
  frame_add(slot, t);
  return slot;
}

static void unhold(Type *t, LLVMValueRef slot) {
  if (slot)
    store(LLVMConstNull(lt_mem(t)), slot);
}

/* Owned-slot stack: locals whose references this function owns. */
static void push_owned(LLVMValueRef slot, Type *t) {
  if (!ty_has_refs(t))
    return;
  if (G.nowned == G.capowned) {
    G.capowned = G.capowned ? 2 * G.capowned : 32;
    G.owned = realloc(G.owned, sizeof(Owned) * (size_t)G.capowned);
    if (!G.owned)
      ice("out of memory");
  }
  G.owned[G.nowned++] = (Owned){slot, t};
  frame_add(slot, t);
}

/* Releases owned slots above mark (innermost first), keeping them listed.
 * Unless the function returns next (and its frame goes), each slot is
 * zeroed too: an error later in the function must not release it again. */
static void release_slots(int mark, bool returning) {
  if (terminated())
    return;
  for (int i = G.nowned - 1; i >= mark; i--) {
    Owned *o = &G.owned[i];
    release_value(o->ty, load_mem(o->ty, o->slot));
    if (!returning)
      store(LLVMConstNull(lt_mem(o->ty)), o->slot);
  }
}

static void release_to(int mark) { release_slots(mark, false); }

static void scope_end(int mark) {
  release_to(mark);
  G.nowned = mark;
}

/* ---------------------------------------------------- zero values */

static LLVMValueRef zero_value(Type *t, Loc l) {
  switch (t->kind) {
  case TY_STR: return RT0(sf_str_empty);
  case TY_ARRAY: return RT(sf_array_new, desc_arg(t->elem), ci64(0), loc_const(l));
  case TY_MAP: return RT(sf_map_new, desc_arg(t));
  case TY_STRUCT: {
    LLVMValueRef v = LLVMGetUndef(lt_val(t));
    unsigned i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++)
      v = LLVMBuildInsertValue(G.b, v, to_mem(f->type, zero_value(f->type, l)), i, "");
    return v;
  }
  default: return LLVMConstNull(lt_val(t));
  }
}

/* ------------------------------------------------------- arrays */

static LLVMValueRef arr_len(LLVMValueRef a) {
  return tag(LLVMBuildLoad2(G.b, G.i64, struct_gep(G.arr_ty, a, 3), "len"), G.tbaa_len);
}

static LLVMValueRef arr_data(LLVMValueRef a) {
  return tag(LLVMBuildLoad2(G.b, G.P, ptr_as(struct_gep(G.arr_ty, a, 5), G.P), "data"),
             G.tbaa_data);
}

static LLVMValueRef data_elem(LLVMValueRef data, Type *elem, LLVMValueRef idx) {
  LLVMTypeRef et = lt_mem(elem);
  return LLVMBuildGEP2(G.b, et, ptr_as(data, et), &idx, 1, "");
}

static LLVMValueRef elem_ptr(LLVMValueRef a, Type *elem, LLVMValueRef idx) {
  return data_elem(arr_data(a), elem, idx);
}

static LLVMValueRef load_elem(Type *elem, LLVMValueRef p) {
  LLVMValueRef v = tag(load(lt_mem(elem), p), elem_tbaa(elem));
  if (elem->kind == TY_ARRAY)
    mark_array_load(v);
  return from_mem(elem, v);
}
static void store_elem(Type *elem, LLVMValueRef v, LLVMValueRef p) {
  tag(store_mem(elem, v, p), elem_tbaa(elem));
}

static LLVMValueRef to_i64(Type *t, LLVMValueRef v) {
  return t->kind == TY_I32 ? LLVMBuildSExt(G.b, v, G.i64, "") : v;
}

static void check_index(LLVMValueRef idx, LLVMValueRef len, Loc l) {
  LLVMBasicBlockRef ok = cold_if(LLVMBuildICmp(G.b, LLVMIntUGE, idx, len, ""));
  RT(sf_index_fail, idx, len, loc_const(l));
  cold_end(ok);
}

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

/* ------------------------------------------------------- lvalues */

/* An address plus an owned base object to release after the access. */
typedef struct {
  LLVMValueRef ptr;
  Val base;
  Type *basety;
} LVal;

static LVal map_lvalue(Node *n, bool put);

static LLVMValueRef var_addr(Var *v) {
  if (v->kind == V_FIELD) {
    if (!G.fn->state)
      ice("codegen: actor field '%s' outside its actor", v->name);
    return struct_gep(G.fn->state_ty, G.fn->state, (unsigned)v->decl->index);
  }
  if (!v->llvm)
    ice("codegen: variable '%s' has no storage", v->name);
  return v->llvm;
}

static bool addressable(Node *n) {
  if (n->kind == N_NAME)
    return n->var != NULL;
  if (n->kind == N_FIELD)
    return n->lhs->ty->kind == TY_STRUCT && !n->decl && addressable(n->lhs);
  return n->kind == N_INDEX;
}

static LVal lvalue(Node *n) {
  switch (n->kind) {
  case N_NAME: return (LVal){var_addr(n->var), {0}, NULL};
  case N_FIELD: {
    LVal b = lvalue(n->lhs);
    b.ptr = struct_gep(lt_val(n->lhs->ty), b.ptr, (unsigned)n->field_index);
    return b;
  }
  case N_INDEX: {
    if (n->lhs->ty->kind == TY_MAP)
      return map_lvalue(n, false);
    Val a = expr(n->lhs);
    LLVMValueRef p = index_addr(a.v, n->ty, n->rhs, n->loc);
    return (LVal){p, a, n->lhs->ty};
  }
  default: ice("codegen: not an lvalue (node %d)", n->kind);
  }
}

static void lvalue_done(LVal lv) {
  if (lv.basety)
    drop(lv.basety, lv.base);
}

/* Loads through an lvalue: element loads carry TBAA. */
static LLVMValueRef lv_load(Node *n, LVal lv) {
  return n->kind == N_INDEX ? load_elem(n->ty, lv.ptr) : load_mem(n->ty, lv.ptr);
}
static void lv_store(Node *n, LVal lv, LLVMValueRef v) {
  if (n->kind == N_INDEX)
    store_elem(n->ty, v, lv.ptr);
  else
    store_mem(n->ty, v, lv.ptr);
}

/* ----------------------------------------------------- operators */

static bool is_float(Type *t) { return t->kind == TY_F32 || t->kind == TY_F64; }

static LLVMValueRef int_divrem(int op, LLVMValueRef l, LLVMValueRef r, Loc loc) {
  LLVMTypeRef t = LLVMTypeOf(l);
  LLVMValueRef zero = LLVMConstNull(t);
  LLVMBasicBlockRef ok = cold_if(LLVMBuildICmp(G.b, LLVMIntEQ, r, zero, ""));
  RT(sf_div_zero, loc_const(loc));
  cold_end(ok);
  /* x / -1 is -x and x % -1 is 0, computed without the trapping sdiv. */
  LLVMValueRef m1 = LLVMBuildICmp(G.b, LLVMIntEQ, r, LLVMConstAllOnes(t), "");
  LLVMValueRef rs = LLVMBuildSelect(G.b, m1, LLVMConstInt(t, 1, 0), r, "");
  LLVMValueRef q = op == '/' ? LLVMBuildSDiv(G.b, l, rs, "") : LLVMBuildSRem(G.b, l, rs, "");
  LLVMValueRef alt = op == '/' ? LLVMBuildSub(G.b, zero, l, "") : zero;
  return LLVMBuildSelect(G.b, m1, alt, q, "");
}

static LLVMValueRef arith(int op, Type *t, LLVMValueRef l, LLVMValueRef r, Loc loc) {
  LLVMBuilderRef b = G.b;
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

static LLVMValueRef str_op(int op, LLVMValueRef l, LLVMValueRef r) {
  switch (op) {
  case '+': return RT(sf_str_concat, l, r);
  case TOK_EQ: return RT(sf_str_eq, l, r);
  case TOK_NE: return LLVMBuildNot(G.b, RT(sf_str_eq, l, r), "");
  default: {
    LLVMValueRef c = RT(sf_str_cmp, l, r);
    LLVMIntPredicate p = op == '<' ? LLVMIntSLT : op == '>' ? LLVMIntSGT
                         : op == TOK_LE ? LLVMIntSLE : LLVMIntSGE;
    return LLVMBuildICmp(G.b, p, c, ci32(0), "");
  }
  }
}

static Val short_circuit(Node *n) {
  bool is_and = n->op == TOK_ANDAND;
  LLVMValueRef l = expr(n->lhs).v;
  LLVMBasicBlockRef from = LLVMGetInsertBlock(G.b);
  LLVMBasicBlockRef rhs = new_block(is_and ? "and.rhs" : "or.rhs"), end = new_block("sc.end");
  if (is_and)
    LLVMBuildCondBr(G.b, l, rhs, end);
  else
    LLVMBuildCondBr(G.b, l, end, rhs);
  LLVMPositionBuilderAtEnd(G.b, rhs);
  LLVMValueRef r = expr(n->rhs).v;
  LLVMBasicBlockRef rhs_end = LLVMGetInsertBlock(G.b);
  LLVMBuildBr(G.b, end);
  LLVMPositionBuilderAtEnd(G.b, end);
  LLVMValueRef phi = LLVMBuildPhi(G.b, G.i1, "");
  LLVMValueRef vals[] = {LLVMConstInt(G.i1, is_and ? 0 : 1, 0), r};
  LLVMBasicBlockRef bbs[] = {from, rhs_end};
  LLVMAddIncoming(phi, vals, bbs, 2);
  return mkval(phi, false);
}

/* ------------------------------------------------------- tensors */

/* The tensor operators (sema.c "tensors"): each is one call of the nn
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
static LLVMValueRef tensor_apply(int op, Type *lt, LLVMValueRef l, Type *rty, LLVMValueRef r, Loc loc) {
  LLVMValueRef top = ci32(tensor_op(op)), L = loc_const(loc);
  if (lt->kind == TY_TENSOR && rty->kind == TY_TENSOR)
    return RT(sf_tensor_binop, top, l, r, L);
  bool scalar_left = lt->kind != TY_TENSOR;
  return RT(sf_tensor_scalar, top, scalar_left ? r : l, scalar_left ? l : r,
            LLVMConstInt(G.i1, scalar_left, 0), L);
}

static Val tensor_binary(Node *n) {
  Val l = expr(n->lhs), r = expr(n->rhs);
  LLVMValueRef v = tensor_apply(n->op, n->lhs->ty, l.v, n->rhs->ty, r.v, n->loc);
  drop(n->lhs->ty, l);
  drop(n->rhs->ty, r);
  return mkval(v, true);
}

/* t[i] and t[a..b]: views from the runtime, which checks the bounds. */
static Val tensor_index(Node *n) {
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

static Val tensor_neg(Node *n) {
  Val a = expr(n->lhs);
  LLVMValueRef v = RT(sf_tensor_neg, a.v, loc_const(n->loc));
  drop(n->lhs->ty, a);
  return mkval(v, true);
}

static Val binary(Node *n) {
  if (n->op == TOK_ANDAND || n->op == TOK_OROR)
    return short_circuit(n);
  if (n->ty->kind == TY_TENSOR)
    return tensor_binary(n);
  Type *t = n->lhs->ty;
  if (t->kind == TY_ARRAY)
    return array_concat(n);
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
    case TOK_EQ: return mkval(LLVMBuildICmp(G.b, LLVMIntEQ, l.v, r.v, ""), false);
    case TOK_NE:
    case '^': return mkval(LLVMBuildXor(G.b, l.v, r.v, ""), false);
    case '&': return mkval(LLVMBuildAnd(G.b, l.v, r.v, ""), false);
    case '|': return mkval(LLVMBuildOr(G.b, l.v, r.v, ""), false);
    }
  }
  return mkval(arith(n->op, t, l.v, r.v, n->loc), false);
}

static Val unary(Node *n) {
  if (n->ty->kind == TY_TENSOR)
    return tensor_neg(n);
  Val v = expr(n->lhs);
  if (n->op == '!')
    return mkval(LLVMBuildNot(G.b, v.v, ""), false);
  if (is_float(n->ty))
    return mkval(LLVMBuildFNeg(G.b, v.v, ""), false);
  return mkval(LLVMBuildSub(G.b, LLVMConstNull(LLVMTypeOf(v.v)), v.v, ""), false);
}

/* ------------------------------------------------------ builtins */

static LLVMValueRef intrinsic1(const char *base, Type *t, LLVMValueRef x) {
  char name[64];
  snprintf(name, sizeof name, "llvm.%s.%s", base, t->kind == TY_F32 ? "f32" : "f64");
  LLVMTypeRef ft = lt_val(t), ps[] = {ft, ft};
  LLVMValueRef args[] = {x};
  return call(get_fn(name, ft, ps, 1, false), args, 1);
}

static LLVMValueRef intrinsic2(const char *base, Type *t, LLVMValueRef x, LLVMValueRef y) {
  char name[64];
  snprintf(name, sizeof name, "llvm.%s.%s", base, t->kind == TY_F32 ? "f32" : "f64");
  LLVMTypeRef ft = lt_val(t), ps[] = {ft, ft};
  LLVMValueRef args[] = {x, y};
  return call(get_fn(name, ft, ps, 2, false), args, 2);
}

static LLVMValueRef libm1(const char *name, Type *t, LLVMValueRef x) {
  char nm[32];
  snprintf(nm, sizeof nm, "%s%s", name, t->kind == TY_F32 ? "f" : "");
  LLVMTypeRef ft = lt_val(t);
  LLVMValueRef args[] = {x};
  return call(get_fn(nm, ft, &ft, 1, false), args, 1);
}

/* A float operand for a math builtin: ints convert to f64. */
static LLVMValueRef as_float(Type *from, Type *to, LLVMValueRef v) {
  if (is_float(from)) {
    if (from->kind == to->kind)
      return v;
    return from->kind == TY_F32 ? LLVMBuildFPExt(G.b, v, G.f64, "")
                                : LLVMBuildFPTrunc(G.b, v, G.f32, "");
  }
  if (from->kind == TY_BOOL)
    return LLVMBuildUIToFP(G.b, v, lt_val(to), "");
  return LLVMBuildSIToFP(G.b, v, lt_val(to), "");
}

static void print_value(Type *t, LLVMValueRef v) {
  switch (t->kind) {
  case TY_BOOL: RT(sf_print_bool, v); return;
  case TY_I32: RT(sf_print_i64, LLVMBuildSExt(G.b, v, G.i64, "")); return;
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
  case TY_I32: return RT(sf_str_from_i64, LLVMBuildSExt(G.b, v, G.i64, ""));
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
    LLVMTypeRef to = bi == B_CAST_I64 ? G.i64 : G.i32;
    if (from->kind == TY_STR) {
      r = bi == B_CAST_I64 ? RT(sf_str_to_i64, v, L) : RT(sf_str_to_i32, v, L);
      drop(from, a);
      return mkval(r, false);
    }
    if (is_float(from)) {
      LLVMValueRef d = from->kind == TY_F32 ? LLVMBuildFPExt(G.b, v, G.f64, "") : v;
      return mkval(bi == B_CAST_I64 ? RT(sf_f64_to_i64, d, L)
                                    : RT(sf_f64_to_i32, d, L), false);
    }
    if (from->kind == TY_BOOL)
      return mkval(LLVMBuildZExt(G.b, v, to, ""), false);
    return mkval(LLVMBuildIntCast2(G.b, v, to, 1, ""), false); /* wraps */
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
      return mkval(LLVMBuildFCmp(G.b, LLVMRealUNE, v, LLVMConstNull(LLVMTypeOf(v)), ""), false);
    return mkval(LLVMBuildICmp(G.b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), ""), false);
  default: ice("codegen: cast %d", bi);
  }
}

/* ----------------------------------------------------- the data core */

/* Math, random numbers, sort/argsort/join and the methods of str and
 * arrays (sema.c's "data core" section).  Every runtime call borrows its
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

static Val data_builtin(Node *n) {
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
static Val data_index_expr(Node *n) {
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
static Val array_concat(Node *n) {
  Type *t = n->ty;
  Val a = expr(n->lhs), b = expr(n->rhs);
  LLVMValueRef r = RT(sf_array_concat, desc_arg(t->elem), a.v, b.v, loc_const(n->loc));
  drop(t, a);
  drop(t, b);
  return mkval(r, true);
}

/* A collective over tensors (a tensor or a tensor[]): the nn layer's
 * entry points, in place (docs/nn.md, "Collectives over tensors"). */
static bool is_tensor_coll(Type *t) {
  return t->kind == TY_TENSOR || (t->kind == TY_ARRAY && t->elem->kind == TY_TENSOR);
}

static Val builtin(Node *n) {
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
      return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(G.b, r, G.i32, "") : r, false);
    } else {
      LLVMValueRef r = arr_len(a.v);
      drop(av[0]->ty, a);
      return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(G.b, r, G.i32, "") : r, false);
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
    return mkval(LLVMBuildSelect(G.b, LLVMBuildICmp(G.b, LLVMIntSLT, a.v,
                                                    LLVMConstNull(LLVMTypeOf(a.v)), ""),
                                 LLVMBuildSub(G.b, LLVMConstNull(LLVMTypeOf(a.v)), a.v, ""), a.v,
                                 ""),
                 false);
  case B_MIN:
  case B_MAX: {
    a = expr(av[0]);
    b = expr(av[1]);
    bool mn = n->builtin == B_MIN;
    if (is_float(t)) /* fmin/fmax: a NaN operand yields the other one */
      return mkval(intrinsic2(mn ? "minnum" : "maxnum", t, a.v, b.v), false);
    LLVMValueRef c = LLVMBuildICmp(G.b, mn ? LLVMIntSLT : LLVMIntSGT, a.v, b.v, "");
    return mkval(LLVMBuildSelect(G.b, c, a.v, b.v, ""), false);
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
    LLVMBuildUnreachable(G.b);
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
    if (!G.fn->tid)
      return mkval(ci64(0), false);
    return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(G.b, G.fn->tid, G.i32, "") : G.fn->tid,
                 false);
  case B_GROUP_RANK:
  case B_GROUP_SIZE: {
    LLVMValueRef r = n->builtin == B_GROUP_RANK ? RT0(sf_group_rank) : RT0(sf_group_size);
    return mkval(t->kind == TY_I32 ? LLVMBuildTrunc(G.b, r, G.i32, "") : r, false);
  }
  case B_ALLREDUCE_SUM:
  case B_ALLREDUCE_MEAN:
    a = expr(av[0]);
    if (is_tensor_coll(av[0]->ty)) {
      LLVMValueRef mean = LLVMConstInt(G.i1, n->builtin == B_ALLREDUCE_MEAN, 0);
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

/* ------------------------------------------------- calls and tasks */

static DInfo *info(Decl *d) {
  if (!d->llvm2)
    d->llvm2 = arena_alloc(sizeof(DInfo));
  return d->llvm2;
}

/* Evaluates the arguments into an argument block (owned values moved in);
 * returns its address, or a null pointer when there are no parameters. */
static LLVMValueRef args_block(DInfo *di, Node **argv, int argc) {
  if (!argc)
    return LLVMConstNull(G.P);
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
static void declare_extern(Decl *d) {
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
    ps[k++] = G.P;
    ps[k++] = G.P;
  }
  for (Decl *p = d->params; p; p = p->next) {
    if (p->type->kind == TY_STRUCT || p->type->kind == TY_TPARAM) {
      ps[k++] = G.P;
      ps[k++] = G.P;
    } else {
      zext[k] = p->type->kind == TY_BOOL;
      ps[k++] = lt_val(p->type);
    }
  }
  /* A generic one also gets what each type parameter stands for. */
  if (d->tparam)
    ps[k++] = G.P;
  if (d->tparam2)
    ps[k++] = G.P;
  ps[k++] = G.P;
  di->fn = get_fn(extern_c_name(d), sret ? G.vd : lt_val(ret), ps, k, false);
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

static Val map_call(Node *n);
static Val fn_value_call(Node *n);

static Val call_expr(Node *n) {
  LLVMValueRef L;
  switch (n->callkind) {
  case CALL_BUILTIN: return builtin(n);
  case CALL_MAP: return map_call(n);
  case CALL_FN_VALUE: return fn_value_call(n);
  case CALL_FN:
    if (n->decl->is_extern)
      return extern_call(n);
    if (n->decl == G.redirect_of) {
      DInfo t = *info(n->decl);
      t.fn = G.redirect_fn;
      return direct_call(&t, NULL, n->argv, n->argc, n->ty);
    }
    return direct_call(info(n->decl), NULL, n->argv, n->argc, n->ty);
  case CALL_SELF_METHOD:
    return direct_call(info(n->decl), G.fn->state, n->argv, n->argc, n->ty);
  case CALL_TASK: {
    DInfo *di = info(n->decl);
    LLVMValueRef blk = args_block(di, n->argv, n->argc);
    return mkval(RT(sf_task_call, LLVMConstPointerCast(di->desc, G.P), blk,
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
    LLVMValueRef md = LLVMConstPointerCast(di->desc, G.P);
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

static Val spawn_expr(Node *n) {
  Node *c = n->lhs;
  Decl *actor = c->decl;
  DInfo *ai = info(actor);
  DInfo *ii = info(ai->init_decl);
  LLVMValueRef blk = args_block(ii, c->argv, c->argc);
  LLVMValueRef d = LLVMConstPointerCast(ai->desc, G.P), L = loc_const(n->loc);
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

typedef void (*LoopBody)(void *ctx, LLVMValueRef i);
static void counted_loop(LLVMValueRef len, LoopBody fnb, void *ctx);

/* await fs on future<void>[]: wait for each; there is nothing to collect. */
typedef struct {
  Node *n;
  LLVMValueRef arr;
} AwaitEach;

static void await_each_body(void *ctx, LLVMValueRef i) {
  AwaitEach *a = ctx;
  Type *ft = a->n->lhs->ty->elem;
  LLVMValueRef fut = load_elem(ft, elem_ptr(a->arr, ft, i));
  RT(sf_future_get, fut, LLVMConstNull(G.P), loc_const(a->n->loc));
}

static Val await_expr(Node *n) {
  Val f = expr(n->lhs);
  LLVMValueRef L = loc_const(n->loc), r = NULL;
  if (n->lhs->ty->kind == TY_ARRAY && n->ty->kind == TY_VOID) {
    AwaitEach a = {n, f.v};
    counted_loop(arr_len(f.v), await_each_body, &a);
  } else if (n->lhs->ty->kind == TY_ARRAY) {
    r = RT(sf_future_get_all, f.v, desc_arg(n->ty->elem), L);
  } else if (n->ty->kind == TY_VOID) {
    RT(sf_future_get, f.v, LLVMConstNull(G.P), L);
  } else {
    LLVMValueRef slot = entry_alloca(lt_mem(n->ty), "await");
    RT(sf_future_get, f.v, slot, L);
    r = load_mem(n->ty, slot);
  }
  drop(n->lhs->ty, f);
  return mkval(r, true);
}

/* launch k[n](args): the arguments go BORROWED into the kernel's argument
 * block (the launch ends before sf_launch returns) and the runtime picks
 * the GPU or the CPU version (gen_kernel_glue). */
static void launch_expr(Node *n) {
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
  Val *vals = arena_alloc(sizeof(Val) * (size_t)(argc + 1));
  LLVMValueRef blk = argc ? entry_alloca(di->args_ty, "kargs") : LLVMConstNull(G.P);
  for (int i = 0; i < argc; i++) {
    vals[i] = expr(argv[i]);
    store_mem(argv[i]->ty, vals[i].v, struct_gep(di->args_ty, blk, (unsigned)i));
  }
  LLVMValueRef cnt = to_i64(n->rhs->ty, expr(n->rhs).v);
  RT(sf_launch, LLVMConstPointerCast(di->desc, G.P), cnt, blk, loc_const(n->loc));
  for (int j = 0; j < argc; j++)
    drop(argv[j]->ty, vals[j]);
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

static void counted_loop(LLVMValueRef len, LoopBody fnb, void *ctx) {
  LLVMValueRef ctr = entry_alloca(G.i64, "i");
  store(ci64(0), ctr);
  LLVMBasicBlockRef cond = new_block("loop.cond"), body = new_block("loop.body"),
                    end = new_block("loop.end");
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, cond);
  LLVMValueRef i = load(G.i64, ctr);
  LLVMBuildCondBr(G.b, LLVMBuildICmp(G.b, LLVMIntSLT, i, len, ""), body, end);
  LLVMPositionBuilderAtEnd(G.b, body);
  fnb(ctx, i);
  store(LLVMBuildAdd(G.b, i, ci64(1), ""), ctr);
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, end);
}

typedef struct {
  Node *n;
  LLVMValueRef src, dst, start; /* src: array (or NULL for ranges), start: range start */
  Type *vty;
} Comp;

static void comp_body(void *ctx, LLVMValueRef i) {
  Comp *c = ctx;
  Var *v = c->n->var;
  int mark = G.nowned;
  LLVMValueRef x;
  if (c->src) {
    Type *et = c->n->rhs->ty->elem;
    /* The result has the source's length at the start: a source that the
     * element expression shrinks (xs.pop()) is an index error here. */
    check_index(i, arr_len(c->src), c->n->rhs->loc);
    x = load_elem(et, elem_ptr(c->src, et, i));
    retain_value(et, x);
  } else {
    x = LLVMBuildAdd(G.b, c->start, LLVMBuildIntCast2(G.b, i, LLVMTypeOf(c->start), 1, ""), "");
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
    LLVMValueRef d = LLVMBuildSub(G.b, to_i64(n->rhs->lhs->ty, hi), to_i64(n->rhs->lhs->ty, lo), "");
    len = LLVMBuildSelect(G.b, LLVMBuildICmp(G.b, LLVMIntSLT, d, ci64(0), ""), ci64(0), d, "");
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
static LVal map_lvalue(Node *n, bool put) {
  Val m = expr(n->lhs);
  Val k = expr(n->rhs);
  LLVMValueRef key = in_slot(n->rhs->ty, k.v, "map.key"), L = loc_const(n->loc);
  LLVMValueRef slot = put ? RT(sf_map_put, m.v, key, L) : RT(sf_map_at, m.v, key, L);
  drop(n->rhs->ty, k);
  return (LVal){slot, m, n->lhs->ty};
}

/* The value of m[k]: borrowed from the map, unless the map itself was a
 * temporary. */
static Val map_index(Node *n) {
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
static void map_put_stmt(Node *n) {
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
static Val map_call(Node *n) {
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

/* ------------------------------------------------- function values */

/* The index of d in the function-value table, 1-based (0 is no
 * function); the table is built by gen_fn_table once all are known. */
static int64_t fn_index(Decl *d) {
  for (int i = 0; i < G.nfnvals; i++)
    if (G.fnvals[i] == d)
      return i + 1;
  if (G.nfnvals == G.capfnvals) {
    G.capfnvals = G.capfnvals ? 2 * G.capfnvals : 16;
    G.fnvals = realloc(G.fnvals, sizeof(Decl *) * (size_t)G.capfnvals);
    if (!G.fnvals)
      ice("out of memory");
  }
  G.fnvals[G.nfnvals++] = d;
  return G.nfnvals;
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
  LLVMBasicBlockRef ok = cold_if(LLVMBuildICmp(G.b, LLVMIntEQ, f.v, ci64(0), ""));
  RT(sf_fn_unset, loc_const(n->loc));
  cold_end(ok);
  if (!G.fntab)
    G.fntab = LLVMAddGlobal(G.mod, LLVMArrayType(G.P, 0), "sflow.fns.pending");
  LLVMValueRef idx = f.v;
  LLVMValueRef slot = LLVMBuildGEP2(G.b, G.P, ptr_as(G.fntab, G.P), &idx, 1, "");
  LLVMTypeRef fty = fn_llvm_type(ft);
  LLVMValueRef fp = LLVMBuildPointerCast(G.b, load(G.P, slot), ptr_to(fty), "");
  LLVMValueRef *args = arena_alloc(sizeof(LLVMValueRef) * (size_t)(n->argc + 1));
  Val *vals = arena_alloc(sizeof(Val) * (size_t)(n->argc + 1));
  for (int i = 0; i < n->argc; i++) {
    vals[i] = expr(n->argv[i]);
    args[i] = vals[i].v;
  }
  LLVMValueRef r = LLVMBuildCall2(G.b, fty, fp, args, (unsigned)n->argc, "");
  for (int i = 0; i < n->argc; i++)
    drop(n->argv[i]->ty, vals[i]);
  return mkval(ft->elem->kind == TY_VOID ? NULL : r, true);
}

/* A task used as a value is called through a function of the task's
 * parameters that makes the call and returns its future: the argument
 * block takes its own references to the borrowed arguments. */
static const char *sym(Decl *d, const char *suffix);

static LLVMValueRef task_value_fn(Decl *d) {
  DInfo *di = info(d);
  if (di->value_fn)
    return di->value_fn;
  LLVMTypeRef *ps = arena_alloc(sizeof(LLVMTypeRef) * (size_t)(d->nparams + 1));
  int k = 0;
  for (Decl *p = d->params; p; p = p->next)
    ps[k++] = lt_val(p->type);
  di->value_fn = LLVMAddFunction(G.mod, sym(d, ".value"), LLVMFunctionType(G.P, ps, (unsigned)k, 0));
  LLVMSetLinkage(di->value_fn, LLVMInternalLinkage);
  Fn f;
  memset(&f, 0, sizeof f);
  f.fn = di->value_fn;
  f.ret = ty_future(d->ret_type);
  f.base = G.nowned;
  G.fn = &f;
  f.entry = LLVMAppendBasicBlockInContext(G.ctx, f.fn, "entry");
  LLVMPositionBuilderAtEnd(G.b, f.entry);
  LLVMSetCurrentDebugLocation2(G.b, NULL);
  LLVMValueRef blk = LLVMConstNull(G.P);
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
  LLVMBuildRet(G.b, RT(sf_task_call, LLVMConstPointerCast(di->desc, G.P), blk, loc_const(d->loc)));
  G.fn = NULL;
  return di->value_fn;
}

static LLVMValueRef const_global(LLVMValueRef init, const char *name);

/* "sq", "util.score": a function value's printed name. */
static const char *fn_value_name(Decl *d) {
  if (d->module && d->module->name && *d->module->name)
    return arena_printf("%s.%s", d->module->name, d->name);
  return d->name;
}

/* After every body: the table of function values (entry 0 empty) that
 * calls go through, and their names for the runtime (sf_program). */
static void gen_fn_table(void) {
  int n = G.nfnvals + 1;
  LLVMValueRef *fns = arena_alloc(sizeof(LLVMValueRef) * (size_t)n);
  LLVMValueRef *names = arena_alloc(sizeof(LLVMValueRef) * (size_t)n);
  LLVMValueRef *tasks = arena_alloc(sizeof(LLVMValueRef) * (size_t)n);
  fns[0] = names[0] = tasks[0] = LLVMConstNull(G.P);
  for (int i = 1; i < n; i++) {
    Decl *d = G.fnvals[i - 1];
    LLVMValueRef f = d->kind == D_TASK ? task_value_fn(d) : info(d)->fn;
    fns[i] = LLVMConstPointerCast(f, G.P);
    names[i] = LLVMConstPointerCast(cstr(fn_value_name(d)), G.P);
    tasks[i] = d->kind == D_TASK ? LLVMConstPointerCast(info(d)->desc, G.P) : LLVMConstNull(G.P);
  }
  G.fn_tasks = const_global(LLVMConstArray(G.P, tasks, (unsigned)n), "sflow.fn_tasks");
  LLVMValueRef tab = const_global(LLVMConstArray(G.P, fns, (unsigned)n), "sflow.fns");
  G.fns = tab;
  G.fn_names = const_global(LLVMConstArray(G.P, names, (unsigned)n), "sflow.fn_names");
  if (G.fntab) {
    LLVMReplaceAllUsesWith(G.fntab, LLVMConstPointerCast(tab, LLVMTypeOf(G.fntab)));
    LLVMDeleteGlobal(G.fntab);
    G.fntab = NULL;
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
    v = LLVMBuildInsertValue(G.b, v, to_mem(e->ty, own(e->ty, fv)), (unsigned)a->field_index, "");
  }
  return mkval(v, true);
}

static Val const_value(Decl *d) { return expr(d->value); }

/* Does n, or anything after it in its list (statements, arguments), call a
 * method of its own actor, which could assign the actor's fields? */
static bool calls_own_method(Node *n) {
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
  return base->kind == N_NAME && base->var && base->var->kind == V_FIELD && G.fn &&
         G.fn->own_fields && ty_has_refs(n->ty);
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
  LLVMValueRef v = from_mem(n->ty, LLVMBuildExtractValue(G.b, s.v, (unsigned)n->field_index, ""));
  if (s.owned && ty_has_refs(n->lhs->ty)) {
    retain_value(n->ty, v);
    drop(n->lhs->ty, s);
    return mkval(v, ty_has_refs(n->ty));
  }
  return mkval(v, false);
}

static Val index_expr(Node *n) {
  if (n->lhs->ty->kind == TY_MAP)
    return map_index(n);
  if (n->lhs->ty->kind == TY_TENSOR)
    return tensor_index(n);
  if (n->rhs->kind == N_RANGE || n->lhs->ty->kind == TY_STR)
    return data_index_expr(n);
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

static Val expr(Node *n) {
  Type *t = n->ty;
  switch (n->kind) {
  case N_INT:
    if (is_float(t))
      return mkval(LLVMConstReal(lt_val(t), (double)n->ival), false);
    return mkval(LLVMConstInt(lt_val(t), (unsigned long long)n->ival, 1), false);
  case N_FLOAT: return mkval(LLVMConstReal(lt_val(t), n->fval), false);
  case N_BOOL: return mkval(LLVMConstInt(G.i1, n->ival ? 1 : 0, 0), false);
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
  case N_AWAIT: return await_expr(n);
  case N_SPAWN: return spawn_expr(n);
  case N_LAUNCH: launch_expr(n); return mkval(NULL, false);
  case N_MAP_NEW: return mkval(RT(sf_map_new, desc_arg(t)), true);
  default: ice("codegen: expression node %d", n->kind);
  }
}

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
    map_put_stmt(n);
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
    lv_store(n->lhs, lv, tensor_apply(n->op, t, old, n->rhs->ty, r.v, n->loc));
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
  LLVMBuildCondBr(G.b, c, th, el ? el : end);
  LLVMPositionBuilderAtEnd(G.b, th);
  block(n->then);
  LLVMBuildBr(G.b, end);
  if (el) {
    LLVMPositionBuilderAtEnd(G.b, el);
    if (n->els->kind == N_IF)
      stmt(n->els);
    else
      block(n->els);
    LLVMBuildBr(G.b, end);
  }
  LLVMPositionBuilderAtEnd(G.b, end);
}

static void while_stmt(Node *n) {
  LLVMBasicBlockRef cond = new_block("while.cond"), body = new_block("while.body"),
                    end = new_block("while.end");
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, cond);
  LLVMBuildCondBr(G.b, expr(n->cond).v, body, end);
  LLVMPositionBuilderAtEnd(G.b, body);
  Loop lp = {end, cond, G.nowned, G.fn->loop};
  G.fn->loop = &lp;
  block(n->body);
  G.fn->loop = lp.up;
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, end);
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
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, cond);
  LLVMValueRef i = load(lt_val(it), ctr);
  LLVMBuildCondBr(G.b, LLVMBuildICmp(G.b, LLVMIntSLT, i, hi, ""), body, end);
  LLVMPositionBuilderAtEnd(G.b, body);
  store(i, v->llvm);
  Loop lp = {end, step, G.nowned, G.fn->loop};
  G.fn->loop = &lp;
  block(n->body);
  G.fn->loop = lp.up;
  LLVMBuildBr(G.b, step);
  LLVMPositionBuilderAtEnd(G.b, step);
  store(LLVMBuildAdd(G.b, load(lt_val(it), ctr), LLVMConstInt(lt_val(it), 1, 0), ""), ctr);
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, end);
}

/* for v in array: the array is held (+1) for the loop, and v holds its own
 * reference to each element, so the body may reassign both freely. */
static void for_array(Node *n) {
  Var *v = n->var;
  Type *at = n->rhs->ty, *et = at->elem;
  int outer = G.nowned;
  Val a = expr(n->rhs);
  LLVMValueRef arr = own(at, a);
  LLVMValueRef aslot = entry_alloca(G.P, "for.arr");
  store(arr, aslot);
  push_owned(aslot, at);
  LLVMValueRef len = arr_len(arr);
  LLVMValueRef ctr = entry_alloca(G.i64, "for.i");
  v->llvm = entry_alloca(lt_mem(v->ty), v->name);
  di_declare(v, v->llvm, 0);
  store(ci64(0), ctr);
  LLVMBasicBlockRef cond = new_block("for.cond"), body = new_block("for.body"),
                    step = new_block("for.step"), end = new_block("for.end");
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, cond);
  LLVMValueRef i = load(G.i64, ctr);
  /* The elements the array had at the start, fewer if the body pops some
   * (xs.pop() moved them out).  With no call in the body LICM hoists the
   * second length load, so numeric loops pay nothing for it. */
  LLVMValueRef more = LLVMBuildAnd(G.b, LLVMBuildICmp(G.b, LLVMIntSLT, i, len, ""),
                                   LLVMBuildICmp(G.b, LLVMIntSLT, i, arr_len(arr), ""), "");
  LLVMBuildCondBr(G.b, more, body, end);
  LLVMPositionBuilderAtEnd(G.b, body);
  int mark = G.nowned;
  LLVMValueRef x = load_elem(et, elem_ptr(arr, et, i));
  retain_value(et, x);
  store_mem(et, x, v->llvm);
  Loop lp = {end, step, mark, G.fn->loop};
  G.fn->loop = &lp;
  push_owned(v->llvm, et);
  block(n->body);
  scope_end(mark);
  G.fn->loop = lp.up;
  LLVMBuildBr(G.b, step);
  LLVMPositionBuilderAtEnd(G.b, step);
  store(LLVMBuildAdd(G.b, load(G.i64, ctr), ci64(1), ""), ctr);
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, end);
  scope_end(outer);
}

/* `for w in s.split(sep)` / `for w in s.split()`: the parts one at a time
 * (sf_str_split_next), never the whole array; the same words in the same
 * order as iterating the array would give.  The string is evaluated once
 * and held for the loop. */
static bool is_split_call(Node *e) {
  return e->kind == N_CALL && e->callkind == CALL_BUILTIN &&
         (e->builtin == B_STR_SPLIT || e->builtin == B_STR_SPLIT_WS);
}

static void for_split(Node *n) {
  Var *v = n->var;
  Node *c = n->rhs;
  int outer = G.nowned;
  Operands o = operands(c);
  Type *st = ty_prim(TY_STR);
  LLVMValueRef sslot = entry_alloca(G.P, "for.text");
  store(own(st, o.v[0]), sslot);
  push_owned(sslot, st);
  LLVMValueRef sep = LLVMConstNull(G.P);
  if (c->builtin == B_STR_SPLIT) {
    LLVMValueRef pslot = entry_alloca(G.P, "for.sep");
    store(own(st, o.v[1]), pslot);
    push_owned(pslot, st);
    sep = load(G.P, pslot);
  }
  LLVMValueRef pos = entry_alloca(G.i64, "for.pos");
  store(ci64(0), pos);
  v->llvm = entry_alloca(lt_mem(v->ty), v->name);
  di_declare(v, v->llvm, 0);
  LLVMBasicBlockRef cond = new_block("for.cond"), body = new_block("for.body"),
                    end = new_block("for.end");
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, cond);
  LLVMValueRef w = RT(sf_str_split_next, load(G.P, sslot), sep, pos, loc_const(c->loc));
  LLVMBuildCondBr(G.b, LLVMBuildIsNotNull(G.b, w, ""), body, end);
  LLVMPositionBuilderAtEnd(G.b, body);
  int mark = G.nowned;
  store_mem(v->ty, w, v->llvm);
  Loop lp = {end, cond, mark, G.fn->loop};
  G.fn->loop = &lp;
  push_owned(v->llvm, v->ty);
  block(n->body);
  scope_end(mark);
  G.fn->loop = lp.up;
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, end);
  scope_end(outer);
}

static void return_stmt(Node *n) {
  LLVMValueRef rv = NULL;
  if (n->lhs) {
    Val v = expr(n->lhs);
    if (n->lhs->ty->kind != TY_VOID)
      rv = own(n->lhs->ty, v);
  }
  release_slots(G.fn->base, true);
  if (terminated()) {
    start_dead_block();
    return;
  }
  if (rv && G.fn->ret->kind != TY_VOID)
    LLVMBuildRet(G.b, rv);
  else
    LLVMBuildRetVoid(G.b);
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
      for_split(n);
    else
      for_array(n);
    break;
  case N_BREAK:
  case N_CONTINUE: {
    Loop *lp = G.fn->loop;
    if (!lp)
      ice("codegen: break outside a loop");
    release_to(lp->mark);
    LLVMBuildBr(G.b, n->kind == N_BREAK ? lp->brk : lp->cont);
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
static void block(Node *n) {
  int mark = G.nowned;
  for (Node *s = n && n->kind == N_BLOCK ? n->body : n; s; s = s->next) {
    if (s->settle_before)
      RT0(sf_gpu_settle);
    stmt(s);
    if (s->settle_after && !terminated())
      RT0(sf_gpu_settle);
  }
  scope_end(mark);
}

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

static const char *sym(Decl *d, const char *suffix) {
  const char *m = d->mangled ? d->mangled : d->name;
  return arena_printf("sflow.%s%s", m, suffix);
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
  di->fn = LLVMAddFunction(G.mod, name, di->fnty);
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
    di->args_ty = LLVMStructCreateNamed(G.ctx, arena_printf("%s.args", name));
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
  f->base = G.nowned;
  G.fn = f;
  f->entry = LLVMAppendBasicBlockInContext(G.ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(G.b, f->entry);
  LLVMSetCurrentDebugLocation2(G.b, NULL);
  if (G.dib && d) {
    LLVMMetadataRef file = di_file(d->loc.file);
    LLVMMetadataRef sty = LLVMDIBuilderCreateSubroutineType(G.dib, file, NULL, 0, LLVMDIFlagZero);
    const char *nm = d->mangled ? d->mangled : d->name ? d->name : "init";
    const char *link = LLVMGetValueName(fn);
    f->sp = LLVMDIBuilderCreateFunction(G.dib, file, nm, strlen(nm), link, strlen(link), file,
                                        (unsigned)d->loc.line, sty, 1, 1, (unsigned)d->loc.line,
                                        LLVMDIFlagZero, G.opts->opt_level > 0);
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
  LLVMValueRef g = LLVMGetNamedGlobal(G.mod, "sf_frames");
  if (!g) {
    g = LLVMAddGlobal(G.mod, G.P, "sf_frames");
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
  LLVMValueRef dv[] = {ci64(n), LLVMConstArray(G.P, tys, (unsigned)n)};
  LLVMValueRef desc = const_global(LLVMConstStructInContext(G.ctx, dv, 2, 0), "frame.desc");
  LLVMTypeRef ft[] = {G.P, G.P, LLVMArrayType(G.P, (unsigned)n)};
  LLVMTypeRef fty = LLVMStructTypeInContext(G.ctx, ft, 3, 0);
  LLVMValueRef fr = entry_alloca(fty, "frame");
  LLVMValueRef top = frames_top();
  LLVMValueRef first = LLVMGetFirstInstruction(f->entry);
  while (first && LLVMIsAAllocaInst(first))
    first = LLVMGetNextInstruction(first);
  if (first)
    LLVMPositionBuilderBefore(G.b, first);
  else
    LLVMPositionBuilderAtEnd(G.b, f->entry);
  LLVMSetCurrentDebugLocation2(G.b, NULL);
  LLVMValueRef slots = struct_gep(fty, fr, 2);
  for (int i = 0; i < n; i++) {
    LLVMValueRef s = f->frame[i].slot;
    store(LLVMConstNull(lt_mem(f->frame[i].ty)), s);
    LLVMValueRef idx[] = {ci64(0), ci64(i)};
    store(as_P(s), LLVMBuildInBoundsGEP2(G.b, ft[2], slots, idx, 2, ""));
  }
  store(load(G.P, top), struct_gep(fty, fr, 0));
  store(LLVMConstPointerCast(desc, G.P), struct_gep(fty, fr, 1));
  store(as_P(fr), top);
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f->fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
    LLVMValueRef t = LLVMGetBasicBlockTerminator(bb);
    if (t && LLVMGetInstructionOpcode(t) == LLVMRet) {
      LLVMPositionBuilderBefore(G.b, t);
      store(load(G.P, struct_gep(fty, fr, 0)), top);
    }
  }
  free(f->frame);
  f->frame = NULL;
}

static void end_fn(Fn *f) {
  scope_end(f->base);
  if (!terminated()) {
    if (f->ret->kind == TY_VOID)
      LLVMBuildRetVoid(G.b);
    else
      LLVMBuildUnreachable(G.b); /* sema rejects a missing return */
  }
  /* Dead blocks may lack terminators. */
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f->fn); bb; bb = LLVMGetNextBasicBlock(bb))
    if (!LLVMGetBasicBlockTerminator(bb)) {
      LLVMPositionBuilderAtEnd(G.b, bb);
      LLVMBuildUnreachable(G.b);
    }
  emit_frame(f);
  G.fn = NULL;
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
    if (G.nchains % 16 == 0) {
      UnrollChain *c = arena_alloc(sizeof(UnrollChain) * (size_t)(G.nchains + 16));
      if (G.nchains)
        memcpy(c, G.chains, sizeof(UnrollChain) * (size_t)G.nchains);
      G.chains = c;
    }
    G.chains[G.nchains++] = (UnrollChain){di->copies, ncopies};
  }
}

/* Each copy's body; shared twins call each other, chained copies call
 * themselves until unroll_chains links them. */
static void gen_unrolled(Decl *d) {
  DInfo *di = info(d);
  G.redirect_of = di->shared ? d : NULL;
  for (int i = 0; i < di->ncopies; i++) {
    di->fn = di->copies[i];
    G.redirect_fn = di->copies[(i + 1) % di->ncopies];
    gen_fn(d);
  }
  di->fn = di->copies[0];
  G.redirect_of = NULL;
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
  LLVMTypeRef ps[] = {G.P, G.P, G.P};
  int np = has_state ? 3 : 2;
  di->thunk = LLVMAddFunction(G.mod, sym(d, ".thunk"), LLVMFunctionType(G.vd, ps, (unsigned)np, 0));
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
  LLVMBuildRetVoid(G.b);
  G.fn = NULL;
}

static LLVMValueRef const_global(LLVMValueRef init, const char *name) {
  LLVMValueRef g = LLVMAddGlobal(G.mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  return g;
}

static LLVMValueRef method_desc(Decl *m) {
  DInfo *di = info(m);
  Type *ret = m->kind == D_INIT ? ty_prim(TY_VOID) : m->ret_type ? m->ret_type : ty_prim(TY_VOID);
  LLVMValueRef f[] = {cstr(m->mangled ? m->mangled : m->name ? m->name : "init"),
                      LLVMConstPointerCast(di->thunk, G.P),
                      LLVMConstPointerCast(di->args_desc, G.P), desc_arg(ret)};
  return const_global(LLVMConstStructInContext(G.ctx, f, 4, 0), ".method");
}

static void task_desc(Decl *d) {
  DInfo *di = info(d);
  LLVMValueRef f[] = {cstr(d->mangled ? d->mangled : d->name), LLVMConstPointerCast(di->thunk, G.P),
                      LLVMConstPointerCast(di->args_desc, G.P), desc_arg(d->ret_type),
                      ci32(d->retry), ci32(0), LLVMConstReal(G.f64, d->cpus),
                      LLVMConstReal(G.f64, d->gpus), LLVMConstReal(G.f64, d->timeout)};
  LLVMSetInitializer(di->desc, LLVMConstStructInContext(G.ctx, f, 9, 0));
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
    ai->init_decl = in;
  }
  Decl *in = ai->init_decl;
  if (!in->mangled)
    in->mangled = arena_printf("%s.init", an);
  declare_fn(in, sym(in, ""), G.P, true);
  for (Decl *m = a->methods; m; m = m->next)
    declare_fn(m, sym(m, ""), G.P, true);
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
                      LLVMConstPointerCast(ai->state_desc, G.P),
                      LLVMConstPointerCast(info(in)->desc, G.P), ci32(a->restarts),
                      ci32(a->checkpoint_every), ci32(a->replicas), ci32(a->checkpoint_keep),
                      LLVMConstReal(G.f64, a->cpus), LLVMConstReal(G.f64, a->gpus)};
  LLVMSetInitializer(ai->desc, LLVMConstStructInContext(G.ctx, f, 9, 0));
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
    return LLVMConstPtrToInt(str_literal(v->sval, v->slen), G.i64);
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
  LLVMTypeRef ps[] = {G.P};
  LLVMValueRef mainfn = LLVMAddFunction(G.mod, "sflow.main_fn", LLVMFunctionType(G.vd, ps, 1, 0));
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
      LLVMStructTypeInContext(G.ctx, (LLVMTypeRef[]){G.P, G.i32, G.i32, G.i64, G.P, G.P}, 6, 0);
  int i = 0;
  for (Decl *p = wf->params; p; p = p->next, i++) {
    LLVMValueRef idx = ci64(i);
    LLVMValueRef slot = LLVMBuildGEP2(G.b, G.i64, ptr_as(args, G.i64), &idx, 1, "");
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
  LLVMBuildRetVoid(G.b);
  G.fn = NULL;

  LLVMValueRef parr = NULL;
  if (n)
    parr = const_global(LLVMConstArray(param_ty, params, (unsigned)n), ".params");
  Source *main_src = src_get(G.prog->main->file);
  /* What a host's CPU must have (target.c), checked by the head of a
   * --nodes run before it deploys this executable anywhere. */
  LLVMValueRef pd[] = {ci32(SF_ABI_VERSION), cstr(stem(main_src->path)), cstr(main_src->path),
                       ci32(n), parr ? LLVMConstPointerCast(parr, G.P) : LLVMConstNull(G.P),
                       LLVMConstPointerCast(mainfn, G.P), cstr(G.target.cpu),
                       cstr(G.target.needs), ci64(G.nfnvals + 1),
                       LLVMConstPointerCast(G.fn_names, G.P),
                       LLVMConstPointerCast(G.fn_tasks, G.P), LLVMConstPointerCast(G.fns, G.P),
                       cstr(source_dir(main_src->path))};
  LLVMValueRef init = LLVMConstStructInContext(G.ctx, pd, 13, 0);
  LLVMValueRef g = LLVMAddGlobal(G.mod, LLVMTypeOf(init), "sf_program_desc");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
}

static void declare_all(Program *p) {
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next)
      switch (d->kind) {
      case D_FN: {
        if (d->is_extern) {
          declare_extern(d);
          break;
        }
        bool shared;
        int ncopies = unroll_copies(d, G.opts->opt_level, &shared);
        if (ncopies)
          declare_unrolled(d, ncopies, shared);
        else
          declare_fn(d, sym(d, ""), NULL, false);
        break;
      }
      case D_WORKFLOW: declare_fn(d, sym(d, ""), NULL, false); break;
      case D_KERNEL:
        declare_fn(d, sym(d, ".cpu"), G.i64, true);
        info(d)->desc = LLVMAddGlobal(
            G.mod, LLVMStructTypeInContext(G.ctx, (LLVMTypeRef[]){G.P, G.P, G.P, G.P, G.P, G.P, G.i64}, 7, 0),
            ".kernel");
        LLVMSetLinkage(info(d)->desc, LLVMPrivateLinkage);
        LLVMSetGlobalConstant(info(d)->desc, 1);
        break;
      case D_TASK:
        declare_fn(d, sym(d, ""), NULL, false);
        info(d)->desc = LLVMAddGlobal(
            G.mod,
            LLVMStructTypeInContext(G.ctx,
                                    (LLVMTypeRef[]){G.P, G.P, G.P, G.P, G.i32, G.i32, G.f64,
                                                    G.f64, G.f64},
                                    9, 0),
            ".task");
        LLVMSetLinkage(info(d)->desc, LLVMPrivateLinkage);
        LLVMSetGlobalConstant(info(d)->desc, 1);
        break;
      case D_ACTOR:
        declare_actor(d);
        info(d)->desc = LLVMAddGlobal(
            G.mod,
            LLVMStructTypeInContext(G.ctx,
                                    (LLVMTypeRef[]){G.P, G.P, G.P, G.i32, G.i32, G.i32, G.i32,
                                                    G.f64, G.f64},
                                    9, 0),
            ".actor");
        LLVMSetLinkage(info(d)->desc, LLVMPrivateLinkage);
        LLVMSetGlobalConstant(info(d)->desc, 1);
        break;
      default: break;
      }
}

/* A kernel's runtime face: `k.range(lo, hi, args)` runs the CPU version
 * over thread ids [lo, hi) from an argument block, and the sf_kernel_desc
 * carries it beside the CUDA C (cudagen.c) that NVRTC compiles on a GPU. */
static void gen_kernel_glue(Decl *d) {
  DInfo *di = info(d);
  LLVMTypeRef ps[] = {G.i64, G.i64, G.P};
  LLVMValueRef fn = LLVMAddFunction(G.mod, sym(d, ".range"), LLVMFunctionType(G.vd, ps, 3, 0));
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
  LLVMValueRef ctr = entry_alloca(G.i64, "tid");
  store(lo, ctr);
  LLVMBasicBlockRef cond = new_block("cond"), body = new_block("body"), end = new_block("end");
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, cond);
  LLVMValueRef i = load(G.i64, ctr);
  LLVMBuildCondBr(G.b, LLVMBuildICmp(G.b, LLVMIntSLT, i, hi, ""), body, end);
  LLVMPositionBuilderAtEnd(G.b, body);
  cargs[0] = i;
  call(di->fn, cargs, k);
  store(LLVMBuildAdd(G.b, i, ci64(1), ""), ctr);
  LLVMBuildBr(G.b, cond);
  LLVMPositionBuilderAtEnd(G.b, end);
  LLVMBuildRetVoid(G.b);
  G.fn = NULL;
  char *cuda = cudagen_kernel(d);
  Source *src = src_get(d->loc.file);
  LLVMValueRef fs[] = {cstr(d->mangled ? d->mangled : d->name), cstr(src->path), cstr(cuda),
                       cstr(cudagen_entry(d)), LLVMConstPointerCast(di->args_desc, G.P),
                       LLVMConstPointerCast(fn, G.P), LLVMConstInt(G.i64, writes, 0)};
  free(cuda);
  LLVMSetInitializer(di->desc, LLVMConstStructInContext(G.ctx, fs, 7, 0));
}

static void gen_all(Program *p) {
  for (Module *m = p->modules; m; m = m->next)
    for (Decl *d = m->decls; d; d = d->next)
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

/* ------------------------------------------------------ the module */

static void init_types(void) {
  G.i1 = LLVMInt1TypeInContext(G.ctx);
  G.i8 = LLVMInt8TypeInContext(G.ctx);
  G.i32 = LLVMInt32TypeInContext(G.ctx);
  G.i64 = LLVMInt64TypeInContext(G.ctx);
  G.f32 = LLVMFloatTypeInContext(G.ctx);
  G.f64 = LLVMDoubleTypeInContext(G.ctx);
  G.vd = LLVMVoidTypeInContext(G.ctx);
  G.P = ptr_to(G.i8);
  /* sf_array: {rc, tag, flags, len, elem, data, dev, where, gpu, cap} */
  G.arr_ty = LLVMStructCreateNamed(G.ctx, "sf_array");
  LLVMTypeRef at[] = {G.i64, G.i32, G.i32, G.i64, G.P, G.P, G.P, G.i32, G.i32, G.i64};
  LLVMStructSetBody(G.arr_ty, at, 10, 0);
  G.loc_ty = LLVMStructCreateNamed(G.ctx, "sf_loc");
  LLVMTypeRef lt[] = {G.P, G.i32, G.i32};
  LLVMStructSetBody(G.loc_ty, lt, 3, 0);
  G.type_ty = LLVMStructCreateNamed(G.ctx, "sf_type");
  LLVMTypeRef tt[] = {G.i32, G.i32, G.i32, G.i32, G.P, G.P, G.P};
  LLVMStructSetBody(G.type_ty, tt, 7, 0);
  G.field_ty = LLVMStructCreateNamed(G.ctx, "sf_field");
  LLVMTypeRef ft[] = {G.P, G.i32, G.P};
  LLVMStructSetBody(G.field_ty, ft, 3, 0);
}

static int make_target(void) {
  if (target_open(&G.opts->target, G.opts->opt_level, &G.target)) {
    if (G.target.tm)
      LLVMDisposeTargetMachine(G.target.tm);
    return 1;
  }
  G.tm = G.target.tm;
  G.td = LLVMCreateTargetDataLayout(G.tm);
  LLVMSetTarget(G.mod, G.target.triple);
  LLVMSetModuleDataLayout(G.mod, G.td);
  return 0;
}

static void finish(void) {
  if (G.dib)
    LLVMDisposeDIBuilder(G.dib);
  LLVMDisposeBuilder(G.b);
  LLVMDisposeModule(G.mod);
  LLVMDisposeTargetData(G.td);
  LLVMDisposeTargetMachine(G.tm);
  LLVMContextDispose(G.ctx);
  free(G.owned);
  free(G.fnvals);
  free(G.file_names);
  free(G.difiles);
  memset(&G, 0, sizeof G);
}

int codegen_program(Program *p, const CodegenOptions *opts) {
  memset(&G, 0, sizeof G);
  G.prog = p;
  G.opts = opts;
  bool linking = !opts->emit;
  if (linking && !p->workflow) {
    fprintf(stderr, "sflowc: error: no 'workflow main' to run\n");
    return 1;
  }
  G.ctx = LLVMContextCreate();
  Source *ms = src_get(p->main->file);
  G.mod = LLVMModuleCreateWithNameInContext(ms->path, G.ctx);
  G.b = LLVMCreateBuilderInContext(G.ctx);
  G.file_names = calloc((size_t)src_count() + 1, sizeof(LLVMValueRef));
  G.difiles = calloc((size_t)src_count() + 1, sizeof(LLVMMetadataRef));
  if (make_target()) {
    LLVMDisposeBuilder(G.b);
    LLVMDisposeModule(G.mod);
    LLVMContextDispose(G.ctx);
    return 1;
  }
  init_types();
  tbaa_init();
  if (opts->debug) {
    G.dib = LLVMCreateDIBuilder(G.mod);
    LLVMMetadataRef f = di_file(p->main->file);
    G.cu = LLVMDIBuilderCreateCompileUnit(G.dib, LLVMDWARFSourceLanguageC, f, "sflowc", 6,
                                          opts->opt_level > 0, "", 0, 0, "", 0,
                                          LLVMDWARFEmissionFull, 0, 0, 0, "", 0, "", 0);
    LLVMAddModuleFlag(G.mod, LLVMModuleFlagBehaviorWarning, "Debug Info Version", 18,
                      LLVMValueAsMetadata(ci32((int32_t)LLVMDebugMetadataVersion())));
    LLVMAddModuleFlag(G.mod, LLVMModuleFlagBehaviorWarning, "Dwarf Version", 13,
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
  declare_all(p);
  gen_all(p);
  gen_fn_table();
  if (p->workflow)
    gen_program_desc(p->workflow);
  if (G.dib)
    LLVMDIBuilderFinalize(G.dib);
  if (diag_error_count()) {
    finish();
    return 1;
  }
  char *msg = NULL;
  if (LLVMVerifyModule(G.mod, LLVMReturnStatusAction, &msg)) {
    fprintf(stderr, "sflowc: internal compiler error: invalid LLVM IR:\n%s\n", msg);
    LLVMDisposeMessage(msg);
    if (getenv("SFLOWC_DUMP_IR"))
      LLVMDumpModule(G.mod);
    finish();
    return 101;
  }
  LLVMDisposeMessage(msg);
  target_tune(G.mod, &G.target);
  int rc = unroll_chains(G.mod, G.tm, G.chains, G.nchains);
  if (!rc)
    rc = link_program(G.mod, &G.target, opts);
  finish();
  return rc;
}
