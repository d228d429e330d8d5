/*
 * worker_tasks.c — a worker's side of task calls: the head's task-submit
 * frames checked, queued and run on runner threads, one attempt each.
 *
 * sf__remote_worker_submit (on the worker's control loop) checks
 * the frame and queues it; runner threads (grown on demand) deserialize
 * the arguments, run one attempt with sf__task_submit_attempt on a private
 * copy of the descriptor whose @retry equals that attempt, wait, and send
 * the result.  print output goes to the head as print frames (print.c's
 * hook), which prefixes it with "[node K] " when more than one node runs
 * work.
 *
 * Key design choice: nothing a peer sends is followed blindly.  A task's
 * identity across processes of the same executable is its descriptor's
 * offset from &sf_program_desc (load addresses differ under PIE, offsets
 * do not), plus its name.  A worker checks that the offset lies inside
 * its own executable image, is aligned, and points at a descriptor whose
 * name, thunk and types also lie inside the image and whose name equals
 * the one sent; anything else is answered with an error result.  The same
 * checks guard actor and method descriptors (ractor_worker.c).
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker_internal.h"

/* "task 'x' failed after N attempts: CAUSE" -> CAUSE. */
static const char *cause_of(const char *msg) {
  if (strncmp(msg, "task '", 6))
    return msg;
  const char *p = strstr(msg, "' failed after ");
  p = p ? strstr(p, ": ") : NULL;
  return p ? p + 2 : msg;
}

typedef struct wjob {
  struct wjob *next;
  uint64_t id;
  const sf_task_desc *d; /* the private copy for this attempt */
  int32_t attempt;
  uint64_t key;          /* the call's identity, as the head gave it */
  uint8_t *args;         /* serialized arguments */
  uint32_t n;
} wjob;

/* Descriptor copies with @retry equal to the attempt: exactly one attempt
 * runs here, and its failure message counts the attempts made so far. */
typedef struct dcopy {
  struct dcopy *next;
  const sf_task_desc *orig;
  int32_t attempt;
  sf_task_desc d;
} dcopy;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  wjob *head, *tail;
  int runners, idle, queued;
  dcopy *copies;
  uintptr_t lo[16], hi[16]; /* this executable's loaded segments */
  bool exec[16];
  int nseg;
} WK = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int seg_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  /* The first object is the executable itself. */
  for (int i = 0; i < info->dlpi_phnum && WK.nseg < 16; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R))
      continue;
    WK.lo[WK.nseg] = info->dlpi_addr + ph->p_vaddr;
    WK.hi[WK.nseg] = WK.lo[WK.nseg] + ph->p_memsz;
    WK.exec[WK.nseg] = (ph->p_flags & PF_X) != 0;
    WK.nseg++;
  }
  return 1;
}

/* Whether [p, p+n) lies in one loaded segment (executable when code). */
static bool in_image(const void *p, size_t n, bool code) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < WK.nseg; i++)
    if (a >= WK.lo[i] && a <= WK.hi[i] && n <= WK.hi[i] - a && (!code || WK.exec[i]))
      return true;
  return false;
}

static size_t image_room(const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < WK.nseg; i++)
    if (a >= WK.lo[i] && a < WK.hi[i])
      return WK.hi[i] - a;
  return 0;
}

static bool type_ok(const sf_type *t) { return in_image(t, sizeof *t, false); }

static pthread_once_t seg_once = PTHREAD_ONCE_INIT;
static void seg_init(void) { dl_iterate_phdr(seg_cb, NULL); }

/* The descriptor of `size` bytes at offset off whose first field, a name,
 * equals name[0..nl); what names the kind in errors. */
static const void *find_desc(uint32_t off, size_t size, size_t align, const uint8_t *name,
                             uint32_t nl, const char *what, char *err, size_t errlen) {
  pthread_once(&seg_once, seg_init);
  uintptr_t a = (uintptr_t)&sf_program_desc;
  __asm__("" : "+r"(a));
  a += (uintptr_t)(intptr_t)(int32_t)off;
  const char *p = (const char *)a;
  if (((uintptr_t)p % align) || !in_image(p, size, false)) {
    snprintf(err, errlen, "no %s descriptor at offset %d", what, (int32_t)off);
    return NULL;
  }
  const char *dname = *(const char *const *)p;
  size_t room = image_room(dname);
  if (!room || room < (size_t)nl + 1 || memcmp(dname, name, nl) || dname[nl] != '\0') {
    snprintf(err, errlen, "the %s descriptor at offset %d is not '%.*s'", what, (int32_t)off,
             (int)(nl > 200 ? 200 : nl), (const char *)name);
    return NULL;
  }
  return p;
}

