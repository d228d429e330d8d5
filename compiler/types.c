/*
 * types.c — the type representation.
 *
 * Types are interned, so two types are equal exactly when their pointers
 * are: primitives are static singletons, and composite types are found in
 * a small table keyed by (kind, elem, decl).  Untyped literal kinds exist
 * only during checking; sema gives every expression a concrete type.
 */
#include "sflowc.h"

#include <string.h>

static Type prims[TY_MODULE + 1];

Type *ty_prim(TypeKind k) {
  Type *t = &prims[k];
  t->kind = k;
  return t;
}

/* The intern table: open addressing keyed by (kind, elem, decl), kept in
 * the arena.  A program with thousands of structs and actors asks for their
 * types on every use, so a list here showed up first in profiles. */
static Type **itab;
static size_t icap, icount;

static size_t ihash(TypeKind k, Type *elem, Decl *decl) {
  uintptr_t h = (uintptr_t)elem * 0x9E3779B97F4A7C15u ^ (uintptr_t)decl * 0xC2B2AE3D27D4EB4Fu;
  h ^= (uintptr_t)k;
  return (size_t)(h ^ (h >> 29));
}

static Type *intern(TypeKind k, Type *elem, Decl *decl) {
  if ((icount + 1) * 2 > icap) {
    size_t ncap = icap ? icap * 2 : 256;
    Type **nt = arena_alloc(sizeof(Type *) * ncap);
    for (size_t i = 0; i < icap; i++)
      if (itab[i]) {
        size_t j = ihash(itab[i]->kind, itab[i]->elem, itab[i]->decl) & (ncap - 1);
        while (nt[j])
          j = (j + 1) & (ncap - 1);
        nt[j] = itab[i];
      }
    itab = nt;
    icap = ncap;
  }
  size_t j = ihash(k, elem, decl) & (icap - 1);
  for (; itab[j]; j = (j + 1) & (icap - 1))
    if (itab[j]->kind == k && itab[j]->elem == elem && itab[j]->decl == decl)
      return itab[j];
  Type *t = arena_alloc(sizeof(Type));
  t->kind = k;
  t->elem = elem;
  t->decl = decl;
  itab[j] = t;
  icount++;
  return t;
}

/* Maps and function types have more than one component, so they are
 * interned in a list of their own (a program names few of them). */
typedef struct Multi Multi;
struct Multi {
  Type *t;
  Multi *next;
};
static Multi *multis;

/* The arena is freed between compilations (language server), so the
 * intern table must be forgotten with it. */
void types_reset(void) {
  multis = NULL;
  itab = NULL;
  icap = icount = 0;
  for (int k = 0; k <= TY_MODULE; k++)
    prims[k].llvm = NULL;
}

static Type tparam2 = {.kind = TY_TPARAM, .nparams = 1};

Type *ty_tparam(int i) { return i ? &tparam2 : ty_prim(TY_TPARAM); }

Type *ty_array(Type *elem) { return intern(TY_ARRAY, elem, NULL); }
Type *ty_future(Type *elem) { return intern(TY_FUTURE, elem, NULL); }
Type *ty_struct(Decl *d) { return intern(TY_STRUCT, NULL, d); }
Type *ty_actor(Decl *d) { return intern(TY_ACTOR, NULL, d); }
Type *ty_group(Decl *d) { return intern(TY_GROUP, NULL, d); }

static Type *multi_add(Type *t) {
  Multi *m = arena_alloc(sizeof *m);
  m->t = t;
  m->next = multis;
  multis = m;
  return t;
}

Type *ty_map(Type *key, Type *val) {
  for (Multi *m = multis; m; m = m->next)
    if (m->t->kind == TY_MAP && m->t->key == key && m->t->elem == val)
      return m->t;
  Type *t = arena_alloc(sizeof(Type));
  t->kind = TY_MAP;
  t->key = key;
  t->elem = val;
  return multi_add(t);
}

