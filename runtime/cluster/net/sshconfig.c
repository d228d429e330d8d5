/*
 * sshconfig.c — the OpenSSH client configuration (ssh_config(5)) applied to
 * the hosts of a --nodes run, so that a hostfile naming `gpu1` reaches the
 * machine, port, login and key that `ssh gpu1` (and so mpirun and pdsh)
 * would use.
 *
 * Read: ~/.ssh/config, then /etc/ssh/ssh_config; `--ssh-config FILE` reads
 * only FILE and `--ssh-config none` nothing (ssh -F).  OpenSSH's rules:
 * keywords are case-insensitive, `Key value` or `Key=value`, values may be
 * quoted; `Host` lines hold whitespace-separated patterns with `*`, `?` and
 * `!negation`; `Match all|host|originalhost|user|localuser|canonical|final`
 * (comma lists, `!`) select blocks too (a `Match final` makes a second pass,
 * as ssh does), and a block with any other criterion is skipped with one
 * warning; `Include` takes globs, relative to ~/.ssh (/etc/ssh in
 * the system file), nested up to 16 deep; for every keyword the first value
 * obtained wins, except IdentityFile, whose lines add up in order.
 *
 * Used: HostName (%h), Port, User, IdentityFile and UserKnownHostsFile (~,
 * %d %h %i %k %L %l %n %p %r %u %%), HostKeyAlias, IdentitiesOnly,
 * StrictHostKeyChecking, and ProxyJump / ProxyCommand (%h %n %p %r %%), which
 * resolve into the hops before the host (ssh.c connects through them).
 * Other keywords are ignored.
 *
 * Key design choices:
 *  - Two steps: load parses and validates every line once (a bad Port
 *    anywhere is an error naming file:line, as ssh refuses it too, even in
 *    a block that matches no host), into a flat list of directives with
 *    markers where an Include begins and ends; resolve then walks that list
 *    once per host.  So 32 hosts read the files once, and the walk is the
 *    whole of OpenSSH's matching logic in one loop.
 *  - What the user says for one host beats the config, which beats the
 *    defaults: the hostfile's user@ and port, then the flags (--ssh-user,
 *    --ssh-key, --known-hosts, --accept-new-host-keys), then the config.
 *  - Host-key checking is never weakened: StrictHostKeyChecking no/off act
 *    as accept-new (record an unknown key, refuse a changed one), and ask
 *    as yes, since sflow never prompts.
 */
#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "net.h"

#define INCLUDE_DEPTH_MAX 16
#define CONFIG_SIZE_MAX ((size_t)4 << 20)

typedef enum {
  D_FILE,      /* a top-level file begins: all applies until a Host or Match */
  D_INC_BEGIN, /* an Include's file begins: the including block's state goes on */
  D_INC_END,   /* ... and ends: that state comes back */
  D_HOST,
  D_MATCH,
  D_HOSTNAME,
  D_PORT,
  D_USER,
  D_IDENTITYFILE,
  D_KNOWNHOSTS,
  D_STRICT,
  D_ALIAS,
  D_IDONLY,
  D_PROXYJUMP,
  D_PROXYCOMMAND,
  D_INCLUDE, /* only while parsing: expanded into D_INC_BEGIN..D_INC_END */
} dkind;

/* The keywords sflow reads; min/max arguments (0: any number). */
static const struct {
  const char *name;
  dkind kind;
  int min, max;
} KEYWORDS[] = {
    {"Host", D_HOST, 1, 0},
    {"Match", D_MATCH, 1, 0},
    {"Include", D_INCLUDE, 1, 0},
    {"HostName", D_HOSTNAME, 1, 1},
    {"Port", D_PORT, 1, 1},
    {"User", D_USER, 1, 1},
    {"IdentityFile", D_IDENTITYFILE, 1, 1},
    {"UserKnownHostsFile", D_KNOWNHOSTS, 1, 0},
    {"StrictHostKeyChecking", D_STRICT, 1, 1},
    {"HostKeyAlias", D_ALIAS, 1, 1},
    {"IdentitiesOnly", D_IDONLY, 1, 1},
    {"ProxyJump", D_PROXYJUMP, 1, 1},
    {"ProxyCommand", D_PROXYCOMMAND, 1, 0},
};
#define N_KEYWORDS ((int)(sizeof KEYWORDS / sizeof KEYWORDS[0]))

enum { SHK_YES = 1, SHK_ACCEPT_NEW };

typedef struct directive {
  dkind kind;
  int argc;
  char **argv;     /* owned; Match: criterion, argument, criterion, ... */
  int num;         /* Port; SHK_*; IdentitiesOnly 0/1; Match: 1 = unsupported */
  char where[300]; /* "file:line" */
} directive;

struct sf__sshcfg {
  directive *d;
  int n, cap;
  bool final_pass; /* a Match final: resolve walks twice, as ssh reads twice */
  char *warn; /* warnings, one per line (owned; NULL: none) */
  size_t warn_n;
};

/* ------------------------------------------------------------ helpers */

static const char *home_dir(char *buf, size_t n) {
  const char *home = getenv("HOME");
  if (home && *home)
    return home;
  /* getpwuid_r: hosts resolve on one thread, but ssh.c's threads call too. */
  struct passwd pwd, *pw = NULL;
  char pbuf[4096];
  getpwuid_r(getuid(), &pwd, pbuf, sizeof pbuf, &pw);
  snprintf(buf, n, "%s", pw ? pw->pw_dir : "/");
  return buf;
}

