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

typedef struct Interned Interned;
struct Interned {
  Type t;
  Interned *next;
};
static Interned *interned;

static Type *intern(TypeKind k, Type *elem, Decl *decl) {
  for (Interned *i = interned; i; i = i->next)
    if (i->t.kind == k && i->t.elem == elem && i->t.decl == decl)
      return &i->t;
  Interned *i = arena_alloc(sizeof(Interned));
  i->t.kind = k;
  i->t.elem = elem;
  i->t.decl = decl;
  i->next = interned;
  interned = i;
  return &i->t;
}

/* The arena is freed between compilations (language server), so the
 * intern table must be forgotten with it. */
void types_reset(void) {
  interned = NULL;
  for (int k = 0; k <= TY_MODULE; k++)
    prims[k].llvm = NULL;
}

Type *ty_array(Type *elem) { return intern(TY_ARRAY, elem, NULL); }
Type *ty_future(Type *elem) { return intern(TY_FUTURE, elem, NULL); }
Type *ty_struct(Decl *d) { return intern(TY_STRUCT, NULL, d); }
Type *ty_actor(Decl *d) { return intern(TY_ACTOR, NULL, d); }
Type *ty_group(Decl *d) { return intern(TY_GROUP, NULL, d); }

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
  case TY_STR: case TY_ARRAY: case TY_FUTURE: case TY_ACTOR: case TY_GROUP:
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
  case TY_ARRAY: return arena_printf("%s[]", ty_str(t->elem));
  case TY_FUTURE: return arena_printf("future<%s>", ty_str(t->elem));
  case TY_STRUCT:
  case TY_ACTOR: return t->decl->name;
  case TY_GROUP: return arena_printf("group<%s>", t->decl->name);
  case TY_MODULE: return "module";
  }
  return "?";
}
