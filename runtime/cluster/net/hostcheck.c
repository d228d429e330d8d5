/*
 * hostcheck.c — whether a host can run this executable, asked before a
 * --nodes run deploys anything: its architecture, its glibc version and
 * its CPU's features, so a host that lacks one is refused with its name
 * and what it lacks instead of dying of SIGILL (or a loader error) on the
 * worker.
 *
 * What the executable needs it knows about itself:
 *  - the CPU features sflowc compiled for, recorded in
 *    sf_program_desc.target_needs (compiler/target.c);
 *  - the newest glibc symbol version it links against, read from its own
 *    ELF version-needs section (what `objdump -T` shows as GLIBC_2.34);
 *  - the architecture the runtime was built for.
 *
 * Key design choice: what a host has is read over the SSH session already
 * open, by shell commands (uname -m, getconf GNU_LIBC_VERSION and the
 * flags line of /proc/cpuinfo) that the worker's own channel runs first,
 * before the executable is copied; the same command then waits for the
 * head's go and execs the worker (launch.c), so the check costs no SSH
 * session of its own.  Nothing
 * of ours runs on the host, so the check cannot itself execute an
 * instruction the host lacks.  The kernel's /proc/cpuinfo flags are what
 * the CPU has *and* the kernel enabled (AVX-512 needs the kernel to save
 * its registers), which is exactly what a program can use.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_features.h"
#include "net.h"

const char sf__host_probe_cmd[] =
    "echo arch=$(uname -m); echo libc=$(getconf GNU_LIBC_VERSION 2>/dev/null); "
    "grep -m1 -E \"^(flags|Features)[[:space:]]*:\" /proc/cpuinfo";

#if defined(__x86_64__)
#define THIS_ARCH "x86_64"
#elif defined(__aarch64__)
#define THIS_ARCH "aarch64"
#else
#define THIS_ARCH NULL /* not checked */
#endif

/* ------------------------------------------------ what the file needs */

static int need_major, need_minor; /* newest GLIBC_x.y; 0.0: unknown */

#define SELF "this machine" /* cpu_check's label for sf__host_check_self */

/* "2.34" or "2.3.4" -> (2, 34) / (2, 3); false when not a version. */
static bool parse_version(const char *s, int *major, int *minor) {
  char *end;
  long a = strtol(s, &end, 10);
  if (end == s || *end != '.')
    return false;
  const char *m = end + 1;
  long b = strtol(m, &end, 10);
  if (end == m)
    return false;
  *major = (int)a, *minor = (int)b;
  return true;
}

static bool read_at(int fd, void *buf, size_t n, off_t off) {
  return pread(fd, buf, n, off) == (ssize_t)n;
}

/* The newest GLIBC_x.y among the version needs of the ELF file at path
 * (its SHT_GNU_verneed section and the string table it links to). */
