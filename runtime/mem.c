/*
 * mem.c — allocation and reference counting of runtime objects.
 *
 * Every string, array, future, actor and group starts with an sf_obj header
 * whose count is changed with atomic builtins, because tasks on different
 * threads share arrays and strings freely.  A negative count marks an
 * immortal object (string literals the compiler emits as constants): those
 * are never written to, so constant data can live in read-only memory.
 * Releasing the last reference frees the object and, driven by the element
 * descriptor, releases every reference stored inside it.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

sf__dtor_fn sf__obj_dtor[SF_OBJ_GROUP + 1];

void *sf_alloc(size_t n) {
  /* malloc(0) may return NULL; asking for one byte keeps "never NULL". */
  void *p = malloc(n ? n : 1);
  if (!p)
    sf_runtime_error(NULL, "out of memory");
  return p;
}

void sf_free(void *p) { free(p); }

void *sf__alloc_n(size_t count, size_t size) {
  if (size && count > SIZE_MAX / size)
    sf_runtime_error(NULL, "out of memory");
  return sf_alloc(count * size);
}

void sf_retain(void *obj) {
  sf_obj *o = obj;
  if (!o || __atomic_load_n(&o->rc, __ATOMIC_RELAXED) < 0)
    return;
  /* Relaxed is enough: a new reference can only come from an existing one,
   * which already keeps the object alive (the same reasoning as
   * std::shared_ptr). */
  __atomic_fetch_add(&o->rc, 1, __ATOMIC_RELAXED);
}

static void array_destroy(sf_array *a) {
  const sf_type *t = a->elem;
  if (t && a->data && sf__type_has_refs(t))
    for (int64_t i = 0; i < a->len; i++)
      sf_value_release(t, sf__array_at(a, i));
  if (a->dev)
    sf__gpu_array_free(a);
  sf_free(a->data);
  sf_free(a);
}

static void obj_destroy(sf_obj *o) {
  switch (o->tag) {
  case SF_OBJ_ARRAY:
    array_destroy((sf_array *)o);
    return;
  case SF_OBJ_FUTURE:
  case SF_OBJ_ACTOR:
  case SF_OBJ_GROUP:
    if (sf__obj_dtor[o->tag]) {
      sf__obj_dtor[o->tag](o);
      return;
    }
    sf_free(o);
    return;
  default: /* SF_OBJ_STR: the bytes are inline */
    sf_free(o);
    return;
  }
}

void sf_release(void *obj) {
  sf_obj *o = obj;
  if (!o || __atomic_load_n(&o->rc, __ATOMIC_RELAXED) < 0)
    return;
  /* Acquire-release so every write made through other references happens
   * before the destructor reads the object. */
  if (__atomic_sub_fetch(&o->rc, 1, __ATOMIC_ACQ_REL) == 0)
    obj_destroy(o);
}

/* Applies fn to every reference slot inside a value of type t at p. */
static void each_ref(const sf_type *t, void *p, void (*fn)(void *)) {
  switch (t->kind) {
  case SF_STR:
  case SF_ARRAY:
  case SF_FUTURE:
  case SF_ACTOR:
  case SF_GROUP:
    fn(*(void **)p);
    return;
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      each_ref(t->fields[i].type, (char *)p + t->fields[i].offset, fn);
    return;
  default:
    return;
  }
}

void sf_value_retain(const sf_type *t, void *p) {
  if (t && p)
    each_ref(t, p, sf_retain);
}

void sf_value_release(const sf_type *t, void *p) {
  if (t && p)
    each_ref(t, p, sf_release);
}
