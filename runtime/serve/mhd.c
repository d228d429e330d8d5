/*
 * mhd.c — GNU libmicrohttpd, loaded with dlopen on the first serve.start.
 *
 * Key design choice: as std.data loads cJSON (runtime/data/json.c), the
 * library is opened at run time, not linked, so every compiled program
 * keeps its short list of run-time dependencies (docs/cluster.md, "What a
 * node needs") and only one that serves needs the libmicrohttpd12 package.
 * The soname is 12, the ABI Debian 12's 0.9.75 and later releases keep.
 */
#include <dlfcn.h>

#include "serve.h"

sf__mhd_api sf__mhd;
static char mhd_err[300];
static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;

#define MHD_SYM(field, name)                                                              \
  do {                                                                                    \
    *(void **)&sf__mhd.field = dlsym(h, name);                                            \
    if (!sf__mhd.field) {                                                                 \
      snprintf(mhd_err, sizeof mhd_err, "libmicrohttpd.so.12 lacks %s (0.9.75 or newer " \
               "is needed)", name);                                                      \
      return;                                                                             \
    }                                                                                     \
  } while (0)

static void mhd_open(void) {
  void *h = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(mhd_err, sizeof mhd_err, "std.serve needs libmicrohttpd.so.12, which cannot be "
             "loaded (%s): install the libmicrohttpd12 package", dlerror());
    return;
  }
  MHD_SYM(start_daemon, "MHD_start_daemon");
  MHD_SYM(stop_daemon, "MHD_stop_daemon");
  MHD_SYM(quiesce_daemon, "MHD_quiesce_daemon");
  MHD_SYM(create_response_from_buffer, "MHD_create_response_from_buffer");
  MHD_SYM(create_response_from_callback, "MHD_create_response_from_callback");
  MHD_SYM(add_response_header, "MHD_add_response_header");
  MHD_SYM(queue_response, "MHD_queue_response");
  MHD_SYM(destroy_response, "MHD_destroy_response");
  MHD_SYM(lookup_connection_value, "MHD_lookup_connection_value");
  MHD_SYM(get_connection_info, "MHD_get_connection_info");
}

bool sf__mhd_load(char *err, size_t errlen) {
  pthread_once(&mhd_once, mhd_open);
  if (!mhd_err[0])
    return true;
  snprintf(err, errlen, "%s", mhd_err);
  return false;
}
