/*
 * test_rt_gpu.c — the parts of the GPU layer that run without a GPU:
 * SHA-256 against the FIPS vectors, NVRTC compiling through the on-disk
 * cache (a hit the second time, a corrupt entry rebuilt), the CPU
 * references of the library kernels, the CPU matmul against the reference
 * loop, and a launch falling back to the CPU version with its notice.
 * Where NVRTC is missing, the cache tests fail: the suite needs it.
 */
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>

#include "gpu.h"
#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_gpu", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static void test_sha256(void) {
  char hex[65];
  sf__sha256_hex("abc", 3, hex);
  CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sf__sha256_hex("", 0, hex);
  CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sf__sha256_hex(two, strlen(two), hex);
  CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char million[1000000];
  memset(million, 'a', sizeof million);
  sf__sha256_hex(million, sizeof million, hex);
  CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static const char *SRC = "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n";

static void cache_dir(char *dir, size_t n) {
  snprintf(dir, n, "/tmp/sflow-test-cache-%d", (int)getpid());
  setenv("SFLOW_KERNEL_CACHE", dir, 1);
}

static void test_nvrtc_cache(void) {
  char dir[256], why[256];
  cache_dir(dir, sizeof dir);
  CU_ASSERT_FATAL(sf__nvrtc_load(why, sizeof why));
  CU_ASSERT(sf__nvrtc_version() >= 11000);
  sf__blob a = {0}, b = {0};
  bool hit = true;
  char *log = NULL;
  CU_ASSERT_FATAL(sf__kernel_image(SRC, "k", "sm_80", &a, &hit, &log));
  CU_ASSERT(!hit);
  CU_ASSERT(a.len > 100 && !memcmp(a.data, "\177ELF", 4)); /* a CUBIN is an ELF file */
  CU_ASSERT_FATAL(sf__kernel_image(SRC, "k", "sm_80", &b, &hit, &log));
  CU_ASSERT(hit);
  CU_ASSERT(a.len == b.len && !memcmp(a.data, b.data, a.len));
  sf__blob_free(&b);
  /* Another target is another entry. */
  CU_ASSERT_FATAL(sf__kernel_image(SRC, "k", "sm_90", &b, &hit, &log));
  CU_ASSERT(!hit);
  sf__blob_free(&b);
  /* Corrupt the sm_80 entry: one flipped byte is detected and rebuilt. */
  char key[65], path[512];
  sf__kernel_cache_key(SRC, "sm_80", key);
  snprintf(path, sizeof path, "%s/%s-sm_80.cubin", dir, key);
  int fd = open(path, O_RDWR);
  CU_ASSERT_FATAL(fd >= 0);
  char c;
  CU_ASSERT(pread(fd, &c, 1, 200) == 1);
  c ^= 0x55;
  CU_ASSERT(pwrite(fd, &c, 1, 200) == 1);
  close(fd);
  CU_ASSERT_FATAL(sf__kernel_image(SRC, "k", "sm_80", &b, &hit, &log));
  CU_ASSERT(!hit);
  CU_ASSERT(a.len == b.len && !memcmp(a.data, b.data, a.len));
  sf__blob_free(&b);
  /* Truncated to its header: rebuilt too. */
  CU_ASSERT(truncate(path, 20) == 0);
  CU_ASSERT_FATAL(sf__kernel_image(SRC, "k", "sm_80", &b, &hit, &log));
  CU_ASSERT(!hit);
  sf__blob_free(&b);
  CU_ASSERT_FATAL(sf__kernel_image(SRC, "k", "sm_80", &b, &hit, &log));
  CU_ASSERT(hit);
  sf__blob_free(&b);
  sf__blob_free(&a);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CU_ASSERT(system(cmd) == 0);
}

