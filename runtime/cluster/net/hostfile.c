/*
 * hostfile.c — the host list of a multi-node run: `--nodes FILE` in the
 * MPICH and OpenMPI/DeepSpeed formats, or `--nodes a,b:2,user@c` as
 * `mpirun -H` takes it.  Every accepted form:
 *
 *   # comment                      ignored, as are blank lines
 *   node1                          ~/.ssh/config decides port, user, key...
 *   node2:4                        4 slots (MPICH, mpirun -H), never a port
 *   node2 slots=8 gpus=4           per-host resources (OpenMPI, DeepSpeed)
 *   alice@node3                    the login, over the config's User
 *   alice@node3:4                  both
 *   [node4]:2222                   SSH port 2222 (OpenSSH's known_hosts form)
 *   node4 port=2222                the same, as a key
 *   [fe80::1]  [fe80::1]:2222      IPv6 always in brackets
 *   node5 max_slots=8              accepted for OpenMPI files (checked, unused)
 *
 * Key design choices:
 *  - A colon after a bare name is a slot count, as in MPICH and Open MPI's
 *    `-H`: that is how HPC users write hostfiles.  A port needs brackets
 *    ([host]:PORT, the spelling of known_hosts and ssh-keygen -R) or port=,
 *    so the two can never be confused; the message for a bad `host:N`
 *    says so.
 *  - The name is kept as written (an alias of ~/.ssh/config, a name or an
 *    address): sshconfig.c resolves it as ssh would, and messages show it.
 *  - Strict.  A duplicate host (same name and port as written), an unknown
 *    key, a repeated key, slots or a port given twice, a bad number or a
 *    file without hosts is an error naming file:line, as DeepSpeed does; a
 *    typo in a hostfile must not silently run a job on fewer machines.  Two
 *    entries for one machine with different ports are distinct nodes (that
 *    is how tests simulate a cluster).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flagnames.h" /* SF__MAX_THREADS: a worker runs host:N slots as --threads N */
#include "net.h"

#define HOSTNAME_MAX 255


void sf__hostlist_free(sf__hostlist *l) {
  for (int i = 0; i < l->n; i++) {
    free(l->hosts[i].name);
    free(l->hosts[i].user);
  }
  free(l->hosts);
  free(l->source);
  *l = (sf__hostlist){0};
}

