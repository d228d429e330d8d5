/*
 * libs.c — finding the CUDA libraries that are dlopen'ed by name: NVRTC
 * (nvrtc.c) and cuBLAS (blas.c).
 *
 * Users have them in several places: a CUDA toolkit named by $CUDA_HOME or
 * $CUDA_PATH, the pip wheels PyTorch installs (site-packages/nvidia/NAME/
 * lib, not on the loader's path), the loader's own path (LD_LIBRARY_PATH,
 * ldconfig) and /usr/local/cuda.  Key design choice: the places are tried
 * in that order, a user's explicit setting first and the Python on PATH
 * before the system, so that a benchmark beside torch loads the libraries
 * torch loads; $SFLOW_NVRTC / $SFLOW_CUBLAS name one file and nothing else
 * is tried.  A library's companions in its folder (libnvrtc-builtins,
 * libcublasLt) are loaded first, because a folder off the loader's path
 * would not be searched for them; and the file actually loaded is kept, so
 * that a report can say which one ran.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"

/* The file h was loaded from, into out. */
static void loaded_path(void *h, const char *fallback, char *out, size_t n) {
  struct link_map *lm = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
    snprintf(out, n, "%s", lm->l_name);
  else
    snprintf(out, n, "%s", fallback);
}

/* dir/soname for the first soname present in dir, its companions first. */
static void *open_in(const char *dir, const char *const *sonames, const char *const *companions,
                     char *path, size_t n) {
  for (int i = 0; sonames[i]; i++) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, sonames[i]);
    if (access(p, R_OK) != 0)
      continue;
    for (int c = 0; companions && companions[c]; c++) {
      char pat[PATH_MAX];
      glob_t g;
      snprintf(pat, sizeof pat, "%s/%s", dir, companions[c]);
      if (glob(pat, 0, NULL, &g) == 0)
        for (size_t k = 0; k < g.gl_pathc; k++)
          (void)dlopen(g.gl_pathv[k], RTLD_NOW | RTLD_GLOBAL); /* stays loaded: a dependency */
      globfree(&g);
    }
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      loaded_path(h, p, path, n);
      return h;
    }
  }
  return NULL;
}

/* Every folder matching pattern, in glob's (sorted) order. */
static void *open_glob(const char *pattern, const char *const *sonames,
                       const char *const *companions, char *path, size_t n) {
  glob_t g;
  void *h = NULL;
  if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
    for (size_t k = 0; k < g.gl_pathc && !h; k++)
      h = open_in(g.gl_pathv[k], sonames, companions, path, n);
  globfree(&g);
  return h;
}

/* The wheels' folders under a Python prefix: lib/python3.X/{site,dist}-
 * packages/nvidia/NAME/lib (NAME: cuda_nvrtc, cublas, or cu13 for the
 * CUDA 13 wheels). */
static void *open_prefix(const char *prefix, const char *const *sonames,
                         const char *const *companions, char *path, size_t n) {
  static const char *const under[] = {"lib/python3*/site-packages/nvidia/*/lib",
                                      "lib/python3*/dist-packages/nvidia/*/lib", NULL};
  void *h = NULL;
  for (int i = 0; under[i] && !h; i++) {
    char pat[PATH_MAX];
    snprintf(pat, sizeof pat, "%s/%s", prefix, under[i]);
    h = open_glob(pat, sonames, companions, path, n);
  }
  return h;
}

/* The prefixes of every python3 on PATH (the folder above its bin/, and
 * above the file it links to), of the active virtual or conda environment,
 * and the user's own site-packages. */
static void *open_pythons(const char *const *sonames, const char *const *companions, char *path,
                          size_t n) {
  void *h = NULL;
  const char *envs[] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX")};
  for (int i = 0; i < 2 && !h; i++)
    if (envs[i] && *envs[i])
      h = open_prefix(envs[i], sonames, companions, path, n);
  const char *p = getenv("PATH");
  while (p && *p && !h) {
    size_t len = strcspn(p, ":");
    char dir[PATH_MAX], exe[PATH_MAX + 16], real[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)len, p);
    p += len + (p[len] == ':');
    snprintf(exe, sizeof exe, "%s/python3", dir);
    if (!*dir || access(exe, X_OK) != 0)
      continue;
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
      *slash = '\0';
      h = open_prefix(dir, sonames, companions, path, n);
    }
    if (!h && realpath(exe, real) && (slash = strrchr(real, '/'))) {
      *slash = '\0'; /* PREFIX/bin */
      if ((slash = strrchr(real, '/')) && slash != real) {
        *slash = '\0';
        h = open_prefix(real, sonames, companions, path, n);
      }
    }
  }
  const char *home = getenv("HOME");
  if (!h && home && *home) {
    char pre[PATH_MAX];
    snprintf(pre, sizeof pre, "%s/.local", home);
    h = open_prefix(pre, sonames, companions, path, n);
  }
  return h;
}

void *sf__cuda_lib_open(const char *env, const char *const *sonames,
                        const char *const *companions, char *path, size_t pathn, char *why,
                        size_t whyn) {
  const char *e = getenv(env);
  if (e && *e) {
    void *h = dlopen(e, RTLD_NOW | RTLD_LOCAL);
    if (h)
      loaded_path(h, e, path, pathn);
    else
      snprintf(why, whyn, "%s=%s does not load (%s)", env, e, dlerror());
    return h;
  }
  void *h = NULL;
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH")};
  for (int i = 0; i < 2 && !h; i++)
    if (homes[i] && *homes[i]) {
      char dir[PATH_MAX];
      snprintf(dir, sizeof dir, "%s/lib64", homes[i]);
      h = open_in(dir, sonames, companions, path, pathn);
      snprintf(dir, sizeof dir, "%s/lib", homes[i]);
      h = h ? h : open_in(dir, sonames, companions, path, pathn);
    }
  if (!h)
    h = open_pythons(sonames, companions, path, pathn);
  for (int i = 0; sonames[i] && !h; i++) /* LD_LIBRARY_PATH, ldconfig */
    if ((h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL)))
      loaded_path(h, sonames[i], path, pathn);
  if (!h)
    h = open_in("/usr/local/cuda/lib64", sonames, companions, path, pathn);
  if (!h)
    snprintf(why, whyn, "%s not found (looked in $CUDA_HOME, $CUDA_PATH, the nvidia/*/lib folders "
             "of the python3 on PATH, the loader's path and /usr/local/cuda/lib64; %s names one)",
             sonames[0], env);
  return h;
}