static void glibc_needed(const char *path, int *major, int *minor) {
  *major = *minor = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  Elf64_Ehdr eh;
  Elf64_Shdr *sh = NULL;
  char *vn = NULL, *str = NULL;
  if (!read_at(fd, &eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_shnum == 0 || eh.e_shnum > 4096)
    goto out;
  sh = calloc(eh.e_shnum, sizeof *sh);
  if (!sh || !read_at(fd, sh, eh.e_shnum * sizeof *sh, (off_t)eh.e_shoff))
    goto out;
  for (int i = 0; i < eh.e_shnum; i++) {
    if (sh[i].sh_type != SHT_GNU_verneed || sh[i].sh_link >= eh.e_shnum)
      continue;
    const Elf64_Shdr *v = &sh[i], *s = &sh[v->sh_link];
    if (v->sh_size > (1u << 20) || s->sh_size > (16u << 20))
      break;
    vn = malloc(v->sh_size + 1);
    str = malloc(s->sh_size + 1);
    if (!vn || !str || !read_at(fd, vn, v->sh_size, (off_t)v->sh_offset) ||
        !read_at(fd, str, s->sh_size, (off_t)s->sh_offset))
      break;
    str[s->sh_size] = '\0';
    /* Each file needed (libc.so.6, libm.so.6, ...) lists its versions. */
    for (size_t off = 0; off + sizeof(Elf64_Verneed) <= v->sh_size;) {
      Elf64_Verneed need;
      memcpy(&need, vn + off, sizeof need);
      size_t a = off + need.vn_aux;
      for (unsigned k = 0; k < need.vn_cnt && a + sizeof(Elf64_Vernaux) <= v->sh_size; k++) {
        Elf64_Vernaux aux;
        memcpy(&aux, vn + a, sizeof aux);
        int x, y;
        if (aux.vna_name < s->sh_size && !strncmp(str + aux.vna_name, "GLIBC_", 6) &&
            parse_version(str + aux.vna_name + 6, &x, &y) &&
            (x > *major || (x == *major && y > *minor)))
          *major = x, *minor = y;
        if (!aux.vna_next)
          break;
        a += aux.vna_next;
      }
      if (!need.vn_next)
        break;
      off += need.vn_next;
    }
    break;
  }
out:
  free(vn);
  free(str);
  free(sh);
  close(fd);
}

void sf__host_requirements(const char *exe_path) {
  glibc_needed(exe_path, &need_major, &need_minor);
}

/* ------------------------------------------------- what the host has */

/* The /proc/cpuinfo name of an LLVM feature: the table's, else LLVM's
 * spelling with '.' and '-' as '_' (how the kernel writes most of them). */
static void cpuinfo_name(const char *llvm, char *out, size_t n) {
#define MATCH(l, c, e) \
  if (!strcmp(llvm, l)) { \
    snprintf(out, n, "%s", c); \
    return; \
  }
#if defined(__aarch64__)
  SF_CPU_FEATURES_AARCH64(MATCH)
#else
  SF_CPU_FEATURES_X86(MATCH)
#endif
#undef MATCH
  snprintf(out, n, "%s", llvm);
  for (char *p = out; *p; p++)
    if (*p == '.' || *p == '-')
      *p = '_';
}

/* The value of "key=" on its own line of the probe's output, or "". */
static void probe_value(const char *out, const char *key, char *val, size_t n) {
  size_t k = strlen(key);
  val[0] = '\0';
  for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (!strncmp(p, key, k) && p[k] == '=') {
      const char *e = strchr(p, '\n');
      snprintf(val, n, "%.*s", (int)(e ? e - p - (long)k - 1 : (long)strlen(p + k + 1)), p + k + 1);
      return;
    }
}

/* Whether word is one of the space-separated words of list. */
static bool has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)); p += n)
    if ((p == list || p[-1] == ' ' || p[-1] == '\t') &&
        (p[n] == '\0' || p[n] == ' ' || p[n] == '\n' || p[n] == '\t'))
      return true;
  return false;
}

static int cpu_check(const char *label, const char *out, char *err, size_t errlen);

int sf__host_check(const char *label, const char *out, char *err, size_t errlen) {
  const char *prog = sf_program_desc.name && *sf_program_desc.name ? sf_program_desc.name
                                                                     : "this program";
  char arch[64], libc[128];
  probe_value(out, "arch", arch, sizeof arch);
  probe_value(out, "libc", libc, sizeof libc);
  if (!arch[0]) {
    snprintf(err, errlen, "%s: cannot tell what the host runs: `uname -m` printed nothing",
             label);
    return -1;
  }
  if (THIS_ARCH && strcmp(arch, THIS_ARCH)) {
    snprintf(err, errlen, "%s: the host is %s, %s is compiled for %s", label, arch, prog,
             THIS_ARCH);
    return -1;
  }
  if (need_major) {
    int x = 0, y = 0;
    if (strncmp(libc, "glibc ", 6) || !parse_version(libc + 6, &x, &y)) {
      snprintf(err, errlen, "%s: the host has no GNU C library that `getconf "
               "GNU_LIBC_VERSION` reports; %s needs glibc %d.%d or later", label, prog,
               need_major, need_minor);
      return -1;
    }
    if (x < need_major || (x == need_major && y < need_minor)) {
      snprintf(err, errlen, "%s: the host has glibc %d.%d, %s needs glibc %d.%d or later "
               "(build it on a machine with glibc %d.%d or older, or update the host)",
               label, x, y, prog, need_major, need_minor, x, y);
      return -1;
    }
  }
  return cpu_check(label, out, err, errlen);
}