static void host_free(sf__host *h) {
  free(h->name);
  free(h->user);
  h->name = h->user = NULL;
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

/* User names: POSIX's portable set plus what directories add ('@' of a
 * domain, '\\' of DOMAIN\\user, '$' of machine accounts).  Quotes, spaces
 * and brackets never occur and would only hide a typo. */
static bool user_char(char c) {
  return host_char(c, false) || c == '@' || c == '\\' || c == '$';
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

#define SLOTS_HINT "(host:N is N slots, as in MPICH; an SSH port is [host]:PORT or port=PORT)"

/* The user before the last '@' (as OpenSSH splits user@host). */
static int parse_user(const char *w, size_t n, size_t at, const char *where, sf__host *h,
                      char *err, size_t errlen) {
  if (at == 0)
    return sf__net_fail(err, errlen, "%s: empty user name in '%.*s'", where, (int)n, w);
  if (w[0] == '-')
    return sf__net_fail(err, errlen, "%s: user '%.*s' of '%.*s' starts with '-'", where,
                        (int)at, w, (int)n, w);
  for (size_t i = 0; i < at; i++)
    if (!user_char(w[i]))
      return sf__net_fail(err, errlen, "%s: invalid character '%c' in user '%.*s' of '%.*s'",
                          where, w[i], (int)at, w, (int)n, w);
  h->user = dup_n(w, at);
  return h->user ? 0 : sf__net_fail(err, errlen, "%s: out of memory", where);
}

/* The host word: [user@]name[:SLOTS] or [user@][name][:PORT].  "where"
 * prefixes messages: "hosts.txt:3" or "--nodes entry 2". */
static int parse_host_word(const char *w, size_t n, const char *where, sf__host *h,
                           bool *slots_given, char *err, size_t errlen) {
  const char *at = NULL;
  for (size_t i = 0; i < n && w[i] != '['; i++)
    if (w[i] == '@')
      at = w + i;
  if (at && parse_user(w, n, (size_t)(at - w), where, h, err, errlen))
    return -1;
  const char *name = at ? at + 1 : w, *end = w + n;
  size_t name_n = (size_t)(end - name);
  bool v6 = false;
  if (name < end && name[0] == '[') {
    const char *close = memchr(name, ']', name_n);
    if (!close)
      return sf__net_fail(err, errlen, "%s: missing ']' in host '%.*s'", where, (int)n, w);
    v6 = true;
    if (close + 1 < end) {
      if (close[1] != ':')
        return sf__net_fail(err, errlen, "%s: expected ':PORT' after ']' in '%.*s'", where,
                            (int)n, w);
      const char *port = close + 2;
      if (!parse_num(port, (size_t)(end - port), 1, 65535, &h->port))
        return sf__net_fail(err, errlen, "%s: invalid port '%.*s' (expected 1 to 65535)", where,
                            (int)(end - port), port);
    }
    name++;
    name_n = (size_t)(close - name);
  } else {
    const char *colon = memchr(name, ':', name_n);
    if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1)))
      return sf__net_fail(err, errlen, "%s: IPv6 address '%.*s' must be in brackets: [%.*s]",
                          where, (int)name_n, name, (int)name_n, name);
    if (colon) {
      name_n = (size_t)(colon - name);
      if (name_n == 0)
        return sf__net_fail(err, errlen, "%s: empty host name in '%.*s'", where, (int)n, w);
      const char *k = colon + 1;
      /* At most what a worker's --threads takes: `node:2222` written for a
       * port in an older sflow must be an error, not 2222 slots. */
      if (!parse_num(k, (size_t)(end - k), 1, SF__MAX_THREADS, &h->slots))
        return sf__net_fail(err, errlen, "%s: invalid slots '%.*s' in '%.*s' (1 to %d) " SLOTS_HINT,
                            where, (int)(end - k), k, (int)n, w, SF__MAX_THREADS);
      *slots_given = true;
    }
  }
  if (name_n == 0)
    return sf__net_fail(err, errlen, "%s: empty host name in '%.*s'", where, (int)n, w);
  if (name_n > HOSTNAME_MAX)
    return sf__net_fail(err, errlen, "%s: host name longer than %d characters", where, HOSTNAME_MAX);
  if (name[0] == '-')
    return sf__net_fail(err, errlen, "%s: host '%.*s' starts with '-'", where, (int)n, w);
  for (size_t i = 0; i < name_n; i++)
    if (!host_char(name[i], v6))
      return sf__net_fail(err, errlen, "%s: invalid character '%c' in host '%.*s'", where, name[i],
                  (int)n, w);
  h->name = dup_n(name, name_n);
  return h->name ? 0 : sf__net_fail(err, errlen, "%s: out of memory", where);
}

/* The keys of a hostfile line, one row each:
 *   K(ID, name, alias, field, lo, hi, expected, shown)
 * field is where the value goes (AT(member) of sf__host, or NOWHERE for a
 * key that is checked and ignored); a value outside lo..hi is "invalid
 * NAME 'v' (expected EXPECTED)"; shown puts the key in the message for a
 * word that is not key=value.  Adding a key is a row here and its field in
 * sf__host (HACKING.md, "Adding a hostfile key"). */
#define AT(member) ((long)offsetof(sf__host, member))
#define NOWHERE (-1L)
#define HOST_KEYS(K)                                                                           \
  K(SLOTS, "slots", NULL, AT(slots), 1, SF__MAX_THREADS,                                       \
    "a number from 1 to " SF__STR(SF__MAX_THREADS), true)                                      \
  K(GPUS, "gpus", NULL, AT(gpus), 0, 1 << 16, "a number from 0", true)                         \
  K(PORT, "port", NULL, AT(port), 1, 65535, "1 to 65535", true)                                \
  /* Open MPI's; accepted so its hostfiles read, not used. */                                  \
  K(MAX_SLOTS, "max_slots", "max-slots", NOWHERE, 1, 1 << 20, "a number from 1", false)

enum {
#define K(id, ...) KEY_##id,
  HOST_KEYS(K)
#undef K
  N_KEYS
};
_Static_assert(N_KEYS <= 32, "parse_key's set of keys seen is one unsigned");

