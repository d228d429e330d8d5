/*
 * cpu_features.h — the CPU features an sflow executable may need, in one
 * table that both sides read: sflowc (compiler/target.c) asks LLVM which of
 * them the chosen target enables and records those in the executable; the
 * head of a --nodes run (runtime/hostcheck.c) looks each one up in every
 * host's /proc/cpuinfo before it deploys.
 *
 * Each row is X(llvm, cpuinfo, emitted):
 *   llvm     LLVM's name (what --target-features takes: "+sse4.2")
 *   cpuinfo  the Linux kernel's name in /proc/cpuinfo ("sse4_2"; on
 *            aarch64 the "Features" line, "asimd")
 *   emitted  1 when LLVM generates the instructions from ordinary code
 *            (vectorised loops, bit tricks), so a CPU that has it produces
 *            code that needs it; 0 for features only intrinsics use, which
 *            sflow programs cannot call: those count only when named in
 *            --target-features.  This keeps a -march=native build from
 *            demanding, say, AMX or SHA on every worker when no such
 *            instruction is in the file.
 *
 * Key design choice: the table lists what is above the architecture's
 * baseline only (x86-64: SSE2, CMOV, CX8, FXSR, MMX; aarch64: FP and
 * Advanced SIMD), which every host of that architecture has.
 */
#ifndef SF_CPU_FEATURES_H
#define SF_CPU_FEATURES_H

#define SF_CPU_FEATURES_X86(X)                  \
  X("sse3", "pni", 1)                           \
  X("ssse3", "ssse3", 1)                        \
  X("sse4.1", "sse4_1", 1)                      \
  X("sse4.2", "sse4_2", 1)                      \
  X("popcnt", "popcnt", 1)                      \
  X("cx16", "cx16", 1)                          \
  X("sahf", "lahf_lm", 1)                       \
  X("avx", "avx", 1)                            \
  X("avx2", "avx2", 1)                          \
  X("bmi", "bmi1", 1)                           \
  X("bmi2", "bmi2", 1)                          \
  X("f16c", "f16c", 1)                          \
  X("fma", "fma", 1)                            \
  X("lzcnt", "abm", 1)                          \
  X("movbe", "movbe", 1)                        \
  X("xsave", "xsave", 0)                        \
  X("avx512f", "avx512f", 1)                    \
  X("avx512bw", "avx512bw", 1)                  \
  X("avx512cd", "avx512cd", 1)                  \
  X("avx512dq", "avx512dq", 1)                  \
  X("avx512vl", "avx512vl", 1)                  \
  X("avx512ifma", "avx512ifma", 1)              \
  X("avx512vbmi", "avx512vbmi", 1)              \
  X("avx512vbmi2", "avx512_vbmi2", 1)           \
  X("avx512vnni", "avx512_vnni", 1)             \
  X("avx512bitalg", "avx512_bitalg", 1)         \
  X("avx512vpopcntdq", "avx512_vpopcntdq", 1)   \
  X("avx512bf16", "avx512_bf16", 1)             \
  X("avx512fp16", "avx512_fp16", 1)             \
  X("avxvnni", "avx_vnni", 1)                   \
  X("gfni", "gfni", 1)                          \
  X("prfchw", "3dnowprefetch", 0)               \
  X("sse4a", "sse4a", 0)                        \
  X("fma4", "fma4", 1)                          \
  X("xop", "xop", 1)                            \
  X("tbm", "tbm", 1)                            \
  X("avx512vp2intersect", "avx512_vp2intersect", 0) \
  X("aes", "aes", 0)                            \
  X("pclmul", "pclmulqdq", 0)                   \
  X("vaes", "vaes", 0)                          \
  X("vpclmulqdq", "vpclmulqdq", 0)              \
  X("sha", "sha_ni", 0)                         \
  X("adx", "adx", 0)                            \
  X("rdrnd", "rdrand", 0)                       \
  X("rdseed", "rdseed", 0)                      \
  X("amx-tile", "amx_tile", 0)                  \
  X("amx-int8", "amx_int8", 0)                  \
  X("amx-bf16", "amx_bf16", 0)

#define SF_CPU_FEATURES_AARCH64(X) \
  X("lse", "atomics", 1)           \
  X("rdm", "asimdrdm", 1)          \
  X("rcpc", "lrcpc", 1)            \
  X("dotprod", "asimddp", 1)       \
  X("fullfp16", "fphp", 1)         \
  X("jsconv", "jscvt", 1)          \
  X("complxnum", "fcma", 1)        \
  X("sve", "sve", 1)               \
  X("sve2", "sve2", 1)             \
  X("i8mm", "i8mm", 1)             \
  X("bf16", "bf16", 1)             \
  X("crc", "crc32", 0)             \
  X("aes", "aes", 0)               \
  X("sha2", "sha2", 0)             \
  X("sha3", "sha3", 0)             \
  X("sm4", "sm4", 0)

#endif