static const char *local_user(char *buf, size_t n) {
  struct passwd pwd, *pw = NULL;
  char pbuf[4096];
  getpwuid_r(getuid(), &pwd, pbuf, sizeof pbuf, &pw);
  const char *u = pw ? pw->pw_name : getenv("USER");
  if (!u || !*u)
    return NULL;
  snprintf(buf, n, "%s", u);
  return buf;
}

static void add_warning(sf__sshcfg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_warning(sf__sshcfg *c, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (k < 0)
    return;
  size_t len = strlen(line);
  char *w = realloc(c->warn, c->warn_n + len + 2);
  if (!w)
    return;
  c->warn = w;
  memcpy(w + c->warn_n, line, len);
  c->warn_n += len;
  w[c->warn_n++] = '\n';
  w[c->warn_n] = '\0';
}

static int push(sf__sshcfg *c, dkind kind, int argc, char **argv, int num, const char *where) {
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 32;
    directive *d = realloc(c->d, (size_t)cap * sizeof *d);
    if (!d)
      return -1;
    c->d = d;
    c->cap = cap;
  }
  directive *d = &c->d[c->n++];
  *d = (directive){kind, argc, argv, num, ""};
  snprintf(d->where, sizeof d->where, "%s", where);
  return 0;
}

static void free_argv(char **argv, int argc) {
  for (int i = 0; i < argc; i++)
    free(argv[i]);
  free(argv);
}

void sf__sshcfg_free(sf__sshcfg *c) {
  if (!c)
    return;
  for (int i = 0; i < c->n; i++)
    free_argv(c->d[i].argv, c->d[i].argc);
  free(c->d);
  free(c->warn);
  free(c);
}

const char *sf__sshcfg_warnings(const sf__sshcfg *c) { return c && c->warn ? c->warn : ""; }

/* ---------------------------------------------------------- tokenizer */

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

/* Splits s[0..n) into words as OpenSSH does: blanks separate; "..." and
 * '...' group; a backslash escapes a quote, a backslash or a blank; an
 * unquoted '#' starting a word begins a comment.  Returns the number of
 * words (argv owned by the caller), or -1 for an unterminated quote or no
 * memory. */
static int split_words(const char *s, size_t n, char ***argv_out) {
  char **argv = NULL;
  int argc = 0;
  size_t i = 0;
  char *buf = malloc(n + 1);
  if (!buf)
    return -1;
  for (;;) {
    while (i < n && is_blank(s[i]))
      i++;
    if (i >= n || s[i] == '#')
      break;
    size_t k = 0;
    char quote = 0;
    for (; i < n; i++) {
      char ch = s[i];
      if (!quote && is_blank(ch))
        break;
      if (ch == '\\' && i + 1 < n &&
          (s[i + 1] == '"' || s[i + 1] == '\'' || s[i + 1] == '\\' || is_blank(s[i + 1]))) {
        buf[k++] = s[++i];
      } else if (quote && ch == quote) {
        quote = 0;
      } else if (!quote && (ch == '"' || ch == '\'')) {
        quote = ch;
      } else {
        buf[k++] = ch;
      }
    }
    char **na = quote ? NULL : realloc(argv, (size_t)(argc + 2) * sizeof *argv);
    char *w = na ? malloc(k + 1) : NULL;
    if (!w) {
      if (na)
        argv = na;
      free_argv(argv, argc);
      free(buf);
      return -1;
    }
    argv = na;
    memcpy(w, buf, k);
    w[k] = '\0';
    argv[argc++] = w;
    argv[argc] = NULL;
  }
  free(buf);
  *argv_out = argv;
  return argc;
}

/* ------------------------------------------------------------- parser */

typedef struct parse_state {
  sf__sshcfg *c;
  bool system; /* /etc/ssh/ssh_config or what it includes: Include is relative to /etc/ssh */
  int depth;
  char *err;
  size_t errlen;
} parse_state;

static int parse_text(parse_state *ps, const char *text, size_t len, const char *fname);

static bool yes_no(const char *v, int *out) {
  if (!strcasecmp(v, "yes") || !strcasecmp(v, "true"))
    *out = 1;
  else if (!strcasecmp(v, "no") || !strcasecmp(v, "false"))
    *out = 0;
  else
    return false;
  return true;
}

static bool with_arg(const char *c) {
  return !strcasecmp(c, "host") || !strcasecmp(c, "originalhost") || !strcasecmp(c, "user") ||
         !strcasecmp(c, "localuser");
}

/* canonical and final match in ssh's last pass over the files, which it
 * makes when some Match says final (CanonicalizeHostname is not used). */
static bool post_pass(const char *c) {
  return !strcasecmp(c, "canonical") || !strcasecmp(c, "final");
}

/* Match's criteria, checked now so that resolve only evaluates.  An
 * unsupported criterion skips the block (never applies it by mistake). */