const sf_method_desc *sf__remote_find_method(uint32_t off, const uint8_t *name, uint32_t nl,
                                             char *err, size_t errlen) {
  const sf_method_desc *d = find_desc(off, sizeof *d, _Alignof(sf_method_desc), name, nl,
                                      "method", err, errlen);
  if (d && (!in_image((const void *)(uintptr_t)d->thunk, 1, true) ||
            (d->args && (!type_ok(d->args) || d->args->kind != SF_STRUCT)) ||
            (d->result && !type_ok(d->result)))) {
    snprintf(err, errlen, "the method descriptor of '%s' is damaged", d->name);
    return NULL;
  }
  return d;
}

const sf_actor_desc *sf__remote_find_class(uint32_t off, const uint8_t *name, uint32_t nl,
                                           char *err, size_t errlen) {
  const sf_actor_desc *d = find_desc(off, sizeof *d, _Alignof(sf_actor_desc), name, nl,
                                     "actor", err, errlen);
  if (d && (!type_ok(d->state) || d->state->kind != SF_STRUCT ||
            (d->init && !in_image(d->init, sizeof *d->init, false)))) {
    snprintf(err, errlen, "the actor descriptor of '%s' is damaged", d->name);
    return NULL;
  }
  if (d && d->init) { /* init is checked like any method */
    char e2[64];
    uint32_t n2 = 0;
    while (n2 < 256 && in_image(d->init->name + n2, 1, false) && d->init->name[n2])
      n2++;
    intptr_t ioff = (const char *)d->init - (const char *)&sf_program_desc;
    if (n2 >= 256 || !in_image(d->init->name, n2 + 1, false) ||
        !sf__remote_find_method((uint32_t)(int32_t)ioff, (const uint8_t *)d->init->name, n2, e2,
                                sizeof e2)) {
      snprintf(err, errlen, "the actor descriptor of '%s' is damaged", d->name);
      return NULL;
    }
  }
  return d;
}

/* The descriptor at offset off, if it is one and is called name. */
const sf_task_desc *sf__remote_find_task(uint32_t off, const uint8_t *name, uint32_t nl,
                                         char *err, size_t errlen) {
  const sf_task_desc *d = find_desc(off, sizeof *d, _Alignof(sf_task_desc), name, nl, "task",
                                    err, errlen);
  if (d && (!in_image((const void *)(uintptr_t)d->thunk, 1, true) || !type_ok(d->args) ||
            d->args->kind != SF_STRUCT || (d->result && !type_ok(d->result)))) {
    snprintf(err, errlen, "the task descriptor of '%s' is damaged", d->name);
    return NULL;
  }
  return d;
}

/* out[0..on): what the attempt printed (sent with a value, never with a
 * failure); left out when it would not fit in the frame with the value. */
static void worker_reply(uint64_t id, int status, const void *p, size_t n, const char *out,
                         size_t on) {
  sf__frame f = {.type = SF__F_TASK_RESULT};
  f.u.task_result.task = id;
  f.u.task_result.status = (uint8_t)status;
  f.u.task_result.value = (sf__bytes){p, (uint32_t)n};
  if (status != 1 && on && on <= SF__FRAME_MAX / 2 && n <= SF__FRAME_MAX / 2 - 64)
    f.u.task_result.output = (sf__bytes){(const uint8_t *)out, (uint32_t)on};
  sf__trace_ship(); /* the attempt's trace event reaches the head before its result */
  sf__worker_send_frame(&f);
}

static void print_to_head(const char *line, size_t n) {
  sf__frame f = {.type = SF__F_PRINT};
  f.u.print.line = (sf__bytes){(const uint8_t *)line, (uint32_t)n};
  sf__worker_send_frame(&f);
}

/* A line on this worker's stderr, which reaches the head's as a log
 * line: "sflow worker K: ...". */
void sf__worker_note(const char *fmt, ...) {
  char line[600];
  int k = snprintf(line, sizeof line, "sflow worker %lld: ", (long long)sf__node_id);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + k, sizeof line - (size_t)k - 1, fmt, ap);
  va_end(ap);
  size_t n = (size_t)k + (m < 0 ? 0 : (size_t)m);
  if (n > sizeof line - 2)
    n = sizeof line - 2;
  line[n++] = '\n';
  (void)sf__write_all(2, line, n);
}

