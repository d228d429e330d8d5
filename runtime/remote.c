/*
 * remote.c — placement of task calls on other nodes of a --nodes run.
 *
 * Until tasks are distributed, every call runs on the node that makes it.
 */
#include "internal.h"

bool sf__remote_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq) {
  (void)d, (void)args, (void)f, (void)seq;
  return false;
}
