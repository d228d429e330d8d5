/*
 * fnval.c — what the runtime knows of function values.
 *
 * A function value is an int64 index into the program's table of the
 * functions and tasks it uses as values (sf_program.fn_names, emitted by
 * the compiler; codegen calls through its own table of the same order).
 * Key design choice: an index, never a code address, so the value means
 * the same in every process of a --nodes run (each maps the executable at
 * its own address) and in a journal read back by --resume; it serializes
 * as its 8 bytes.  Index 0 is "no function": the zero value of a field or
 * an array slot never assigned.
 */
#include "core.h"

int64_t sf__nfns;
const char *const *sf__fn_names;
const sf_task_desc *const *sf__fn_tasks;
const void *const *sf__fns;

_Noreturn void sf_fn_unset(const sf_loc *loc) {
  sf_runtime_error(loc, "call of a function value that was never assigned");
}
