/*
 * codegen_internal.h — what the files of the host back end share, and only
 * they: the code generator's state, the value and function records, the
 * runtime-call macro, and one section per file in dependency order.
 *
 * Layering: codegen_base.c is the base (LLVM helpers, runtime entry
 * points, TBAA, types, descriptors, debug info, reference counts, arrays);
 * codegen_expr.c lowers the generic expressions and calls over it, and
 * codegen_stmt.c the statements over those.  The domain files
 * (codegen_builtin.c, codegen_data.c, codegen_tensor.c, codegen_task.c)
 * call the generic files, never the reverse: where a generic lowering
 * meets a domain (a builtin call, m[k], `+` of tensors, spawn) it calls
 * through the CgDomains table that codegen.c, the top, fills.
 */
#ifndef CODEGEN_INTERNAL_H
#define CODEGEN_INTERNAL_H

#include "sflowc.h"
#include "parser.h"
#include "rtabi.h" /* and runtime/sflow.h: sf_kind, the object tags, SF_ABI_VERSION */

#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/TargetMachine.h>

#include <string.h>

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

/* An address plus an owned base object to release after the access. */
typedef struct {
  LLVMValueRef ptr;
  Val base;
  Type *basety;
} LVal;

/* The body of counted_loop, called with the index i. */
typedef void (*LoopBody)(void *ctx, LLVMValueRef i);

/* The domain lowerings, as the generic files call them (filled by
 * codegen.c): one hook per place a generic lowering meets a domain. */
typedef struct {
  /* codegen_builtin.c: a CALL_BUILTIN */
  Val (*builtin)(Node *n);
  /* codegen_data.c: the data core and maps */
  Val (*array_concat)(Node *n);
  Val (*data_index_expr)(Node *n);
  Val (*map_call)(Node *n);
  Val (*map_index)(Node *n);
  LVal (*map_lvalue)(Node *n, bool put);
  void (*map_put_stmt)(Node *n);
  void (*for_split)(Node *n);
  /* codegen_tensor.c: std.nn's tensors */
  Val (*tensor_binary)(Node *n);
  Val (*tensor_index)(Node *n);
  Val (*tensor_neg)(Node *n);
  LLVMValueRef (*tensor_apply)(int op, Type *lt, LLVMValueRef l, Type *rty, LLVMValueRef r, Loc loc);
  /* codegen_task.c: spawn, await, launch */
  Val (*spawn_expr)(Node *n);
  Val (*await_expr)(Node *n);
  void (*launch_expr)(Node *n);
} CgDomains;

typedef struct DescEntry DescEntry;
struct DescEntry {
  Type *ty;
  LLVMValueRef g;
  DescEntry *next;
};

typedef struct {
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
  const CgDomains *dom; /* the domain files, as the generic ones call them */
} Codegen;

/* The one code generator state (codegen_base.c), zeroed by codegen_program. */
extern Codegen cg;

/* ------------------------------------------------------- codegen_base.c */

/* The runtime entry point of row id of rtabi.h, declared on first use. */
LLVMValueRef rt(int id);
LLVMValueRef const_str_global(const char *s, size_t n);
LLVMValueRef type_desc(Type *t);
const char *sym(Decl *d, const char *suffix);

static inline Val mkval(LLVMValueRef v, bool owned) { return (Val){v, owned}; }
static inline LLVMValueRef ci64(int64_t v) { return LLVMConstInt(cg.i64, (unsigned long long)v, 1); }
static inline LLVMValueRef ci32(int32_t v) { return LLVMConstInt(cg.i32, (unsigned long long)v, 1); }
static inline LLVMTypeRef ptr_to(LLVMTypeRef t) { return LLVMPointerType(t, 0); }
static inline LLVMValueRef as_P(LLVMValueRef p) { return LLVMBuildPointerCast(cg.b, p, cg.P, ""); }
LLVMValueRef ptr_as(LLVMValueRef p, LLVMTypeRef t);
LLVMValueRef load(LLVMTypeRef t, LLVMValueRef p);
LLVMValueRef store(LLVMValueRef v, LLVMValueRef p);
LLVMValueRef struct_gep(LLVMTypeRef sty, LLVMValueRef p, unsigned i);
bool terminated(void);
LLVMBasicBlockRef new_block(const char *name);
LLVMValueRef entry_alloca(LLVMTypeRef t, const char *name);
LLVMValueRef get_fn(const char *name, LLVMTypeRef ret, LLVMTypeRef *ps, int n,
                           bool vararg);
void add_attr(LLVMValueRef f, unsigned idx, const char *name);
LLVMValueRef call(LLVMValueRef f, LLVMValueRef *args, int n);
LLVMValueRef loc_const(Loc l);
LLVMValueRef str_literal(const char *s, size_t n);
LLVMBasicBlockRef cold_if(LLVMValueRef failcond);
void cold_end(LLVMBasicBlockRef ok);
void tbaa_init(void);
LLVMTypeRef struct_of_fields(const char *name, Decl *fields);
LLVMTypeRef lt_val(Type *t);
LLVMValueRef to_mem(Type *t, LLVMValueRef v);
LLVMValueRef from_mem(Type *t, LLVMValueRef v);
void mark_array_attrs(LLVMValueRef fn, unsigned idx);
LLVMValueRef load_mem(Type *t, LLVMValueRef p);
LLVMValueRef store_mem(Type *t, LLVMValueRef v, LLVMValueRef p);
LLVMValueRef new_desc_global(const char *name);
void set_struct_desc(LLVMValueRef g, const char *name, LLVMTypeRef sty, int n,
                            const char **names, Type **types);