/* Reads one future argument of type ft (a future<T>) into *out. */
static int de_future(sf__reader *r, const sf_type *ft, sf_future **out, uint64_t *lost,
                     char *why, size_t wl) {
  if (r->p >= r->end)
    return -1;
  uint8_t tag = *r->p++;
  const sf_type *vt = ft->elem;
  int32_t vs = sf__value_size(vt);
  if (tag == SF__ARG_NONE)
    return 0;
  if (tag == SF__ARG_FAILED) {
    uint32_t n;
    if (r->end - r->p < 4 || (memcpy(&n, r->p, 4), n > (uint64_t)(r->end - r->p - 4)))
      return -1;
    char *m = strndup((const char *)r->p + 4, n);
    r->p += 4 + n;
    if (!m)
      return -1;
    *out = sf__future_failed(vt, m);
    free(m);
    return 0;
  }
  const uint8_t *bytes = NULL;
  uint64_t nbytes = 0;
  uint8_t *fetched = NULL;
  wobj *local = NULL;
  sf__reader vr = *r;
  if (tag == SF__ARG_REF) {
    uint32_t node;
    uint64_t id, size;
    uint16_t port;
    if (r->end - r->p < 4 + 8 + 8 + 2 + 1)
      return -1;
    memcpy(&node, r->p, 4);
    memcpy(&id, r->p + 4, 8);
    memcpy(&size, r->p + 12, 8);
    memcpy(&port, r->p + 20, 2);
    uint8_t al = r->p[22];
    r->p += 23;
    if (r->end - r->p < al || al >= 64)
      return -1;
    char addr[64];
    memcpy(addr, r->p, al);
    addr[al] = '\0';
    r->p += al;
    if ((int64_t)node == sf__node_id) { /* held here: used in place */
      if (!(local = sf__wobj_use(id)) || local->n != size) {
        if (local)
          sf__wobj_unuse(local);
        *lost = id;
        snprintf(why, wl, "node %u no longer holds object %llu", node, (unsigned long long)id);
        return 1;
      }
      bytes = local->p;
      nbytes = local->n;
    } else {
      char w2[200];
      if (!(fetched = sf__obj_fetch(addr, port, id, size, w2, sizeof w2))) {
        *lost = id;
        snprintf(why, wl, "object %llu from node %u: %s", (unsigned long long)id, node, w2);
        return 1;
      }
      bytes = fetched;
      nbytes = size;
    }
    vr = (sf__reader){bytes, bytes + nbytes};
  } else if (tag != SF__ARG_VALUE) {
    return -1;
  }
  _Alignas(16) unsigned char tmp[256];
  void *v = vs <= (int32_t)sizeof tmp ? tmp : calloc(1, (size_t)vs);
  int rc = v ? 0 : -1;
  if (v) {
    memset(v, 0, (size_t)vs);
    if (vs && !sf__de_value(&vr, vt, v)) {
      sf_value_release(vt, v);
      rc = -1;
    } else if (tag == SF__ARG_REF && vr.p != vr.end) {
      sf_value_release(vt, v);
      rc = -1;
    } else {
      *out = sf_future_done(vt, v);
    }
    if (v != tmp)
      free(v);
  }
  if (tag == SF__ARG_VALUE)
    *r = vr;
  if (local)
    sf__wobj_unuse(local);
  free(fetched);
  return rc;
}

/* The arguments of d from the head's payload into args (zeroed): the
 * serial.c layout, a future as one of the ARG_ forms.  0, -1 malformed,
 * 1 an input object could not be had (*lost, why). */
static int de_args(const sf_task_desc *d, const uint8_t *p, uint32_t n, void *args,
                   uint64_t *lost, char *why, size_t wl) {
  sf__reader r = {p, p + n};
  const sf_type *a = d->args;
  for (int32_t i = 0; i < a->nfields; i++) {
    const sf_type *ft = a->fields[i].type;
    void *fp = (char *)args + a->fields[i].offset;
    int rc = ft->kind == SF_FUTURE ? de_future(&r, ft, (sf_future **)fp, lost, why, wl)
                                   : sf__de_value(&r, ft, fp) ? 0 : -1;
    if (rc)
      return rc;
  }
  return r.p == r.end ? 0 : -1;
}