static int check_match(parse_state *ps, char **argv, int argc, int *unsupported,
                       const char *where) {
  static const char *const other[] = {"exec",      "localnetwork", "tagged",  "address",
                                      "localaddress", "localport", "rdomain", "version",
                                      "sessiontype", "command"};
  *unsupported = 0;
  for (int i = 0; i < argc; i++) {
    const char *c = argv[i][0] == '!' ? argv[i] + 1 : argv[i];
    if (with_arg(c)) {
      if (i + 1 >= argc)
        return sf__net_fail(ps->err, ps->errlen, "%s: Match %s needs an argument", where, c);
      i++;
      continue;
    }
    if (post_pass(c)) {
      ps->c->final_pass |= !strcasecmp(c, "final");
      continue;
    }
    if (!strcasecmp(c, "all")) {
      /* as ssh: alone, or right after canonical/final ("Match final all") */
      bool ok = i == argc - 1 && c == argv[i];
      for (int k = 0; k < i; k++)
        ok &= post_pass(argv[k]);
      if (!ok)
        return sf__net_fail(ps->err, ps->errlen, "%s: Match all cannot be combined with other "
                            "criteria", where);
      continue;
    }
    bool takes_arg = false;
    for (size_t k = 0; k < sizeof other / sizeof *other; k++)
      takes_arg |= !strcasecmp(c, other[k]);
    if (!*unsupported)
      add_warning(ps->c, "%s: Match %s is not supported by sflow; this Match block is skipped",
                  where, c);
    *unsupported = 1;
    if (takes_arg)
      i++;
  }
  return 0;
}

/* Include: each argument a glob, ~ expanded, relative to ~/.ssh or /etc/ssh. */
static int include(parse_state *ps, char **argv, int argc, const char *where) {
  if (ps->depth >= INCLUDE_DEPTH_MAX)
    return sf__net_fail(ps->err, ps->errlen, "%s: Include nested more than %d deep", where,
                        INCLUDE_DEPTH_MAX);
  for (int i = 0; i < argc; i++) {
    char hb[1024], pat[4096];
    const char *a = argv[i];
    if (a[0] == '~' && (a[1] == '/' || !a[1]))
      snprintf(pat, sizeof pat, "%s%s", home_dir(hb, sizeof hb), a + 1);
    else if (a[0] == '/')
      snprintf(pat, sizeof pat, "%s", a);
    else if (ps->system)
      snprintf(pat, sizeof pat, "/etc/ssh/%s", a);
    else
      snprintf(pat, sizeof pat, "%s/.ssh/%s", home_dir(hb, sizeof hb), a);
    glob_t g;
    int r = glob(pat, 0, NULL, &g);
    if (r == GLOB_NOMATCH)
      continue; /* as OpenSSH: an Include that matches nothing is fine */
    if (r)
      return sf__net_fail(ps->err, ps->errlen, "%s: cannot expand Include %s", where, a);
    for (size_t k = 0; k < g.gl_pathc; k++) {
      FILE *f = fopen(g.gl_pathv[k], "rb");
      if (!f)
        continue; /* as OpenSSH: an unreadable included file is skipped */
      char *buf = malloc(CONFIG_SIZE_MAX);
      size_t n = buf ? fread(buf, 1, CONFIG_SIZE_MAX, f) : 0;
      fclose(f);
      if (!buf || n == CONFIG_SIZE_MAX) {
        free(buf);
        globfree(&g);
        return sf__net_fail(ps->err, ps->errlen, "%s: %s is larger than 4 MiB", where,
                            g.gl_pathv[k]);
      }
      ps->depth++;
      int rc = push(ps->c, D_INC_BEGIN, 0, NULL, 0, where);
      rc = rc ? rc : parse_text(ps, buf, n, g.gl_pathv[k]);
      rc = rc ? rc : push(ps->c, D_INC_END, 0, NULL, 0, where);
      ps->depth--;
      free(buf);
      if (rc) {
        globfree(&g);
        if (!ps->err[0])
          sf__net_fail(ps->err, ps->errlen, "%s: out of memory", where);
        return -1;
      }
    }
    globfree(&g);
  }
  return 0;
}

