/*
 * knownhosts.c — OpenSSH's known_hosts files: which lines name a host, and
 * whether the key a server showed is trusted, unknown, changed or revoked.
 *
 * Key design choice: sflow matches known_hosts itself instead of through
 * libssh2's knownhost API, which skips neither markers nor ports: it takes
 * `@revoked` for a host name, and accepts a key listed for `host` (port
 * 22) when asked about `[host]:2222`, and it has no wildcards.  The rules
 * here are OpenSSH's (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"):
 *  - a host is looked up as `host` on port 22 and `[host]:port` otherwise
 *    (HostKeyAlias: the alias alone); a bare `host` entry is port 22 only;
 *  - the hosts field is a comma-separated list of patterns with `*` and `?`,
 *    compared without case; a matching `!pattern` excludes the host even
 *    when another pattern matches;
 *  - a hashed entry `|1|salt|hash` holds HMAC-SHA1(salt, name) of that
 *    same name (base64), so it matches one name exactly;
 *  - `@revoked` marks a key that must never be accepted: sflow refuses it
 *    for every host, whatever the line's host patterns (the usual form is
 *    `@revoked * type key`), even when another line lists it;
 *  - `@cert-authority` lines trust certificates signed by that key; sflow
 *    accepts no host certificates, so for plain keys they are skipped.
 * Lines that cannot be parsed are skipped, as ssh skips them.  The key is
 * compared as its decoded blob, whose first field names its type, so a
 * line of another key type is neither a match nor a change.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

/* ------------------------------------------------------------ SHA-1 */

/* Hashed entries use HMAC-SHA1 (RFC 2104 over FIPS 180-4's SHA-1): the
 * only place sflow needs SHA-1, so it lives here. */
typedef struct sha1 {
  uint32_t h[5];
  uint8_t buf[64];
  size_t n;
  uint64_t bits;
} sha1;

static uint32_t rol(uint32_t x, int k) { return x << k | x >> (32 - k); }

static void sha1_block(sha1 *c, const uint8_t *p) {
  uint32_t w[80];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           p[4 * i + 3];
  for (int i = 16; i < 80; i++)
    w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = c->h[0], b = c->h[1], d = c->h[3], e = c->h[4], cc = c->h[2];
  for (int i = 0; i < 80; i++) {
    uint32_t f, k;
    if (i < 20)
      f = (b & cc) | (~b & d), k = 0x5a827999;
    else if (i < 40)
      f = b ^ cc ^ d, k = 0x6ed9eba1;
    else if (i < 60)
      f = (b & cc) | (b & d) | (cc & d), k = 0x8f1bbcdc;
    else
      f = b ^ cc ^ d, k = 0xca62c1d6;
    uint32_t t = rol(a, 5) + f + e + k + w[i];
    e = d, d = cc, cc = rol(b, 30), b = a, a = t;
  }
  c->h[0] += a, c->h[1] += b, c->h[2] += cc, c->h[3] += d, c->h[4] += e;
}

static void sha1_init(sha1 *c) {
  *c = (sha1){{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0}, {0}, 0, 0};
}

static void sha1_update(sha1 *c, const void *data, size_t n) {
  const uint8_t *p = data;
  c->bits += (uint64_t)n * 8;
  while (n) {
    size_t k = 64 - c->n < n ? 64 - c->n : n;
    memcpy(c->buf + c->n, p, k);
    c->n += k, p += k, n -= k;
    if (c->n == 64) {
      sha1_block(c, c->buf);
      c->n = 0;
    }
  }
}

static void sha1_final(sha1 *c, uint8_t out[20]) {
  uint64_t bits = c->bits;
  uint8_t pad = 0x80, zero = 0, len[8];
  sha1_update(c, &pad, 1);
  while (c->n != 56)
    sha1_update(c, &zero, 1);
  for (int i = 0; i < 8; i++)
    len[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha1_update(c, len, 8);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 4; j++)
      out[4 * i + j] = (uint8_t)(c->h[i] >> (24 - 8 * j));
}

void sf__hmac_sha1(const uint8_t *key, size_t klen, const void *msg, size_t n, uint8_t out[20]) {
  uint8_t k[64] = {0}, pad[64], inner[20];
  sha1 c;
  if (klen > 64) {
    sha1_init(&c);
    sha1_update(&c, key, klen);
    sha1_final(&c, k);
  } else {
    memcpy(k, key, klen);
  }
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x36;
  sha1_init(&c);
  sha1_update(&c, pad, 64);
  sha1_update(&c, msg, n);
  sha1_final(&c, inner);
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x5c;
  sha1_init(&c);
  sha1_update(&c, pad, 64);
  sha1_update(&c, inner, 20);
  sha1_final(&c, out);
}

