/*
 * emu_nvrtc.c — the emulator's NVRTC (a program compiled by the host C++
 * compiler with cuda_shim.h force-included, content-addressed in the module
 * cache) and the driver's module calls (cuModuleLoadData, cuModuleGetFunction,
 * occupancy).  emu.c's comment describes the emulator.
 */
#include "emu.h"

/* The shim header, embedded at build time (SF_EMU_SHIM is its path). */
__asm__(".section .rodata\n"
        ".balign 16\n"
        "sf_emu_shim_text:\n"
        ".incbin \"" SF_EMU_SHIM "\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char sf_emu_shim_text[] __asm__("sf_emu_shim_text");

/* ================================================================ NVRTC */

/* Two independent 64-bit hashes: 128 bits of content address. */
typedef struct {
  uint64_t a, b;
} Hash;
static void hash_init(Hash *h) {
  h->a = 0xcbf29ce484222325ull;
  h->b = 0x9e3779b97f4a7c15ull;
}
static void hash_add(Hash *h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h->a = (h->a ^ s[i]) * 0x100000001b3ull;
    h->b = (h->b ^ s[i]) * 0xff51afd7ed558ccdull;
    h->b ^= h->b >> 29;
  }
  /* a separator, so ("ab","c") and ("a","bc") differ */
  h->a = (h->a ^ 0xff) * 0x100000001b3ull;
  h->b = (h->b ^ (uint64_t)n) * 0xc4ceb9fe1a85ec53ull;
}
static void hash_str(Hash *h, const char *s) { hash_add(h, s, strlen(s)); }
static void hash_hex(const Hash *h, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)h->a, (unsigned long long)h->b);
}

static void mkdirs(const char *dir) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0755);
      *s = '/';
    }
  mkdir(p, 0755);
}

static bool write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return false;
  bool ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap + 1);
  size_t r;
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      cap *= 2;
      char *nb = realloc(b, cap + 1);
      if (!nb) {
        free(b);
        b = NULL;
      }
      b = nb;
    }
  }
  fclose(f);
  if (!b)
    return NULL;
  b[n] = 0;
  if (len)
    *len = n;
  return b;
}

