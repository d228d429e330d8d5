/*
 * hostfile.c — the host list of a multi-node run: `--nodes FILE` in the
 * OpenMPI/DeepSpeed format, or `--nodes host1,host2`.
 *
 *   # comment                      ignored, as are blank lines
 *   node1                          port 22, slots and gpus detected
 *   node2 slots=8 gpus=4           per-host resources
 *   node3:2222 slots=4             SSH port after a colon ...
 *   node4 port=2222                ... or as a key
 *   [fe80::1]:2222                 IPv6 in brackets when a port follows
 *   node5 max_slots=8              accepted for OpenMPI files (checked, unused)
 *
 * Key design choice: strict.  A duplicate host (same name and port), an
 * unknown key, a repeated key, a bad number or a file without hosts is an
 * error naming file:line, as DeepSpeed does; a typo in a hostfile must not
 * silently run a job on fewer machines.  Two entries for one machine with
 * different ports are distinct nodes (that is how tests simulate a cluster).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "net.h"

#define HOSTNAME_MAX 255


void sf__hostlist_free(sf__hostlist *l) {
  for (int i = 0; i < l->n; i++)
    free(l->hosts[i].name);
  free(l->hosts);
  free(l->source);
  *l = (sf__hostlist){0};
}

/* A whole decimal number in [lo, hi]; false otherwise. */
static bool parse_num(const char *s, size_t n, long lo, long hi, int *out) {
  if (n == 0 || n > 9)
    return false;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi)
    return false;
  *out = (int)v;
  return true;
}

/* Characters allowed in a host name or address (RFC 1123 names, IPv4,
 * IPv6 inside brackets, and user-style dots and underscores). */
static bool host_char(char c, bool v6) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_' || (v6 && (c == ':' || c == '%'));
}

/* "where" prefixes messages: "hosts.txt:3" or "--nodes". */
static int parse_host_word(const char *w, size_t n, const char *where, sf__host *h,
                           bool *port_given, char *err, size_t errlen) {
  const char *name = w, *port = NULL;
  size_t name_n = n, port_n = 0;
  bool v6 = false;
  if (n && w[0] == '[') {
    const char *close = memchr(w, ']', n);
    if (!close)
      return sf__net_fail(err, errlen, "%s: missing ']' in host '%.*s'", where, (int)n, w);
    name = w + 1;
    name_n = (size_t)(close - name);
    v6 = true;
    size_t rest = n - (size_t)(close + 1 - w);
    if (rest) {
      if (close[1] != ':')
        return sf__net_fail(err, errlen, "%s: expected ':PORT' after ']' in '%.*s'", where, (int)n, w);
      port = close + 2;
      port_n = rest - 1;
    }
  } else {
    const char *colon = memchr(w, ':', n);
    if (colon) {
      name_n = (size_t)(colon - w);
      port = colon + 1;
      port_n = n - name_n - 1;
    }
  }
  if (name_n == 0)
    return sf__net_fail(err, errlen, "%s: empty host name in '%.*s'", where, (int)n, w);
  if (name_n > HOSTNAME_MAX)
    return sf__net_fail(err, errlen, "%s: host name longer than %d characters", where, HOSTNAME_MAX);
  for (size_t i = 0; i < name_n; i++)
    if (!host_char(name[i], v6))
      return sf__net_fail(err, errlen, "%s: invalid character '%c' in host '%.*s'", where, name[i],
                  (int)n, w);
  h->port = 22;
  *port_given = port != NULL;
  if (port && !parse_num(port, port_n, 1, 65535, &h->port))
    return sf__net_fail(err, errlen, "%s: invalid port '%.*s' (expected 1 to 65535)", where,
                (int)port_n, port);
  h->name = malloc(name_n + 1);
  if (!h->name)
    return sf__net_fail(err, errlen, "%s: out of memory", where);
  memcpy(h->name, name, name_n);
  h->name[name_n] = '\0';
  return 0;
}

/* key=value after the host word. */
static int parse_key(const char *w, size_t n, const char *where, sf__host *h, bool port_given,
                     unsigned *seen, char *err, size_t errlen) {
  static const char *const keys[] = {"slots", "gpus", "port", "max_slots", "max-slots"};
  const char *eq = memchr(w, '=', n);
  if (!eq)
    return sf__net_fail(err, errlen, "%s: unexpected '%.*s' (expected key=value: slots, gpus, port)",
                where, (int)n, w);
  size_t kn = (size_t)(eq - w), vn = n - kn - 1;
  const char *v = eq + 1;
  int k = -1;
  for (int i = 0; i < 5; i++)
    if (strlen(keys[i]) == kn && !memcmp(keys[i], w, kn))
      k = i;
  if (k < 0)
    return sf__net_fail(err, errlen, "%s: unknown key '%.*s' (expected slots, gpus, port or max_slots)",
                where, (int)kn, w);
  if (k == 4)
    k = 3; /* max-slots is the same key as max_slots */
  if (*seen & (1u << k))
    return sf__net_fail(err, errlen, "%s: '%s' given twice", where, keys[k]);
  *seen |= 1u << k;
  int val = 0;
  switch (k) {
  case 0:
    if (!parse_num(v, vn, 1, 1 << 20, &h->slots))
      return sf__net_fail(err, errlen, "%s: invalid slots '%.*s' (expected a number from 1)", where,
                  (int)vn, v);
    return 0;
  case 1:
    if (!parse_num(v, vn, 0, 1 << 16, &h->gpus))
      return sf__net_fail(err, errlen, "%s: invalid gpus '%.*s' (expected a number from 0)", where,
                  (int)vn, v);
    return 0;
  case 2:
    if (port_given)
      return sf__net_fail(err, errlen, "%s: port given both after ':' and as port=", where);
    if (!parse_num(v, vn, 1, 65535, &h->port))
      return sf__net_fail(err, errlen, "%s: invalid port '%.*s' (expected 1 to 65535)", where, (int)vn,
                  v);
    return 0;
  default:
    if (!parse_num(v, vn, 1, 1 << 20, &val))
      return sf__net_fail(err, errlen, "%s: invalid max_slots '%.*s' (expected a number from 1)", where,
                  (int)vn, v);
    return 0;
  }
}

