/*
 * crypto.c — SHA-256 and HMAC-SHA256 from OpenSSL's libcrypto, plus kernel
 * randomness and constant-time comparison, for deployment (content hash of
 * the executable) and the control plane's challenge-response.
 *
 * Key design choice: libcrypto is loaded with dlopen on first use, like
 * libssh2 (ssh.c) and the CUDA libraries, so an executable that runs on one
 * machine links and needs nothing beyond libc; only `--nodes` runs (head
 * and workers) need libcrypto.so.3, which libssh2 depends on anyway.  The
 * 256-bit run secret comes from getrandom(2), never from libcrypto's RNG.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "internal.h"
#include "net.h"

typedef struct evp_md_st EVP_MD;
typedef struct evp_md_ctx_st EVP_MD_CTX;

static struct {
  const EVP_MD *(*sha256)(void);
  EVP_MD_CTX *(*ctx_new)(void);
  void (*ctx_free)(EVP_MD_CTX *);
  int (*init)(EVP_MD_CTX *, const EVP_MD *, void *engine);
  int (*update)(EVP_MD_CTX *, const void *, size_t);
  int (*final)(EVP_MD_CTX *, unsigned char *, unsigned int *);
  unsigned char *(*hmac)(const EVP_MD *, const void *, int, const unsigned char *, size_t,
                         unsigned char *, unsigned int *);
} C;
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
  static const char *const names[] = {"libcrypto.so.3", "libcrypto.so"};
  void *h = NULL;
  for (size_t i = 0; i < 2 && !h; i++)
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(load_error, sizeof load_error,
             "cannot load libcrypto.so.3 (install libssl3; needed by --nodes): %s", dlerror());
    return;
  }
#define SYM(field, name)                                                                \
  if (!(*(void **)&C.field = dlsym(h, name))) {                                         \
    snprintf(load_error, sizeof load_error, "libcrypto.so.3 lacks %s", name);           \
    return;                                                                             \
  }
  SYM(sha256, "EVP_sha256");
  SYM(ctx_new, "EVP_MD_CTX_new");
  SYM(ctx_free, "EVP_MD_CTX_free");
  SYM(init, "EVP_DigestInit_ex");
  SYM(update, "EVP_DigestUpdate");
  SYM(final, "EVP_DigestFinal_ex");
  SYM(hmac, "HMAC");
#undef SYM
}

bool sf__crypto_load(char *err, size_t errlen) {
  pthread_once(&load_once, load);
  if (load_error[0]) {
    if (errlen)
      snprintf(err, errlen, "%s", load_error);
    return false;
  }
  return true;
}

int sf__sha256_file(const char *path, uint8_t out[SF__HASH_LEN], char *err, size_t errlen) {
  if (!sf__crypto_load(err, errlen))
    return -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  EVP_MD_CTX *ctx = C.ctx_new();
  /* On the heap, not thread-local: static TLS is zeroed for every thread
   * the pool starts. */
  enum { BUF = 1 << 16 };
  uint8_t *buf = malloc(BUF);
  int ok = buf && ctx && C.init(ctx, C.sha256(), NULL) == 1;
  ssize_t k;
  while (ok && (k = read(fd, buf, BUF)) != 0) {
    if (k < 0 && errno == EINTR)
      continue;
    ok = k > 0 && C.update(ctx, buf, (size_t)k) == 1;
  }
  unsigned int n = 0;
  ok = ok && C.final(ctx, out, &n) == 1 && n == SF__HASH_LEN;
  if (ctx)
    C.ctx_free(ctx);
  free(buf);
  close(fd);
  if (!ok) {
    snprintf(err, errlen, "cannot hash %s", path);
    return -1;
  }
  return 0;
}

/* Callers have passed sf__crypto_load before any MAC is needed (the head at
 * start-up, the worker before it connects); a MAC of zeros would only make
 * authentication fail, never pass. */
void sf__hmac_sha256(const uint8_t *key, size_t klen, const void *msg, size_t n,
                     uint8_t out[SF__HASH_LEN]) {
  unsigned int len = 0;
  memset(out, 0, SF__HASH_LEN);
  if (!sf__crypto_load(NULL, 0) || !C.hmac(C.sha256(), key, (int)klen, msg, n, out, &len))
    memset(out, 0, SF__HASH_LEN);
}

int sf__random_bytes(void *buf, size_t n) {
  uint8_t *p = buf;
  while (n) {
    ssize_t k = getrandom(p, n, 0);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

bool sf__ct_equal(const void *a, const void *b, size_t n) {
  const volatile uint8_t *x = a, *y = b;
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++)
    d |= x[i] ^ y[i];
  return d == 0;
}

void sf__hex(const uint8_t *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool sf__unhex(const char *in, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int hi = hexval(in[2 * i]), lo = hi < 0 ? -1 : hexval(in[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}