/* ----------------------------------------------------------- base64 */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Decodes n characters of standard base64 (padding optional) into out;
 * the byte count, or -1 when it is not base64 or does not fit. */
long sf__base64_decode(const char *in, size_t n, uint8_t *out, size_t cap) {
  size_t k = 0;
  unsigned acc = 0;
  int bits = 0;
  while (n && in[n - 1] == '=')
    n--;
  for (size_t i = 0; i < n; i++) {
    const char *at = in[i] ? strchr(b64, in[i]) : NULL;
    if (!at)
      return -1;
    acc = (acc << 6) | (unsigned)(at - b64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (k == cap)
        return -1;
      out[k++] = (uint8_t)(acc >> bits);
    }
  }
  return (long)k;
}

/* Encodes n bytes with padding; out needs 4 * ceil(n / 3) + 1 bytes. */
void sf__base64_encode(const uint8_t *in, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                 (i + 2 < n ? in[i + 2] : 0);
    out[k++] = b64[v >> 18 & 63];
    out[k++] = b64[v >> 12 & 63];
    out[k++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
    out[k++] = i + 2 < n ? b64[v & 63] : '=';
  }
  out[k] = '\0';
}

/* ---------------------------------------------------------- matching */

void sf__kh_name(const char *host, int port, char *out, size_t n) {
  if (port < 0 || port == 22)
    snprintf(out, n, "%s", host);
  else
    snprintf(out, n, "[%s]:%d", host, port);
}

/* Glob match of name against pattern[0..plen) without case ('*', '?'). */
static bool glob(const char *name, const char *pat, size_t plen) {
  if (!plen)
    return !*name;
  if (*pat == '*') {
    for (const char *s = name;; s++) {
      if (glob(s, pat + 1, plen - 1))
        return true;
      if (!*s)
        return false;
    }
  }
  if (!*name || (*pat != '?' && tolower((unsigned char)*pat) != tolower((unsigned char)*name)))
    return false;
  return glob(name + 1, pat + 1, plen - 1);
}

/* 1 when a pattern of the comma-separated list matches name and no
 * negated one does, else 0 (OpenSSH's match_hostname). */
static int match_list(const char *name, const char *list, size_t n) {
  int got = 0;
  while (n) {
    const char *comma = memchr(list, ',', n);
    size_t k = comma ? (size_t)(comma - list) : n;
    bool neg = k && *list == '!';
    if (k > (size_t)neg && glob(name, list + neg, k - neg)) {
      if (neg)
        return 0;
      got = 1;
    }
    list += k, n -= k;
    if (comma)
      list++, n--;
  }
  return got;
}

/* |1|salt|hash: HMAC-SHA1(salt, name) == hash. */
static bool match_hashed(const char *name, const char *field, size_t n) {
  const char *salt = field + 3, *bar = memchr(salt, '|', n - 3);
  if (!bar)
    return false;
  uint8_t s[64], h[64], want[20];
  long sn = sf__base64_decode(salt, (size_t)(bar - salt), s, sizeof s);
  long hn = sf__base64_decode(bar + 1, n - (size_t)(bar + 1 - field), h, sizeof h);
  if (sn <= 0 || hn != 20)
    return false;
  sf__hmac_sha1(s, (size_t)sn, name, strlen(name), want);
  return sf__ct_equal(want, h, 20);
}

static bool host_matches(const char *name, const char *field, size_t n) {
  if (n > 3 && !memcmp(field, "|1|", 3))
    return match_hashed(name, field, n);
  return match_list(name, field, n) == 1;
}

/* The type a key blob names in its first field ("ssh-ed25519"). */
static bool blob_type(const uint8_t *b, size_t n, char *out, size_t cap) {
  if (n < 4)
    return false;
  uint32_t k = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
  if (k == 0 || k >= cap || k > n - 4)
    return false;
  memcpy(out, b + 4, k);
  out[k] = '\0';
  return true;
}

/* The next whitespace-separated field of [*p, end). */
static bool field(const char **p, const char *end, const char **f, size_t *n) {
  while (*p < end && (**p == ' ' || **p == '\t'))
    (*p)++;
  *f = *p;
  while (*p < end && **p != ' ' && **p != '\t')
    (*p)++;
  *n = (size_t)(*p - *f);
  return *n > 0;
}

static void decide(sf__kh_result *r, sf__kh_status st, const char *fname, int line) {
  if (st <= r->status)
    return;
  r->status = st;
  snprintf(r->where, sizeof r->where, "%s:%d", fname, line);
}

