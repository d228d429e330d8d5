/*
 * emu.h — what the files of the host emulator share (emu.c's comment says
 * what the emulator is): the driver's types, the globals of emu.c (devices,
 * contexts, allocations, stream queues), the helpers and the entry points
 * one file calls in another.  Internal: every name here is hidden from the
 * library's exports (C_VISIBILITY_PRESET hidden); only API names are seen.
 */
#ifndef SF_EMU_H
#define SF_EMU_H
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define API __attribute__((visibility("default")))
#define EMU_VERSION "sflow-emu 1"
#define MAX_DEV 16
#define MAX_THREADS 1024


/* ================================================================ driver */

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

typedef struct Ctx {
  uint32_t magic;
  int dev;
} Ctx;
#define CTX_MAGIC 0x43545845u

#define NEED_INIT()                                 \
  do {                                              \
    if (!G.inited)                                  \
      return CUDA_ERROR_NOT_INITIALIZED;            \
  } while (0)
#define NEED_CTX()                                  \
  do {                                              \
    if (!G.inited)                                  \
      return CUDA_ERROR_NOT_INITIALIZED;            \
    if (!cur_ctx)                                   \
      return no_context(__func__);                  \
  } while (0)


enum { MEM_DEVICE, MEM_HOST, MEM_GLOBAL };
typedef struct {
  uintptr_t base;
  size_t size;
  void *map;       /* the mapping (guarded) or malloc block */
  size_t map_len;  /* 0: malloc'ed */
  int dev, kind;
} Alloc;

typedef struct Stream Stream;
struct Op;
/* Work queued on a stream in asynchronous mode, run in order when CUDA's
 * semantics force it (q_sync_*). */
typedef struct Work {
  CUresult (*run)(void *arg); /* arg: one malloc block, freed after */
  void *arg;
  uint64_t seq; /* issue order across streams (the legacy stream's implicit waits) */
  struct Work *next;
} Work;
typedef struct {
  Work *head, *tail;
} Queue;
struct Stream {
  uint32_t magic;
  int dev;
  bool blocking;      /* made without CU_STREAM_NON_BLOCKING: ordered with the legacy stream */
  Queue q;            /* asynchronous mode's queued work */
  Stream *next_live;  /* the live streams made here (Q.streams) */
  struct Op *pending; /* an NCCL collective this stream waits for (emulated NCCL) */
};
#define STREAM_MAGIC 0x5354524du
/* A valid stream, after the work queued on it before (an emulated NCCL
 * collective) has finished. */
#define NEED_STREAM(s)                         \
  do {                                         \
    if (!valid_stream(s))                      \
      return CUDA_ERROR_INVALID_HANDLE;        \
    if ((uintptr_t)(s) > 2)                    \
      stream_ready((s), true);                 \
  } while (0)
#define VALID_STREAM(s)                        \
  do {                                         \
    if (!valid_stream(s))                      \
      return CUDA_ERROR_INVALID_HANDLE;        \
  } while (0)

struct sf_emu_state {
  struct { unsigned x, y, z; } threadIdx, blockIdx, blockDim, gridDim;
  void (*sync)(void);
  void (*exit_thread)(void);
  void (*fail)(const char *what);
  int (*check_ptr)(const void *p, int index);
  unsigned long long clock;
};

typedef struct Module {
  uint32_t magic;
  int dev;
  void *so;
  struct sf_emu_state *st;
  char *path;
} Module;
#define MODULE_MAGIC 0x4d4f444cu

typedef struct Function {
  uint32_t magic;
  Module *m;
  void (*body)(void **);
  int (*check)(void **);
  unsigned (*sizes)(unsigned long *); /* NULL: a module from an older shim */
  char *name;
} Function;
#define FUNCTION_MAGIC 0x46554e43u

/* The devices and the emulator's settings (emu.c's global_init). */
typedef struct {
  pthread_once_t once;
  bool inited;
  int ndev;
  uint64_t total_mem; /* per device */
  uint64_t used[MAX_DEV];
  Ctx ctx[MAX_DEV];
  bool guard, poison, check_ptrs, trace;
  bool async; /* SFLOW_EMU_ASYNC: work queued per stream ("asynchronous mode") */
  size_t page;
} EmuGlobals;
extern EmuGlobals G;
extern __thread Ctx *cur_ctx;
CUresult no_context(const char *fn);

/* The allocations, sorted by base (emu.c, "memory"). */
typedef struct {
  pthread_mutex_t mu;
  Alloc *a;
  size_t n, cap;
} EmuAllocs;
extern EmuAllocs M;
Alloc *find_range(uintptr_t p, size_t n);
void describe(uintptr_t p, char *out, size_t n);
CUresult mem_alloc(uintptr_t *out, size_t size, int dev, int kind);
CUresult mem_free(uintptr_t p, int kind, const char *fn);
bool check_range(const char *fn, const char *what, uintptr_t p, size_t n);

/* The stream queues of the asynchronous mode (emu.c). */
typedef struct {
  pthread_mutex_t mu;  /* the queues and the stream list */
  pthread_mutex_t run; /* one queue runs at a time, in order */
  Queue legacy[MAX_DEV];
  Stream *streams;
  uint64_t seq;
  CUresult err[MAX_DEV];
} EmuQueues;
extern EmuQueues Q;
void q_push(void *s, CUresult (*run)(void *), void *arg);
void q_sync_device(int dev);
void q_sync_legacy(int dev);
void q_sync_stream(void *s);
CUresult q_error(int dev);
bool valid_stream(void *s);
bool stream_ready(void *s, bool wait);
void stream_drop(Stream *s);

/* helpers (emu.c) */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
long env_long(const char *name, long dflt);
bool env_on(const char *name, bool dflt);
double now_ms(void);
char *xstrdup(const char *s);

static inline bool valid_function(const Function *f) { return f && f->magic == FUNCTION_MAGIC; }

/* bfloat16 <-> float (cuBLAS's and NCCL's bf16). */
static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t f32_to_bf16(float f) { /* round to nearest even */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

size_t upper(uintptr_t p);
void insert_alloc(Alloc al);
const char *nccl_uses(uintptr_t base, size_t size);

/* What a kernel's module calls back (emu_launch.c): a barrier, the end of
 * a thread, a trap, a pointer parameter's check. */
void emu_sync(void);
void emu_exit_thread(void);
void emu_fail(const char *what);
int emu_check_ptr(const void *p, int index);

/* Counts one device operation (emu.c, "counting device operations"). */
enum { EMU_LAUNCH, EMU_BLAS, EMU_COPY, EMU_SET, EMU_KINDS };
void emu_count(int kind, const char *name);

#endif
