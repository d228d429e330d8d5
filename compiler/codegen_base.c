/*
 * codegen_base.c — the base of the host back end: the state, LLVM
 * helpers, runtime entry points declared from their rows of rtabi.h,
 * TBAA, the LLVM types of sflow types, type descriptors, debug info,
 * reference counts and owned slots, zero values, array elements.
 *
 * Design: nothing here lowers an expression; every other codegen file
 * may call this one and this one calls none of them.
 */
#include "codegen_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Codegen cg;

/* ----------------------------------------------------------- basics */




/* p cast to "pointer to t" (a no-op with opaque pointers). */
LLVMValueRef ptr_as(LLVMValueRef p, LLVMTypeRef t) {
  return LLVMBuildPointerCast(cg.b, p, ptr_to(t), "");
}

LLVMValueRef load(LLVMTypeRef t, LLVMValueRef p) {
  return LLVMBuildLoad2(cg.b, t, ptr_as(p, t), "");
}
LLVMValueRef store(LLVMValueRef v, LLVMValueRef p) {
  return LLVMBuildStore(cg.b, v, ptr_as(p, LLVMTypeOf(v)));
}

LLVMValueRef struct_gep(LLVMTypeRef sty, LLVMValueRef p, unsigned i) {
  return LLVMBuildStructGEP2(cg.b, sty, ptr_as(p, sty), i, "");
}

bool terminated(void) {
  return LLVMGetBasicBlockTerminator(LLVMGetInsertBlock(cg.b)) != NULL;
}

LLVMBasicBlockRef new_block(const char *name) {
  return LLVMAppendBasicBlockInContext(cg.ctx, cg.fn->fn, name);
}

/* After return/break/continue/noreturn calls: keep emitting into a block
 * nothing jumps to (the optimiser drops it). */

/* An alloca in the entry block, so mem2reg turns it into registers. */
LLVMValueRef entry_alloca(LLVMTypeRef t, const char *name) {
  LLVMBuilderRef eb = LLVMCreateBuilderInContext(cg.ctx);
  LLVMValueRef first = LLVMGetFirstInstruction(cg.fn->entry);
  if (first)
    LLVMPositionBuilderBefore(eb, first);
  else
    LLVMPositionBuilderAtEnd(eb, cg.fn->entry);
  LLVMValueRef a = LLVMBuildAlloca(eb, t, name);
  LLVMDisposeBuilder(eb);
  return a;
}

LLVMValueRef get_fn(const char *name, LLVMTypeRef ret, LLVMTypeRef *ps, int n,
                           bool vararg) {
  LLVMValueRef f = LLVMGetNamedFunction(cg.mod, name);
  if (!f) {
    f = LLVMAddFunction(cg.mod, name, LLVMFunctionType(ret, ps, (unsigned)n, vararg));
    LLVMAddAttributeAtIndex(
        f, LLVMAttributeFunctionIndex,
        LLVMCreateEnumAttribute(cg.ctx, LLVMGetEnumAttributeKindForName("nounwind", 8), 0));
  }
  return f;
}

void add_attr(LLVMValueRef f, unsigned idx, const char *name) {
  unsigned k = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(f, idx, LLVMCreateEnumAttribute(cg.ctx, k, 0));
}

LLVMValueRef call(LLVMValueRef f, LLVMValueRef *args, int n) {
  LLVMTypeRef fty = LLVMGlobalGetValueType(f);
  /* Match pointer argument types (typed pointers on LLVM 14). */
  LLVMTypeRef ps[16];
  unsigned np = LLVMCountParamTypes(fty);
  if (np <= 16) {
    LLVMGetParamTypes(fty, ps);
    for (unsigned i = 0; i < np && i < (unsigned)n; i++)
      if (LLVMGetTypeKind(ps[i]) == LLVMPointerTypeKind &&
          LLVMGetTypeKind(LLVMTypeOf(args[i])) == LLVMPointerTypeKind)
        args[i] = LLVMBuildPointerCast(cg.b, args[i], ps[i], "");
  }
  LLVMValueRef c = LLVMBuildCall2(cg.b, fty, f, args, (unsigned)n, "");
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
  case 'v': return cg.vd;
  case 'b': return cg.i1;
  case 'i': return cg.i32;
  case 'l': return cg.i64;
  case 'f': return cg.f32;
  case 'd': return cg.f64;
  case 'p': return cg.P;
  default: ice("codegen: signature letter '%c' in compiler/rtabi.h", c);
  }
}

