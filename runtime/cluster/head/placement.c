/*
 * placement.c — the head's ledger of the nodes of a --nodes run: free
 * slots per node, GPU shares per device, and where a task or an actor
 * goes.
 *
 * Tasks.  dispatch.c hands a backlog entry to the node holding most of a
 * call's input bytes when it has a free slot, else to the live node with
 * the most free slots (slots from the hostfile or the worker's CPU count;
 * the head, node 0, counts with its pool size when --head-runs-work), so
 * each node has at most `slots` tasks running and PIPELINE x slots in
 * flight, and the rest wait at the head.
 *
 * GPUs.  Each node has a count of GPUs (the hostfile's gpus=N, else what
 * its worker detected and sent in its hello; the head's from its own GPU
 * layer when it runs work), learned at the first @gpus call.  An @gpus
 * task also needs a free share there, counted in thousandths per device
 * as resources.c counts locally and fitted the same way (a share on the
 * fullest device where it fits, whole devices for more than one), on the
 * node left with the least (best fit).  The share is given back when the
 * attempt ends there, however it ends.  A GPU task that fits nowhere stays
 * in the backlog and the calls behind it still go.  Actors hold a share
 * for their lifetime (sf__remote_place with an sf__gpu_hold).
 *
 * Key design choice: tasks and actors draw on one ledger.  Actors and
 * groups are placed by ractor_head.c on the same slots: an actor holds its
 * slots for its lifetime (sf__remote_place), and the task dispatcher
 * counts them as taken.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "remote_internal.h"

/* ------------------------------------------------------------- tasks */

/* Free slots of node i for one more task (actors hold slots for their
 * lifetime; tasks still get one slot of a node they fill, so a program
 * whose actors take every slot oversubscribes rather than waits forever). */
static int free_slots(int i) {
  int room = R.slots[i] - R.held[i];
  if (R.slots[i] > 0 && room < 1)
    room = 1;
  return room * (i ? PIPELINE : 1) - R.inflight[i];
}

/* The live node with the most free slots, or -1. */
static int place_cpu_locked(void) {
  int best = -1, best_free = 0;
  for (int i = 0; i < R.n; i++) {
    int fr = free_slots(i);
    if (R.alive[i] && fr > best_free) {
      best = i;
      best_free = fr;
    }
  }
  return best;
}

/* The live node other than p with the most free slots; -1 when none is
 * free now (while another live node could take work later: wait for
 * it), else place_cpu_locked's answer. */
static int place_away_locked(int p) {
  int best = -1, best_free = 0;
  bool other = false; /* another live node (busy or not): wait for it */
  for (int i = 0; i < R.n; i++) {
    int fr = free_slots(i);
    other |= i != p && R.alive[i] && R.slots[i] > 0;
    if (i != p && R.alive[i] && fr > best_free) {
      best = i;
      best_free = fr;
    }
  }
  return best >= 0 || other ? best : place_cpu_locked();
}

/* Objects: a task whose payload names held objects goes to the node that
 * holds most of their bytes when it has a free slot (no copy at all);
 * else, as any task, to the node with the most free slots.
 * SFLOW_OBJECT_LOCALITY=-1 (tests) avoids that node instead, so that the
 * bytes must move worker to worker.  A task re-run because its result
 * could not be fetched from node `avoid` does not go back there (the
 * head may not have seen that node die yet). */
int sf__remote_place_near_locked(const rtask *t) {
  if (t->avoid > 0 && t->avoid < R.n && R.alive[t->avoid])
    return place_away_locked(t->avoid);
  int p = t->pref;
  bool near = p > 0 && p < R.n && R.alive[p];
  if (near && R.locality > 0 && free_slots(p) > 0)
    return p;
  if (!near || R.locality >= 0)
    return place_cpu_locked();
  return place_away_locked(p);
}

/* What is left on node i once a share of h->share is taken there (best
 * fit: the least is best), or -1 when it does not fit; *dev / *mask:
 * where. */
static int gpu_fit(int i, const sf__gpu_hold *h, int32_t *dev, uint64_t *mask) {
  const int32_t *u = R.gpu_used[i];
  int left = -1;
  if (h->share <= SHARE_UNIT) { /* a share of one device: the fullest that fits */
    for (int k = 0; k < R.gpus[i]; k++)
      if (u[k] + h->share <= SHARE_UNIT &&
          (left < 0 || SHARE_UNIT - u[k] - h->share < left)) {
        left = SHARE_UNIT - u[k] - h->share;
        *dev = k;
      }
    return left;
  }
  int need = h->share / SHARE_UNIT, idle = 0; /* whole devices: idle ones */
  uint64_t m = 0;
  for (int k = 0; k < R.gpus[i]; k++)
    if (u[k] == 0) {
      if (idle < need)
        m |= (uint64_t)1 << k;
      idle++;
    }
  if (idle < need)
    return -1;
  *mask = m;
  *dev = __builtin_ctzll(m);
  return (idle - need) * SHARE_UNIT;
}

/* The live node (the head only when head_ok) with `room` free slots
 * (free_slots for tasks, unheld ones for actors) where h's share fits
 * best (ties: the most free); takes the share there.  -1: none now. */
