/*
 * flags.c — command-line flags of a compiled workflow: the parameters of
 * `workflow main` and the runtime's own flags, plus --help and --version.
 *
 * Key design choice: parsing is strict and every mistake stops the run
 * before any work starts, with a message naming the flag and what it
 * expected (and a "did you mean" for a misspelt name, using clang's edit
 * distance limit of (len+2)/3).  A typo in `--lr` must never silently fall
 * back to a default and waste a day of GPU time.  The parser reports
 * through its return value and an error buffer and never exits, so unit
 * tests drive it directly; main.c turns the result into output and exit
 * codes.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "flagnames.h"
#include "core.h"

sf__options_t sf__options = {.journal = true};

/* ------------------------------------------------------- runtime flags */

/* The table comes from flagnames.h, which the compiler also reads to
 * reserve these names (a workflow parameter may not shadow one). */
typedef enum {
#define X(id, name, arg, help) RT_##id,
  SF__RUNTIME_FLAGS(X)
#undef X
} rt_id;

typedef struct rt_flag {
  const char *name;
  const char *arg; /* NULL for a boolean flag */
  const char *help; /* NULL: hidden (internal), not in --help nor suggested */
} rt_flag;

static const rt_flag rt_flags[] = {
#define X(id, name, arg, help) [RT_##id] = {name, arg, help},
    SF__RUNTIME_FLAGS(X)
#undef X
};
#define N_RT ((int)(sizeof rt_flags / sizeof rt_flags[0]))

static const char *kind_name(int32_t kind) {
  switch (kind) {
  case SF_BOOL: return "bool";
  case SF_I32: return "i32";
  case SF_I64: return "i64";
  case SF_F32: return "f32";
  case SF_F64: return "f64";
  default: return "str";
  }
}

/* A parameter's flag as --help and messages write it: each '_' of the
 * name as '-' (`eval_samples` is --eval-samples), the way command lines
 * spell flags; the parser takes both (same_flag). */
typedef struct { char s[128]; } flag_text;

static flag_text dashed(const char *name) {
  flag_text t;
  size_t i = 0;
  for (; name[i] && i + 1 < sizeof t.s; i++)
    t.s[i] = name[i] == '_' ? '-' : name[i];
  t.s[i] = '\0';
  return t;
}

/* ------------------------------------------------------------- parser */

typedef struct parser {
  const sf_program *prog;
  sf_value *out;
  char *err;
  size_t errlen;
  bool *given; /* per parameter: set on the command line */
} parser;

/* Formats an error into the caller's buffer; always returns false so
 * callers can `return fail(...)`. */
__attribute__((format(printf, 2, 3))) static bool fail(parser *ps, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (ps->errlen)
    vsnprintf(ps->err, ps->errlen, fmt, ap);
  va_end(ap);
  return false;
}

/* A command-line value shown in a message: cut when very long. */
#define SHOW_MAX 64
#define SHOW(v) \
  (int)(strlen(v) > SHOW_MAX ? SHOW_MAX : strlen(v)), (v), (strlen(v) > SHOW_MAX ? "..." : "")

static bool bad_value(parser *ps, const char *name, const char *v, const char *expected,
                      sf__parse_status st) {
  if (st == SF__PARSE_RANGE)
    return fail(ps, "invalid value '%.*s%s' for --%s: out of range for %s", SHOW(v), name,
                expected);
  return fail(ps, "invalid value '%.*s%s' for --%s: expected %s", SHOW(v), name, expected);
}

static bool set_param(parser *ps, int idx, const char *v) {
  const sf_param *p = &ps->prog->params[idx];
  sf_value *slot = &ps->out[idx];
  size_t n = strlen(v);
  sf__parse_status st = SF__PARSE_OK;
  switch (p->kind) {
  case SF_BOOL: st = sf__parse_bool(v, n, &slot->b); break;
  case SF_I32: st = sf__parse_i32(v, n, &slot->i32); break;
  case SF_I64: st = sf__parse_i64(v, n, &slot->i64); break;
  case SF_F32: st = sf__parse_f32(v, n, &slot->f32); break;
  case SF_F64: st = sf__parse_f64(v, n, &slot->f64); break;
  case SF_STR:
    sf_release(slot->s);
    slot->s = sf_str_new(v, (int64_t)n);
    break;
  default: /* the compiler only makes flags of the six types above */
    return fail(ps, "internal error: --%s has unsupported kind %d", dashed(p->name).s,
                (int)p->kind);
  }
  if (st != SF__PARSE_OK)
    return bad_value(ps, dashed(p->name).s, v, kind_name(p->kind), st);
  ps->given[idx] = true;
  return true;
}