LLVMValueRef rt(int id) {
  if (cg.rtfn[id])
    return cg.rtfn[id];
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
  return cg.rtfn[id] = f;
}


LLVMValueRef const_str_global(const char *s, size_t n) {
  LLVMValueRef init = LLVMConstStringInContext(cg.ctx, s, (unsigned)n, 0);
  LLVMValueRef g = LLVMAddGlobal(cg.mod, LLVMTypeOf(init), ".str");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return LLVMConstPointerCast(g, cg.P);
}

/* A runtime error location constant (sf_loc). */
LLVMValueRef loc_const(Loc l) {
  if (!cg.file_names[l.file]) {
    Source *s = src_get(l.file);
    cg.file_names[l.file] = cstr(s->path);
  }
  LLVMValueRef f[] = {cg.file_names[l.file], ci32(l.line), ci32(l.col)};
  LLVMValueRef init = LLVMConstNamedStruct(cg.loc_ty, f, 3);
  LLVMValueRef g = LLVMAddGlobal(cg.mod, cg.loc_ty, ".loc");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return LLVMConstPointerCast(g, cg.P);
}

/* An immortal string object (rc -1) for a literal. */
LLVMValueRef str_literal(const char *s, size_t n) {
  LLVMValueRef bytes = LLVMConstStringInContext(cg.ctx, s ? s : "", (unsigned)n, 0);
  LLVMValueRef hdr[] = {ci64(-1), ci32(SF_OBJ_STR), ci32(0), ci64((int64_t)n), bytes};
  LLVMValueRef init = LLVMConstStructInContext(cg.ctx, hdr, 5, 0);
  LLVMValueRef g = LLVMAddGlobal(cg.mod, LLVMTypeOf(init), ".sfstr");
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetAlignment(g, 8);
  return LLVMConstPointerCast(g, cg.P);
}

/* Marks a branch as almost never taken. */
static void set_unlikely(LLVMValueRef br, bool then_unlikely) {
  LLVMValueRef w[] = {LLVMMDStringInContext(cg.ctx, "branch_weights", 14),
                      LLVMConstInt(cg.i32, then_unlikely ? 1 : 1u << 20, 0),
                      LLVMConstInt(cg.i32, then_unlikely ? 1u << 20 : 1, 0)};
  LLVMSetMetadata(br, cg.md_prof, LLVMMDNodeInContext(cg.ctx, w, 3));
}

/* Branches to a new cold block when failcond holds; the builder is left in
 * the cold block and the returned block is where the normal path goes on. */
LLVMBasicBlockRef cold_if(LLVMValueRef failcond) {
  LLVMBasicBlockRef fail = new_block("fail"), ok = new_block("ok");
  set_unlikely(LLVMBuildCondBr(cg.b, failcond, fail, ok), true);
  LLVMPositionBuilderAtEnd(cg.b, fail);
  return ok;
}
void cold_end(LLVMBasicBlockRef ok) {
  LLVMBuildUnreachable(cg.b);
  LLVMPositionBuilderAtEnd(cg.b, ok);
}

/* ------------------------------------------------------------ TBAA */

static LLVMValueRef tbaa_scalar(const char *name) {
  LLVMValueRef v[] = {LLVMMDStringInContext(cg.ctx, name, (unsigned)strlen(name)), cg.tbaa_root,
                      ci64(0)};
  LLVMValueRef ty = LLVMMDNodeInContext(cg.ctx, v, 3);
  LLVMValueRef tag[] = {ty, ty, ci64(0)};
  return LLVMMDNodeInContext(cg.ctx, tag, 3);
}