static const struct host_key {
  const char *name, *alias;
  long field, lo, hi;
  const char *expected;
  bool shown;
} host_keys[] = {
#define K(id, name, alias, field, lo, hi, expected, shown) \
  [KEY_##id] = {name, alias, field, lo, hi, expected, shown},
    HOST_KEYS(K)
#undef K
};

/* "slots, gpus, port" (the shown keys) or "slots, gpus, port or
 * max_slots" (all of them), for messages. */
static const char *key_list(bool shown_only, char *buf, size_t n) {
  size_t at = 0;
  int last = N_KEYS - 1;
  while (shown_only && last > 0 && !host_keys[last].shown)
    last--;
  buf[0] = '\0';
  for (int k = 0; k <= last && at < n; k++) {
    if (shown_only && !host_keys[k].shown)
      continue;
    const char *sep = k == 0 ? "" : k < last || shown_only ? ", " : " or ";
    at += (size_t)snprintf(buf + at, n - at, "%s%s", sep, host_keys[k].name);
  }
  return buf;
}

static int find_key(const char *w, size_t n) {
  for (int k = 0; k < N_KEYS; k++) {
    const char *alias = host_keys[k].alias;
    if ((strlen(host_keys[k].name) == n && !memcmp(host_keys[k].name, w, n)) ||
        (alias && strlen(alias) == n && !memcmp(alias, w, n)))
      return k;
  }
  return -1;
}

/* key=value after the host word. */
static int parse_key(const char *w, size_t n, const char *where, sf__host *h, bool port_given,
                     bool slots_given, unsigned *seen, char *err, size_t errlen) {
  char keys[128];
  const char *eq = memchr(w, '=', n);
  if (!eq)
    return sf__net_fail(err, errlen, "%s: unexpected '%.*s' (expected key=value: %s)", where,
                        (int)n, w, key_list(true, keys, sizeof keys));
  size_t kn = (size_t)(eq - w), vn = n - kn - 1;
  const char *v = eq + 1;
  int k = find_key(w, kn);
  if (k < 0)
    return sf__net_fail(err, errlen, "%s: unknown key '%.*s' (expected %s)", where, (int)kn, w,
                        key_list(false, keys, sizeof keys));
  const struct host_key *key = &host_keys[k];
  if (*seen & (1u << k))
    return sf__net_fail(err, errlen, "%s: '%s' given twice", where, key->name);
  *seen |= 1u << k;
  /* The keys that the host word can also give. */
  if (k == KEY_SLOTS && slots_given)
    return sf__net_fail(err, errlen, "%s: slots given both as host:N and as slots=", where);
  if (k == KEY_PORT && port_given)
    return sf__net_fail(err, errlen, "%s: port given both as [host]:PORT and as port=", where);
  int val = 0;
  if (!parse_num(v, vn, key->lo, key->hi, &val))
    return sf__net_fail(err, errlen, "%s: invalid %s '%.*s' (expected %s)", where, key->name,
                        (int)vn, v, key->expected);
  if (key->field != NOWHERE)
    *(int *)((char *)h + key->field) = val;
  return 0;
}

static int add_host(sf__hostlist *l, const sf__host *h, const char *where, char *err,
                    size_t errlen) {
  /* A port not given counts as 22 here: the config's Port for the name
   * would make both entries the same destination anyway. */
  int port = h->port ? h->port : 22;
  for (int i = 0; i < l->n; i++) {
    const sf__host *o = &l->hosts[i];
    if ((o->port ? o->port : 22) != port || strcmp(o->name, h->name))
      continue;
    char p[24] = "", first[40] = "";
    if (h->port)
      snprintf(p, sizeof p, " port %d", h->port);
    if (o->line)
      snprintf(first, sizeof first, " (first on line %d)", o->line);
    return sf__net_fail(err, errlen, "%s: duplicate host '%s'%s%s", where, h->name, p, first);
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
  sf__host h = {.slots = -1, .gpus = -1};
  bool have_host = false, slots_given = false;
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
      r = parse_host_word(s + b, i - b, where, &h, &slots_given, err, errlen);
      have_host = r == 0;
    } else {
      r = parse_key(s + b, i - b, where, &h, h.port != 0, slots_given, &seen, err, errlen);
    }
    if (r) {
      host_free(&h);
      return -1;
    }
  }
  if (!have_host)
    return 0;
  if (add_host(l, &h, where, err, errlen)) {
    host_free(&h);
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
    sf__host h = {.slots = -1, .gpus = -1};
    bool slots_given = false;
    if (parse_host_word(p, n, where, &h, &slots_given, err, errlen) ||
        add_host(out, &h, where, err, errlen)) {
      host_free(&h);
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