/* One line: the keyword (up to a blank or '='), then its arguments. */
static int parse_line(parse_state *ps, const char *s, size_t n, const char *where) {
  size_t i = 0;
  while (i < n && is_blank(s[i]))
    i++;
  if (i >= n || s[i] == '#')
    return 0;
  size_t kb = i;
  while (i < n && !is_blank(s[i]) && s[i] != '=')
    i++;
  size_t kn = i - kb;
  while (i < n && is_blank(s[i]))
    i++;
  if (i < n && s[i] == '=')
    i++;
  int k = -1;
  for (int j = 0; j < N_KEYWORDS; j++)
    if (strlen(KEYWORDS[j].name) == kn && !strncasecmp(KEYWORDS[j].name, s + kb, kn))
      k = j;
  if (k < 0)
    return 0; /* a keyword sflow does not use (ssh itself reads it) */
  const char *name = KEYWORDS[k].name;
  char **argv = NULL;
  int argc = split_words(s + i, n - i, &argv);
  if (argc < 0)
    return sf__net_fail(ps->err, ps->errlen, "%s: unterminated quote in %s", where, name);
  int num = 0, rc = 0;
  dkind kind = KEYWORDS[k].kind;
  if (kind == D_PROXYCOMMAND && argc > 0) {
    /* As ssh: the command is the rest of the line as written, for
     * /bin/sh to split (quotes and all), not sflow's words. */
    size_t e = n;
    while (e > i && is_blank(s[e - 1]))
      e--;
    char *raw = strndup(s + i, e - i);
    free_argv(argv, argc);
    argv = raw ? calloc(2, sizeof *argv) : NULL;
    if (!argv) {
      free(raw);
      return sf__net_fail(ps->err, ps->errlen, "%s: out of memory", where);
    }
    argv[0] = raw;
    argc = 1;
  }
  if (argc < KEYWORDS[k].min)
    rc = sf__net_fail(ps->err, ps->errlen, "%s: %s needs an argument", where, name);
  else if (KEYWORDS[k].max && argc > KEYWORDS[k].max)
    rc = sf__net_fail(ps->err, ps->errlen, "%s: %s takes one argument, not %d", where, name,
                      argc);
  else if (kind == D_PORT) {
    char *end;
    long v = strtol(argv[0], &end, 10);
    if (!isdigit((unsigned char)argv[0][0]) || *end || v < 1 || v > 65535)
      rc = sf__net_fail(ps->err, ps->errlen, "%s: invalid Port '%s' (expected 1 to 65535)",
                        where, argv[0]);
    num = (int)v;
  } else if (kind == D_STRICT) {
    const char *v = argv[0];
    if (!strcasecmp(v, "yes") || !strcasecmp(v, "ask") || !strcasecmp(v, "true"))
      num = SHK_YES;
    else if (!strcasecmp(v, "accept-new") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
             !strcasecmp(v, "false"))
      num = SHK_ACCEPT_NEW;
    else
      rc = sf__net_fail(ps->err, ps->errlen,
                        "%s: invalid StrictHostKeyChecking '%s' (expected yes, ask, accept-new, "
                        "no or off)",
                        where, v);
  } else if (kind == D_IDONLY) {
    if (!yes_no(argv[0], &num))
      rc = sf__net_fail(ps->err, ps->errlen, "%s: invalid IdentitiesOnly '%s' (expected yes or "
                        "no)", where, argv[0]);
  } else if (kind == D_MATCH) {
    rc = check_match(ps, argv, argc, &num, where);
  } else if (kind == D_INCLUDE) {
    rc = include(ps, argv, argc, where);
    free_argv(argv, argc);
    return rc;
  }
  if (rc || push(ps->c, kind, argc, argv, num, where)) {
    free_argv(argv, argc);
    return rc ? rc : sf__net_fail(ps->err, ps->errlen, "%s: out of memory", where);
  }
  return 0;
}

static int parse_text(parse_state *ps, const char *text, size_t len, const char *fname) {
  char where[300];
  int line = 1;
  for (size_t i = 0; i < len; line++) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
    snprintf(where, sizeof where, "%s:%d", fname, line);
    if (memchr(text + i, '\0', n))
      return sf__net_fail(ps->err, ps->errlen, "%s: NUL byte in ssh config", where);
    if (parse_line(ps, text + i, n, where))
      return -1;
    i += n + (nl ? 1 : 0);
  }
  return 0;
}

/* Adds one top-level file.  missing_ok: the default files may not exist. */
static int add_file(sf__sshcfg *c, const char *path, bool system, bool missing_ok, char *err,
                    size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (missing_ok && errno == ENOENT)
      return 0;
    return sf__net_fail(err, errlen, "cannot read ssh config %s: %s", path, strerror(errno));
  }
  char *buf = malloc(CONFIG_SIZE_MAX);
  size_t n = buf ? fread(buf, 1, CONFIG_SIZE_MAX, f) : 0;
  bool bad = ferror(f);
  fclose(f);
  if (!buf || bad || n == CONFIG_SIZE_MAX) {
    free(buf);
    return sf__net_fail(err, errlen, "cannot read ssh config %s%s", path,
                        n == CONFIG_SIZE_MAX ? ": larger than 4 MiB" : "");
  }
  parse_state ps = {c, system, 0, err, errlen};
  err[0] = '\0';
  int rc = push(c, D_FILE, 0, NULL, 0, path);
  rc = rc ? sf__net_fail(err, errlen, "out of memory") : parse_text(&ps, buf, n, path);
  free(buf);
  return rc;
}

static sf__sshcfg *new_config(void) { return calloc(1, sizeof(sf__sshcfg)); }

int sf__sshcfg_parse(const char *text, size_t len, const char *fname, sf__sshcfg **out,
                     char *err, size_t errlen) {
  *out = new_config();
  if (!*out)
    return sf__net_fail(err, errlen, "out of memory");
  parse_state ps = {*out, false, 0, err, errlen};
  err[0] = '\0';
  if (push(*out, D_FILE, 0, NULL, 0, fname) || parse_text(&ps, text, len, fname)) {
    if (!err[0])
      sf__net_fail(err, errlen, "out of memory");
    sf__sshcfg_free(*out);
    *out = NULL;
    return -1;
  }
  return 0;
}

int sf__sshcfg_load(const char *path, sf__sshcfg **out, char *err, size_t errlen) {
  *out = new_config();
  if (!*out)
    return sf__net_fail(err, errlen, "out of memory");
  int rc = 0;
  if (path && !strcmp(path, "none")) {
    /* ssh -F none: no configuration at all */
  } else if (path) {
    rc = add_file(*out, path, false, false, err, errlen);
  } else {
    char hb[1024], user[1200];
    snprintf(user, sizeof user, "%s/.ssh/config", home_dir(hb, sizeof hb));
    rc = add_file(*out, user, false, true, err, errlen);
    if (!rc)
      rc = add_file(*out, "/etc/ssh/ssh_config", true, true, err, errlen);
  }
  if (rc) {
    sf__sshcfg_free(*out);
    *out = NULL;
  }
  return rc;
}

