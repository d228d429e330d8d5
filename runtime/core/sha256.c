/*
 * sha256.c — SHA-256 (FIPS 180-4): the kernel cache's keys and entry
 * checksums, the content hash of the executable a --nodes run deploys, and
 * (through crypto.c) the HMAC of the control plane's handshakes.
 *
 * Key design choice: a page of C here instead of OpenSSL's libcrypto, so
 * that every compiled program, head and workers alike, links only libc,
 * libm, libpthread and libdl, and runs on machines without OpenSSL (a bare
 * GPU node, a host with OpenSSL 1.1).  The rounds are unrolled by eight
 * with the variables renamed instead of moved, and the message schedule
 * is computed in a ring of 16 words as it is used: about as fast as
 * coreutils' sha256sum (docs/cluster.md, "What a node needs").  Checked
 * against the FIPS vectors in tests/unit/test_rt_gpu.c and, streamed in
 * pieces, in tests/unit/test_rt_wire.c.
 */
#include <string.h>

#include "core.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static inline uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* One round with the eight working variables named by position, so that
 * eight rounds in a row rotate the names instead of moving values; the
 * message schedule is a ring of 16 words computed as it is consumed. */
#define S0(x) (ror(x, 2) ^ ror(x, 13) ^ ror(x, 22))
#define S1(x) (ror(x, 6) ^ ror(x, 11) ^ ror(x, 25))
#define s0(x) (ror(x, 7) ^ ror(x, 18) ^ ((x) >> 3))
#define s1(x) (ror(x, 17) ^ ror(x, 19) ^ ((x) >> 10))
#define CH(e, f, g) ((g) ^ ((e) & ((f) ^ (g))))
#define MAJ(a, b, c) (((a) & (b)) | ((c) & ((a) | (b))))
#define W(i) w[(i) & 15]
#define SCHED(i) (W(i) += s1(W((i) - 2)) + W((i) - 7) + s0(W((i) - 15)))
#define ROUND(a, b, c, d, e, f, g, h, i, wi)              \
  do {                                                    \
    uint32_t t1 = h + S1(e) + CH(e, f, g) + K[i] + (wi);  \
    d += t1;                                              \
    h = t1 + S0(a) + MAJ(a, b, c);                        \
  } while (0)
#define EIGHT(i, WI)                            \
  ROUND(a, b, c, d, e, f, g, h, (i) + 0, WI((i) + 0)); \
  ROUND(h, a, b, c, d, e, f, g, (i) + 1, WI((i) + 1)); \
  ROUND(g, h, a, b, c, d, e, f, (i) + 2, WI((i) + 2)); \
  ROUND(f, g, h, a, b, c, d, e, (i) + 3, WI((i) + 3)); \
  ROUND(e, f, g, h, a, b, c, d, (i) + 4, WI((i) + 4)); \
  ROUND(d, e, f, g, h, a, b, c, (i) + 5, WI((i) + 5)); \
  ROUND(c, d, e, f, g, h, a, b, (i) + 6, WI((i) + 6)); \
  ROUND(b, c, d, e, f, g, h, a, (i) + 7, WI((i) + 7))

static void blocks(uint32_t st[8], const uint8_t *p, size_t n) {
  for (; n--; p += 64) {
    uint32_t w[16];
    for (int i = 0; i < 16; i++)
      w[i] = load_be32(p + 4 * i);
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6],
             h = st[7];
    EIGHT(0, W);
    EIGHT(8, W);
    for (int i = 16; i < 64; i += 16) {
      EIGHT(i, SCHED);
      EIGHT(i + 8, SCHED);
    }
    st[0] += a, st[1] += b, st[2] += c, st[3] += d, st[4] += e, st[5] += f, st[6] += g,
        st[7] += h;
  }
}

void sf__sha256_init(sf__sha256_ctx *c) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, iv, sizeof iv);
  c->bytes = 0;
  c->used = 0;
}

void sf__sha256_update(sf__sha256_ctx *c, const void *data, size_t n) {
  const uint8_t *p = data;
  c->bytes += n;
  if (c->used) {
    size_t k = 64 - c->used < n ? 64 - c->used : n;
    memcpy(c->buf + c->used, p, k);
    c->used += k, p += k, n -= k;
    if (c->used < 64)
      return;
    blocks(c->h, c->buf, 1);
    c->used = 0;
  }
  blocks(c->h, p, n / 64);
  p += n & ~(size_t)63;
  memcpy(c->buf, p, n & 63);
  c->used = n & 63;
}

void sf__sha256_final(sf__sha256_ctx *c, uint8_t out[32]) {
  uint64_t bits = c->bytes * 8;
  uint8_t pad[72] = {0x80};
  size_t k = c->used < 56 ? 56 - c->used : 120 - c->used;
  for (int i = 0; i < 8; i++)
    pad[k + i] = (uint8_t)(bits >> (56 - 8 * i));
  sf__sha256_update(c, pad, k + 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++)
      out[4 * i + j] = (uint8_t)(c->h[i] >> (24 - 8 * j));
}

void sf__sha256(const void *data, size_t n, uint8_t out[32]) {
  sf__sha256_ctx c;
  sf__sha256_init(&c);
  sf__sha256_update(&c, data, n);
  sf__sha256_final(&c, out);
}

void sf__sha256_hex(const void *data, size_t n, char out[65]) {
  uint8_t d[32];
  sf__sha256(data, n, d);
  for (int i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
}
