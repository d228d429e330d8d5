/*
 * crypto.c — file hashing and HMAC-SHA256 (RFC 2104) on the runtime's own
 * SHA-256 (sha256.c), plus kernel randomness and constant-time comparison,
 * for deployment (content hash of the executable) and the control plane's
 * challenge-response.
 *
 * Key design choice: no OpenSSL.  Head and workers hash and MAC with
 * sha256.c, so a node needs no libcrypto at all (one with OpenSSL 1.1, or
 * none, joins a run) and a worker loads no library beyond libc; only the
 * head loads libssh2 (ssh.c), which brings its own libcrypto.  The 256-bit
 * run secret comes from getrandom(2).  Checked against the RFC 4231
 * vectors in tests/unit/test_rt_wire.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "net.h"

int sf__sha256_file(const char *path, uint8_t out[SF__HASH_LEN], char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  sf__sha256_ctx c;
  sf__sha256_init(&c);
  /* On the heap, not thread-local: static TLS is zeroed for every thread
   * the pool starts. */
  enum { BUF = 1 << 16 };
  uint8_t *buf = malloc(BUF);
  if (!buf) {
    snprintf(err, errlen, "cannot hash %s: out of memory", path);
    close(fd);
    return -1;
  }
  for (;;) {
    ssize_t k = read(fd, buf, BUF);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
      free(buf);
      close(fd);
      return -1;
    }
    if (k == 0)
      break;
    sf__sha256_update(&c, buf, (size_t)k);
  }
  free(buf);
  close(fd);
  sf__sha256_final(&c, out);
  return 0;
}

/* RFC 2104 with SHA-256's 64-byte block: a key longer than a block is
 * hashed first; H((K ^ opad) || H((K ^ ipad) || msg)). */
void sf__hmac_sha256(const uint8_t *key, size_t klen, const void *msg, size_t n,
                     uint8_t out[SF__HASH_LEN]) {
  uint8_t k[64] = {0}, pad[64], inner[SF__HASH_LEN];
  if (klen > sizeof k)
    sf__sha256(key, klen, k);
  else if (klen)
    memcpy(k, key, klen);
  sf__sha256_ctx c;
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x36;
  sf__sha256_init(&c);
  sf__sha256_update(&c, pad, sizeof pad);
  sf__sha256_update(&c, msg, n);
  sf__sha256_final(&c, inner);
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x5c;
  sf__sha256_init(&c);
  sf__sha256_update(&c, pad, sizeof pad);
  sf__sha256_update(&c, inner, sizeof inner);
  sf__sha256_final(&c, out);
  memset(k, 0, sizeof k);
  memset(pad, 0, sizeof pad);
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