static bool set_bool_option(parser *ps, bool *dst, const char *name, const char *v) {
  if (sf__parse_bool(v, strlen(v), dst) != SF__PARSE_OK)
    return bad_value(ps, name, v, "bool (true or false)", SF__PARSE_BAD);
  return true;
}

/* A TCP port to listen on, 1 to 65535. */
static bool set_port(parser *ps, int64_t *dst, const char *name, const char *v) {
  if (sf__parse_i64(v, strlen(v), dst) != SF__PARSE_OK || *dst < 1 || *dst > 65535)
    return bad_value(ps, name, v, "a TCP port from 1 to 65535", SF__PARSE_BAD);
  return true;
}

static bool set_option(parser *ps, rt_id id, const char *v) {
  sf__options_t *o = &sf__options;
  const char *name = rt_flags[id].name;
  if (rt_flags[id].arg && !*v)
    return fail(ps, "invalid value '' for --%s: expected %s", name, rt_flags[id].arg);
  switch (id) {
  case RT_NODES: o->nodes = v; return true;
  case RT_TRACE: o->trace = v; return true;
  case RT_METRICS_PORT: return set_port(ps, &o->metrics_port, name, v);
  case RT_DASHBOARD: return set_port(ps, &o->dashboard_port, name, v);
  case RT_METRICS_BIND: o->metrics_bind = v; return true;
  case RT_CKPT: o->checkpoint_dir = v; return true;
  case RT_RESUME: return set_bool_option(ps, &o->resume, name, v);
  case RT_QUIET: return set_bool_option(ps, &o->quiet, name, v);
  case RT_JOURNAL: return set_bool_option(ps, &o->journal, name, v);
  case RT_GPU: return set_bool_option(ps, &o->require_gpu, name, v);
  case RT_PROGRESS:
    if (!strcmp(v, "auto")) o->progress = SF__PROGRESS_AUTO;
    else if (!strcmp(v, "always")) o->progress = SF__PROGRESS_ALWAYS;
    else if (!strcmp(v, "never")) o->progress = SF__PROGRESS_NEVER;
    else return bad_value(ps, name, v, "auto, always or never", SF__PARSE_BAD);
    return true;
  case RT_THREADS:
    if (sf__parse_i64(v, strlen(v), &o->threads) != SF__PARSE_OK || o->threads < 1 ||
        o->threads > SF__MAX_THREADS)
      return bad_value(ps, name, v, "a number of threads from 1 to " SF__STR(SF__MAX_THREADS),
                       SF__PARSE_BAD);
    return true;
  case RT_SSH_USER: o->ssh_user = v; return true;
  case RT_SSH_KEY: o->ssh_key = v; return true;
  case RT_KNOWN_HOSTS: o->known_hosts = v; return true;
  case RT_SSH_CONFIG: o->ssh_config = v; return true;
  case RT_REMOTE_CACHE:
    /* The path goes into a single-quoted remote command line. */
    if (strpbrk(v, "'\\\n"))
      return bad_value(ps, name, v, "a folder name without quotes, backslashes or newlines",
                       SF__PARSE_BAD);
    o->remote_cache = v;
    return true;
  case RT_WORKER: o->worker = v; return true;
  case RT_WORKER_CWD: o->worker_cwd = v; return true;
  case RT_WORKER_TRACE: return set_bool_option(ps, &o->worker_trace, name, v);
  case RT_WORKER_METRICS: return set_bool_option(ps, &o->worker_metrics, name, v);
  case RT_SELFTEST: o->selftest = v; return true;
  case RT_ACCEPT_NEW: return set_bool_option(ps, &o->accept_new_host_keys, name, v);
  case RT_HEAD_WORK: return set_bool_option(ps, &o->head_runs_work, name, v);
  case RT_CLUSTER_LOG: return set_bool_option(ps, &o->cluster_log, name, v);
  case RT_CONNECT_TIMEOUT:
    if (sf__parse_i64(v, strlen(v), &o->connect_timeout) != SF__PARSE_OK ||
        o->connect_timeout < 1 || o->connect_timeout > 3600)
      return bad_value(ps, name, v, "seconds from 1 to 3600", SF__PARSE_BAD);
    return true;
  }
  return true;
}

