/*
 * rtabi.h — every runtime entry point that generated code may call, with
 * the LLVM signature codegen declares it with.
 *
 * The functions themselves are declared once, in runtime/sflow.h; this
 * table is the compiler's view of them, one X-macro row each:
 *
 *   X(name, signature, attributes)
 *
 * The signature is one letter per type, the return type first: v void,
 * b bool, i i32, l i64, f f32, d f64, p any pointer.  The attributes say
 * what LLVM may assume of the call: RTA_ARRAY, it returns a valid sf_array
 * (nonnull, aligned, dereferenceable, so loops over a fresh array hoist its
 * header loads); RTA_NORETURN, it never returns (noreturn and cold).
 *
 * Codegen calls a runtime function only by its row (RT(sf_name, ...)), so a
 * name missing here does not compile, and the argument count is checked
 * against the signature at build time.  tests/abi/rtabi_test.py checks
 * every row against sflow.h's prototypes with the C compiler: the letters
 * against the parameter and return types, RTA_ARRAY against an sf_array *
 * result, RTA_NORETURN against _Noreturn; and that codegen uses every row.
 */
#ifndef SFLOWC_RTABI_H
#define SFLOWC_RTABI_H

enum { RTA_NONE = 0, RTA_ARRAY = 1, RTA_NORETURN = 2 };

/* In the order of runtime/sflow.h's sections. */
#define SF_RUNTIME_ENTRY_POINTS(X)          \
  /* objects */                             \
  X(sf_retain, "vp", RTA_NONE)              \
  X(sf_release, "vp", RTA_NONE)             \
  /* strings */                             \
  X(sf_str_empty, "p", RTA_NONE)            \
  X(sf_str_concat, "ppp", RTA_NONE)         \
  X(sf_str_append, "ppp", RTA_NONE)         \
  X(sf_str_cmp, "ipp", RTA_NONE)            \
  X(sf_str_eq, "bpp", RTA_NONE)             \
  X(sf_str_len, "lp", RTA_NONE)             \
  X(sf_str_from_bool, "pb", RTA_NONE)       \
  X(sf_str_from_i64, "pl", RTA_NONE)        \
  X(sf_str_from_f64, "pd", RTA_NONE)        \
  X(sf_str_from_f32, "pf", RTA_NONE)        \
  X(sf_fmt_f64, "pdlp", RTA_NONE)           \
  X(sf_str_to_i64, "lpp", RTA_NONE)         \
  X(sf_str_to_i32, "ipp", RTA_NONE)         \
  X(sf_str_to_f64, "dpp", RTA_NONE)         \
  X(sf_str_to_f32, "fpp", RTA_NONE)         \
  X(sf_str_to_bool, "bpp", RTA_NONE)        \
  X(sf_f64_to_i64, "ldp", RTA_NONE)         \
  X(sf_f64_to_i32, "idp", RTA_NONE)         \
  /* arrays */                              \
  X(sf_array_new, "pplp", RTA_ARRAY)        \
  X(sf_array_split, "pplp", RTA_ARRAY)      \
  X(sf_index_fail, "vllp", RTA_NORETURN)    \
  /* printing */                            \
  X(sf_print_begin, "v", RTA_NONE)          \
  X(sf_print_bool, "vb", RTA_NONE)          \
  X(sf_print_i64, "vl", RTA_NONE)           \
  X(sf_print_f64, "vd", RTA_NONE)           \
  X(sf_print_f32, "vf", RTA_NONE)           \
  X(sf_print_str, "vp", RTA_NONE)           \
  X(sf_print_value, "vpp", RTA_NONE)        \
  X(sf_print_end, "v", RTA_NONE)            \
  /* errors */                              \
  X(sf_div_zero, "vp", RTA_NORETURN)        \
  X(sf_fail, "vpp", RTA_NORETURN)           \
  X(sf_attempt, "l", RTA_NONE)              \
  /* builtins and files */                  \
  X(sf_now, "d", RTA_NONE)                  \
  X(sf_rand_seed, "vl", RTA_NONE)           \
  X(sf_rand_f32, "f", RTA_NONE)             \
  X(sf_node_id, "l", RTA_NONE)              \
  X(sf_hostname, "p", RTA_NONE)             \
  X(sf_read_file, "ppp", RTA_NONE)          \
  X(sf_write_file, "vppp", RTA_NONE)        \
  X(sf_append_file, "vppp", RTA_NONE)       \
  X(sf_file_exists, "bp", RTA_NONE)         \
  X(sf_read_lines, "ppp", RTA_ARRAY)        \
  /* tasks, actors, futures, collectives */ \
  X(sf_future_get, "vppp", RTA_NONE)        \
  X(sf_future_get_all, "pppp", RTA_ARRAY)   \
  X(sf_task_call, "pppp", RTA_NONE)         \
  X(sf_actor_spawn, "pppp", RTA_NONE)       \
  X(sf_group_spawn, "pplpp", RTA_NONE)      \
  X(sf_actor_call, "ppppp", RTA_NONE)       \
  X(sf_group_call_all, "ppppp", RTA_NONE)   \
  X(sf_group_call_any, "ppppp", RTA_NONE)   \
  X(sf_group_call_one, "pplppp", RTA_NONE)  \
  X(sf_group_len, "lp", RTA_NONE)           \
  X(sf_group_rank, "l", RTA_NONE)           \
  X(sf_group_size, "l", RTA_NONE)           \
  X(sf_allreduce_sum, "vpp", RTA_NONE)      \
  X(sf_allreduce_mean, "vpp", RTA_NONE)     \
  X(sf_broadcast, "vplp", RTA_NONE)         \
  X(sf_allgather, "ppp", RTA_ARRAY)         \
  X(sf_barrier, "vp", RTA_NONE)             \
  /* kernels, matmul */                     \
  X(sf_launch, "vplpp", RTA_NONE)           \
  X(sf_gpu_settle, "v", RTA_NONE)           \
  X(sf_matmul, "ppplllip", RTA_ARRAY)

#endif
