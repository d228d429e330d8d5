/*
 * kinds.h — the op kinds of std.nn, written once for the C runtime and for
 * the CUDA C of the kernels/ files (docs/nn.md, "Code layout").
 *
 * Key design choice: every list is an X-macro, expanded here into the
 * enum both sides use and, by each side, into its kernel tables and
 * switches, one entry per kind.  A kind added here without a CPU loop or a
 * GPU device function is a compile error on that side (the tables name
 * `<side>_<name>` for every kind), never a silent fall-through to some
 * other kind.  The file is plain C with no includes: cmake/embed.cmake
 * inlines it where a kernel file includes it by name, so NVRTC sees
 * one self-contained program.
 */
#ifndef SF_NN_KINDS_H
#define SF_NN_KINDS_H

/* X(KIND, name, value): the elementwise binary ops; the values are
 * sflow.h's SF_TOP_ADD .. SF_TOP_DIV, which generated code passes. */
#define SF_NN_BINARY_KINDS(X) X(ADD, add, 1) X(SUB, sub, 2) X(MUL, mul, 3) X(DIV, div, 4)

/* X(KIND, name, uses_output): the activations; uses_output says whether
 * the backward rule reads the output (saved) rather than the input. */
#define SF_NN_UNARY_KINDS(X)                                                                  \
  X(RELU, relu, 0) X(GELU, gelu, 0) X(SIGMOID, sigmoid, 1) X(TANH, tanh, 1) X(EXP, exp, 1)   \
  X(LOG, log, 0) X(GELU_TANH, gelu_tanh, 0) X(SILU, silu, 0)

/* X(KIND, name): the reductions; SUMSQ (the sum of squares) serves only
 * clip_grad_norm on the device. */
#define SF_NN_REDUCE_KINDS(X) X(SUM, sum) X(MEAN, mean) X(MAX, max) X(SUMSQ, sumsq)

#define SF_NN_ENUM_B(K, name, v) SF__B_##K = v,
#define SF_NN_ENUM_U(K, name, out) SF__U_##K,
#define SF_NN_ENUM_R(K, name) SF__R_##K,
enum { SF_NN_BINARY_KINDS(SF_NN_ENUM_B) SF__B_END };
enum { SF_NN_UNARY_KINDS(SF_NN_ENUM_U) SF__U_COUNT };
enum { SF_NN_REDUCE_KINDS(SF_NN_ENUM_R) SF__R_COUNT };
#undef SF_NN_ENUM_B
#undef SF_NN_ENUM_U
#undef SF_NN_ENUM_R

#endif