/* A parameter's flag is its name, with '-' accepted for any '_'
 * (`--seq-len` sets seq_len, as command lines usually spell flags).  An
 * identifier holds no '-', so a typed name picks at most one parameter,
 * and the compiler refuses parameters that would meet a runtime flag this
 * way (flagnames.h), so none shadows one. */
static bool same_flag(const char *param, const char *name, size_t n) {
  if (strlen(param) != n)
    return false;
  for (size_t i = 0; i < n; i++)
    if (param[i] != name[i] && !(param[i] == '_' && name[i] == '-'))
      return false;
  return true;
}

static int find_param(const sf_program *prog, const char *name, size_t n) {
  for (int i = 0; i < prog->nparams; i++)
    if (same_flag(prog->params[i].name, name, n))
      return i;
  return -1;
}

static int find_option(const char *name, size_t n) {
  for (int i = 0; i < N_RT; i++)
    if (strlen(rt_flags[i].name) == n && !memcmp(rt_flags[i].name, name, n))
      return i;
  return -1;
}

/* ------------------------------------------------------- did you mean */

size_t sf__edit_distance(const char *a, const char *b) {
  enum { MAX = 64 };
  size_t la = strlen(a), lb = strlen(b);
  if (la > MAX || lb > MAX)
    return SIZE_MAX;
  size_t d[MAX + 1][MAX + 1];
  for (size_t i = 0; i <= la; i++)
    d[i][0] = i;
  for (size_t j = 0; j <= lb; j++)
    d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      /* A swap of two neighbours ("wokrers") counts as one typo. */
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

static void consider(const char *typed, const char *cand, flag_text *best, size_t *best_d) {
  size_t d = sf__edit_distance(typed, cand);
  if (d < *best_d) {
    snprintf(best->s, sizeof best->s, "%s", cand);
    *best_d = d;
  }
}

/* The known flag closest to typed, within (len+2)/3 edits, into *best;
 * false if none is that close.  Parameters are compared and suggested in
 * their dashed form, with what was typed dashed too, so "--eval_sampels"
 * and "--eval-sampels" both get "--eval-samples". */
static bool suggest(const sf_program *prog, const char *typed, flag_text *best) {
  flag_text t = dashed(typed);
  size_t best_d = (strlen(typed) + 2) / 3 + 1, limit = best_d;
  for (int i = 0; i < prog->nparams; i++)
    consider(t.s, dashed(prog->params[i].name).s, best, &best_d);
  for (int i = 0; i < N_RT; i++)
    if (rt_flags[i].help)
      consider(t.s, rt_flags[i].name, best, &best_d);
#define X(name, help) consider(t.s, name, best, &best_d);
  SF__INFO_FLAGS(X)
#undef X
  return best_d < limit;
}

static bool unknown_flag(parser *ps, const char *arg, const char *name, size_t n) {
  char typed[80];
  snprintf(typed, sizeof typed, "%.*s", (int)(n < 79 ? n : 79), name);
  flag_text s;
  bool found = suggest(ps->prog, typed, &s);
  /* "-workers": a real flag behind a single dash. */
  if (arg[1] != '-' && (find_param(ps->prog, name, n) >= 0 || find_option(name, n) >= 0)) {
    s = dashed(typed);
    found = true;
  }
  if (found)
    return fail(ps, "unknown flag '%.*s%s' (did you mean '--%s'?)", SHOW(arg), s.s);
  return fail(ps, "unknown flag '%.*s%s'", SHOW(arg));
}

/* ------------------------------------------------------------- driver */

/* One "--name[=value]" at argv[*i]; may consume the next argument. */
static bool parse_flag(parser *ps, int argc, char **argv, int *i) {
  const char *arg = argv[*i], *name = arg + 2;
  const char *eq = strchr(name, '=');
  size_t n = eq ? (size_t)(eq - name) : strlen(name);
  int param = find_param(ps->prog, name, n);
  int opt = param < 0 ? find_option(name, n) : -1;
  if (param < 0 && opt < 0)
    return unknown_flag(ps, arg, name, n);
  bool is_bool = param >= 0 ? ps->prog->params[param].kind == SF_BOOL : !rt_flags[opt].arg;
  const char *v = eq ? eq + 1 : NULL;
  if (!v && is_bool)
    v = "true";
  if (!v && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0)
    v = argv[++*i];
  if (!v)
    return fail(ps, "missing value for --%.*s", (int)n, name);
  return param >= 0 ? set_param(ps, param, v) : set_option(ps, (rt_id)opt, v);
}

static bool positional(parser *ps, char **argv, int i) {
  const char *prev = i > 1 ? argv[i - 1] : "";
  bool tf = !strcmp(argv[i], "true") || !strcmp(argv[i], "false");
  /* "--verbose false" reads as --verbose followed by a stray word. */
  if (tf && !strncmp(prev, "--", 2) && !strchr(prev, '='))
    return fail(ps, "unexpected argument '%s' (write %s=%s)", argv[i], prev, argv[i]);
  return fail(ps, "unexpected argument '%.*s%s' (a workflow takes only --flags)", SHOW(argv[i]));
}

static bool check_required(parser *ps) {
  for (int i = 0; i < ps->prog->nparams; i++)
    if (!ps->prog->params[i].has_default && !ps->given[i])
      return fail(ps, "missing required flag --%s", dashed(ps->prog->params[i].name).s);
  return true;
}

static void set_defaults(const sf_program *prog, sf_value *out) {
  sf__options = (sf__options_t){.journal = true};
  sf__options.head_runs_work = true;
  sf__options.connect_timeout = 10;
  for (int i = 0; i < prog->nparams; i++) {
    const sf_param *p = &prog->params[i];
    memset(&out[i], 0, sizeof out[i]);
    if (p->has_default)
      out[i] = p->def;
    if (p->kind == SF_STR)
      sf_retain(out[i].s);
  }
}

/* --help and --version win wherever they appear before "--": someone
 * asking for help should not first be told about another mistake. */
static int wants_info(int argc, char **argv) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
      return SF__FLAGS_HELP;
    if (!strcmp(argv[i], "--version"))
      return SF__FLAGS_VERSION;
  }
  return SF__FLAGS_OK;
}