void tbaa_init(void) {
  cg.md_tbaa = LLVMGetMDKindIDInContext(cg.ctx, "tbaa", 4);
  cg.md_prof = LLVMGetMDKindIDInContext(cg.ctx, "prof", 4);
  LLVMValueRef r = LLVMMDStringInContext(cg.ctx, "sflow tbaa", 10);
  cg.tbaa_root = LLVMMDNodeInContext(cg.ctx, &r, 1);
  cg.tbaa_len = tbaa_scalar("sf_array.len");
  cg.tbaa_data = tbaa_scalar("sf_array.data");
  cg.tbaa_elem[TY_BOOL] = tbaa_scalar("bool");
  cg.tbaa_elem[TY_I32] = tbaa_scalar("i32");
  cg.tbaa_elem[TY_I64] = tbaa_scalar("i64");
  cg.tbaa_elem[TY_F32] = tbaa_scalar("f32");
  cg.tbaa_elem[TY_F64] = tbaa_scalar("f64");
  cg.tbaa_elem[TY_STR] = tbaa_scalar("ref");
}

static LLVMValueRef tag(LLVMValueRef inst, LLVMValueRef t) {
  if (t)
    LLVMSetMetadata(inst, cg.md_tbaa, t);
  return inst;
}

static LLVMValueRef elem_tbaa(Type *t) {
  if (t->kind <= TY_STR)
    return cg.tbaa_elem[t->kind];
  if (ty_is_ref(t))
    return cg.tbaa_elem[TY_STR];
  return NULL;
}

/* ------------------------------------------------------------- types */


