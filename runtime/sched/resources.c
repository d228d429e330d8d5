/*
 * resources.c — @cpus and @gpus: what a task or actor asks for, and the
 * CPU slots and GPU shares of this machine it takes while it runs.
 *
 * Key design choice: one mutex-guarded ledger for the process, touched
 * only by calls that ask for something (the common call asks for nothing
 * and never takes the lock).  A call that finds too little free waits in
 * a list, off the pool, and every give-back queues the whole list again:
 * simple, fair enough for the few calls that carry resources, and never
 * a thread blocked on a resource.  Shares of a GPU are counted in
 * thousandths so sums stay exact; a share goes to the best-fitting
 * device, whole GPUs to the first idle ones.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "task_internal.h"

/* Shares of a GPU are counted in thousandths so sums stay exact. */
#define SHARE_UNIT 1000
#define MAX_GPUS 64

static struct {
  pthread_mutex_t lock;
  bool ready;
  int32_t ncpus, cpus_used;
  int32_t ngpus;
  int32_t gpu_used[MAX_GPUS];
  sf__job *waiting, *waiting_tail; /* jobs waiting for resources */
  bool notice_given;
} R = {.lock = PTHREAD_MUTEX_INITIALIZER};

_Thread_local int32_t sf__current_gpu = -1;

__attribute__((weak)) int32_t sf__gpu_devices(void) { return 0; }

/* A run without a GPU says so in one line: this layer's notice (a call
 * asks for @gpus) or the GPU layer's (a launch, a matmul or a tensor op),
 * whichever comes first; both say that the work runs on the CPU. */
bool sf__no_gpu_notice_first(void) {
  static int told;
  return !__atomic_exchange_n(&told, 1, __ATOMIC_SEQ_CST);
}

static void resources_init(void) {
  if (R.ready)
    return;
  R.ncpus = sf__pool_size();
  int32_t g = sf__gpu_devices();
  R.ngpus = g < 0 ? 0 : g > MAX_GPUS ? MAX_GPUS : g;
  R.ready = true;
}

/* sf__demand_of for a call that asks for a GPU or more than one CPU. */
sf__demand sf__demand_ask(double cpus, double gpus, const char *name, const sf_loc *loc) {
  sf__demand d = {0, 0};
  if (gpus > 0) {
    pthread_mutex_lock(&R.lock);
    resources_init();
    int32_t ngpus = R.ngpus;
    bool notice = !R.notice_given;
    R.notice_given = true;
    pthread_mutex_unlock(&R.lock);
    if (ngpus == 0) {
      if (sf__options.require_gpu)
        sf_runtime_error(loc, "%s asks for @gpus(%g) but this machine has no GPU "
                         "(--require-gpu is set)", name, gpus);
      if (notice && !sf__options.quiet && sf__no_gpu_notice_first())
        sf__notice("no GPU found: work that asks for @gpus runs on the CPU");
    } else {
      d.gpu = (int32_t)(gpus * SHARE_UNIT + 0.5);
      if (d.gpu > SHARE_UNIT * ngpus)
        d.gpu = SHARE_UNIT * ngpus;
    }
  }
  if (cpus > 1) {
    pthread_mutex_lock(&R.lock);
    resources_init();
    int32_t c = (int32_t)(cpus + 0.999);
    d.cpus = c > R.ncpus ? R.ncpus : c;
    pthread_mutex_unlock(&R.lock);
  }
  return d;
}

/* sf__resources_take of a non-empty demand.  The check and the entry in
 * the waiting list are one hold of the lock: with two, a give-back between
 * them emptied the list before j was on it, and j waited for ever
 * (run/scheduler/resources.sflow hung about once in 200 runs). */
bool sf__resources_take_some(sf__demand d, int32_t *dev, sf__job *j, void *keep) {
  *dev = -1;
  bool ok = true;
  pthread_mutex_lock(&R.lock);
  /* A call holds all of its n slots, the one its own thread is included:
   * counting n - 1 against a capacity of ncpus - 1 let k calls take
   * k * n slots of a pool of k * (n - 1) + 1 (three @cpus(2) calls at once
   * on --threads 4). */
  if (R.cpus_used + d.cpus > R.ncpus && d.cpus > 0)
    ok = false;
  int32_t best = -1;
  if (ok && d.gpu > 0) {
    if (d.gpu <= SHARE_UNIT) { /* a share of one device: best fit */
      for (int32_t i = 0; i < R.ngpus; i++)
        if (R.gpu_used[i] + d.gpu <= SHARE_UNIT &&
            (best < 0 || R.gpu_used[i] > R.gpu_used[best]))
          best = i;
      ok = best >= 0;
    } else { /* whole devices: the first n idle ones */
      int32_t need = d.gpu / SHARE_UNIT, idle = 0;
      for (int32_t i = 0; i < R.ngpus; i++)
        idle += R.gpu_used[i] == 0;
      ok = idle >= need;
    }
  }
  if (ok) {
    R.cpus_used += d.cpus;
    if (d.gpu > 0 && d.gpu <= SHARE_UNIT) {
      R.gpu_used[best] += d.gpu;
      *dev = best;
    } else if (d.gpu > SHARE_UNIT) {
      int32_t need = d.gpu / SHARE_UNIT;
      for (int32_t i = 0; i < R.ngpus && need; i++)
        if (R.gpu_used[i] == 0) {
          R.gpu_used[i] = SHARE_UNIT;
          if (*dev < 0)
            *dev = i;
          need--;
        }
    }
  } else {
    sf_retain(keep); /* the waiting entry's reference */
    j->next = NULL;
    if (R.waiting_tail)
      R.waiting_tail->next = j;
    else
      R.waiting = j;
    R.waiting_tail = j;
  }
  pthread_mutex_unlock(&R.lock);
  return ok;
}

/* sf__resources_give of a non-empty demand. */
void sf__resources_give_some(sf__demand d, int32_t dev) {
  pthread_mutex_lock(&R.lock);
  R.cpus_used -= d.cpus;
  if (d.gpu > 0 && d.gpu <= SHARE_UNIT && dev >= 0)
    R.gpu_used[dev] -= d.gpu;
  else if (d.gpu > SHARE_UNIT)
    for (int32_t i = dev, need = d.gpu / SHARE_UNIT; i >= 0 && i < R.ngpus && need; i++)
      if (R.gpu_used[i] == SHARE_UNIT) {
        R.gpu_used[i] = 0;
        need--;
      }
  /* Everything that waited gets another chance. */
  sf__job *w = R.waiting;
  R.waiting = R.waiting_tail = NULL;
  pthread_mutex_unlock(&R.lock);
  while (w) {
    sf__job *next = w->next;
    sf__sched_push_shared(w);
    w = next;
  }
}