/* The whole argument list; returns an sf__flags_result. */
static int parse_args(parser *ps, int argc, char **argv) {
  int info = wants_info(argc, argv);
  if (info != SF__FLAGS_OK)
    return info;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) {
      if (i + 1 < argc) {
        positional(ps, argv, i + 1);
        return SF__FLAGS_ERROR;
      }
      break;
    }
    bool ok = !strncmp(a, "--", 2) ? parse_flag(ps, argc, argv, &i)
              : a[0] == '-' && a[1] ? unknown_flag(ps, a, a + 1, strcspn(a + 1, "="))
                                    : positional(ps, argv, i);
    if (!ok)
      return SF__FLAGS_ERROR;
  }
  /* A worker takes the workflow's arguments from the head, not argv. */
  if (sf__options.worker)
    return SF__FLAGS_OK;
  return check_required(ps) ? SF__FLAGS_OK : SF__FLAGS_ERROR;
}

int sf__parse_flags(const sf_program *prog, int argc, char **argv, sf_value *out,
                    char *err, size_t errlen) {
  if (errlen)
    err[0] = '\0';
  set_defaults(prog, out);
  bool *given = sf__alloc_n((size_t)prog->nparams + 1, sizeof(bool));
  memset(given, 0, (size_t)prog->nparams + 1);
  parser ps = {prog, out, err, errlen, given};
  int r = parse_args(&ps, argc, argv);
  sf_free(given);
  if (r != SF__FLAGS_OK)
    sf__flags_release(prog, out);
  return r;
}

void sf__flags_release(const sf_program *prog, sf_value *args) {
  for (int i = 0; i < prog->nparams; i++)
    if (prog->params[i].kind == SF_STR) {
      sf_release(args[i].s);
      args[i].s = NULL;
    }
}

/* -------------------------------------------------------------- usage */

