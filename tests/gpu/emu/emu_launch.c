/*
 * emu_launch.c — cuLaunchKernel: a block's threads as fibers switched at
 * __syncthreads() and thread exit, blocks one after another, a crash inside
 * a kernel named by kernel, block and thread.
 */
#include "emu.h"

/* =============================================================== fibers */

enum { F_NEW, F_RUN, F_WAIT, F_DONE };
typedef struct {
  void *sp;
  int state;
  int stack;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
} Fiber;

static struct {
  pthread_mutex_t mu; /* one launch at a time */
  Fiber f[MAX_THREADS];
  char *stack[MAX_THREADS]; /* lowest usable address; a guard page below */
  int nstacks;
  int freelist[MAX_THREADS], nfree;
  size_t stack_size;
  void *sched_sp;
#if !defined(__x86_64__)
  ucontext_t sched_uc;
#endif
  int cur, nthreads; /* cur: the running fiber's place in the sweep */
  bool reverse;
  unsigned bx, by;
  Function *fn;
  void **params;
  struct sf_emu_state *st;
  volatile sig_atomic_t running;
  pthread_t thread;
  bool failed;
  char failmsg[600];
} L = {.mu = PTHREAD_MUTEX_INITIALIZER};

#if defined(__x86_64__)
/* sf_emu_swap(&save, to): saves the callee-saved registers on this stack,
 * stores the stack pointer in *save, and resumes the context whose stack
 * pointer is `to`.  (Kernels never change MXCSR or the x87 control word,
 * so those are not switched.) */
__asm__(".text\n"
        ".type sf_emu_swap,@function\n"
        "sf_emu_swap:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size sf_emu_swap, .-sf_emu_swap\n"
        ".type sf_emu_fiber_entry,@function\n"
        "sf_emu_fiber_entry:\n"
        "  movq %r12, %rdi\n  callq *%r13\n  ud2\n"
        ".size sf_emu_fiber_entry, .-sf_emu_fiber_entry\n");
void sf_emu_swap(void **save, void *to) __asm__("sf_emu_swap");
void sf_emu_fiber_entry(void) __asm__("sf_emu_fiber_entry");
#endif

static void fiber_main(void *arg);

static void fiber_init(int i, char *stack_lo) {
  Fiber *f = &L.f[i];
#if defined(__x86_64__)
  uint64_t *top = (uint64_t *)(((uintptr_t)stack_lo + L.stack_size) & ~(uintptr_t)15);
  uint64_t *sp = top - 2; /* A: 16-aligned, where sp lands after `ret` */
  sp[-1] = (uint64_t)(uintptr_t)sf_emu_fiber_entry;
  sp[-2] = 0;                             /* rbp */
  sp[-3] = 0;                             /* rbx */
  sp[-4] = (uint64_t)(uintptr_t)f;        /* r12: the argument */
  sp[-5] = (uint64_t)(uintptr_t)fiber_main; /* r13: the function */
  sp[-6] = 0;                             /* r14 */
  sp[-7] = 0;                             /* r15 */
  f->sp = &sp[-7];
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack_lo;
  f->uc.uc_stack.ss_size = L.stack_size;
  f->uc.uc_link = NULL;
  makecontext(&f->uc, (void (*)(void))fiber_main, 1, f); /* pointer fits on LP64 targets */
#endif
}

static void to_fiber(int i) {
#if defined(__x86_64__)
  sf_emu_swap(&L.sched_sp, L.f[i].sp);
#else
  swapcontext(&L.sched_uc, &L.f[i].uc);
#endif
}

static void to_scheduler(Fiber *f) {
#if defined(__x86_64__)
  sf_emu_swap(&f->sp, L.sched_sp);
#else
  swapcontext(&f->uc, &L.sched_uc);
#endif
}

/* Leaves fiber f for fiber t (both of the running block). */
static void switch_fiber(Fiber *f, Fiber *t) {
#if defined(__x86_64__)
  sf_emu_swap(&f->sp, t->sp);
#else
  swapcontext(&f->uc, &t->uc);
#endif
}

static void set_thread_index(int i);
static char *new_stack(void);

/* The next thread of this sweep after the current one that can run (one
 * not started yet gets a stack first), made current; NULL when there is
 * none (the scheduler then ends the sweep). */
static Fiber *next_fiber(void) {
  for (int j = L.cur + 1; j < L.nthreads; j++) {
    Fiber *t = &L.f[j];
    if (t->state == F_NEW) {
      if (!L.nfree) {
        char *s = new_stack();
        if (!s)
          return NULL; /* the scheduler reports it */
        L.stack[L.nstacks] = s;
        L.freelist[L.nfree++] = L.nstacks++;
      }
      t->stack = L.freelist[--L.nfree];
      fiber_init(j, L.stack[t->stack]);
      t->state = F_RUN;
    }
    if (t->state == F_RUN) {
      L.cur = j;
      set_thread_index(j);
      return t;
    }
  }
  return NULL;
}