static void rmtree(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      char p[PATH_MAX];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
        rmtree(p);
      else
        unlink(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* The kernel cache of nvrtc.c (the same rule), under which the emulator
 * keeps its compiled modules unless SFLOW_EMU_CACHE says otherwise. */
static void cache_dir(char *out, size_t n) {
  const char *e = getenv("SFLOW_EMU_CACHE");
  if (e && *e) {
    snprintf(out, n, "%s", e);
    return;
  }
  if ((e = getenv("SFLOW_KERNEL_CACHE")) && *e)
    snprintf(out, n, "%s/emu", e);
  else if ((e = getenv("XDG_CACHE_HOME")) && *e)
    snprintf(out, n, "%s/sflow/kernels/emu", e);
  else
    snprintf(out, n, "%s/.cache/sflow/kernels/emu", getenv("HOME") ? getenv("HOME") : "/tmp");
}

enum {
  NVRTC_SUCCESS = 0,
  NVRTC_ERROR_OUT_OF_MEMORY = 1,
  NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
  NVRTC_ERROR_INVALID_INPUT = 3,
  NVRTC_ERROR_INVALID_PROGRAM = 4,
  NVRTC_ERROR_INVALID_OPTION = 5,
  NVRTC_ERROR_COMPILATION = 6,
  NVRTC_ERROR_INTERNAL_ERROR = 11,
};

API const char *nvrtcGetErrorString(int rc) {
  switch (rc) {
  case 0: return "NVRTC_SUCCESS";
  case 1: return "NVRTC_ERROR_OUT_OF_MEMORY";
  case 2: return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
  case 3: return "NVRTC_ERROR_INVALID_INPUT";
  case 4: return "NVRTC_ERROR_INVALID_PROGRAM";
  case 5: return "NVRTC_ERROR_INVALID_OPTION";
  case 6: return "NVRTC_ERROR_COMPILATION";
  case 11: return "NVRTC_ERROR_INTERNAL_ERROR";
  default: return "NVRTC_ERROR unknown";
  }
}
API int nvrtcVersion(int *major, int *minor) {
  *major = 99; /* not a real NVRTC: its cache keys never meet a real one's */
  *minor = 0;
  return NVRTC_SUCCESS;
}
API int nvrtcGetNumSupportedArchs(int *n) {
  *n = 1;
  return NVRTC_SUCCESS;
}
API int nvrtcGetSupportedArchs(int *a) {
  a[0] = 90;
  return NVRTC_SUCCESS;
}

typedef struct Prog {
  uint32_t magic;
  char *src, *name;
  int nh;
  char **hsrc, **hname;
  char *log;
  char *image;
  size_t image_len;
} Prog;
#define PROG_MAGIC 0x50524f47u

API int nvrtcCreateProgram(Prog **out, const char *src, const char *name, int nh,
                           const char *const *hsrc, const char *const *hname) {
  if (!out || !src || nh < 0 || (nh > 0 && (!hsrc || !hname)))
    return NVRTC_ERROR_INVALID_INPUT;
  Prog *p = calloc(1, sizeof *p);
  if (!p)
    return NVRTC_ERROR_OUT_OF_MEMORY;
  p->magic = PROG_MAGIC;
  p->src = xstrdup(src);
  p->name = xstrdup(name && *name ? name : "default_program");
  p->nh = nh;
  p->hsrc = calloc((size_t)nh + 1, sizeof *p->hsrc);
  p->hname = calloc((size_t)nh + 1, sizeof *p->hname);
  for (int i = 0; i < nh; i++) {
    p->hsrc[i] = xstrdup(hsrc[i]);
    p->hname[i] = xstrdup(hname[i]);
  }
  *out = p;
  return NVRTC_SUCCESS;
}
static bool valid_prog(const Prog *p) { return p && p->magic == PROG_MAGIC; }

API int nvrtcDestroyProgram(Prog **pp) {
  if (!pp || !valid_prog(*pp))
    return NVRTC_ERROR_INVALID_PROGRAM;
  Prog *p = *pp;
  for (int i = 0; i < p->nh; i++) {
    free(p->hsrc[i]);
    free(p->hname[i]);
  }
  free(p->hsrc);
  free(p->hname);
  free(p->src);
  free(p->name);
  free(p->log);
  free(p->image);
  p->magic = 0;
  free(p);
  *pp = NULL;
  return NVRTC_SUCCESS;
}

/* Runs argv with stdout and stderr into log; the exit status (-1: could
 * not run). */
static int run_tool(char *const *argv, const char *log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    FILE *f = fopen(log, "a");
    if (f) {
      fprintf(f, "sflow-emu: cannot run the host compiler '%s': %s (SFLOW_EMU_CXX names it)\n",
              argv[0], strerror(rc));
      fclose(f);
    }
    return -1;
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Splits s on spaces into argv (appended at *n); the strings are s's own
 * (s is modified). */
static void split_words(char *s, char **argv, int *n, int max) {
  for (char *t = strtok(s, " \t"); t && *n < max; t = strtok(NULL, " \t"))
    argv[(*n)++] = t;
}

static const char *const CXXFLAGS[] = {
    "-std=c++17", "-O1", "-g0", "-fPIC", "-w", "-fwrapv", "-fno-strict-aliasing",
    "-ffp-contract=off", "-fno-math-errno", "-fno-exceptions", NULL};

/* The options the emulator passes on to the C++ compiler (-D -U -I -std),
 * in NVRTC's spellings; the others (architecture, -default-device, fmad...)
 * mean nothing on the host. */
static int host_options(int nopt, const char *const *opts, char **out, int max, char *err,
                        size_t errn) {
  int k = 0;
  for (int i = 0; i < nopt; i++) {
    const char *o = opts[i];
    if (!o)
      continue;
    const char *val = NULL;
    char flag = 0;
    if (!strncmp(o, "-D", 2) || !strncmp(o, "--define-macro=", 15))
      flag = 'D', val = o[1] == 'D' ? o + 2 : o + 15;
    else if (!strncmp(o, "-U", 2) || !strncmp(o, "--undefine-macro=", 17))
      flag = 'U', val = o[1] == 'U' ? o + 2 : o + 17;
    else if (!strncmp(o, "-I", 2) || !strncmp(o, "--include-path=", 15))
      flag = 'I', val = o[1] == 'I' ? o + 2 : o + 15;
    else if (!strncmp(o, "-std=", 5) || !strncmp(o, "--std=", 6))
      flag = 's', val = strchr(o, '=') + 1;
    if (!flag)
      continue;
    if ((flag == 'D' || flag == 'U' || flag == 'I') && !*val) {
      if (i + 1 >= nopt) {
        snprintf(err, errn, "nvrtc: option %s needs a value", o);
        return -1;
      }
      val = opts[++i];
    }
    if (k >= max)
      break;
    size_t n = strlen(val) + 8;
    out[k] = malloc(n);
    if (flag == 's')
      snprintf(out[k], n, "-std=%s", val);
    else
      snprintf(out[k], n, "-%c%s", flag, val);
    k++;
  }
  return k;
}

/* The file name a program's text is written under: its NVRTC name, made
 * safe. */
static void safe_name(const char *name, char *out, size_t n) {
  size_t k = 0;
  for (const char *s = name; *s && k + 1 < n; s++)
    out[k++] = (char)((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                              (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == '-'
                          ? *s
                          : '_');
  out[k] = 0;
  if (!k || out[0] == '.')
    snprintf(out, n, "program.cu");
}

/* The kernels of a preprocessed program: every `__global__` (the shim's
 * attribute) function that is not a template, once each. */
static char **scan_kernels(const char *ii, int *count) {
  static const char mark[] = "__attribute__((sf_emu_global))";
  char **names = NULL;
  int n = 0, cap = 0;
  for (const char *p = strstr(ii, mark); p; p = strstr(p + 1, mark)) {
    /* A template kernel cannot be named by cuModuleGetFunction here. */
    const char *b = p;
    while (b > ii && b[-1] != ';' && b[-1] != '}')
      b--;
    bool tmpl = false;
    for (const char *t = b; t < p; t++)
      if (!strncmp(t, "template", 8)) {
        tmpl = true;
        break;
      }
    const char *s = p + sizeof mark - 1;
    while (*s == ' ' || *s == '\t' || *s == '\n')
      s++;
    if (strncmp(s, "void", 4) || !(s[4] == ' ' || s[4] == '\t' || s[4] == '\n'))
      continue;
    s += 4;
    while (*s == ' ' || *s == '\t' || *s == '\n')
      s++;
    const char *id = s;
    while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
           *s == '_')
      s++;
    size_t len = (size_t)(s - id);
    while (*s == ' ' || *s == '\t' || *s == '\n')
      s++;
    if (!len || *s != '(' || tmpl)
      continue;
    bool dup = false;
    for (int i = 0; i < n; i++)
      if (strlen(names[i]) == len && !strncmp(names[i], id, len))
        dup = true;
    if (dup)
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      names = realloc(names, (size_t)cap * sizeof *names);
    }
    names[n] = malloc(len + 1);
    memcpy(names[n], id, len);
    names[n][len] = 0;
    n++;
  }
  *count = n;
  return names;
}

/* Appends a file's text to a malloc'ed log, without the work folder's
 * prefix (so messages name "softmax.cu:12:3", not a temporary path). */
static void log_append(char **log, const char *file, const char *tmp) {
  char *t = read_file(file, NULL);
  if (!t || !*t) {
    free(t);
    return;
  }
  size_t tl = strlen(tmp), cap = strlen(t) + 1;
  char *o = malloc(cap + (*log ? strlen(*log) : 0) + 1), *w = o;
  if (*log) {
    strcpy(o, *log);
    w = o + strlen(o);
  }
  for (const char *s = t; *s;) {
    if (!strncmp(s, tmp, tl) && s[tl] == '/')
      s += tl + 1;
    else
      *w++ = *s++;
  }
  *w = 0;
  free(*log);
  free(t);
  *log = o;
}

/* Compiles src (with its headers and host options) into the module cache;
 * returns the path of the shared object (malloc'ed) or NULL with *log set. */
static char *compile_module(const char *src, const char *name, int nh, char **hsrc, char **hname,
                            int nhost, char **host, char **log) {
  char dir[PATH_MAX];
  cache_dir(dir, sizeof dir);
  const char *cxx = getenv("SFLOW_EMU_CXX");
  if (!cxx || !*cxx)
    cxx = "c++";
  const char *extra = getenv("SFLOW_EMU_CXXFLAGS");
  Hash h;
  hash_init(&h);
  hash_str(&h, EMU_VERSION);
  hash_str(&h, sf_emu_shim_text);
  hash_str(&h, cxx);
  hash_str(&h, extra ? extra : "");
  for (int i = 0; CXXFLAGS[i]; i++)
    hash_str(&h, CXXFLAGS[i]);
  for (int i = 0; i < nhost; i++)
    hash_str(&h, host[i]);
  for (int i = 0; i < nh; i++) {
    hash_str(&h, hname[i]);
    hash_str(&h, hsrc[i]);
  }
  hash_str(&h, src);
  char key[33];
  hash_hex(&h, key);
  char so[PATH_MAX + 64];
  snprintf(so, sizeof so, "%s/%s.so", dir, key);
  if (access(so, R_OK) == 0)
    return xstrdup(so);

  mkdirs(dir);
  /* The shim, once per version of its text. */
  Hash hs;
  hash_init(&hs);
  hash_str(&hs, sf_emu_shim_text);
  char skey[33], shim[PATH_MAX + 64];
  hash_hex(&hs, skey);
  snprintf(shim, sizeof shim, "%s/cuda_shim-%.16s.h", dir, skey);
  if (access(shim, R_OK) != 0) {
    char tmp[PATH_MAX + 80];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", shim, (int)getpid());
    if (!write_file(tmp, sf_emu_shim_text, strlen(sf_emu_shim_text)) || rename(tmp, shim) != 0) {
      unlink(tmp);
      *log = xstrdup("sflow-emu: cannot write the shim header into the module cache");
      return NULL;
    }
  }
  /* Work folders of compiles killed midway (over 10 minutes old) go first. */
  DIR *dd = opendir(dir);
  for (struct dirent *e; dd && (e = readdir(dd));) {
    char old[PATH_MAX + 300];
    struct stat st;
    snprintf(old, sizeof old, "%s/%s", dir, e->d_name);
    if (!strncmp(e->d_name, ".work-", 6) && stat(old, &st) == 0 &&
        time(NULL) - st.st_mtime > 600)
      rmtree(old);
  }
  if (dd)
    closedir(dd);
  char work[PATH_MAX + 64];
  snprintf(work, sizeof work, "%s/.work-XXXXXX", dir);
  if (!mkdtemp(work)) {
    char m[PATH_MAX + 100];
    snprintf(m, sizeof m, "sflow-emu: cannot make a work folder in %s: %s", dir, strerror(errno));
    *log = xstrdup(m);
    return NULL;
  }
  char file[128], path[PATH_MAX + 200], ii[PATH_MAX + 80], all[PATH_MAX + 80],
      out[PATH_MAX + 80], lg[PATH_MAX + 80];
  safe_name(name, file, sizeof file);
  snprintf(path, sizeof path, "%s/%s", work, file);
  snprintf(ii, sizeof ii, "%s/scan.ii", work);
  snprintf(all, sizeof all, "%s/sf_emu_all.cpp", work);
  snprintf(out, sizeof out, "%s/module.so", work);
  snprintf(lg, sizeof lg, "%s/log", work);
  char *result = NULL;
  bool ok = write_file(path, src, strlen(src));
  for (int i = 0; ok && i < nh; i++) {
    char hp[PATH_MAX + 200];
    snprintf(hp, sizeof hp, "%s/%s", work, hname[i]);
    char *slash = strrchr(hp, '/');
    *slash = 0;
    mkdirs(hp);
    *slash = '/';
    ok = write_file(hp, hsrc[i], strlen(hsrc[i]));
  }
  if (!ok) {
    *log = xstrdup("sflow-emu: cannot write the program into the work folder");
    goto done;
  }
  /* argv: compiler words, flags, extra words, host options, -include, -I. */
  char cxxbuf[1024], extrabuf[1024];
  snprintf(cxxbuf, sizeof cxxbuf, "%s", cxx);
  snprintf(extrabuf, sizeof extrabuf, "%s", extra ? extra : "");
  char incw[PATH_MAX + 80];
  snprintf(incw, sizeof incw, "-I%s", work);
  char *argv[128];
  int n = 0;
  split_words(cxxbuf, argv, &n, 8);
  int base = n;
  for (int i = 0; CXXFLAGS[i]; i++)
    argv[n++] = (char *)CXXFLAGS[i];
  split_words(extrabuf, argv, &n, 40);
  for (int i = 0; i < nhost && n < 100; i++)
    argv[n++] = host[i];
  char keydef[64];
  snprintf(keydef, sizeof keydef, "-DSF_EMU_SHIM_KEY=\"%.16s\"", skey);
  argv[n++] = keydef;
  argv[n++] = "-include";
  argv[n++] = shim;
  argv[n++] = incw;
  int common = n;
  /* Pass 1: preprocess, to find the kernels. */
  argv[n++] = "-E";
  argv[n++] = "-P";
  argv[n++] = "-x";
  argv[n++] = "c++";
  argv[n++] = path;
  argv[n++] = "-o";
  argv[n++] = ii;
  argv[n] = NULL;
  (void)base;
  if (run_tool(argv, lg) != 0) {
    log_append(log, lg, work);
    if (!*log)
      *log = xstrdup("sflow-emu: the host compiler failed to preprocess the program");
    goto done;
  }
  char *text = read_file(ii, NULL);
  int nk = 0;
  char **kernels = text ? scan_kernels(text, &nk) : NULL;
  free(text);
  /* Pass 2: the program and a launcher per kernel. */
  size_t cap = 256 + strlen(file);
  for (int i = 0; i < nk; i++)
    cap += strlen(kernels[i]) + 32;
  char *w = malloc(cap);
  int off = snprintf(w, cap, "#include \"%s\"\n", file);
  for (int i = 0; i < nk; i++) {
    off += snprintf(w + off, cap - (size_t)off, "SF_EMU_KERNEL(%s)\n", kernels[i]);
    free(kernels[i]);
  }
  free(kernels);
  ok = write_file(all, w, (size_t)off);
  free(w);
  n = common;
  argv[n++] = "-shared";
  argv[n++] = all;
  argv[n++] = "-o";
  argv[n++] = out;
  argv[n++] = "-lm";
  argv[n] = NULL;
  if (!ok || run_tool(argv, lg) != 0) {
    log_append(log, lg, work);
    if (!*log)
      *log = xstrdup("sflow-emu: the host compiler failed");
    goto done;
  }
  if (rename(out, so) != 0) {
    *log = xstrdup("sflow-emu: cannot move the module into the cache");
    goto done;
  }
  result = xstrdup(so);
done:
  rmtree(work);
  return result;
}

/* The first 16 hex digits of the shim's hash: a module built with another
 * shim is rebuilt, not loaded. */
static void shim_key(char out[17]) {
  Hash hs;
  hash_init(&hs);
  hash_str(&hs, sf_emu_shim_text);
  char k[33];
  hash_hex(&hs, k);
  memcpy(out, k, 16);
  out[16] = 0;
}

/* The image ("CUBIN"): magic, the shared object's path, the program name,
 * the host options and the source (to rebuild a cleaned cache). */
#define IMG_MAGIC "SFEMUIMG1"
static char *make_image(const char *so, const char *name, int nhost, char **host, const char *src,
                        size_t *len) {
  size_t n = sizeof IMG_MAGIC + strlen(so) + 1 + strlen(name) + 1 + 16 + strlen(src) + 1;
  for (int i = 0; i < nhost; i++)
    n += strlen(host[i]) + 1;
  char *img = malloc(n), *w = img;
  memcpy(w, IMG_MAGIC, sizeof IMG_MAGIC), w += sizeof IMG_MAGIC;
  w = stpcpy(w, so) + 1;
  w = stpcpy(w, name) + 1;
  w += sprintf(w, "%d", nhost) + 1;
  for (int i = 0; i < nhost; i++)
    w = stpcpy(w, host[i]) + 1;
  w = stpcpy(w, src) + 1;
  *len = (size_t)(w - img);
  return img;
}

API int nvrtcCompileProgram(Prog *p, int nopt, const char *const *opts) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  if (nopt < 0 || (nopt > 0 && !opts))
    return NVRTC_ERROR_INVALID_INPUT;
  free(p->log);
  p->log = NULL;
  free(p->image);
  p->image = NULL;
  char *host[64];
  char err[256];
  int nhost = host_options(nopt, opts, host, 64, err, sizeof err);
  if (nhost < 0) {
    p->log = xstrdup(err);
    return NVRTC_ERROR_INVALID_OPTION;
  }
  char *so = compile_module(p->src, p->name, p->nh, p->hsrc, p->hname, nhost, host, &p->log);
  int rc = NVRTC_ERROR_COMPILATION;
  if (so) {
    p->image = make_image(so, p->name, nhost, host, p->src, &p->image_len);
    rc = NVRTC_SUCCESS;
  }
  free(so);
  for (int i = 0; i < nhost; i++)
    free(host[i]);
  return rc;
}

API int nvrtcGetProgramLogSize(Prog *p, size_t *n) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  *n = (p->log ? strlen(p->log) : 0) + 1;
  return NVRTC_SUCCESS;
}
API int nvrtcGetProgramLog(Prog *p, char *out) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  strcpy(out, p->log ? p->log : "");
  return NVRTC_SUCCESS;
}
API int nvrtcGetCUBINSize(Prog *p, size_t *n) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  if (!p->image)
    return NVRTC_ERROR_INVALID_INPUT;
  *n = p->image_len;
  return NVRTC_SUCCESS;
}
API int nvrtcGetCUBIN(Prog *p, char *out) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  if (!p->image)
    return NVRTC_ERROR_INVALID_INPUT;
  memcpy(out, p->image, p->image_len);
  return NVRTC_SUCCESS;
}
/* PTX is the same image (cuModuleLoadData takes either). */
API int nvrtcGetPTXSize(Prog *p, size_t *n) { return nvrtcGetCUBINSize(p, n); }
API int nvrtcGetPTX(Prog *p, char *out) { return nvrtcGetCUBIN(p, out); }
/* Name expressions: only plain extern "C" names are supported. */
API int nvrtcAddNameExpression(Prog *p, const char *expr) {
  (void)expr;
  return valid_prog(p) ? NVRTC_SUCCESS : NVRTC_ERROR_INVALID_PROGRAM;
}
API int nvrtcGetLoweredName(Prog *p, const char *expr, const char **lowered) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  while (*expr == '&' || *expr == ' ')
    expr++;
  *lowered = expr;
  return NVRTC_SUCCESS;
}