/* The default as written in the source, else formatted from the value. */
static void default_text(const sf_param *p, char *buf, size_t n) {
  if (p->def_text) {
    snprintf(buf, n, "%s", p->def_text);
    return;
  }
  char num[SF__FLOAT_BUF];
  switch (p->kind) {
  case SF_BOOL: snprintf(buf, n, "%s", p->def.b ? "true" : "false"); break;
  case SF_I32: snprintf(buf, n, "%" PRId32, p->def.i32); break;
  case SF_I64: snprintf(buf, n, "%" PRId64, p->def.i64); break;
  case SF_F32: sf__fmt_f32_repr(p->def.f32, num); snprintf(buf, n, "%s", num); break;
  case SF_F64: sf__fmt_f64_repr(p->def.f64, num); snprintf(buf, n, "%s", num); break;
  default:
    sf__quote(sf__str_data(p->def.s), (size_t)sf__str_len(p->def.s), 200, buf, n);
    break;
  }
}

static const char *prog_name(const sf_program *prog) {
  return prog->name && *prog->name ? prog->name : "program";
}

/* Width of the first column: the longest "--name type" or "--name ARG". */
static int column_width(const sf_program *prog) {
  size_t w = 0;
  for (int i = 0; i < prog->nparams; i++) {
    const sf_param *p = &prog->params[i];
    size_t n = 2 + strlen(p->name) + 1 + strlen(kind_name(p->kind));
    w = n > w ? n : w;
  }
  for (int i = 0; i < N_RT; i++) {
    const rt_flag *r = &rt_flags[i];
    if (!r->help)
      continue;
    size_t n = 2 + strlen(r->name) + (r->arg ? 1 + strlen(r->arg) : 0);
    w = n > w ? n : w;
  }
  return (int)w + 2;
}

/* Writes text after a column of width w (already filled on this line),
 * wrapped at words to keep lines within 100 columns; continuation lines
 * are indented to the column. */
static void wrapped(FILE *f, int w, const char *text) {
  enum { LINE = 100 };
  int at = 2 + w, room = LINE - at > 30 ? LINE - at : 30, used = 0;
  for (const char *p = text; *p;) {
    while (*p == ' ')
      p++;
    int n = (int)strcspn(p, " ");
    if (!n)
      break;
    if (used > 0 && used + 1 + n > room) {
      fprintf(f, "\n%*s", at, "");
      used = 0;
    } else if (used > 0) {
      fputc(' ', f);
      used++;
    }
    fprintf(f, "%.*s", n, p);
    used += n;
    p += n;
  }
  fputc('\n', f);
}

void sf__usage(const sf_program *prog, FILE *f) {
  int w = column_width(prog);
  char col[160], def[256], line[1024];
  fprintf(f, "usage: %s [flags]\n", prog_name(prog));
  if (prog->nparams > 0)
    fprintf(f, "\nFlags:\n");
  for (int i = 0; i < prog->nparams; i++) {
    const sf_param *p = &prog->params[i];
    snprintf(col, sizeof col, "--%s %s", dashed(p->name).s, kind_name(p->kind));
    /* The comment above the parameter in the source, then its default. */
    const char *help = p->help && *p->help ? p->help : "";
    if (p->has_default)
      default_text(p, def, sizeof def);
    snprintf(line, sizeof line, "%s%s%s%s%s", help, *help ? " " : "",
             p->has_default ? "(default " : "(required", p->has_default ? def : "", ")");
    fprintf(f, "  %-*s", w, col);
    wrapped(f, w, line);
  }
  fprintf(f, "\nRuntime flags:\n");
  for (int i = 0; i < N_RT; i++) {
    const rt_flag *r = &rt_flags[i];
    if (!r->help)
      continue;
    /* --progress takes one of a fixed set, shown the way it is written. */
    snprintf(col, sizeof col, "--%s%s%s", r->name, !r->arg ? "" : i == RT_PROGRESS ? "=" : " ",
             r->arg ? r->arg : "");
    fprintf(f, "  %-*s%s\n", w, col, r->help);
  }
  /* help is also spelled -h (wants_info). */
#define X(name, help) \
  fprintf(f, "  %-*s%s\n", w, !strcmp(name, "help") ? "-h, --help" : "--" name, help);
  SF__INFO_FLAGS(X)
#undef X
}

void sf__version(const sf_program *prog, FILE *f) {
  fprintf(f, "%s (sflow %s, runtime ABI %d)\n", prog_name(prog), SF__VERSION, SF_ABI_VERSION);
}