int sf__remote_place_gpu_locked(sf__gpu_hold *h, bool head_ok, bool actor, int need) {
  int best = -1, best_left = 0, best_free = 0;
  int32_t best_dev = -1;
  uint64_t best_mask = 0;
  for (int k = 1; k <= R.n; k++) {
    int i = k % R.n; /* workers first, then the head: ties go to a worker */
    int32_t dev = -1;
    uint64_t mask = 0;
    int fr = actor ? R.slots[i] - R.held[i] - need + 1 : free_slots(i);
    if (!R.alive[i] || (i == 0 && !head_ok) || fr <= 0 || R.gpus[i] <= 0)
      continue;
    int left = gpu_fit(i, h, &dev, &mask);
    if (left >= 0 && (best < 0 || left < best_left || (left == best_left && fr > best_free))) {
      best = i;
      best_left = left;
      best_free = fr;
      best_dev = dev;
      best_mask = mask;
    }
  }
  if (best < 0)
    return -1;
  if (h->share <= SHARE_UNIT)
    R.gpu_used[best][best_dev] += h->share;
  else
    for (int k = 0; k < R.gpus[best]; k++)
      if (best_mask >> k & 1)
        R.gpu_used[best][k] = SHARE_UNIT;
  h->dev = best_dev;
  h->mask = best_mask;
  h->held = true;
  return best;
}

/* Gives h's share back to node i (once; a no-op without one). */
void sf__remote_gpu_give_locked(int i, sf__gpu_hold *h) {
  if (!h || !h->held)
    return;
  h->held = false;
  if (i < 0 || i >= R.n)
    return;
  if (h->share <= SHARE_UNIT)
    R.gpu_used[i][h->dev] -= h->share;
  else
    for (int k = 0; k < R.gpus[i]; k++)
      if (h->mask >> k & 1)
        R.gpu_used[i][k] = 0;
}

/* ------------------------------------------------ actor placement */

bool sf__remote_active(void) { return sf__remote_activate(); }

const char *sf__remote_lost_why(int node) {
  pthread_mutex_lock(&R.mu);
  const char *w = node > 0 && node < R.n && !R.alive[node] ? R.lost_why[node] : NULL;
  pthread_mutex_unlock(&R.mu);
  return w; /* kept until the end of the run */
}

int sf__remote_place(int need, sf__gpu_hold *gpu, bool head_ok, const bool *exclude) {
  pthread_mutex_lock(&R.mu);
  if (gpu && gpu->share) { /* exclude is for gangs, which ask for no GPU */
    int at = R.gpu_state > 0 ? sf__remote_place_gpu_locked(gpu, head_ok, true, need) : -1;
    if (at >= 0)
      R.held[at] += need;
    pthread_mutex_unlock(&R.mu);
    return at;
  }
  int best = -1, best_free = 0;
  for (int k = 1; k <= R.n; k++) {
    int i = k % R.n; /* workers first, then the head: ties go to a worker */
    if (!R.alive[i] || (i == 0 && !head_ok) || (exclude && exclude[i]))
      continue;
    int fr = R.slots[i] - R.held[i];
    if (fr >= need && fr > best_free) {
      best = i;
      best_free = fr;
    }
  }
  if (best >= 0)
    R.held[best] += need;
  pthread_mutex_unlock(&R.mu);
  return best;
}

void sf__remote_unplace(int node, int need, sf__gpu_hold *gpu) {
  pthread_mutex_lock(&R.mu);
  if (node >= 0 && node < R.n) {
    R.held[node] -= need;
    sf__remote_gpu_give_locked(node, gpu);
  }
  pthread_mutex_unlock(&R.mu);
}

/* ------------------------------------------------------------- GPUs */

/* Learns each node's GPUs at the first @gpus call: the hostfile's gpus=N,
 * else what the worker detected and reported in its hello (control.c);
 * the head's own, when it runs work, from its GPU layer, which is started
 * only now so that CPU-only programs never load it.  Returns whether some
 * node has one. */
bool sf__remote_gpus_learn(void) {
  pthread_mutex_lock(&R.mu);
  int st = R.gpu_state, head = R.slots[0];
  pthread_mutex_unlock(&R.mu);
  if (st)
    return st > 0;
  int32_t hg = head > 0 ? sf__gpu_devices() : 0;
  int *g = calloc((size_t)R.n, sizeof *g);
  int32_t(*u)[MAX_NODE_GPUS] = calloc((size_t)R.n, sizeof *u);
  bool any = false;
  for (int i = 0; g && u && i < R.n; i++) {
    sf__node_info ni;
    int k = i == 0 ? hg : sf__cluster_node(i, &ni) ? ni.gpus : 0;
    g[i] = k < 0 ? 0 : k > MAX_NODE_GPUS ? MAX_NODE_GPUS : k;
    any |= g[i] > 0 && R.slots[i] > 0;
  }
  pthread_mutex_lock(&R.mu);
  if (!R.gpu_state) {
    R.gpus = g;
    R.gpu_used = u;
    R.gpu_state = g && u && any ? 1 : -1;
    g = NULL;
    u = NULL;
  }
  st = R.gpu_state;
  pthread_mutex_unlock(&R.mu);
  free(g);
  free(u);
  return st > 0;
}

/* t's share in thousandths, clamped like resources.c's demand to what the
 * largest node has. */
int32_t sf__remote_share_of(double gpus) {
  int most = 0;
  for (int i = 0; i < R.n; i++)
    most = R.gpus[i] > most ? R.gpus[i] : most;
  int32_t s = (int32_t)(gpus * SHARE_UNIT + 0.5);
  if (s < 1)
    s = 1;
  return s > SHARE_UNIT * most ? SHARE_UNIT * most : s;
}

int32_t sf__remote_gpu_share(double gpus) {
  return gpus > 0 && sf__remote_activate() && sf__remote_gpus_learn() ? sf__remote_share_of(gpus)
                                                                      : 0;
}