static void *worker_runner(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&WK.mu);
    while (!WK.head) {
      WK.idle++;
      pthread_cond_wait(&WK.cv, &WK.mu);
      WK.idle--;
    }
    wjob *j = WK.head;
    WK.head = j->next;
    if (!WK.head)
      WK.tail = NULL;
    WK.queued--;
    pthread_mutex_unlock(&WK.mu);

    const sf_task_desc *d = j->d;
    int32_t asize = sf__value_size(d->args);
    void *args = calloc(1, asize ? (size_t)asize : 1);
    uint64_t lost = 0;
    char why[300];
    int de = args ? de_args(d, j->args, j->n, args, &lost, why, sizeof why) : -1;
    if (de) {
      if (args)
        sf_value_release(d->args, args);
      free(args);
      static const char msg[] = "malformed task arguments from the head";
      if (de > 0) { /* an input object is lost: the head re-makes it */
        uint8_t v[8 + sizeof why];
        memcpy(v, &lost, 8);
        size_t wn = strlen(why);
        memcpy(v + 8, why, wn);
        worker_reply(j->id, 3, v, 8 + wn, NULL, 0);
      } else {
        worker_reply(j->id, 1, msg, sizeof msg - 1, NULL, 0);
      }
    } else {
      sf__buf out; /* the attempt's print lines, sent with its value */
      sf__buf_init(&out, NULL, 0);
      sf_future *f = sf__task_submit_attempt(d, args, j->attempt, &out, j->key);
      free(args);
      int32_t rsize = sf__value_size(d->result);
      void *res = calloc(1, rsize ? (size_t)rsize : 1);
      char err[SF__ERROR_MAX + 256];
      bool ok = res && sf__future_wait_result(f, res, err, sizeof err);
      sf_release(f);
      if (ok) {
        sf__buf b;
        char store[512];
        sf__buf_init(&b, store, sizeof store);
        if (rsize)
          sf__ser_value(&b, d->result, res);
        uint64_t ref[2] = {j->id, b.len};
        if (b.len > sf__obj_threshold() && sf__wobj_keep(j->id, b.data, b.len))
          worker_reply(j->id, 2, ref, sizeof ref, out.data, out.len); /* objects: stays here */
        else
          worker_reply(j->id, 0, b.data, b.len, out.data, out.len);
        sf__buf_free(&b);
        sf_value_release(d->result, res);
      } else {
        const char *c = res ? cause_of(err) : "out of memory";
        worker_reply(j->id, 1, c, strlen(c), NULL, 0);
      }
      sf__buf_free(&out);
      free(res);
    }
    free(j->args);
    free(j);
  }
  return NULL;
}

void sf__remote_worker_start(void) {
  sf__sched_start();
  pthread_once(&seg_once, seg_init);
  sf__print_hook = print_to_head;
}

void sf__remote_worker_submit(const sf__frame *f) {
  char err[300];
  const uint8_t *p = f->u.task_submit.args.p;
  uint32_t n = f->u.task_submit.args.n, nl = 0;
  const sf_task_desc *d = NULL;
  if (n < 4 || (memcpy(&nl, p, 4), nl > n - 4) || nl == 0)
    snprintf(err, sizeof err, "malformed task-submit payload");
  else
    d = sf__remote_find_task(f->u.task_submit.fn, p + 4, nl, err, sizeof err);
  int32_t attempt = (int32_t)f->u.task_submit.attempt;
  if (d && (attempt < 0 || attempt > d->retry)) {
    snprintf(err, sizeof err, "attempt %u of '%s' is beyond its @retry(%d)",
             f->u.task_submit.attempt, d->name, d->retry);
    d = NULL;
  }
  if (!d) {
    char line[400];
    int k = snprintf(line, sizeof line, "sflow worker %lld: refused a task: %s\n",
                     (long long)sf__node_id, err);
    (void)sf__write_all(2, line, (size_t)(k < (int)sizeof line ? k : (int)sizeof line - 1));
    worker_reply(f->u.task_submit.task, 1, err, strlen(err), NULL, 0);
    return;
  }
  wjob *j = calloc(1, sizeof *j);
  uint8_t *a = malloc(n - 4 - nl + 1);
  if (!j || !a) {
    free(j);
    free(a);
    static const char msg[] = "out of memory on the worker";
    worker_reply(f->u.task_submit.task, 1, msg, sizeof msg - 1, NULL, 0);
    return;
  }
  memcpy(a, p + 4 + nl, n - 4 - nl);
  j->id = f->u.task_submit.task;
  j->attempt = attempt;
  j->key = f->u.task_submit.key;
  j->args = a;
  j->n = n - 4 - nl;
  pthread_mutex_lock(&WK.mu);
  dcopy *c = WK.copies;
  while (c && !(c->orig == d && c->attempt == attempt))
    c = c->next;
  if (!c && (c = calloc(1, sizeof *c))) {
    c->orig = d;
    c->attempt = attempt;
    c->d = *d;
    c->d.retry = attempt;
    c->next = WK.copies;
    WK.copies = c;
  }
  j->d = c ? &c->d : d;
  if (WK.tail)
    WK.tail->next = j;
  else
    WK.head = j;
  WK.tail = j;
  WK.queued++;
  int cap = sf__pool_size(); /* --threads: the hostfile's slots, or the CPUs */
  bool spawn = WK.queued > WK.idle && WK.runners < (cap > 0 ? cap : 1);
  if (spawn)
    WK.runners++;
  pthread_cond_signal(&WK.cv);
  pthread_mutex_unlock(&WK.mu);
  if (spawn) {
    pthread_t th;
    if (pthread_create(&th, NULL, worker_runner, NULL)) {
      pthread_mutex_lock(&WK.mu);
      WK.runners--;
      pthread_mutex_unlock(&WK.mu);
    } else {
      pthread_detach(th);
    }
  }
}
