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

#include <stddef.h>

#include "sflow.h" /* runtime/ */

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
  X(sf_str_split, "pppp", RTA_ARRAY)        \
  X(sf_str_split_ws, "pp", RTA_ARRAY)       \
  X(sf_str_split_next, "ppppp", RTA_NONE)   \
  X(sf_str_slice, "ppllp", RTA_NONE)        \
  X(sf_str_at, "pplp", RTA_NONE)            \
  X(sf_str_find, "lpp", RTA_NONE)           \
  X(sf_str_strip, "pp", RTA_NONE)           \
  X(sf_str_lower, "pp", RTA_NONE)           \
  X(sf_str_upper, "pp", RTA_NONE)           \
  X(sf_str_replace, "ppppp", RTA_NONE)      \
  X(sf_str_starts_with, "bpp", RTA_NONE)    \
  X(sf_str_ends_with, "bpp", RTA_NONE)      \
  X(sf_str_join, "ppp", RTA_NONE)           \
  X(sf_str_ord, "lpp", RTA_NONE)            \
  X(sf_str_chr, "plp", RTA_NONE)            \
  X(sf_str_codepoints, "ppp", RTA_ARRAY)    \
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
  X(sf_array_push, "vppp", RTA_NONE)        \
  X(sf_array_pop, "vppp", RTA_NONE)         \
  X(sf_array_concat, "ppppp", RTA_ARRAY)    \
  X(sf_array_slice, "pppllp", RTA_ARRAY)    \
  X(sf_array_sort, "pppp", RTA_ARRAY)       \
  X(sf_array_argsort, "pppp", RTA_ARRAY)    \
  X(sf_index_fail, "vllp", RTA_NORETURN)    \
  /* maps, function values */               \
  X(sf_map_new, "pp", RTA_NONE)             \
  X(sf_map_len, "lp", RTA_NONE)             \
  X(sf_map_at, "pppp", RTA_NONE)            \
  X(sf_map_put, "pppp", RTA_NONE)           \
  X(sf_map_get, "pppp", RTA_NONE)           \
  X(sf_map_has, "bpp", RTA_NONE)            \
  X(sf_map_remove, "bpp", RTA_NONE)         \
  X(sf_map_keys, "ppp", RTA_ARRAY)          \
  X(sf_map_values, "ppp", RTA_ARRAY)        \
  X(sf_fn_unset, "vp", RTA_NORETURN)        \
  /* tensors (the nn layer) */              \
  X(sf_tensor_binop, "pippp", RTA_NONE)     \
  X(sf_tensor_scalar, "pipfbp", RTA_NONE)   \
  X(sf_tensor_neg, "ppp", RTA_NONE)         \
  X(sf_tensor_index, "pplp", RTA_NONE)      \
  X(sf_tensor_slice, "ppllp", RTA_NONE)     \
  X(sf_allreduce_tensor, "vpbp", RTA_NONE)  \
  X(sf_allreduce_tensors, "vpbp", RTA_NONE) \
  X(sf_broadcast_tensor, "vplp", RTA_NONE)  \
  X(sf_broadcast_tensors, "vplp", RTA_NONE) \
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
  X(sf_rand_int, "lllp", RTA_NONE)          \
  X(sf_randn_f32, "f", RTA_NONE)            \
  X(sf_node_id, "l", RTA_NONE)              \
  X(sf_hostname, "p", RTA_NONE)             \
  X(sf_read_file, "ppp", RTA_NONE)          \
  X(sf_write_file, "vppp", RTA_NONE)        \
  X(sf_append_file, "vppp", RTA_NONE)       \
  X(sf_file_exists, "bp", RTA_NONE)         \
  X(sf_read_lines, "ppp", RTA_ARRAY)        \
  /* tasks, actors, futures, collectives */ \
  X(sf_future_get, "vppp", RTA_NONE)        \
  X(sf_future_error, "ppp", RTA_NONE)       \
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
  X(sf_matmul, "ppplllip", RTA_ARRAY)       \
  /* the program (sf__program_links_nn names it, never calls it) */ \
  X(sf__nn_install, "v", RTA_NONE)