static void add_type(sf__kh_result *r, const char *t, size_t n) {
  char one[64];
  if (n >= sizeof one)
    return;
  memcpy(one, t, n);
  one[n] = '\0';
  for (const char *p = r->types; (p = strstr(p, one)); p += n)
    if ((p == r->types || p[-1] == ',') && (p[n] == ',' || !p[n]))
      return;
  size_t have = strlen(r->types);
  if (have + n + 2 < sizeof r->types)
    snprintf(r->types + have, sizeof r->types - have, "%s%s", have ? "," : "", one);
}

/* One line: marker, hosts, type, base64 key, comment. */
static void check_line(const char *p, const char *end, const char *fname, int line,
                       const char *name, const uint8_t *key, size_t keylen, const char *ktype,
                       sf__kh_result *r) {
  const char *f, *hosts, *type, *k64;
  size_t fn, hn, tn, kn;
  if (!field(&p, end, &f, &fn) || *f == '#')
    return;
  bool revoked = false;
  if (*f == '@') {
    if (fn == 8 && !memcmp(f, "@revoked", 8))
      revoked = true;
    else
      return; /* @cert-authority (certificates are not accepted) or unknown */
    if (!field(&p, end, &f, &fn))
      return;
  }
  hosts = f, hn = fn;
  if (!field(&p, end, &type, &tn) || !field(&p, end, &k64, &kn))
    return;
  uint8_t blob[16384];
  long bn = sf__base64_decode(k64, kn, blob, sizeof blob);
  char btype[64];
  if (bn <= 0 || !blob_type(blob, (size_t)bn, btype, sizeof btype))
    return; /* not a key ssh would read either */
  bool same_key = key && (size_t)bn == keylen && !memcmp(blob, key, keylen);
  if (revoked) {
    if (same_key)
      decide(r, SF__KH_REVOKED, fname, line);
    return;
  }
  if (!host_matches(name, hosts, hn))
    return;
  add_type(r, type, tn);
  if (same_key)
    decide(r, SF__KH_MATCH, fname, line);
  else if (key && !strcmp(btype, ktype))
    decide(r, SF__KH_MISMATCH, fname, line);
}

void sf__kh_check(const char *text, size_t len, const char *fname, const char *name,
                  const uint8_t *key, size_t keylen, sf__kh_result *r) {
  char ktype[64] = "";
  if (key && !blob_type(key, keylen, ktype, sizeof ktype))
    key = NULL; /* a blob without a type matches nothing */
  const char *p = text, *end = text + len;
  for (int line = 1; p < end; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end;
    if (e > p && e[-1] == '\r')
      e--;
    check_line(p, e, fname, line, name, key, keylen, ktype, r);
    p = nl ? nl + 1 : end;
  }
}

/* known_hosts files larger than this are refused rather than read. */
#define KH_FILE_MAX ((size_t)64 << 20)

int sf__kh_check_file(const char *path, const char *name, const uint8_t *key, size_t keylen,
                      sf__kh_result *r, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    if (errno == ENOENT)
      return 0; /* no file: nothing known (the first is created by TOFU) */
    return sf__net_fail(err, errlen, "cannot read known hosts file %s: %s", path, strerror(errno));
  }
  char *text = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (;;) {
    if (cap - n < 65536) {
      cap = cap ? cap * 2 : 65536;
      char *t = cap <= KH_FILE_MAX + 65536 ? realloc(text, cap) : NULL;
      if (!t) {
        rc = sf__net_fail(err, errlen, "known hosts file %s is too large (over %zu MB)", path,
                          KH_FILE_MAX >> 20);
        break;
      }
      text = t;
    }
    size_t k = fread(text + n, 1, cap - n, f);
    n += k;
    if (k == 0) {
      if (ferror(f))
        rc = sf__net_fail(err, errlen, "cannot read known hosts file %s: %s", path,
                          strerror(errno));
      break;
    }
  }
  fclose(f);
  if (!rc)
    sf__kh_check(text, n, path, name, key, keylen, r);
  free(text);
  return rc;
}

int sf__kh_line(const char *name, const uint8_t *key, size_t keylen, char *out, size_t n) {
  char type[64];
  if (!blob_type(key, keylen, type, sizeof type) || keylen > 12288)
    return -1;
  char enc[16400];
  sf__base64_encode(key, keylen, enc);
  int k = snprintf(out, n, "%s %s %s\n", name, type, enc);
  return k > 0 && (size_t)k < n ? 0 : -1;
}
