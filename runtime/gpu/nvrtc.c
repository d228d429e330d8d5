/*
 * nvrtc.c — CUDA C to CUBIN with NVRTC, and the on-disk kernel cache.
 *
 * NVRTC is dlopen'ed (no GPU is needed to compile, which is how the test
 * suite checks every kernel for sm_80 and sm_90 on a machine without one).
 * Compiled images are cached on disk, keyed by the SHA-256 of the source,
 * the target architecture, the options and the NVRTC version.  Key design
 * choice: an entry carries its own length and SHA-256 in a header, so a
 * truncated or corrupted file is detected and rebuilt, never loaded; an
 * entry is written to a temporary file in the cache folder and renamed
 * into place, so concurrent processes never see half an entry.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"

/* The options every kernel is compiled with (part of the cache key). */
#define NVRTC_OPTS "-std=c++17 -default-device"

typedef void *nvrtcProgram;
static struct {
  void *lib;
  int version;
  int (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                const char *const *);
  int (*compile)(nvrtcProgram, int, const char *const *);
  int (*log_size)(nvrtcProgram, size_t *);
  int (*log)(nvrtcProgram, char *);
  int (*cubin_size)(nvrtcProgram, size_t *);
  int (*cubin)(nvrtcProgram, char *);
  int (*destroy)(nvrtcProgram *);
  const char *(*errstr)(int);
  char why[256];
} N;
static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;

void sf__blob_free(sf__blob *b) {
  free(b->data);
  b->data = NULL;
  b->len = 0;
}

static void *open_first(const char *env, const char *const *names, char *why, size_t n) {
  const char *e = getenv(env);
  if (e && *e) {
    void *h = dlopen(e, RTLD_NOW | RTLD_LOCAL);
    if (!h)
      snprintf(why, n, "%s", dlerror());
    return h;
  }
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h)
      return h;
  }
  snprintf(why, n, "%s not found", names[0]);
  return NULL;
}

static void nvrtc_init(void) {
  static const char *const names[] = {
      "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
      "/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so", NULL};
  N.lib = open_first("SFLOW_NVRTC", names, N.why, sizeof N.why);
  if (!N.lib)
    return;
#define SYM(field, name)                                                  \
  if (!(*(void **)&N.field = dlsym(N.lib, name))) {                       \
    snprintf(N.why, sizeof N.why, "NVRTC lacks %s", name);                \
    dlclose(N.lib);                                                       \
    N.lib = NULL;                                                         \
    return;                                                               \
  }
  SYM(create, "nvrtcCreateProgram");
  SYM(compile, "nvrtcCompileProgram");
  SYM(log_size, "nvrtcGetProgramLogSize");
  SYM(log, "nvrtcGetProgramLog");
  SYM(cubin_size, "nvrtcGetCUBINSize");
  SYM(cubin, "nvrtcGetCUBIN");
  SYM(destroy, "nvrtcDestroyProgram");
  SYM(errstr, "nvrtcGetErrorString");
#undef SYM
  int (*ver)(int *, int *) = (int (*)(int *, int *))dlsym(N.lib, "nvrtcVersion");
  int maj = 0, min = 0;
  if (ver && ver(&maj, &min) == 0)
    N.version = maj * 1000 + min * 10;
}

bool sf__nvrtc_load(char *err, size_t n) {
  pthread_once(&nvrtc_once, nvrtc_init);
  if (!N.lib && err)
    snprintf(err, n, "%s", N.why);
  return N.lib != NULL;
}

int sf__nvrtc_version(void) {
  pthread_once(&nvrtc_once, nvrtc_init);
  return N.version;
}

static char *dupf(const char *fmt, const char *a, const char *b) {
  size_t n = strlen(fmt) + strlen(a) + strlen(b) + 1;
  char *s = malloc(n);
  if (s)
    snprintf(s, n, fmt, a, b);
  return s;
}

bool sf__nvrtc_compile(const char *src, const char *name, const char *arch, sf__blob *out,
                       char **log) {
  *log = NULL;
  out->data = NULL;
  out->len = 0;
  char why[256];
  if (!sf__nvrtc_load(why, sizeof why)) {
    *log = dupf("NVRTC is not available: %s%s", why, "");
    return false;
  }
  nvrtcProgram p = NULL;
  int rc = N.create(&p, src, name, 0, NULL, NULL);
  if (rc) {
    *log = dupf("nvrtcCreateProgram: %s%s", N.errstr(rc), "");
    return false;
  }
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[] = {archopt, "-std=c++17", "-default-device"};
  rc = N.compile(p, 3, opts);
  size_t ls = 0;
  if (N.log_size(p, &ls) == 0 && ls > 1) {
    *log = malloc(ls);
    if (*log && N.log(p, *log) != 0) {
      free(*log);
      *log = NULL;
    }
  }
  bool ok = rc == 0;
  if (ok && N.cubin_size(p, &out->len) == 0 && out->len > 0 && (out->data = malloc(out->len)) &&
      N.cubin(p, out->data) == 0) {
    free(*log); /* warnings only */
    *log = NULL;
  } else {
    if (!*log)
      *log = dupf("nvrtcCompileProgram: %s%s", N.errstr(rc ? rc : 1), "");
    sf__blob_free(out);
    ok = false;
  }
  N.destroy(&p);
  return ok;
}