/* The runtime's structs that codegen.c spells out by hand (init_types, its
 * descriptors, str_literal, gen_program_desc), field by field as
 * runtime/sflow.h lays them out on LP64: a field added or moved there stops
 * the build here instead of shifting every field after it at run time. */
#define SF_AT(type, field, off)                                                      \
  _Static_assert(offsetof(type, field) == (off),                                     \
                 #type "." #field " moved in runtime/sflow.h: update codegen.c's " #type)
#define SF_SIZE(type, n)                                                             \
  _Static_assert(sizeof(type) == (n), "runtime/sflow.h changed the size of " #type)
SF_AT(sf_obj, rc, 0); SF_AT(sf_obj, tag, 8); SF_AT(sf_obj, flags, 12); SF_SIZE(sf_obj, 16);
SF_AT(sf_str, len, 16); SF_AT(sf_str, data, 24);
SF_AT(sf_array, len, 16); SF_AT(sf_array, elem, 24); SF_AT(sf_array, data, 32);
SF_AT(sf_array, dev, 40); SF_AT(sf_array, where, 48); SF_AT(sf_array, gpu, 52);
SF_AT(sf_array, cap, 56); SF_SIZE(sf_array, 64);
SF_AT(sf_loc, line, 8); SF_AT(sf_loc, col, 12); SF_SIZE(sf_loc, 16);
SF_AT(sf_type, kind, 0); SF_AT(sf_type, size, 4); SF_AT(sf_type, align, 8);
SF_AT(sf_type, nfields, 12); SF_AT(sf_type, elem, 16); SF_AT(sf_type, fields, 24);
SF_AT(sf_type, name, 32); SF_SIZE(sf_type, 40);
SF_AT(sf_field, offset, 8); SF_AT(sf_field, type, 16); SF_SIZE(sf_field, 24);
SF_AT(sf_task_desc, thunk, 8); SF_AT(sf_task_desc, args, 16); SF_AT(sf_task_desc, result, 24);
SF_AT(sf_task_desc, retry, 32); SF_AT(sf_task_desc, cpus, 40); SF_AT(sf_task_desc, gpus, 48);
SF_AT(sf_task_desc, timeout, 56); SF_SIZE(sf_task_desc, 64);
SF_AT(sf_method_desc, thunk, 8); SF_AT(sf_method_desc, args, 16);
SF_AT(sf_method_desc, result, 24); SF_SIZE(sf_method_desc, 32);
SF_AT(sf_actor_desc, state, 8); SF_AT(sf_actor_desc, init, 16); SF_AT(sf_actor_desc, restarts, 24);
SF_AT(sf_actor_desc, checkpoint_every, 28); SF_AT(sf_actor_desc, replicas, 32);
SF_AT(sf_actor_desc, checkpoint_keep, 36); SF_AT(sf_actor_desc, cpus, 40);
SF_AT(sf_actor_desc, gpus, 48); SF_SIZE(sf_actor_desc, 56);
SF_AT(sf_kernel_desc, file, 8); SF_AT(sf_kernel_desc, cuda, 16); SF_AT(sf_kernel_desc, entry, 24);
SF_AT(sf_kernel_desc, args, 32); SF_AT(sf_kernel_desc, cpu, 40); SF_AT(sf_kernel_desc, writes, 48);
SF_SIZE(sf_kernel_desc, 56);
SF_AT(sf_param, kind, 8); SF_AT(sf_param, has_default, 12); SF_AT(sf_param, def, 16);
SF_AT(sf_param, def_text, 24); SF_AT(sf_param, help, 32); SF_SIZE(sf_param, 40);
SF_SIZE(sf_value, 8);
SF_AT(sf_program, name, 8); SF_AT(sf_program, source, 16); SF_AT(sf_program, nparams, 24);
SF_AT(sf_program, params, 32); SF_AT(sf_program, main_fn, 40); SF_AT(sf_program, target_cpu, 48);
SF_AT(sf_program, target_needs, 56); SF_AT(sf_program, nfns, 64);
SF_AT(sf_program, fn_names, 72); SF_AT(sf_program, fn_tasks, 80);
SF_AT(sf_program, fns, 88); SF_AT(sf_program, source_dir, 96); SF_SIZE(sf_program, 104);
#undef SF_AT
#undef SF_SIZE

#endif