/* ----------------------------------------------------------- matching */

/* OpenSSH's wildcards: '*' any run of characters, '?' one; host names
 * compare without case. */
static bool wild(const char *p, const char *s, bool nocase) {
  for (; *p; p++, s++) {
    if (*p == '*') {
      while (p[1] == '*')
        p++;
      if (!p[1])
        return true;
      for (; *s; s++)
        if (wild(p + 1, s, nocase))
          return true;
      return false;
    }
    if (!*s)
      return false;
    if (*p != '?' && (nocase ? tolower((unsigned char)*p) != tolower((unsigned char)*s)
                             : *p != *s))
      return false;
  }
  return !*s;
}

/* A pattern list: true when some pattern matches and no negated one does. */
static bool match_patterns(char *const *pats, int n, const char *s, bool nocase) {
  bool hit = false;
  for (int i = 0; i < n; i++) {
    bool neg = pats[i][0] == '!';
    if (wild(pats[i] + neg, s, nocase)) {
      if (neg)
        return false;
      hit = true;
    }
  }
  return hit;
}

/* A comma-separated list, as Match takes it ("a*,!ab"). */
static bool match_list(const char *list, const char *s, bool nocase) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", list);
  char *pats[64];
  int n = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 64;
       t = strtok_r(NULL, ",", &save))
    pats[n++] = t;
  return match_patterns(pats, n, s, nocase);
}

/* What a host's walk has obtained so far: the first value of each. */
typedef struct found {
  const directive *hostname, *port, *user, *known, *strict, *alias, *idonly, *proxy;
  const directive *ids[SF__SSH_IDS_MAX];
  int nids;
  bool ids_dropped;
} found;

typedef struct mctx {
  const char *original; /* the name as written, lower case */
  const char *user;     /* hostfile or flag user; NULL: the config's so far */
  const char *local;    /* the local user */
} mctx;

/* HostName so far, %h expanded: what Match host compares (as OpenSSH). */
static void current_host(const found *f, const mctx *m, char *buf, size_t n) {
  if (!f->hostname) {
    snprintf(buf, n, "%s", m->original);
    return;
  }
  size_t k = 0;
  for (const char *p = f->hostname->argv[0]; *p && k + 1 < n; p++) {
    if (p[0] == '%' && p[1] == 'h') {
      k += (size_t)snprintf(buf + k, n - k, "%s", m->original);
      p++;
    } else if (p[0] == '%' && p[1] == '%') {
      buf[k++] = '%';
      p++;
    } else {
      buf[k++] = *p;
    }
    if (k >= n)
      k = n - 1;
  }
  buf[k] = '\0';
}

static bool match_block(const directive *d, const found *f, const mctx *m, bool post) {
  if (d->num)
    return false; /* unsupported criterion: skipped, warned at load */
  for (int i = 0; i < d->argc; i++) {
    bool neg = d->argv[i][0] == '!';
    const char *c = d->argv[i] + neg;
    if (!strcasecmp(c, "all"))
      continue;
    if (post_pass(c)) {
      if (post == neg)
        return false;
      continue;
    }
    const char *arg = d->argv[++i];
    char host[512];
    bool r;
    if (!strcasecmp(c, "host")) {
      current_host(f, m, host, sizeof host);
      r = match_list(arg, host, true);
    } else if (!strcasecmp(c, "originalhost")) {
      r = match_list(arg, m->original, true);
    } else if (!strcasecmp(c, "user")) {
      const char *u = m->user ? m->user : f->user ? f->user->argv[0] : m->local;
      r = match_list(arg, u ? u : "", false);
    } else {
      r = match_list(arg, m->local ? m->local : "", false);
    }
    if (r == neg)
      return false;
  }
  return true;
}

static void take(const directive **slot, const directive *d) {
  if (!*slot)
    *slot = d;
}

/* The walk: OpenSSH's "active" flag, with Include saving and restoring it
 * (and an Include inside an inactive block matching nothing at all). */
static void walk(const sf__sshcfg *c, const mctx *m, found *f, bool post) {
  struct state {
    bool active, never;
  } stack[INCLUDE_DEPTH_MAX + 1];
  int sp = 0;
  bool active = true, never = false;
  for (int i = 0; i < c->n; i++) {
    const directive *d = &c->d[i];
    switch (d->kind) {
    case D_FILE: active = true, never = false, sp = 0; break;
    case D_INC_BEGIN:
      if (sp <= INCLUDE_DEPTH_MAX)
        stack[sp++] = (struct state){active, never};
      never |= !active;
      break;
    case D_INC_END:
      if (sp > 0)
        sp--, active = stack[sp].active, never = stack[sp].never;
      break;
    case D_HOST: active = !never && match_patterns(d->argv, d->argc, m->original, true); break;
    case D_MATCH: active = !never && match_block(d, f, m, post); break;
    default:
      if (!active)
        break;
      switch (d->kind) {
      case D_HOSTNAME: take(&f->hostname, d); break;
      case D_PORT: take(&f->port, d); break;
      case D_USER: take(&f->user, d); break;
      case D_KNOWNHOSTS: take(&f->known, d); break;
      case D_STRICT: take(&f->strict, d); break;
      case D_ALIAS: take(&f->alias, d); break;
      case D_IDONLY: take(&f->idonly, d); break;
      case D_PROXYJUMP:
      case D_PROXYCOMMAND: take(&f->proxy, d); break;
      case D_IDENTITYFILE:
        for (int k = 0; k < f->nids; k++)
          if (f->ids[k] == d)
            d = NULL; /* the second pass meets the first pass's lines again */
        if (!d)
          break;
        if (f->nids < SF__SSH_IDS_MAX)
          f->ids[f->nids++] = d;
        else
          f->ids_dropped = true;
        break;
      default: break;
      }
    }
  }
}