/* ------------------------------------------------------------- cache */

const char *sf__kernel_cache_dir(void) {
  static char dir[4096];
  const char *e = getenv("SFLOW_KERNEL_CACHE");
  if (e && *e)
    snprintf(dir, sizeof dir, "%s", e);
  else if ((e = getenv("XDG_CACHE_HOME")) && *e)
    snprintf(dir, sizeof dir, "%s/sflow/kernels", e);
  else
    snprintf(dir, sizeof dir, "%s/.cache/sflow/kernels", getenv("HOME") ? getenv("HOME") : "/tmp");
  return dir;
}

void sf__kernel_cache_key(const char *src, const char *arch, char out[65]) {
  size_t ls = strlen(src), la = strlen(arch), lo = sizeof NVRTC_OPTS;
  char ver[32];
  int lv = snprintf(ver, sizeof ver, "nvrtc %d", sf__nvrtc_version());
  size_t n = ls + la + lo + (size_t)lv + 3;
  char *buf = sf_alloc(n);
  char *p = buf;
  memcpy(p, src, ls + 1), p += ls + 1;
  memcpy(p, arch, la + 1), p += la + 1;
  memcpy(p, NVRTC_OPTS, lo), p += lo;
  memcpy(p, ver, (size_t)lv + 1);
  sf__sha256_hex(buf, n, out);
  sf_free(buf);
}

/* Entry layout: "SFKC1\n", 8-byte little-endian payload length, the
 * payload's SHA-256, the payload. */
#define MAGIC "SFKC1\n"
#define HDR (6 + 8 + 32)

static bool read_entry(const char *path, sf__blob *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  struct stat st;
  bool ok = false;
  if (fstat(fd, &st) == 0 && st.st_size >= HDR && st.st_size < (1 << 30)) {
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n);
    if (b && read(fd, b, n) == (ssize_t)n && !memcmp(b, MAGIC, 6)) {
      uint64_t len = 0;
      for (int i = 0; i < 8; i++)
        len |= (uint64_t)b[6 + i] << (8 * i);
      uint8_t sum[32];
      if (len == n - HDR) {
        sf__sha256(b + HDR, len, sum);
        if (!memcmp(sum, b + 14, 32)) {
          out->data = malloc(len ? len : 1);
          if (out->data) {
            memcpy(out->data, b + HDR, len);
            out->len = len;
            ok = true;
          }
        }
      }
    }
    free(b);
  }
  close(fd);
  return ok;
}

static void mkdirs(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0755);
      *s = '/';
    }
  mkdir(p, 0755);
}

/* Best effort: a cache that cannot be written only costs a recompile.
 * Replaced whole (core's outfile.c, SF__OUT_ATOMIC): a reader in another
 * process never sees half an image, and anything but a regular file at
 * the path is left alone. */
static void write_entry(const char *dir, const char *path, const sf__blob *img) {
  mkdirs(dir);
  sf__outfile o;
  if (!sf__outfile_open(&o, path, SF__OUT_ATOMIC, NULL, 0))
    return;
  uint8_t hdr[HDR];
  memcpy(hdr, MAGIC, 6);
  for (int i = 0; i < 8; i++)
    hdr[6 + i] = (uint8_t)((uint64_t)img->len >> (8 * i));
  sf__sha256(img->data, img->len, hdr + 14);
  if (sf__outfile_write(&o, hdr, HDR) && sf__outfile_write(&o, img->data, img->len))
    (void)sf__outfile_commit(&o);
  else
    sf__outfile_abort(&o);
}

bool sf__kernel_image(const char *src, const char *name, const char *arch, sf__blob *out,
                      bool *hit, char **log) {
  char key[65];
  *log = NULL;
  *hit = false;
  char why[256];
  if (!sf__nvrtc_load(why, sizeof why)) {
    *log = dupf("NVRTC is not available: %s%s", why, "");
    return false;
  }
  sf__kernel_cache_key(src, arch, key);
  const char *dir = sf__kernel_cache_dir();
  char path[4200];
  snprintf(path, sizeof path, "%s/%s-%s.cubin", dir, key, arch);
  if (read_entry(path, out)) {
    *hit = true;
    return true;
  }
  if (!sf__nvrtc_compile(src, name, arch, out, log))
    return false;
  write_entry(dir, path, out);
  return true;
}
