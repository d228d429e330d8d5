/*
 * types.c — the runtime's own type descriptors.
 *
 * The compiler emits a constant sf_type for every type a program names; the
 * runtime defines the primitive ones and builds the few it needs on its own
 * at run time ("array of X" for a.split(k), str[] for read_lines).  Those
 * are interned in a mutex-protected list so each is built once and lives
 * for the whole run: descriptors are stored in arrays that may outlive any
 * caller, so they must never be freed.
 */
#include <pthread.h>
#include <string.h>

#include "core.h"

#define PRIM(id, k, sz, nm) \
  const sf_type id = {.kind = k, .size = sz, .align = sz, .name = nm}

PRIM(sf_type_bool, SF_BOOL, 1, "bool");
PRIM(sf_type_i32, SF_I32, 4, "i32");
PRIM(sf_type_i64, SF_I64, 8, "i64");
PRIM(sf_type_f32, SF_F32, 4, "f32");
PRIM(sf_type_f64, SF_F64, 8, "f64");
PRIM(sf_type_str, SF_STR, (int32_t)sizeof(void *), "str");

bool sf__type_has_refs(const sf_type *t) {
  switch (t->kind) {
  case SF_STR:
  case SF_ARRAY:
  case SF_FUTURE:
  case SF_ACTOR:
  case SF_GROUP:
  case SF_MAP:
  case SF_TENSOR: /* issue 16 */
    return true;
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      if (sf__type_has_refs(t->fields[i].type))
        return true;
    return false;
  default:
    return false;
  }
}

/* Two descriptors describe the same type (names decide for structs, actors
 * and groups, which the language identifies by name). */
static bool same_type(const sf_type *a, const sf_type *b) {
  if (a == b)
    return true;
  if (a->kind != b->kind)
    return false;
  switch (a->kind) {
  case SF_ARRAY:
  case SF_FUTURE:
    return same_type(a->elem, b->elem);
  case SF_MAP:
    return same_type(a->elem, b->elem) && same_type(a->fields[0].type, b->fields[0].type);
  case SF_STRUCT:
  case SF_ACTOR:
  case SF_GROUP:
    return a->name && b->name && strcmp(a->name, b->name) == 0;
  default:
    return true;
  }
}

typedef struct interned {
  sf_type type;
  struct interned *next;
  char name[];
} interned;

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static interned *intern_list;

static interned *array_type_new(const sf_type *elem) {
  const char *en = elem->name ? elem->name : "?";
  size_t n = strlen(en);
  interned *it = sf_alloc(sizeof *it + n + 3);
  memcpy(it->name, en, n);
  memcpy(it->name + n, "[]", 3);
  it->type = (sf_type){.kind = SF_ARRAY,
                       .size = (int32_t)sizeof(void *),
                       .align = (int32_t)sizeof(void *),
                       .elem = elem,
                       .name = it->name};
  return it;
}

const sf_type *sf__array_type(const sf_type *elem) {
  /* Allocate before taking the lock: running out of memory is a runtime
   * error that may longjmp out of a task, which must not leave the lock
   * held. */
  interned *fresh = array_type_new(elem);
  pthread_mutex_lock(&intern_lock);
  interned *it = intern_list;
  while (it && !same_type(it->type.elem, elem))
    it = it->next;
  if (!it) {
    it = fresh;
    it->next = intern_list;
    intern_list = it;
    fresh = NULL;
  }
  pthread_mutex_unlock(&intern_lock);
  sf_free(fresh);
  return &it->type;
}

/* Map descriptors made at run time (a std C function returning a map it
 * builds), interned in a list of their own like the array ones. */
typedef struct map_interned {
  sf_type type;
  sf_field key;
  struct map_interned *next;
  char name[];
} map_interned;

static map_interned *map_list;

const sf_type *sf__map_type(const sf_type *key, const sf_type *val) {
  const char *kn = key->name ? key->name : "?", *vn = val->name ? val->name : "?";
  size_t n = strlen(kn) + strlen(vn) + 8;
  map_interned *fresh = sf_alloc(sizeof *fresh + n); /* before the lock, as above */
  snprintf(fresh->name, n, "map<%s, %s>", kn, vn);
  fresh->key = (sf_field){.name = "key", .offset = 0, .type = key};
  fresh->type = (sf_type){.kind = SF_MAP, .size = (int32_t)sizeof(void *),
                          .align = (int32_t)sizeof(void *), .nfields = 1, .elem = val,
                          .fields = &fresh->key, .name = fresh->name};
  pthread_mutex_lock(&intern_lock);
  map_interned *it = map_list;
  while (it && !same_type(&it->type, &fresh->type))
    it = it->next;
  if (!it) {
    it = fresh;
    it->next = map_list;
    map_list = it;
    fresh = NULL;
  }
  pthread_mutex_unlock(&intern_lock);
  sf_free(fresh);
  return &it->type;
}

void *sf__field(const sf_type *t, void *base, const char *name, int kind, const sf_loc *loc) {
  if (t && t->kind == SF_STRUCT)
    for (int32_t i = 0; i < t->nfields; i++)
      if (!strcmp(t->fields[i].name, name)) {
        if (t->fields[i].type->kind != kind)
          break;
        return (char *)base + t->fields[i].offset;
      }
  sf_runtime_error(loc, "internal error: the standard library's struct %s has no field '%s' "
                   "of the kind the runtime fills (the std module and the runtime disagree)",
                   t && t->name ? t->name : "?", name);
}