static int add_host(sf__hostlist *l, const sf__host *h, const char *where, char *err,
                    size_t errlen) {
  for (int i = 0; i < l->n; i++)
    if (l->hosts[i].port == h->port && !strcmp(l->hosts[i].name, h->name)) {
      if (l->hosts[i].line)
        return sf__net_fail(err, errlen, "%s: duplicate host '%s' port %d (first on line %d)", where,
                    h->name, h->port, l->hosts[i].line);
      return sf__net_fail(err, errlen, "%s: duplicate host '%s' port %d", where, h->name, h->port);
    }
  sf__host *nh = realloc(l->hosts, (size_t)(l->n + 1) * sizeof *nh);
  if (!nh)
    return sf__net_fail(err, errlen, "%s: out of memory", where);
  l->hosts = nh;
  l->hosts[l->n++] = *h;
  return 0;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* One line without its newline; blank and comment-only lines add nothing. */
static int parse_line(sf__hostlist *l, const char *s, size_t n, const char *where, char *err,
                      size_t errlen) {
  const char *hash = memchr(s, '#', n);
  if (hash)
    n = (size_t)(hash - s);
  size_t i = 0;
  sf__host h = {NULL, 22, -1, -1, 0};
  bool have_host = false, port_given = false;
  unsigned seen = 0;
  while (i < n) {
    while (i < n && is_space(s[i]))
      i++;
    size_t b = i;
    while (i < n && !is_space(s[i]))
      i++;
    if (i == b)
      break;
    int r;
    if (!have_host) {
      r = parse_host_word(s + b, i - b, where, &h, &port_given, err, errlen);
      have_host = r == 0;
    } else {
      r = parse_key(s + b, i - b, where, &h, port_given, &seen, err, errlen);
    }
    if (r) {
      free(h.name);
      return -1;
    }
  }
  if (!have_host)
    return 0;
  if (add_host(l, &h, where, err, errlen)) {
    free(h.name);
    return -1;
  }
  return 0;
}

int sf__hostfile_parse(const char *text, size_t len, const char *fname, sf__hostlist *out,
                       char *err, size_t errlen) {
  *out = (sf__hostlist){0};
  char where[320];
  int line = 1;
  for (size_t i = 0; i < len; line++) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
    if (memchr(text + i, '\0', n)) {
      sf__hostlist_free(out);
      return sf__net_fail(err, errlen, "%s:%d: NUL byte in hostfile", fname, line);
    }
    snprintf(where, sizeof where, "%s:%d", fname, line);
    int before = out->n;
    if (parse_line(out, text + i, n, where, err, errlen)) {
      sf__hostlist_free(out);
      return -1;
    }
    if (out->n > before)
      out->hosts[out->n - 1].line = line;
    i += n + (nl ? 1 : 0);
  }
  if (out->n == 0)
    return sf__net_fail(err, errlen, "%s: no hosts in hostfile", fname);
  out->source = strdup(fname);
  return 0;
}

int sf__hostlist_parse(const char *list, sf__hostlist *out, char *err, size_t errlen) {
  *out = (sf__hostlist){0};
  const char *p = list;
  for (int k = 1;; k++) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    char where[64];
    snprintf(where, sizeof where, "--nodes entry %d", k);
    if (n == 0) {
      sf__hostlist_free(out);
      return sf__net_fail(err, errlen, "%s: empty host name", where);
    }
    sf__host h = {NULL, 22, -1, -1, 0};
    bool port_given;
    if (parse_host_word(p, n, where, &h, &port_given, err, errlen) || add_host(out, &h, where, err, errlen)) {
      free(h.name);
      sf__hostlist_free(out);
      return -1;
    }
    if (!comma)
      break;
    p = comma + 1;
  }
  out->source = strdup("--nodes");
  return 0;
}

int sf__hosts_from_arg(const char *arg, sf__hostlist *out, char *err, size_t errlen) {
  *out = (sf__hostlist){0};
  FILE *f = fopen(arg, "rb");
  if (!f) {
    bool looks_like_file = strchr(arg, '/') || (strchr(arg, '.') && !strchr(arg, ',') &&
                                                strstr(arg, ".txt"));
    if (errno != ENOENT || looks_like_file)
      return sf__net_fail(err, errlen, "cannot read hostfile '%s': %s", arg, strerror(errno));
    return sf__hostlist_parse(arg, out, err, errlen);
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t k;
  while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      if (cap >= ((size_t)16 << 20)) {
        free(buf);
        fclose(f);
        return sf__net_fail(err, errlen, "%s: hostfile larger than 16 MiB", arg);
      }
      char *nb = realloc(buf, cap *= 2);
      if (!nb)
        free(buf);
      buf = nb;
    }
  }
  bool bad = ferror(f);
  fclose(f);
  if (!buf || bad) {
    free(buf);
    return sf__net_fail(err, errlen, "cannot read hostfile '%s'", arg);
  }
  int r = sf__hostfile_parse(buf, n, arg, out, err, errlen);
  free(buf);
  return r;
}