static void release_stack(Fiber *f);

/* Leaves fiber f (waiting or done) for the next runnable thread, else for
 * the scheduler: a barrier costs one switch per thread, not two.  A done
 * fiber's stack is given back only once the next thread has its own (it
 * is still running on it until the switch). */
static void leave(Fiber *f) {
  Fiber *t = next_fiber();
  if (f->state == F_DONE)
    release_stack(f);
  if (t)
    switch_fiber(f, t);
  else
    to_scheduler(f);
}

/* Fibers are numbered in the order a sweep runs them; SFLOW_EMU_ORDER=
 * reverse runs a block's threads last to first, so that a result which
 * depends on the order (a missing barrier) shows as a difference. */
static void set_thread_index(int pos) {
  unsigned bx = L.bx, by = L.by;
  int i = L.reverse ? L.nthreads - 1 - pos : pos;
  L.st->threadIdx.x = (unsigned)i % bx;
  L.st->threadIdx.y = ((unsigned)i / bx) % by;
  L.st->threadIdx.z = (unsigned)i / (bx * by);
}

/* Gives a finished thread's stack back (it is reused only once this
 * fiber has switched away for good). */
static void release_stack(Fiber *f) {
  L.freelist[L.nfree++] = f->stack;
  f->stack = -1;
}

/* A fiber runs its thread, then, while the next thread of the block has
 * not started, that one on the same stack: a block without barriers costs
 * a call per thread, not a switch. */
static void fiber_main(void *arg) {
  Fiber *f = arg;
  for (;;) {
    L.fn->body(L.params);
    f = &L.f[L.cur];
    f->state = F_DONE;
    int j = L.cur + 1;
    if (j < L.nthreads && L.f[j].state == F_NEW) {
      L.f[j].stack = f->stack;
      f->stack = -1;
      L.f[j].state = F_RUN;
      L.cur = j;
      set_thread_index(j);
      continue;
    }
    leave(f);
    abort(); /* never resumed */
  }
}

void emu_sync(void) {
  Fiber *f = &L.f[L.cur];
  f->state = F_WAIT;
  leave(f); /* whoever resumes this fiber makes it current first */
}
void emu_exit_thread(void) {
  Fiber *f = &L.f[L.cur];
  f->state = F_DONE;
  leave(f);
  abort();
}
void emu_fail(const char *what) {
  if (!L.failed)
    snprintf(L.failmsg, sizeof L.failmsg, "%s%s",
             strncmp(what, "__trap", 6) ? "unsupported on the emulator: inline PTX " : "",
             strncmp(what, "__trap", 6) ? what : "__trap() was called");
  L.failed = true;
  Fiber *f = &L.f[L.cur];
  f->state = F_DONE;
  release_stack(f);
  to_scheduler(f);
  abort();
}

int emu_check_ptr(const void *p, int index) {
  if (!p || !G.check_ptrs)
    return 0;
  uintptr_t a = (uintptr_t)p;
  pthread_mutex_lock(&M.mu);
  Alloc *al = find_range(a, 0);
  bool ok = al && (al->kind != MEM_DEVICE || al->dev == L.fn->m->dev);
  char why[200] = "";
  if (!ok) {
    if (al)
      snprintf(why, sizeof why, "memory of device %d, not of device %d", al->dev, L.fn->m->dev);
    else
      describe(a, why, sizeof why);
  }
  pthread_mutex_unlock(&M.mu);
  if (!ok)
    say("kernel '%s': pointer parameter %d (%p) is %s", L.fn->name, index, p, why);
  return ok ? 0 : 1;
}

static char *new_stack(void) {
  size_t len = L.stack_size + G.page;
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  mprotect(m, G.page, PROT_NONE);
  return m + G.page;
}

/* ---------------------------------------------------- crashes in a kernel */

static struct sigaction old_segv, old_bus;
static void install_handlers(void);
static __thread char *alt_stack;