LLVMTypeRef struct_of_fields(const char *name, Decl *fields) {
  LLVMTypeRef st = LLVMStructCreateNamed(cg.ctx, name);
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

LLVMTypeRef lt_val(Type *t) {
  switch (t->kind) {
  case TY_VOID: return cg.vd;
  case TY_BOOL: return cg.i1;
  case TY_I32: return cg.i32;
  case TY_I64: return cg.i64;
  case TY_F32: return cg.f32;
  case TY_F64: return cg.f64;
  case TY_STR:
  case TY_ARRAY:
  case TY_FUTURE:
  case TY_ACTOR:
  case TY_GROUP:
  case TY_MAP:
  case TY_TENSOR: return cg.P;
  case TY_FN: return cg.i64; /* an index into the function table (fn_value_call) */
  case TY_STRUCT:
    if (!t->llvm)
      t->llvm = struct_of_fields(t->decl->mangled ? t->decl->mangled : t->decl->name,
                                 t->decl->fields);
    return t->llvm;
  default: ice("codegen: value of type %s", ty_str(t));
  }
}

/* Register value <-> memory value (bool only differs). */
LLVMValueRef to_mem(Type *t, LLVMValueRef v) {
  return t->kind == TY_BOOL ? LLVMBuildZExt(cg.b, v, cg.i8, "") : v;
}
LLVMValueRef from_mem(Type *t, LLVMValueRef v) {
  return t->kind == TY_BOOL ? LLVMBuildTrunc(cg.b, v, cg.i1, "") : v;
}
/* Every array value is a valid object (never NULL: the zero value of an
 * array is an empty array), which LLVM is told so that it may load the
 * header speculatively: that is what lets it hoist `len` and `data` out of
 * index loops and vectorise them. */
static void mark_array_load(LLVMValueRef ld) {
  LLVMValueRef none = LLVMMDNodeInContext(cg.ctx, NULL, 0);
  LLVMValueRef sz = ci64((int64_t)LLVMABISizeOfType(cg.td, cg.arr_ty)), al = ci64(8);
  LLVMSetMetadata(ld, LLVMGetMDKindIDInContext(cg.ctx, "nonnull", 7), none);
  LLVMSetMetadata(ld, LLVMGetMDKindIDInContext(cg.ctx, "dereferenceable", 15),
                  LLVMMDNodeInContext(cg.ctx, &sz, 1));
  LLVMSetMetadata(ld, LLVMGetMDKindIDInContext(cg.ctx, "align", 5),
                  LLVMMDNodeInContext(cg.ctx, &al, 1));
}

void mark_array_attrs(LLVMValueRef fn, unsigned idx) {
  LLVMAttributeRef a[] = {
      LLVMCreateEnumAttribute(cg.ctx, LLVMGetEnumAttributeKindForName("nonnull", 7), 0),
      LLVMCreateEnumAttribute(cg.ctx, LLVMGetEnumAttributeKindForName("align", 5), 8),
      LLVMCreateEnumAttribute(cg.ctx, LLVMGetEnumAttributeKindForName("dereferenceable", 15),
                              LLVMABISizeOfType(cg.td, cg.arr_ty))};
  for (int i = 0; i < 3; i++)
    LLVMAddAttributeAtIndex(fn, idx, a[i]);
}

LLVMValueRef load_mem(Type *t, LLVMValueRef p) {
  LLVMValueRef v = load(lt_mem(t), p);
  if (t->kind == TY_ARRAY)
    mark_array_load(v);
  return from_mem(t, v);
}
LLVMValueRef store_mem(Type *t, LLVMValueRef v, LLVMValueRef p) {
  return store(to_mem(t, v), p);
}

/* ------------------------------------------------------ descriptors */

static const char *kind_names[] = {[TY_BOOL] = "sf_type_bool", [TY_I32] = "sf_type_i32",
                                   [TY_I64] = "sf_type_i64",   [TY_F32] = "sf_type_f32",
                                   [TY_F64] = "sf_type_f64",   [TY_STR] = "sf_type_str"};

LLVMValueRef new_desc_global(const char *name) {
  LLVMValueRef g = LLVMAddGlobal(cg.mod, cg.type_ty, name);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetGlobalConstant(g, 1);
  return g;
}

static void set_desc(LLVMValueRef g, int kind, int64_t size, int64_t align, int nfields,
                     LLVMValueRef elem, LLVMValueRef fields, const char *name) {
  LLVMValueRef nul = LLVMConstNull(cg.P);
  LLVMValueRef f[] = {ci32(kind), ci32((int32_t)size), ci32((int32_t)align), ci32(nfields),
                      elem ? LLVMConstPointerCast(elem, cg.P) : nul,
                      fields ? LLVMConstPointerCast(fields, cg.P) : nul, cstr(name)};
  LLVMSetInitializer(g, LLVMConstNamedStruct(cg.type_ty, f, 7));
}

/* The sf_type of a struct laid out as sty, with the given fields. */
void set_struct_desc(LLVMValueRef g, const char *name, LLVMTypeRef sty, int n,
                            const char **names, Type **types) {
  LLVMValueRef *fs = arena_alloc(sizeof(LLVMValueRef) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    LLVMValueRef d = type_desc(types[i]);
    LLVMValueRef f[] = {cstr(names[i]), ci32((int32_t)LLVMOffsetOfElement(cg.td, sty, (unsigned)i)),
                        d ? LLVMConstPointerCast(d, cg.P) : LLVMConstNull(cg.P)};
    fs[i] = LLVMConstNamedStruct(cg.field_ty, f, 3);
  }
  LLVMValueRef arr = NULL;
  if (n) {
    LLVMValueRef init = LLVMConstArray(cg.field_ty, fs, (unsigned)n);
    arr = LLVMAddGlobal(cg.mod, LLVMTypeOf(init), ".fields");
    LLVMSetInitializer(arr, init);
    LLVMSetLinkage(arr, LLVMPrivateLinkage);
    LLVMSetGlobalConstant(arr, 1);
  }
  set_desc(g, SF_STRUCT, (int64_t)LLVMABISizeOfType(cg.td, sty),
           (int64_t)LLVMABIAlignmentOfType(cg.td, sty), n, NULL, arr, name);
}

void fields_of(Decl *fields, int *n, const char ***names, Type ***types) {
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
  LLVMValueRef f[] = {cstr("key"), ci32(0), LLVMConstPointerCast(type_desc(t->key), cg.P)};
  LLVMValueRef init = LLVMConstArray(cg.field_ty, (LLVMValueRef[]){LLVMConstNamedStruct(cg.field_ty, f, 3)}, 1);
  LLVMValueRef arr = LLVMAddGlobal(cg.mod, LLVMTypeOf(init), ".fields");
  LLVMSetInitializer(arr, init);
  LLVMSetLinkage(arr, LLVMPrivateLinkage);
  LLVMSetGlobalConstant(arr, 1);
  set_desc(g, SF_MAP, 8, 8, 1, type_desc(t->elem), arr, name);
}

/* The runtime descriptor of t (NULL for void). */
LLVMValueRef type_desc(Type *t) {
  if (t->kind == TY_VOID)
    return NULL;
  if (t->kind <= TY_STR) {
    LLVMValueRef g = LLVMGetNamedGlobal(cg.mod, kind_names[t->kind]);
    if (!g) {
      g = LLVMAddGlobal(cg.mod, cg.type_ty, kind_names[t->kind]);
      LLVMSetGlobalConstant(g, 1);
    }
    return g;
  }
  for (DescEntry *e = cg.descs; e; e = e->next)
    if (e->ty == t)
      return e->g;
  DescEntry *e = arena_alloc(sizeof *e);
  e->ty = t;
  e->g = new_desc_global(".type");
  e->next = cg.descs;
  cg.descs = e; /* before recursing: struct S { kids: S[] } */
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

LLVMValueRef desc_arg(Type *t) {
  LLVMValueRef d = type_desc(t);
  return d ? LLVMConstPointerCast(d, cg.P) : LLVMConstNull(cg.P);
}

/* ------------------------------------------------------ debug info */

LLVMMetadataRef di_file(int file) {
  if (!cg.difiles[file]) {
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
    cg.difiles[file] = LLVMDIBuilderCreateFile(cg.dib, base, strlen(base), dir, strlen(dir));
  }
  return cg.difiles[file];
}

static LLVMMetadataRef di_type(Type *t) {
  const char *name = ty_str(t);
  switch (t->kind) {
  case TY_BOOL: return LLVMDIBuilderCreateBasicType(cg.dib, "bool", 4, 8, 0x02, LLVMDIFlagZero);
  case TY_I32: return LLVMDIBuilderCreateBasicType(cg.dib, "i32", 3, 32, 0x05, LLVMDIFlagZero);
  case TY_I64: return LLVMDIBuilderCreateBasicType(cg.dib, "i64", 3, 64, 0x05, LLVMDIFlagZero);
  case TY_F32: return LLVMDIBuilderCreateBasicType(cg.dib, "f32", 3, 32, 0x04, LLVMDIFlagZero);
  case TY_F64: return LLVMDIBuilderCreateBasicType(cg.dib, "f64", 3, 64, 0x04, LLVMDIFlagZero);
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
          cg.dib, file, f->name, strlen(f->name), file, (unsigned)f->loc.line,
          LLVMABISizeOfType(cg.td, ft) * 8, LLVMABIAlignmentOfType(cg.td, ft) * 8,
          LLVMOffsetOfElement(cg.td, st, (unsigned)i) * 8, LLVMDIFlagZero, di_type(f->type));
    }
    return LLVMDIBuilderCreateStructType(cg.dib, file, name, strlen(name), file,
                                         (unsigned)t->decl->loc.line,
                                         LLVMABISizeOfType(cg.td, st) * 8,
                                         LLVMABIAlignmentOfType(cg.td, st) * 8, LLVMDIFlagZero,
                                         NULL, ms, (unsigned)n, 0, NULL, name, strlen(name));
  }
  default: {
    /* References: a pointer to an opaque object named for the type. */
    LLVMMetadataRef obj = LLVMDIBuilderCreateBasicType(cg.dib, name, strlen(name), 8, 0x08,
                                                       LLVMDIFlagZero);
    return LLVMDIBuilderCreatePointerType(cg.dib, obj, 64, 64, 0, name, strlen(name));
  }
  }
}

