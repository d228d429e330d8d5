/*
 * nvml.c — GPU counters through NVML (libnvidia-ml.so.1, which the
 * NVIDIA driver installs), dlopen'ed as the other CUDA libraries are
 * (gpu/libs.c; SFLOW_NVML names the file).
 *
 * Key design choices:
 *  - Loaded once, on the first sample of a run that has a GPU; a missing
 *    library, a failing nvmlInit or no device leaves every NVML family
 *    absent and prints nothing (the allocator's families, from gpu/, are
 *    there whenever the GPU layer found a device).
 *  - NVML's own types are declared here (four plain structs and ints of
 *    its stable v2 ABI), so building needs no NVML header.
 *  - device="K" is NVML's index, which is PCI bus order; CUDA's ordinals
 *    are too when CUDA_DEVICE_ORDER=PCI_BUS_ID (docs/observability.md).
 */
#include <dlfcn.h>

#include "obs.h"

typedef void *nvml_device;
typedef struct { unsigned gpu, memory; } nvml_utilization;
typedef struct { unsigned long long total, free, used; } nvml_memory;

static struct {
  int (*init)(void);
  int (*count)(unsigned *);
  int (*handle)(unsigned, nvml_device *);
  int (*util)(nvml_device, nvml_utilization *);
  int (*mem)(nvml_device, nvml_memory *);
  int (*power)(nvml_device, unsigned *);
  int (*temp)(nvml_device, int, unsigned *);
  unsigned n;
  bool ok;
} N;

static pthread_once_t once = PTHREAD_ONCE_INIT;

#define SYM(field, name)                       \
  do {                                         \
    *(void **)&N.field = dlsym(h, name);       \
    if (!N.field)                              \
      return;                                  \
  } while (0)

static void nvml_open(void) {
  static const char *const names[] = {"libnvidia-ml.so.1", NULL};
  static const char *const companions[] = {NULL};
  char path[4096], why[600];
  void *h = sf__cuda_lib_open("SFLOW_NVML", names, companions, path, sizeof path, why,
                              sizeof why);
  if (!h)
    return;
  SYM(init, "nvmlInit_v2");
  SYM(count, "nvmlDeviceGetCount_v2");
  SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
  SYM(util, "nvmlDeviceGetUtilizationRates");
  SYM(mem, "nvmlDeviceGetMemoryInfo");
  SYM(power, "nvmlDeviceGetPowerUsage");
  SYM(temp, "nvmlDeviceGetTemperature");
  if (N.init() != 0 || N.count(&N.n) != 0 || N.n == 0)
    return;
  N.ok = true;
}

void sf__nvml_sample(void) {
  pthread_once(&once, nvml_open);
  if (!N.ok)
    return;
  double used_all = 0;
  for (unsigned k = 0; k < N.n && k < 64; k++) {
    nvml_device d;
    if (N.handle(k, &d) != 0)
      continue;
    char l[32];
    snprintf(l, sizeof l, "device=\"%u\"", k);
    nvml_utilization u;
    if (N.util(d, &u) == 0)
      sf__metric_set("sflow_gpu_utilization_ratio", l, u.gpu / 100.0);
    nvml_memory m;
    if (N.mem(d, &m) == 0) {
      sf__metric_set("sflow_gpu_memory_used_bytes", l, (double)m.used);
      sf__metric_set("sflow_gpu_memory_total_bytes", l, (double)m.total);
      used_all += (double)m.used;
    }
    unsigned mw, c;
    if (N.power(d, &mw) == 0)
      sf__metric_set("sflow_gpu_power_watts", l, mw / 1000.0);
    if (N.temp(d, 0 /* NVML_TEMPERATURE_GPU */, &c) == 0)
      sf__metric_set("sflow_gpu_temperature_celsius", l, (double)c);
  }
  sf__trace_counter("device memory used bytes (NVML)", used_all);
}