static void on_fault(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  if (L.running && pthread_equal(pthread_self(), L.thread)) {
    uintptr_t a = (uintptr_t)si->si_addr;
    char why[200] = "an address outside device memory";
    for (int i = 0; i < L.nstacks; i++)
      if (a >= (uintptr_t)L.stack[i] - G.page && a < (uintptr_t)L.stack[i])
        snprintf(why, sizeof why, "a stack overflow of the thread (SFLOW_EMU_STACK_KB=%zu)",
                 L.stack_size >> 10);
    if (pthread_mutex_trylock(&M.mu) == 0) {
      size_t i = upper(a);
      if (i > 0 && a >= M.a[i - 1].base + M.a[i - 1].size &&
          a - (M.a[i - 1].base + M.a[i - 1].size) < 2 * G.page)
        snprintf(why, sizeof why, "%zu bytes past the end of the allocation of %zu bytes at %#lx",
                 (size_t)(a - (M.a[i - 1].base + M.a[i - 1].size)), M.a[i - 1].size,
                 (unsigned long)M.a[i - 1].base);
      pthread_mutex_unlock(&M.mu);
    }
    char msg[800];
    int n = snprintf(msg, sizeof msg,
                     "sflow-emu: kernel '%s' crashed (%s) in block (%u,%u,%u) thread (%u,%u,%u) "
                     "at address %p: %s\n",
                     L.fn->name, sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", L.st->blockIdx.x,
                     L.st->blockIdx.y, L.st->blockIdx.z, L.st->threadIdx.x, L.st->threadIdx.y,
                     L.st->threadIdx.z, si->si_addr, why);
    if (n > 0)
      (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  }
  /* The previous disposition, and the fault again (default: the process
   * dies of the signal). */
  sigaction(sig, sig == SIGSEGV ? &old_segv : &old_bus, NULL);
}

static void install_fault_handler(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (!alt_stack) {
    size_t n = 64 * 1024;
    alt_stack = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (alt_stack != MAP_FAILED) {
      stack_t ss = {.ss_sp = alt_stack, .ss_size = n, .ss_flags = 0};
      stack_t old;
      if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE))
        sigaltstack(&ss, NULL);
    }
  }
  pthread_once(&once, install_handlers);
}
static void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
}

/* ---------------------------------------------------------------- launch */

static CUresult run_grid(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, void **params) {
  int nt = (int)(bx * by * bz);
  struct sf_emu_state *st = f->m->st;
  L.fn = f;
  L.params = params;
  L.st = st;
  L.bx = bx;
  L.by = by;
  L.nthreads = nt;
  L.failed = false;
  st->gridDim.x = gx, st->gridDim.y = gy, st->gridDim.z = gz;
  st->blockDim.x = bx, st->blockDim.y = by, st->blockDim.z = bz;
  CUresult rc = CUDA_SUCCESS;
  L.thread = pthread_self();
  L.running = 1;
  for (unsigned z = 0; z < gz && rc == CUDA_SUCCESS; z++)
    for (unsigned y = 0; y < gy && rc == CUDA_SUCCESS; y++)
      for (unsigned x = 0; x < gx && rc == CUDA_SUCCESS; x++) {
        st->blockIdx.x = x, st->blockIdx.y = y, st->blockIdx.z = z;
        L.nfree = 0;
        for (int s = L.nstacks - 1; s >= 0; s--)
          L.freelist[L.nfree++] = s;
        for (int i = 0; i < nt; i++)
          L.f[i].state = F_NEW, L.f[i].stack = -1;
        for (;;) {
          for (int i = 0; i < nt; i++) {
            Fiber *fb = &L.f[i];
            if (fb->state == F_NEW) {
              if (!L.nfree) {
                char *s = new_stack();
                if (!s) {
                  say("kernel '%s': no memory for the stack of thread %d", f->name, i);
                  rc = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
                  goto out;
                }
                L.stack[L.nstacks] = s;
                L.freelist[L.nfree++] = L.nstacks++;
              }
              fb->stack = L.freelist[--L.nfree];
              fiber_init(i, L.stack[fb->stack]);
              fb->state = F_RUN;
            }
            if (fb->state != F_RUN)
              continue;
            L.cur = i;
            set_thread_index(i);
            to_fiber(i);
            if (L.failed) {
              say("kernel '%s' (block (%u,%u,%u) thread (%u,%u,%u)): %s", f->name, x, y, z,
                  st->threadIdx.x, st->threadIdx.y, st->threadIdx.z, L.failmsg);
              rc = CUDA_ERROR_LAUNCH_FAILED;
              goto out;
            }
            i = L.cur; /* the fiber may have run the threads after i too */
          }
          int waiting = 0, done = 0;
          for (int i = 0; i < nt; i++)
            waiting += L.f[i].state == F_WAIT, done += L.f[i].state == F_DONE;
          if (!waiting)
            break;
          if (done) {
            say("kernel '%s': deadlock in block (%u,%u,%u): %d of its %d threads wait at "
                "__syncthreads() while %d have exited (a barrier that not every thread of the "
                "block reaches)",
                f->name, x, y, z, waiting, nt, done);
            rc = CUDA_ERROR_LAUNCH_FAILED;
            goto out;
          }
          for (int i = 0; i < nt; i++)
            L.f[i].state = F_RUN;
        }
      }
out:
  L.running = 0;
  return rc;
}

static CUresult launch_now(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, void **params);