/* ---------------------------------------------------------- expansion */

typedef struct xctx {
  const char *h, *n, *r, *u, *d, *k;
  int p;
} xctx;

/* ~ and %-tokens of IdentityFile and UserKnownHostsFile (ssh_config(5),
 * TOKENS).  An unknown token is an error, as in ssh. */
static int expand(const char *in, const xctx *x, const directive *d, char *out, size_t n,
                  char *err, size_t errlen) {
  size_t k = 0;
  char tmp[1100];
  const char *p = in;
  if (p[0] == '~') {
    const char *slash = strchr(p, '/');
    size_t un = slash ? (size_t)(slash - p - 1) : strlen(p + 1);
    if (un == 0) {
      k = (size_t)snprintf(out, n, "%s", x->d);
    } else {
      char user[256], pbuf[4096];
      snprintf(user, sizeof user, "%.*s", (int)un, p + 1);
      struct passwd pwd, *pw = NULL;
      getpwnam_r(user, &pwd, pbuf, sizeof pbuf, &pw);
      if (!pw)
        return sf__net_fail(err, errlen, "%s: unknown user '~%s' in %s", d->where, user, in);
      k = (size_t)snprintf(out, n, "%s", pw->pw_dir);
    }
    p += 1 + un;
  }
  for (; *p && k < n; p++) {
    if (*p != '%') {
      out[k++] = *p;
      continue;
    }
    const char *v = NULL;
    switch (*++p) {
    case '%': v = "%"; break;
    case 'd': v = x->d; break;
    case 'h': v = x->h; break;
    case 'n': v = x->n; break;
    case 'r': v = x->r; break;
    case 'u': v = x->u; break;
    case 'k': v = x->k; break;
    case 'p': snprintf(tmp, sizeof tmp, "%d", x->p), v = tmp; break;
    case 'i': snprintf(tmp, sizeof tmp, "%u", (unsigned)getuid()), v = tmp; break;
    case 'l':
    case 'L': /* the local host name; %L up to its first dot */
      if (gethostname(tmp, sizeof tmp - 1))
        tmp[0] = '\0';
      tmp[sizeof tmp - 1] = '\0';
      if (*p == 'L')
        tmp[strcspn(tmp, ".")] = '\0';
      v = tmp;
      break;
    default:
      return sf__net_fail(err, errlen, "%s: unsupported token %%%c in '%s' (sflow expands ~, "
                          "%%d %%h %%i %%k %%L %%l %%n %%p %%r %%u %%%%)",
                          d->where, *p ? *p : ' ', in);
    }
    k += (size_t)snprintf(out + k, n - k, "%s", v ? v : "");
  }
  if (k >= n)
    return sf__net_fail(err, errlen, "%s: path longer than %zu characters", d->where, n - 1);
  out[k] = '\0';
  return 0;
}

/* ------------------------------------------------------------ resolve */

/* The host as written, for messages: "gpu1", "[127.0.0.2]:2222", "[::1]". */
static void written_name(const sf__host *h, char *buf, size_t n) {
  bool v6 = strchr(h->name, ':') != NULL;
  if (h->port)
    snprintf(buf, n, "[%s]:%d", h->name, h->port);
  else
    snprintf(buf, n, v6 ? "[%s]" : "%s", h->name);
}

static void make_label(const sf__host *h, sf__ssh_target *t) {
  char via[300] = "";
  if (strcasecmp(t->host, h->name))
    snprintf(via, sizeof via, "%s", t->host);
  if (!h->port && t->port != 22)
    snprintf(via + strlen(via), sizeof via - strlen(via), "%sport %d", *via ? " " : "", t->port);
  /* "via bastion" or "via ProxyCommand": where a failure may lie */
  if (t->jump || t->proxy_command[0])
    snprintf(via + strlen(via), sizeof via - strlen(via), "%svia %.200s", *via ? " " : "",
             t->jump ? t->jump->name : "ProxyCommand");
  if (*via)
    snprintf(t->label, sizeof t->label, "%s (%s)", t->name, via);
  else
    snprintf(t->label, sizeof t->label, "%s", t->name);
}