/* ============================================================== modules */



/* Parses an image: NULL-terminated fields into f (so, name, nhost, opts..., src). */
static bool parse_image(const char *img, const char **so, const char **name, int *nhost,
                        const char **host, int maxh, const char **src) {
  if (memcmp(img, IMG_MAGIC, sizeof IMG_MAGIC))
    return false;
  const char *r = img + sizeof IMG_MAGIC;
  *so = r, r += strlen(r) + 1;
  *name = r, r += strlen(r) + 1;
  *nhost = atoi(r), r += strlen(r) + 1;
  if (*nhost < 0 || *nhost > maxh)
    return false;
  for (int i = 0; i < *nhost; i++)
    host[i] = r, r += strlen(r) + 1;
  *src = r;
  return true;
}

/* Was the module at path built with the shim whose key is want? */
static bool module_current(const char *path, const char *want) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return false;
  const char *(*key)(void) = (const char *(*)(void))dlsym(h, "sf_emu_shim_key");
  bool ok = key && !strcmp(key(), want);
  dlclose(h);
  return ok;
}

API CUresult cuModuleLoadData(Module **out, const void *image) {
  NEED_CTX();
  const char *so, *name, *src, *host[64];
  int nhost;
  if (!image || !parse_image(image, &so, &name, &nhost, host, 64, &src)) {
    say("cuModuleLoadData: not an emulator image (a real CUBIN or PTX, or a corrupt one)");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  char *path = xstrdup(so);
  char want[17];
  shim_key(want);
  if (access(path, R_OK) != 0 || !module_current(path, want)) {
    /* A cleaned module cache, or a module of an older emulator: rebuild
     * from the image's source. */
    char *log = NULL;
    free(path);
    path = compile_module(src, name, 0, NULL, NULL, nhost, (char **)host, &log);
    if (!path) {
      say("cuModuleLoadData: the module %s is gone and does not rebuild: %s", so, log ? log : "?");
      free(log);
      return CUDA_ERROR_INVALID_IMAGE;
    }
    free(log);
  }
  /* Each device gets its own copy of the object, so that its globals and
   * __shared__ arrays are the device's own, as on GPUs (dlopen shares one
   * instance per file, hard links included). */
  if (cur_ctx->dev > 0) {
    char *copy = malloc(strlen(path) + 16);
    sprintf(copy, "%s.dev%d.so", path, cur_ctx->dev);
    if (access(copy, R_OK) != 0) {
      size_t n = 0;
      char *bytes = read_file(path, &n);
      char tmp[PATH_MAX + 64];
      snprintf(tmp, sizeof tmp, "%s.%d.tmp", copy, (int)getpid());
      if (!bytes || !write_file(tmp, bytes, n) || rename(tmp, copy) != 0)
        unlink(tmp);
      free(bytes);
    }
    free(path);
    path = copy;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    say("cuModuleLoadData: %s", dlerror());
    free(path);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  struct sf_emu_state *(*get)(void) = (struct sf_emu_state * (*)(void)) dlsym(h, "sf_emu_module_state");
  if (!get) {
    say("cuModuleLoadData: %s is not an emulator module", path);
    dlclose(h);
    free(path);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  Module *m = calloc(1, sizeof *m);
  m->magic = MODULE_MAGIC;
  m->dev = cur_ctx->dev;
  m->so = h;
  m->st = get();
  m->st->sync = emu_sync;
  m->st->exit_thread = emu_exit_thread;
  m->st->fail = emu_fail;
  m->st->check_ptr = emu_check_ptr;
  m->path = path;
  *out = m;
  return CUDA_SUCCESS;
}
API CUresult cuModuleLoadDataEx(Module **out, const void *image, unsigned n, void *opts,
                                void **vals) {
  (void)n, (void)opts, (void)vals;
  return cuModuleLoadData(out, image);
}
API CUresult cuModuleUnload(Module *m) {
  NEED_INIT();
  if (!m || m->magic != MODULE_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  /* The shared object stays loaded: functions handed out may outlive it
   * in a caller's table, and a GPU would fault on them just the same. */
  m->magic = 0;
  return CUDA_SUCCESS;
}
API CUresult cuModuleGetFunction(Function **out, Module *m, const char *name) {
  NEED_CTX();
  if (!m || m->magic != MODULE_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  char sym[512];
  snprintf(sym, sizeof sym, "sf_emu_k_%s", name);
  void *body = dlsym(m->so, sym);
  snprintf(sym, sizeof sym, "sf_emu_c_%s", name);
  void *check = dlsym(m->so, sym);
  if (!body || !check)
    return CUDA_ERROR_NOT_FOUND;
  Function *f = calloc(1, sizeof *f);
  f->magic = FUNCTION_MAGIC;
  f->m = m;
  *(void **)&f->body = body;
  *(void **)&f->check = check;
  snprintf(sym, sizeof sym, "sf_emu_s_%s", name);
  *(void **)&f->sizes = dlsym(m->so, sym);
  f->name = xstrdup(name);
  *out = f;
  return CUDA_SUCCESS;
}
/* A module's global variable (a __device__ or __constant__ one): its host
 * address, registered so that copies to and from it pass the checks. */
API CUresult cuModuleGetGlobal_v2(uint64_t *dptr, size_t *bytes, Module *m, const char *name) {
  NEED_CTX();
  if (!m || m->magic != MODULE_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  void *p = dlsym(m->so, name);
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!p || !dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
    return CUDA_ERROR_NOT_FOUND;
  size_t size = sym->st_size;
  pthread_mutex_lock(&M.mu);
  if (!find_range((uintptr_t)p, size ? size : 1))
    insert_alloc((Alloc){(uintptr_t)p, size ? size : 1, NULL, 0, m->dev, MEM_GLOBAL});
  pthread_mutex_unlock(&M.mu);
  if (dptr)
    *dptr = (uintptr_t)p;
  if (bytes)
    *bytes = size;
  return CUDA_SUCCESS;
}


API CUresult cuFuncGetAttribute(int *v, int attr, Function *f) {
  NEED_INIT();
  if (!valid_function(f))
    return CUDA_ERROR_INVALID_HANDLE;
  switch (attr) {
  case 0: *v = 1024; break; /* max threads per block */
  case 4: *v = 32; break;   /* registers */
  case 5: case 6: *v = 90; break;
  default: *v = 0;
  }
  return CUDA_SUCCESS;
}
API CUresult cuFuncSetAttribute(Function *f, int attr, int v) {
  (void)attr, (void)v;
  NEED_INIT();
  return valid_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
API CUresult cuFuncSetCacheConfig(Function *f, int c) {
  (void)c;
  NEED_INIT();
  return valid_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
API CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, Function *f,
                                              void *smem_fn, size_t smem, int limit) {
  (void)smem_fn, (void)smem;
  NEED_CTX();
  if (!valid_function(f))
    return CUDA_ERROR_INVALID_HANDLE;
  int b = 256;
  if (limit > 0 && limit < b)
    b = limit;
  *block = b;
  *min_grid = 132 * (2048 / b);
  return CUDA_SUCCESS;
}
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, Function *f, int block,
                                                         size_t smem) {
  (void)smem;
  NEED_CTX();
  if (!valid_function(f) || block <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  *n = 2048 / block > 32 ? 32 : 2048 / block;
  return CUDA_SUCCESS;
}

