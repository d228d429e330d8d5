/*
 * nvrtc_check.c — compiles CUDA C files with the runtime's own NVRTC path
 * (runtime/gpu/nvrtc.c), for each architecture given, and fails on any error.
 * NVRTC needs no GPU, so this runs everywhere CUDA is installed; without
 * NVRTC it exits 77 and ctest reports the test as not run.
 *
 *   nvrtc_check sm_80 sm_90 -- a.cu b.cu ...
 */
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "nvrtc_check", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

int main(int argc, char **argv) {
  char why[600];
  if (!sf__nvrtc_load(why, sizeof why)) {
    fprintf(stderr, "nvrtc_check: SKIP: NVRTC is not available (%s)\n", why);
    return 77;
  }
  /* Which file the search of runtime/gpu/libs.c loaded, and its version;
   * --which stops there (tests/gpu/libsearch.py). */
  printf("nvrtc_check: NVRTC %d.%d from %s\n", sf__nvrtc_version() / 1000,
         sf__nvrtc_version() % 1000 / 10, sf__nvrtc_path());
  if (argc == 2 && !strcmp(argv[1], "--which"))
    return 0;
  int sep = 1;
  while (sep < argc && strcmp(argv[sep], "--"))
    sep++;
  if (sep == 1 || sep >= argc - 1) {
    fprintf(stderr, "usage: nvrtc_check ARCH... -- FILE...\n");
    return 2;
  }
  int failed = 0, done = 0;
  for (int f = sep + 1; f < argc; f++) {
    size_t len;
    FILE *fp = fopen(argv[f], "rb");
    if (!fp) {
      fprintf(stderr, "nvrtc_check: cannot read %s\n", argv[f]);
      return 2;
    }
    fseek(fp, 0, SEEK_END);
    len = (size_t)ftell(fp);
    rewind(fp);
    char *src = malloc(len + 1);
    if (!src || fread(src, 1, len, fp) != len)
      return 2;
    src[len] = 0;
    fclose(fp);
    for (int a = 1; a < sep; a++) {
      sf__blob img;
      char *log = NULL;
      if (sf__nvrtc_compile(src, argv[f], argv[a], &img, &log)) {
        printf("ok   %s %s (%zu bytes of CUBIN)\n", argv[a], argv[f], img.len);
        sf__blob_free(&img);
      } else {
        printf("FAIL %s %s\n%s\n", argv[a], argv[f], log ? log : "");
        failed++;
      }
      free(log);
      done++;
    }
    free(src);
  }
  printf("nvrtc_check: %d compilations with NVRTC %d.%d, %d failed\n", done,
         sf__nvrtc_version() / 1000, sf__nvrtc_version() % 1000 / 10, failed);
  return failed ? 1 : 0;
}