void di_set_loc(Loc l) {
  if (!cg.dib || !cg.fn || !cg.fn->sp)
    return;
  LLVMMetadataRef dl =
      LLVMDIBuilderCreateDebugLocation(cg.ctx, (unsigned)l.line, (unsigned)l.col, cg.fn->sp, NULL);
  LLVMSetCurrentDebugLocation2(cg.b, dl);
}

/* Describes a variable living in slot (a let/var/for variable or param). */
void di_declare(Var *v, LLVMValueRef slot, int argno) {
  if (!cg.dib || !cg.fn->sp || !v->name)
    return;
  LLVMMetadataRef file = di_file(v->loc.file), dv;
  if (argno)
    dv = LLVMDIBuilderCreateParameterVariable(cg.dib, cg.fn->sp, v->name, strlen(v->name),
                                              (unsigned)argno, file, (unsigned)v->loc.line,
                                              di_type(v->ty), 1, LLVMDIFlagZero);
  else
    dv = LLVMDIBuilderCreateAutoVariable(cg.dib, cg.fn->sp, v->name, strlen(v->name), file,
                                         (unsigned)v->loc.line, di_type(v->ty), 1,
                                         LLVMDIFlagZero, 0);
  LLVMMetadataRef dl = LLVMDIBuilderCreateDebugLocation(cg.ctx, (unsigned)v->loc.line,
                                                        (unsigned)v->loc.col, cg.fn->sp, NULL);
  LLVMMetadataRef ex = LLVMDIBuilderCreateExpression(cg.dib, NULL, 0);
#if LLVM_VERSION_MAJOR >= 19
  LLVMDIBuilderInsertDeclareRecordAtEnd(cg.dib, slot, dv, ex, dl, LLVMGetInsertBlock(cg.b));
#else
  LLVMDIBuilderInsertDeclareAtEnd(cg.dib, slot, dv, ex, dl, LLVMGetInsertBlock(cg.b));
#endif
}