/* A queued launch: the grid and a copy of each parameter's bytes, made at
 * the call as the driver makes it (the caller's argument variables may be
 * gone or rewritten by the time the stream runs the kernel). */
typedef struct {
  Function *f;
  unsigned g[3], b[3];
  unsigned n;
  void **params; /* n pointers into bytes, both in this block */
  unsigned char bytes[];
} LaunchW;
static CUresult launch_run(void *arg) {
  LaunchW *w = arg;
  return launch_now(w->f, w->g[0], w->g[1], w->g[2], w->b[0], w->b[1], w->b[2], w->params);
}
static void q_launch(void *stream, Function *f, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, void **params) {
  unsigned n = f->sizes(NULL);
  unsigned long sz[n ? n : 1];
  f->sizes(sz);
  size_t total = 0;
  for (unsigned i = 0; i < n; i++)
    total += (sz[i] + 15) & ~15ul;
  size_t head = (sizeof(LaunchW) + n * sizeof(void *) + 15) & ~(size_t)15;
  LaunchW *w = aligned_alloc(16, (head + total + 15) & ~(size_t)15);
  if (!w)
    abort();
  *w = (LaunchW){f, {gx, gy, gz}, {bx, by, bz}, n, NULL};
  w->params = (void **)w->bytes;
  unsigned char *at = (unsigned char *)w + head;
  for (unsigned i = 0; i < n; i++) {
    memcpy(at, params[i], sz[i]);
    w->params[i] = at;
    at += (sz[i] + 15) & ~15ul;
  }
  q_push(stream, launch_run, w);
}

API CUresult cuLaunchKernel(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shmem, void *stream,
                            void **params, void **extra) {
  NEED_CTX();
  if (!valid_function(f) || f->m->magic != MODULE_MAGIC) {
    say("cuLaunchKernel: not a function handle (%p)", (void *)f);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (f->m->dev != cur_ctx->dev) {
    say("cuLaunchKernel: kernel '%s' was loaded on device %d, but device %d is current",
        f->name, f->m->dev, cur_ctx->dev);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  NEED_STREAM(stream);
  if (!gx || !gy || !gz || !bx || !by || !bz || gx > 0x7fffffffu || gy > 65535 || gz > 65535 ||
      bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > MAX_THREADS) {
    say("cuLaunchKernel: kernel '%s': invalid launch grid (%u,%u,%u) block (%u,%u,%u)", f->name,
        gx, gy, gz, bx, by, bz);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shmem > 232448) {
    say("cuLaunchKernel: kernel '%s': %u bytes of dynamic shared memory", f->name, shmem);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (extra) {
    say("cuLaunchKernel: kernel '%s': `extra` parameters are not supported", f->name);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  emu_count(EMU_LAUNCH, f->name);
  if (G.async && f->sizes) {
    pthread_mutex_lock(&L.mu); /* the pointer checks name L.fn */
    L.fn = f;
    int bad = f->check(params);
    pthread_mutex_unlock(&L.mu);
    if (bad < 0) {
      say("cuLaunchKernel: kernel '%s' takes parameters, but kernelParams is NULL", f->name);
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad > 0)
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    q_launch(stream, f, gx, gy, gz, bx, by, bz, params);
    return CUDA_SUCCESS;
  }
  return launch_now(f, gx, gy, gz, bx, by, bz, params);
}

/* Runs a launch now (the synchronous mode, or a queued one's turn). */
static CUresult launch_now(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, void **params) {
  install_fault_handler();
  pthread_mutex_lock(&L.mu);
  if (!L.stack_size) {
    long kb = env_long("SFLOW_EMU_STACK_KB", 256);
    L.stack_size = (size_t)(kb < 16 ? 16 : kb) << 10;
    L.stack_size = (L.stack_size + G.page - 1) & ~(G.page - 1);
    const char *o = getenv("SFLOW_EMU_ORDER");
    L.reverse = o && !strcmp(o, "reverse");
  }
  L.fn = f;
  double t0 = G.trace ? now_ms() : 0;
  int bad = f->check(params);
  CUresult rc;
  if (bad < 0) {
    say("cuLaunchKernel: kernel '%s' takes parameters, but kernelParams is NULL", f->name);
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (bad > 0) {
    rc = CUDA_ERROR_ILLEGAL_ADDRESS;
  } else {
    rc = run_grid(f, gx, gy, gz, bx, by, bz, params);
  }
  if (G.trace)
    say("launch %s grid (%u,%u,%u) block (%u,%u,%u) on device %d: %.3f ms%s", f->name, gx, gy,
        gz, bx, by, bz, cur_ctx->dev, now_ms() - t0, rc ? " FAILED" : "");
  pthread_mutex_unlock(&L.mu);
  return rc;
}