static int resolve_files(const found *f, const sf__ssh_opts *o, const xctx *x,
                         sf__ssh_target *t, char *err, size_t errlen) {
  if (o->key) {
    snprintf(t->ids[0], sizeof t->ids[0], "%s", o->key);
    t->nids = 1;
    t->ids_from_flag = true;
  } else if (f->nids) {
    for (int i = 0; i < f->nids; i++)
      if (expand(f->ids[i]->argv[0], x, f->ids[i], t->ids[t->nids++], sizeof t->ids[0], err,
                 errlen))
        return -1;
  } else {
    /* ssh's defaults, in sflow's order; missing ones are skipped at auth. */
    static const char *const names[] = {"id_ed25519", "id_ecdsa", "id_rsa"};
    for (int i = 0; i < 3; i++)
      snprintf(t->ids[t->nids++], sizeof t->ids[0], "%s/.ssh/%s", x->d, names[i]);
  }
  if (o->known_hosts) {
    snprintf(t->known[0], sizeof t->known[0], "%s", o->known_hosts);
    t->nknown = 1;
  } else if (f->known) {
    for (int i = 0; i < f->known->argc && t->nknown < SF__SSH_KH_MAX; i++) {
      if (!strcasecmp(f->known->argv[i], "none"))
        continue; /* no user file: unknown hosts can only be refused or trusted unrecorded */
      if (expand(f->known->argv[i], x, f->known, t->known[t->nknown++], sizeof t->known[0], err,
                 errlen))
        return -1;
    }
  } else {
    snprintf(t->known[0], sizeof t->known[0], "%s/.ssh/known_hosts", x->d);
    t->nknown = 1;
  }
  return 0;
}

/* ----------------------------------------------------------- proxies */

#define JUMP_DEPTH_MAX 8 /* jump hosts before one host, all chains together */

static int resolve_at(const sf__sshcfg *c, const sf__host *h, const sf__ssh_opts *o,
                      sf__ssh_target *t, int depth, bool own_proxy, char *err, size_t errlen);

void sf__ssh_target_free(sf__ssh_target *t) {
  if (!t)
    return;
  for (sf__ssh_target *j = t->jump, *next; j; j = next) {
    next = j->jump;
    free(j);
  }
  t->jump = NULL;
}

/* ProxyCommand's tokens, as ssh_config(5) lists them for it: %% %h %n %p
 * %r.  The values go to /bin/sh as they are, as in ssh. */
static int expand_command(const directive *d, const sf__ssh_target *t, const char *original,
                          char *out, size_t n, char *err, size_t errlen) {
  size_t k = 0;
  for (const char *p = d->argv[0]; *p; p++) {
    char port[8];
    const char *v = NULL;
    if (*p != '%') {
      if (k + 1 < n)
        out[k++] = *p;
      continue;
    }
    switch (*++p) {
    case '%': v = "%"; break;
    case 'h': v = t->host; break;
    case 'n': v = original; break;
    case 'r': v = t->user; break;
    case 'p': snprintf(port, sizeof port, "%d", t->port), v = port; break;
    default:
      return sf__net_fail(err, errlen, "%s: unsupported token %%%c in ProxyCommand (ssh "
                          "expands %%h %%n %%p %%r %%%% there)", d->where, *p ? *p : ' ');
    }
    k += (size_t)snprintf(out + k, n - k, "%s", v);
    if (k >= n)
      break;
  }
  if (k >= n)
    return sf__net_fail(err, errlen, "%s: ProxyCommand longer than %zu characters", d->where,
                        n - 1);
  out[k] = '\0';
  return 0;
}

/* One ProxyJump hop, as ssh reads it: [user@]host[:port],
 * [user@][v6addr]:port or ssh://[user@]host[:port].  The strings point
 * into s, which is cut up. */
static int parse_jump(char *s, const directive *d, sf__host *h, char *err, size_t errlen) {
  *h = (sf__host){.slots = -1, .gpus = -1, .line = 0};
  if (!strncasecmp(s, "ssh://", 6))
    s += 6;
  char *at = strrchr(s, '@');
  if (at) {
    *at = '\0';
    h->user = s;
    s = at + 1;
  }
  char *port = NULL;
  if (*s == '[') {
    char *close = strchr(s, ']');
    if (!close || (close[1] && close[1] != ':'))
      return sf__net_fail(err, errlen, "%s: bad ProxyJump host '%s'", d->where, s);
    *close = '\0';
    port = close[1] ? close + 2 : NULL;
    s++;
  } else if (strchr(s, ':') && strchr(s, ':') == strrchr(s, ':')) {
    port = strchr(s, ':');
    *port++ = '\0';
  }
  if (port) {
    char *end;
    long v = strtol(port, &end, 10);
    if (!isdigit((unsigned char)*port) || *end || v < 1 || v > 65535)
      return sf__net_fail(err, errlen, "%s: invalid port '%s' in ProxyJump (expected 1 to "
                          "65535)", d->where, port);
    h->port = (int)v;
  }
  if (!*s || (h->user && !*h->user) || *s == '-' || (h->user && *h->user == '-'))
    return sf__net_fail(err, errlen, "%s: bad ProxyJump host '%s%s%s'", d->where,
                        h->user ? h->user : "", h->user ? "@" : "", s);
  h->name = s;
  return 0;
}

/* ProxyJump a,b,c: t is reached through c, c through b, b through a, as
 * `ssh -J a,b,c` does: a is reached as `ssh a` would be (its own
 * ProxyJump or ProxyCommand applies), b and c only through the hop
 * before them.  Every hop is a host of its own: its HostName, Port,
 * User, keys and known_hosts from the config, and the flags but
 * --ssh-user (ssh's -l names the destination's user only). */