/* ------------------------------------------------- reference counts */

void retain_value(Type *t, LLVMValueRef v) {
  if (ty_is_ref(t)) {
    RT(sf_retain, v);
  } else if (t->kind == TY_STRUCT) {
    unsigned i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++)
      if (ty_has_refs(f->type))
        retain_value(f->type, LLVMBuildExtractValue(cg.b, v, i, ""));
  }
}

void release_value(Type *t, LLVMValueRef v) {
  if (ty_is_ref(t)) {
    RT(sf_release, v);
  } else if (t->kind == TY_STRUCT) {
    unsigned i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++)
      if (ty_has_refs(f->type))
        release_value(f->type, LLVMBuildExtractValue(cg.b, v, i, ""));
  }
}

/* The value as owned (+1), retaining it if it was borrowed. */
LLVMValueRef own(Type *t, Val v) {
  if (!v.owned && ty_has_refs(t))
    retain_value(t, v.v);
  return v.v;
}

/* Releases an owned temporary nothing consumed. */
void drop(Type *t, Val v) {
  if (v.owned && v.v && ty_has_refs(t))
    release_value(t, v.v);
}

/* Lists slot in the function's frame (emit_frame), once. */
static void frame_add(LLVMValueRef slot, Type *t) {
  Fn *f = cg.fn;
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
LLVMValueRef hold(Type *t, Val v) {
  if (!v.owned || !v.v || !ty_has_refs(t) || !cg.fn)
    return NULL;
  LLVMValueRef slot = entry_alloca(lt_mem(t), "held");
  store_mem(t, v.v, slot);
  frame_add(slot, t);
  return slot;
}

void unhold(Type *t, LLVMValueRef slot) {
  if (slot)
    store(LLVMConstNull(lt_mem(t)), slot);
}

/* Owned-slot stack: locals whose references this function owns. */
void push_owned(LLVMValueRef slot, Type *t) {
  if (!ty_has_refs(t))
    return;
  if (cg.nowned == cg.capowned) {
    cg.capowned = cg.capowned ? 2 * cg.capowned : 32;
    cg.owned = realloc(cg.owned, sizeof(Owned) * (size_t)cg.capowned);
    if (!cg.owned)
      ice("out of memory");
  }
  cg.owned[cg.nowned++] = (Owned){slot, t};
  frame_add(slot, t);
}

/* Releases owned slots above mark (innermost first), keeping them listed.
 * Unless the function returns next (and its frame goes), each slot is
 * zeroed too: an error later in the function must not release it again. */
void release_slots(int mark, bool returning) {
  if (terminated())
    return;
  for (int i = cg.nowned - 1; i >= mark; i--) {
    Owned *o = &cg.owned[i];
    release_value(o->ty, load_mem(o->ty, o->slot));
    if (!returning)
      store(LLVMConstNull(lt_mem(o->ty)), o->slot);
  }
}


void scope_end(int mark) {
  release_to(mark);
  cg.nowned = mark;
}

/* ---------------------------------------------------- zero values */

LLVMValueRef zero_value(Type *t, Loc l) {
  switch (t->kind) {
  case TY_STR: return RT0(sf_str_empty);
  case TY_ARRAY: return RT(sf_array_new, desc_arg(t->elem), ci64(0), loc_const(l));
  case TY_MAP: return RT(sf_map_new, desc_arg(t));
  case TY_STRUCT: {
    LLVMValueRef v = LLVMGetUndef(lt_val(t));
    unsigned i = 0;
    for (Decl *f = t->decl->fields; f; f = f->next, i++)
      v = LLVMBuildInsertValue(cg.b, v, to_mem(f->type, zero_value(f->type, l)), i, "");
    return v;
  }
  default: return LLVMConstNull(lt_val(t));
  }
}

/* ------------------------------------------------------- arrays */

LLVMValueRef arr_len(LLVMValueRef a) {
  return tag(LLVMBuildLoad2(cg.b, cg.i64, struct_gep(cg.arr_ty, a, 3), "len"), cg.tbaa_len);
}

LLVMValueRef arr_data(LLVMValueRef a) {
  return tag(LLVMBuildLoad2(cg.b, cg.P, ptr_as(struct_gep(cg.arr_ty, a, 5), cg.P), "data"),
             cg.tbaa_data);
}

LLVMValueRef data_elem(LLVMValueRef data, Type *elem, LLVMValueRef idx) {
  LLVMTypeRef et = lt_mem(elem);
  return LLVMBuildGEP2(cg.b, et, ptr_as(data, et), &idx, 1, "");
}

LLVMValueRef elem_ptr(LLVMValueRef a, Type *elem, LLVMValueRef idx) {
  return data_elem(arr_data(a), elem, idx);
}

LLVMValueRef load_elem(Type *elem, LLVMValueRef p) {
  LLVMValueRef v = tag(load(lt_mem(elem), p), elem_tbaa(elem));
  if (elem->kind == TY_ARRAY)
    mark_array_load(v);
  return from_mem(elem, v);
}
void store_elem(Type *elem, LLVMValueRef v, LLVMValueRef p) {
  tag(store_mem(elem, v, p), elem_tbaa(elem));
}

LLVMValueRef to_i64(Type *t, LLVMValueRef v) {
  return t->kind == TY_I32 ? LLVMBuildSExt(cg.b, v, cg.i64, "") : v;
}

void check_index(LLVMValueRef idx, LLVMValueRef len, Loc l) {
  LLVMBasicBlockRef ok = cold_if(LLVMBuildICmp(cg.b, LLVMIntUGE, idx, len, ""));
  RT(sf_index_fail, idx, len, loc_const(l));
  cold_end(ok);
}

/* ---------------------------------------------------- small helpers */

LLVMValueRef intrinsic1(const char *base, Type *t, LLVMValueRef x) {
  char name[64];
  snprintf(name, sizeof name, "llvm.%s.%s", base, t->kind == TY_F32 ? "f32" : "f64");
  LLVMTypeRef ft = lt_val(t), ps[] = {ft, ft};
  LLVMValueRef args[] = {x};
  return call(get_fn(name, ft, ps, 1, false), args, 1);
}

LLVMValueRef intrinsic2(const char *base, Type *t, LLVMValueRef x, LLVMValueRef y) {
  char name[64];
  snprintf(name, sizeof name, "llvm.%s.%s", base, t->kind == TY_F32 ? "f32" : "f64");
  LLVMTypeRef ft = lt_val(t), ps[] = {ft, ft};
  LLVMValueRef args[] = {x, y};
  return call(get_fn(name, ft, ps, 2, false), args, 2);
}

LLVMValueRef libm1(const char *name, Type *t, LLVMValueRef x) {
  char nm[32];
  snprintf(nm, sizeof nm, "%s%s", name, t->kind == TY_F32 ? "f" : "");
  LLVMTypeRef ft = lt_val(t);
  LLVMValueRef args[] = {x};
  return call(get_fn(nm, ft, &ft, 1, false), args, 1);
}

/* A float operand for a math builtin: ints convert to f64. */
LLVMValueRef as_float(Type *from, Type *to, LLVMValueRef v) {
  if (is_float(from)) {
    if (from->kind == to->kind)
      return v;
    return from->kind == TY_F32 ? LLVMBuildFPExt(cg.b, v, cg.f64, "")
                                : LLVMBuildFPTrunc(cg.b, v, cg.f32, "");
  }
  if (from->kind == TY_BOOL)
    return LLVMBuildUIToFP(cg.b, v, lt_val(to), "");
  return LLVMBuildSIToFP(cg.b, v, lt_val(to), "");
}

const char *sym(Decl *d, const char *suffix) {
  const char *m = d->mangled ? d->mangled : d->name;
  return arena_printf("sflow.%s%s", m, suffix);
}

LLVMValueRef const_global(LLVMValueRef init, const char *name) {
  LLVMValueRef g = LLVMAddGlobal(cg.mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  return g;
}