/* The CPU half of sf__host_check: out holds a "flags" (or aarch64
 * "Features") line of /proc/cpuinfo. */
static int cpu_check(const char *label, const char *out, char *err, size_t errlen) {
  const char *prog = sf_program_desc.name && *sf_program_desc.name ? sf_program_desc.name
                                                                     : "this program";
  const char *needs = sf_program_desc.target_needs;
  if (!needs || !*needs)
    return 0;
  const char *flags = strstr(out, "flags");
  if (!flags)
    flags = strstr(out, "Features");
  flags = flags ? strchr(flags, ':') : NULL;
  if (!flags) {
    snprintf(err, errlen, "%s: cannot read the CPU's features from /proc/cpuinfo; %s needs %s",
             label, prog, needs);
    return -1;
  }
  char missing[512] = "", names[512] = "";
  int nmissing = 0;
  for (const char *p = needs; *p;) {
    const char *e = strchr(p, ',');
    char llvm[64], flag[64];
    snprintf(llvm, sizeof llvm, "%.*s", (int)(e ? e - p : (long)strlen(p)), p);
    cpuinfo_name(llvm, flag, sizeof flag);
    if (!has_word(flags + 1, flag)) {
      size_t m = strlen(missing), k = strlen(names);
      snprintf(missing + m, sizeof missing - m, "%s%s", nmissing ? ", " : "", llvm);
      snprintf(names + k, sizeof names - k, "%s%s", nmissing ? " " : "", flag);
      nmissing++;
    }
    p = e ? e + 1 : p + strlen(p);
  }
  if (nmissing) {
    bool self = !strcmp(label, SELF);
    snprintf(err, errlen, "%s%s CPU lacks %s (/proc/cpuinfo: %s), which %s was "
             "compiled for (--target-cpu=%s); recompile with a lower --target-cpu or without "
             "%s%s",
             self ? "" : label, self ? "this machine's" : ": the host's", missing, names, prog,
             sf_program_desc.target_cpu && *sf_program_desc.target_cpu
                 ? sf_program_desc.target_cpu
                 : "default",
             nmissing == 1 ? "that feature" : "those features",
             self ? " (SFLOW_SKIP_CPU_CHECK=1 runs it anyway)" : ", or leave this host out");
    return -1;
  }
  return 0;
}

/* ----------------------------------------------------- this machine */

int sf__host_check_self(char *err, size_t errlen) {
  /* Opt-out for a user who knows that no instruction of the missing
   * feature is in the file (and for the tests that build one such file). */
  const char *skip = getenv("SFLOW_SKIP_CPU_CHECK");
  if (skip && !strcmp(skip, "1"))
    return 0;
  const char *needs = sf_program_desc.target_needs;
  if (!needs || !*needs)
    return 0;
  /* Up to the first "flags" line of /proc/cpuinfo, so this reads a few KB
   * however many CPUs the machine has. */
  char out[16384];
  int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0; /* no /proc: nothing to check against; run as before */
  size_t got = 0;
  while (got < sizeof out - 1) {
    ssize_t r = read(fd, out + got, sizeof out - 1 - got);
    if (r <= 0)
      break;
    got += (size_t)r;
    out[got] = '\0';
    const char *f = strstr(out, "\nflags");
    if (!f)
      f = strstr(out, "\nFeatures");
    if (f && strchr(f + 1, '\n'))
      break;
  }
  close(fd);
  out[got] = '\0';
  /* Only the CPU: this is the architecture the file was built for, and the
   * dynamic loader already checked this machine's glibc. */
  return cpu_check(SELF, out, err, errlen);
}