static int resolve_jumps(const sf__sshcfg *c, const directive *d, const sf__ssh_opts *o,
                         sf__ssh_target *t, int depth, char *err, size_t errlen) {
  char list[1024];
  if (strlen(d->argv[0]) >= sizeof list)
    return sf__net_fail(err, errlen, "%s: ProxyJump longer than %zu characters", d->where,
                        sizeof list - 1);
  snprintf(list, sizeof list, "%s", d->argv[0]);
  sf__ssh_opts ho = *o;
  ho.user = NULL;
  int i = 0;
  for (char *save = NULL, *e = strtok_r(list, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
    if (depth + i >= JUMP_DEPTH_MAX)
      return sf__net_fail(err, errlen, "%s: more than %d jump hosts before %s (a ProxyJump "
                          "loop?)", d->where, JUMP_DEPTH_MAX, t->name);
    sf__host hh;
    if (parse_jump(e, d, &hh, err, errlen))
      return -1;
    sf__ssh_target *hop = malloc(sizeof *hop);
    if (!hop)
      return sf__net_fail(err, errlen, "out of memory");
    if (resolve_at(c, &hh, &ho, hop, depth + i + 1, i == 0, err, errlen)) {
      sf__ssh_target_free(hop);
      free(hop);
      return -1;
    }
    if (i > 0)
      hop->jump = t->jump; /* the hop before; the first keeps its own way */
    t->jump = hop;
    i++;
  }
  return i ? 0 : sf__net_fail(err, errlen, "%s: ProxyJump names no host", d->where);
}

/* The config's ProxyJump or ProxyCommand for t, when it has one: "none"
 * is none, and a hop's ProxyJump that names the hop itself is ignored,
 * so that `Host * ProxyJump bastion` does not send the bastion through
 * itself. */
static int resolve_proxy(const sf__sshcfg *c, const found *f, const sf__ssh_opts *o,
                         sf__ssh_target *t, const char *original, int depth, char *err,
                         size_t errlen) {
  const directive *d = f->proxy;
  if (!d || !strcasecmp(d->argv[0], "none"))
    return 0;
  if (d->kind == D_PROXYCOMMAND)
    return expand_command(d, t, original, t->proxy_command, sizeof t->proxy_command, err,
                          errlen);
  {
    char first[1024];
    sf__host hh;
    snprintf(first, sizeof first, "%s", d->argv[0]);
    first[strcspn(first, ",")] = '\0';
    if (!parse_jump(first, d, &hh, err, errlen) && !strcasecmp(hh.name, original))
      return 0;
    err[0] = '\0';
  }
  return resolve_jumps(c, d, o, t, depth, err, errlen);
}

int sf__sshcfg_resolve(const sf__sshcfg *c, const sf__host *h, const sf__ssh_opts *o,
                       sf__ssh_target *t, char *err, size_t errlen) {
  return resolve_at(c, h, o, t, 0, true, err, errlen);
}

static int resolve_at(const sf__sshcfg *c, const sf__host *h, const sf__ssh_opts *o,
                      sf__ssh_target *t, int depth, bool own_proxy, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  char original[sizeof t->host], lbuf[256], hb[1024];
  snprintf(original, sizeof original, "%s", h->name);
  for (char *p = original; *p; p++) /* ssh lower-cases the destination */
    *p = (char)tolower((unsigned char)*p);
  const char *local = local_user(lbuf, sizeof lbuf);
  mctx m = {original, h->user ? h->user : o->user, local};
  found f = {0};
  if (c)
    walk(c, &m, &f, false);
  if (c && c->final_pass) /* as ssh: once more, final true, filling what is unset */
    walk(c, &m, &f, true);
  written_name(h, t->name, sizeof t->name);
  current_host(&f, &m, t->host, sizeof t->host);
  if (!f.hostname) /* a literal as written (an IPv6 zone keeps its case) */
    snprintf(t->host, sizeof t->host, "%s", strchr(h->name, '%') ? h->name : original);
  t->port = h->port ? h->port : f.port ? f.port->num : 22;
  const char *user = m.user ? m.user : f.user ? f.user->argv[0] : local;
  if (!user)
    return sf__net_fail(err, errlen, "%s: cannot tell the current user; pass --ssh-user",
                        t->name);
  snprintf(t->user, sizeof t->user, "%s", user);
  if (f.alias) {
    snprintf(t->key_host, sizeof t->key_host, "%s", f.alias->argv[0]);
    t->key_port = -1; /* as OpenSSH: the alias alone, without [..]:port */
  } else {
    snprintf(t->key_host, sizeof t->key_host, "%s", t->host);
    t->key_port = t->port;
  }
  t->accept_new = o->accept_new || (f.strict && f.strict->num == SHK_ACCEPT_NEW);
  t->identities_only = f.idonly && f.idonly->num && !o->key;
  xctx x = {t->host, original, t->user, local ? local : "", home_dir(hb, sizeof hb),
            t->key_host, t->port};
  if (f.alias == NULL)
    x.k = original;
  if (resolve_files(&f, o, &x, t, err, errlen))
    return -1;
  if (own_proxy && resolve_proxy(c, &f, o, t, original, depth, err, errlen)) {
    sf__ssh_target_free(t);
    return -1;
  }
  make_label(h, t);
  if (f.ids_dropped)
    snprintf(t->warning, sizeof t->warning, "%s: more than %d IdentityFile lines apply; sflow "
             "tries the first %d", t->name, SF__SSH_IDS_MAX, SF__SSH_IDS_MAX);
  return 0;
}