static void test_nvrtc_error(void) {
  sf__blob b = {0};
  char *log = NULL;
  CU_ASSERT(!sf__nvrtc_compile("__global__ void k() { undefined_thing(); }", "bad.cu", "sm_80", &b,
                               &log));
  CU_ASSERT_FATAL(log != NULL);
  CU_ASSERT(strstr(log, "undefined_thing") != NULL);
  free(log);
}

static void test_embedded_kernels(void) {
  const char *names[] = {"reduce", "softmax", "elementwise"};
  for (int i = 0; i < 3; i++)
    CU_ASSERT(sf__kernel_source_find(names[i]) != NULL);
  CU_ASSERT(sf__kernel_source_find("nope") == NULL);
}

double sf__ref_sum_f32(const float *x, int64_t n);
double sf__ref_max_f32(const float *x, int64_t n);
void sf__ref_softmax_rows(const float *x, float *y, int64_t rows, int64_t cols);
bool sf__ref_elementwise(const char *op, const float *a, const float *b, float *c, int64_t n);

static void test_references(void) {
  float x[] = {1, -2, 3.5f, 0.5f}, y[4], z[4];
  CU_ASSERT(sf__ref_sum_f32(x, 4) == 3.0);
  CU_ASSERT(sf__ref_max_f32(x, 4) == 3.5);
  CU_ASSERT(sf__ref_max_f32(x, 0) == -INFINITY);
  sf__ref_softmax_rows(x, y, 2, 2);
  CU_ASSERT(fabsf(y[0] + y[1] - 1) < 1e-6f && fabsf(y[2] + y[3] - 1) < 1e-6f);
  CU_ASSERT(fabsf(y[0] - (float)(1 / (1 + exp(-3.0)))) < 1e-6f);
  CU_ASSERT(sf__ref_elementwise("add", x, x, z, 4) && z[2] == 7.0f);
  CU_ASSERT(sf__ref_elementwise("relu", x, NULL, z, 4) && z[1] == 0.0f && z[0] == 1.0f);
  CU_ASSERT(!sf__ref_elementwise("nope", x, x, z, 4));
}

static void test_matmul_cpu(void) {
  /* Integer-valued data: every order of summation gives exact results. */
  enum { M = 7, K = 5, N = 3 };
  sf_array *a = sf_array_new(&sf_type_f64, M * K, NULL), *b = sf_array_new(&sf_type_f64, K * N, NULL);
  for (int i = 0; i < M * K; i++)
    ((double *)a->data)[i] = i % 5 - 2;
  for (int i = 0; i < K * N; i++)
    ((double *)b->data)[i] = i % 3 + 1;
  setenv("SFLOW_NO_GPU", "1", 1);
  sf__options.quiet = true;
  sf_array *c = sf_matmul(a, b, M, K, N, 0, NULL);
  CU_ASSERT_FATAL(c->len == M * N);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int p = 0; p < K; p++)
        s += ((double *)a->data)[i * K + p] * ((double *)b->data)[p * N + j];
      CU_ASSERT(((double *)c->data)[i * N + j] == s);
    }
  CU_ASSERT(!strcmp(sf__blas_name(), "OpenBLAS"));
  EXPECT_ERROR(sf_matmul(a, b, 2, 2, 2, 0, NULL), "runtime error: matmul: a has 35 elements, but 2×2 needs 4");
  EXPECT_ERROR(sf_matmul(a, b, -1, 2, 2, 0, NULL), "runtime error: matmul: negative dimension in a (-1×2)");
  sf_release(a);
  sf_release(b);
  sf_release(c);
}

static const rt_test tests[] = {
    {"sha256", test_sha256},
    {"nvrtc_cache", test_nvrtc_cache},
    {"nvrtc_error", test_nvrtc_error},
    {"embedded_kernels", test_embedded_kernels},
    {"references", test_references},
    {"matmul_cpu", test_matmul_cpu},
    {NULL, NULL},
};

int main(int argc, char **argv) { return rt_run("rt_gpu", tests, argc, argv); }