void fields_of(Decl *fields, int *n, const char ***names, Type ***types);
LLVMValueRef desc_arg(Type *t);
LLVMMetadataRef di_file(int file);
void di_set_loc(Loc l);
void di_declare(Var *v, LLVMValueRef slot, int argno);
void retain_value(Type *t, LLVMValueRef v);
void release_value(Type *t, LLVMValueRef v);
LLVMValueRef own(Type *t, Val v);
void drop(Type *t, Val v);
LLVMValueRef hold(Type *t, Val v);
void unhold(Type *t, LLVMValueRef slot);
void push_owned(LLVMValueRef slot, Type *t);
void release_slots(int mark, bool returning);
void scope_end(int mark);
LLVMValueRef zero_value(Type *t, Loc l);
LLVMValueRef arr_len(LLVMValueRef a);
LLVMValueRef arr_data(LLVMValueRef a);
LLVMValueRef data_elem(LLVMValueRef data, Type *elem, LLVMValueRef idx);
LLVMValueRef elem_ptr(LLVMValueRef a, Type *elem, LLVMValueRef idx);
LLVMValueRef load_elem(Type *elem, LLVMValueRef p);
void store_elem(Type *elem, LLVMValueRef v, LLVMValueRef p);
LLVMValueRef to_i64(Type *t, LLVMValueRef v);
void check_index(LLVMValueRef idx, LLVMValueRef len, Loc l);
LLVMValueRef intrinsic1(const char *base, Type *t, LLVMValueRef x);
LLVMValueRef intrinsic2(const char *base, Type *t, LLVMValueRef x, LLVMValueRef y);
LLVMValueRef libm1(const char *name, Type *t, LLVMValueRef x);
LLVMValueRef as_float(Type *from, Type *to, LLVMValueRef v);
LLVMValueRef const_global(LLVMValueRef init, const char *name);
static inline void start_dead_block(void) { LLVMPositionBuilderAtEnd(cg.b, new_block("dead")); }
static inline LLVMValueRef cstr(const char *s) { return const_str_global(s, strlen(s)); }
static inline LLVMTypeRef lt_mem(Type *t) { return t->kind == TY_BOOL ? cg.i8 : lt_val(t); }
static inline void release_to(int mark) { release_slots(mark, false); }
static inline bool is_float(Type *t) { return t->kind == TY_F32 || t->kind == TY_F64; }


/* RT(sf_name, args...) calls the runtime through its row of rtabi.h: a
 * name without a row does not compile, nor does a call with another
 * number of arguments than the row's signature has letters after the
 * return type's. */
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

/* ------------------------------------------------------- codegen_expr.c */

bool addressable(Node *n);
LVal lvalue(Node *n);
void lvalue_done(LVal lv);
LLVMValueRef lv_load(Node *n, LVal lv);
void lv_store(Node *n, LVal lv, LLVMValueRef v);
LLVMValueRef arith(int op, Type *t, LLVMValueRef l, LLVMValueRef r, Loc loc);
LLVMValueRef str_op(int op, LLVMValueRef l, LLVMValueRef r);
DInfo *info(Decl *d);
LLVMValueRef args_block(DInfo *di, Node **argv, int argc);
void declare_extern(Decl *d);
void counted_loop(LLVMValueRef len, LoopBody fnb, void *ctx);
void gen_fn_table(void);
bool calls_own_method(Node *n);
Val expr(Node *n);

/* ------------------------------------------------------- codegen_stmt.c */

void block(Node *n);

/* ---------------------------------------------------- codegen_builtin.c */

Val builtin(Node *n);

/* ------------------------------------------------------- codegen_data.c */

/* `for w in s.split(sep)` / `for w in s.split()`: for_split walks the
 * parts one at a time, never building the array. */
static inline bool is_split_call(Node *e) {
  return e->kind == N_CALL && e->callkind == CALL_BUILTIN &&
         (e->builtin == B_STR_SPLIT || e->builtin == B_STR_SPLIT_WS);
}
Val data_builtin(Node *n);
Val data_index_expr(Node *n);
Val array_concat(Node *n);
LVal map_lvalue(Node *n, bool put);
Val map_index(Node *n);
void map_put_stmt(Node *n);
Val map_call(Node *n);
void for_split(Node *n);

/* ----------------------------------------------------- codegen_tensor.c */

LLVMValueRef tensor_apply(int op, Type *lt, LLVMValueRef l, Type *rty, LLVMValueRef r, Loc loc);
Val tensor_binary(Node *n);
Val tensor_index(Node *n);
Val tensor_neg(Node *n);

/* ------------------------------------------------------- codegen_task.c */

Val spawn_expr(Node *n);
Val await_expr(Node *n);
void launch_expr(Node *n);

#endif
