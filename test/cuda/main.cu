// CUDA tests need a GPU: without one every test reports itself skipped (exit 77, which ctest
// counts as "Skipped"), never a silent pass. Listing the tests needs no GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "epl/device/cuda/check.cuh"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing |= std::string(argv[i]).find("list") != std::string::npos;
  if (!listing && epl::device::cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; the CUDA tests run on a GPU machine\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
