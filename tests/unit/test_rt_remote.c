/* worker_tasks.c: a worker names tasks by descriptor offset and name, and follows
 * a peer's offset only when it checks out (never a crash on a bad one). */
#include <stdint.h>

#include "cluster.h"
#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_remote", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static void thunk(void *args, void *res) { (void)args, (void)res; }
static const sf_field FIELDS[] = {{.name = "x", .offset = 0, .type = &sf_type_i64}};
static const sf_type ARGS = {
    .kind = SF_STRUCT, .size = 8, .align = 8, .nfields = 1, .fields = FIELDS, .name = "work"};
static const sf_task_desc WORK = {
    .name = "work", .thunk = thunk, .args = &ARGS, .result = &sf_type_i64, .retry = 2};
static const char not_a_desc[64] = "work";

static uint32_t off_of(const void *p) {
  return (uint32_t)(int32_t)((const char *)p - (const char *)&sf_program_desc);
}

static void test_find_task(void) {
  char err[256];
  const uint8_t *name = (const uint8_t *)"work";
  CU_ASSERT_PTR_EQUAL(sf__remote_find_task(off_of(&WORK), name, 4, err, sizeof err), &WORK);
  /* Right place, wrong name (or a prefix of it). */
  CU_ASSERT_PTR_NULL(sf__remote_find_task(off_of(&WORK), (const uint8_t *)"worm", 4, err,
                                          sizeof err));
  CU_ASSERT(strstr(err, "is not 'worm'") != NULL);
  CU_ASSERT_PTR_NULL(sf__remote_find_task(off_of(&WORK), name, 3, err, sizeof err));
  /* Offsets outside the executable, misaligned, or at something that is
   * not a descriptor. */
  CU_ASSERT_PTR_NULL(sf__remote_find_task(0x7ffffff0u, name, 4, err, sizeof err));
  CU_ASSERT(strstr(err, "no task descriptor at offset") != NULL);
  CU_ASSERT_PTR_NULL(sf__remote_find_task(0x80000000u, name, 4, err, sizeof err));
  CU_ASSERT_PTR_NULL(sf__remote_find_task(off_of(&WORK) + 1, name, 4, err, sizeof err));
  CU_ASSERT_PTR_NULL(sf__remote_find_task(off_of(not_a_desc), name, 4, err, sizeof err));
  CU_ASSERT_PTR_NULL(sf__remote_find_task(off_of(&sf_program_desc), name, 4, err, sizeof err));
}

/* Actors (ractor_worker.c): the class and its methods are named the same way. */
static void mthunk(void *state, void *args, void *res) { (void)state, (void)args, (void)res; }
static const sf_type NOARGS = {.kind = SF_STRUCT, .size = 0, .align = 1, .name = "init"};
static const sf_method_desc INIT = {.name = "Acc.init", .thunk = mthunk, .args = &NOARGS};
static const sf_method_desc ADD = {
    .name = "Acc.add", .thunk = mthunk, .args = &ARGS, .result = &sf_type_i64};
static const sf_actor_desc ACC = {.name = "Acc", .state = &ARGS, .init = &INIT, .restarts = 1};
static const sf_actor_desc BROKEN = {.name = "Bad", .state = &ARGS,
                                     .init = (const sf_method_desc *)not_a_desc};

static void test_find_actor_and_method(void) {
  char err[256];
  CU_ASSERT_PTR_EQUAL(sf__remote_find_class(off_of(&ACC), (const uint8_t *)"Acc", 3, err,
                                            sizeof err), &ACC);
  CU_ASSERT_PTR_EQUAL(sf__remote_find_method(off_of(&ADD), (const uint8_t *)"Acc.add", 7, err,
                                             sizeof err), &ADD);
  /* A method named as a class, a class at a method's place, a bad init. */
  CU_ASSERT_PTR_NULL(sf__remote_find_method(off_of(&ADD), (const uint8_t *)"Acc", 3, err,
                                            sizeof err));
  CU_ASSERT(strstr(err, "is not 'Acc'") != NULL);
  CU_ASSERT_PTR_NULL(sf__remote_find_class(off_of(&ADD), (const uint8_t *)"Acc.add", 7, err,
                                           sizeof err));
  CU_ASSERT_PTR_NULL(sf__remote_find_class(off_of(&BROKEN), (const uint8_t *)"Bad", 3, err,
                                           sizeof err));
  CU_ASSERT(strstr(err, "is damaged") != NULL);
  CU_ASSERT_PTR_NULL(sf__remote_find_method(0x7ffffff0u, (const uint8_t *)"Acc.add", 7, err,
                                            sizeof err));
  CU_ASSERT(strstr(err, "no method descriptor at offset") != NULL);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {{"find_task", test_find_task},
                                  {"find_actor_and_method", test_find_actor_and_method},
                                  {NULL, NULL}};
  return rt_run("rt_remote", tests, argc, argv);
}
