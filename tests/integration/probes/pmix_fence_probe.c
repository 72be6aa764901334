// tests/integration/probes/pmix_fence_probe.c — an LD_PRELOAD probe of the PMIx fences a process
// makes (Open MPI's MPI_Init makes two: the modex, then a barrier). For each PMIx_Fence_nb it prints
// to stderr, with CLOCK_REALTIME (one clock for every rank on one machine, namespaces included):
//   pmix_fence_probe: rank R fence N enter T
//   pmix_fence_probe: rank R fence N release T status S
// A fence is a barrier only if no rank's release comes before the last rank's enter;
// tests/integration/startup_repeat.py checks that from these lines. R is PMIX_RANK.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef pmix_status_t (*fence_nb_fn)(const pmix_proc_t*, size_t, const pmix_info_t*, size_t, pmix_op_cbfunc_t,
                                     void*);

typedef struct {
  pmix_op_cbfunc_t callback;
  void* data;
  int fence;
} probe_call;

static int g_fences = 0;

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char* rank_name(void) {
  const char* r = getenv("PMIX_RANK");
  return r ? r : "?";
}

static void released(pmix_status_t status, void* cbdata) {
  probe_call* call = cbdata;
  fprintf(stderr, "pmix_fence_probe: rank %s fence %d release %.6f status %d\n", rank_name(), call->fence, wall_s(),
          (int)status);
  if (call->callback) call->callback(status, call->data);
  free(call);
}

pmix_status_t PMIx_Fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                            pmix_op_cbfunc_t cbfunc, void* cbdata) {
  static fence_nb_fn real = NULL;
  if (!real) real = (fence_nb_fn)dlsym(RTLD_NEXT, "PMIx_Fence_nb");
  probe_call* call = malloc(sizeof *call);
  if (!real || !call) abort();
  call->callback = cbfunc;
  call->data = cbdata;
  call->fence = __atomic_add_fetch(&g_fences, 1, __ATOMIC_SEQ_CST);
  fprintf(stderr, "pmix_fence_probe: rank %s fence %d enter %.6f\n", rank_name(), call->fence, wall_s());
  return real(procs, nprocs, info, ninfo, released, call);
}