Type *ty_fn(Type **params, int nparams, Type *ret) {
  for (Multi *m = multis; m; m = m->next) {
    Type *t = m->t;
    if (t->kind != TY_FN || t->elem != ret || t->nparams != nparams)
      continue;
    int i = 0;
    while (i < nparams && t->params[i] == params[i])
      i++;
    if (i == nparams)
      return t;
  }
  Type *t = arena_alloc(sizeof(Type));
  t->kind = TY_FN;
  t->elem = ret;
  t->nparams = nparams;
  t->params = arena_alloc(sizeof(Type *) * (size_t)(nparams + 1));
  for (int i = 0; i < nparams; i++)
    t->params[i] = params[i];
  return multi_add(t);
}

bool ty_is_map_key(Type *t) {
  return t->kind == TY_STR || t->kind == TY_I64 || t->kind == TY_I32 || t->kind == TY_BOOL;
}

bool ty_is_int(Type *t) {
  return t->kind == TY_I32 || t->kind == TY_I64 || t->kind == TY_UNTYPED_INT;
}

bool ty_is_float(Type *t) {
  return t->kind == TY_F32 || t->kind == TY_F64 || t->kind == TY_UNTYPED_FLOAT;
}

bool ty_is_numeric(Type *t) { return ty_is_int(t) || ty_is_float(t); }

bool ty_is_untyped(Type *t) { return t->kind == TY_UNTYPED_INT || t->kind == TY_UNTYPED_FLOAT; }

bool ty_is_ref(Type *t) {
  switch (t->kind) {
  case TY_STR: case TY_ARRAY: case TY_FUTURE: case TY_ACTOR: case TY_GROUP: case TY_MAP:
  case TY_TENSOR:
    return true;
  default:
    return false;
  }
}

bool ty_has_refs(Type *t) {
  if (ty_is_ref(t))
    return true;
  if (t->kind == TY_STRUCT)
    for (Decl *f = t->decl->fields; f; f = f->next)
      if (f->type && ty_has_refs(f->type))
        return true;
  return false;
}

bool ty_is_gpu_elem(Type *t) {
  return t->kind == TY_F32 || t->kind == TY_F64 || t->kind == TY_I32 || t->kind == TY_I64;
}

const char *ty_str(Type *t) {
  if (!t)
    return "?";
  switch (t->kind) {
  case TY_ERROR: return "<error>";
  case TY_VOID: return "void";
  case TY_BOOL: return "bool";
  case TY_I32: return "i32";
  case TY_I64: return "i64";
  case TY_F32: return "f32";
  case TY_F64: return "f64";
  case TY_STR: return "str";
  case TY_UNTYPED_INT: return "integer literal";
  case TY_UNTYPED_FLOAT: return "float literal";
  case TY_ARRAY:
    if (t->elem->kind == TY_FN) /* as it is written: fn(i64) -> i64[] returns an array */
      return arena_printf("(%s)[]", ty_str(t->elem));
    return arena_printf("%s[]", ty_str(t->elem));
  case TY_FUTURE: return arena_printf("future<%s>", ty_str(t->elem));
  case TY_STRUCT:
  case TY_ACTOR: return t->decl->name;
  case TY_GROUP: return arena_printf("group<%s>", t->decl->name);
  case TY_MAP: return arena_printf("map<%s, %s>", ty_str(t->key), ty_str(t->elem));
  case TY_FN: {
    Buf b = {0};
    buf_puts(&b, "fn(");
    for (int i = 0; i < t->nparams; i++)
      buf_printf(&b, "%s%s", i ? ", " : "", ty_str(t->params[i]));
    buf_puts(&b, ")");
    if (t->elem && t->elem->kind != TY_VOID)
      buf_printf(&b, " -> %s", ty_str(t->elem));
    const char *s = arena_strdup(b.data);
    buf_free(&b);
    return s;
  }
  case TY_TENSOR: return "tensor";
  case TY_MODULE: return "module";
  case TY_TPARAM: return t->nparams ? "R" : "T";
  }
  return "?";
}
