/*
 * fake_nccl.c — a stand-in for libnccl.so.2 (loaded with SFLOW_NCCL=path)
 * that lets unit/test_rt_nccl drive nccl.c's watchdog without a GPU: it
 * exports the functions nccl.c resolves, and the environment decides how
 * communicator creation behaves, read at each call:
 *
 *   FAKE_NCCL_VERSION  the version ncclGetVersion reports (default 22809)
 *   FAKE_NCCL_INIT     ok | hang (in progress for ever) | async (ends in
 *                      ncclSystemError) | fail (ncclInvalidUsage at once)
 *
 * It counts aborts, finalizes and destroys, and keeps the last config's
 * `blocking`, for the test to read back with dlsym.
 */
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
typedef struct {
  size_t size;
  unsigned magic, version;
  int blocking;
} config_prefix;

EXPORT int fake_aborts, fake_finalizes, fake_destroys, fake_last_blocking = -1;
EXPORT int fake_last_rank = -1, fake_last_nranks = -1;
EXPORT unsigned fake_last_magic;
static int comm_state; /* what GetAsyncError reports: 0 ok, 7 in progress, 2 error */

static const char *env(const char *k, const char *d) {
  const char *v = getenv(k);
  return v && *v ? v : d;
}

EXPORT int ncclGetVersion(int *v) {
  *v = atoi(env("FAKE_NCCL_VERSION", "22809"));
  return 0;
}
EXPORT const char *ncclGetErrorString(int rc) {
  return rc == 2 ? "unhandled system error (fake)" : rc == 5 ? "invalid usage (fake)" : "fake error";
}
EXPORT const char *ncclGetLastError(void *comm) {
  (void)comm;
  return comm_state == 2 ? "peer 1 closed the connection (fake)" : "";
}
EXPORT int ncclGetUniqueId(void *id) {
  memset(id, 0x5a, 128);
  return 0;
}
typedef struct {
  char bytes[128];
} unique_id; /* passed by value, as ncclUniqueId is */
EXPORT int ncclCommInitRankConfig(void **comm, int n, unique_id id, int rank, config_prefix *c) {
  (void)id;
  fake_last_rank = rank;
  fake_last_nranks = n;
  fake_last_blocking = c ? c->blocking : -1;
  fake_last_magic = c ? c->magic : 0;
  const char *mode = env("FAKE_NCCL_INIT", "ok");
  if (!strcmp(mode, "fail"))
    return 5;
  *comm = &comm_state;
  comm_state = !strcmp(mode, "ok") ? 0 : 7;
  return 7; /* ncclInProgress, as a non-blocking communicator does */
}
EXPORT int ncclCommGetAsyncError(void *comm, int *st) {
  (void)comm;
  if (comm_state == 7 && !strcmp(env("FAKE_NCCL_INIT", "ok"), "async"))
    comm_state = 2;
  *st = comm_state;
  return 0;
}
EXPORT int ncclCommAbort(void *comm) {
  (void)comm;
  fake_aborts++;
  return 0;
}
EXPORT int ncclCommFinalize(void *comm) {
  (void)comm;
  fake_finalizes++;
  return 0;
}
EXPORT int ncclCommDestroy(void *comm) {
  (void)comm;
  fake_destroys++;
  return 0;
}
EXPORT int ncclAllReduce(void) { return 0; }
EXPORT int ncclBroadcast(void) { return 0; }
EXPORT int ncclAllGather(void) { return 0; }
