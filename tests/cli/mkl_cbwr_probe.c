/* LD_PRELOAD probe for the tests: at exit, prints "cbwr branch N" to stderr, N being MKL's
 * conditional-numerical-reproducibility branch in the LibTorch the process loaded (1: off,
 * 2: AUTO, 3: COMPATIBLE, ...; -1: no MKL symbol). mltool loads LibTorch with RTLD_LOCAL, so
 * the library is looked up by name rather than in the global scope.
 *   cc -shared -fPIC -o mkl_cbwr_probe.so mkl_cbwr_probe.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

__attribute__((destructor)) static void report(void) {
  void* lib = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) {
    fprintf(stderr, "cbwr branch none (LibTorch not loaded)\n");
    return;
  }
  int (*get)(int) = (int (*)(int))dlsym(lib, "mkl_serv_cbwr_get");
  fprintf(stderr, "cbwr branch %d\n", get ? get(1) : -1); /* 1: MKL_CBWR_BRANCH */
}
