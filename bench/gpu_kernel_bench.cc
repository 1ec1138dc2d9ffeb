// gpu-kernel-bench: the GPU reduction kernel's memory bandwidth beside a device-to-device copy
// measured in the same run, on the current GPU. Bandwidth counts bytes moved: a copy of S bytes
// reads and writes S (2S); a reduction of k inputs of S bytes reads kS and writes S ((k+1)S).
// The ratio column is kernel / copy: the target is >= 0.90 for large float32 and
// bfloat16 sums.
//
//   gpu-kernel-bench [-e MAXBYTES] [-k INPUTS] [-n ITERS]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/gpu/gpu_runtime.h"
#include "kernels/gpu/reduce_kernels.h"

namespace {

void check(gpuError_t err, const char* what) {
  if (err == gpuSuccess) return;
  std::fprintf(stderr, "gpu-kernel-bench: %s: %s\n", what, gpuGetErrorString(err));
  std::exit(1);
}

// Milliseconds per run of `body`, by events around `iters` runs after two warm-ups.
template <typename Body>
float timeMs(gpuStream_t stream, int iters, Body body) {
  gpuEvent_t start, stop;
  check(gpuEventCreate(&start), "event");
  check(gpuEventCreate(&stop), "event");
  body();
  body();
  check(gpuEventRecord(start, stream), "record");
  for (int i = 0; i < iters; ++i) body();
  check(gpuEventRecord(stop, stream), "record");
  check(gpuEventSynchronize(stop), "synchronize");
  float ms = 0;
  check(gpuEventElapsedTime(&ms, start, stop), "elapsed");
  (void)gpuEventDestroy(start);
  (void)gpuEventDestroy(stop);
  return ms / static_cast<float>(iters);
}

struct TypeCase {
  const char* name;
  weftDataType_t type;
  size_t size;
};

}  // namespace

int main(int argc, char** argv) {
  size_t maxBytes = size_t{1} << 30;
  int inputs = 2;
  int iters = 20;
  for (int opt; (opt = getopt(argc, argv, "e:k:n:h")) != -1;) {
    switch (opt) {
      case 'e': maxBytes = std::strtoull(optarg, nullptr, 10) << 20; break;  // MiB
      case 'k': inputs = std::atoi(optarg); break;
      case 'n': iters = std::atoi(optarg); break;
      default:
        std::fprintf(stderr, "usage: gpu-kernel-bench [-e MAX_MIB] [-k INPUTS] [-n ITERS]\n");
        return opt == 'h' ? 0 : 2;
    }
  }
  if (inputs < 1 || iters < 1 || maxBytes == 0) {
    std::fprintf(stderr, "gpu-kernel-bench: -k, -n and -e must be positive\n");
    return 2;
  }
  int count = 0;
  if (gpuGetDeviceCount(&count) != gpuSuccess || count == 0) {
    std::fprintf(stderr, "gpu-kernel-bench: no GPU visible\n");
    return 77;
  }
  gpuStream_t stream;
  check(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking), "stream");
  void* in = nullptr;
  void* out = nullptr;
  check(gpuMalloc(&in, maxBytes * static_cast<size_t>(inputs)), "malloc inputs");
  check(gpuMalloc(&out, maxBytes), "malloc output");
  check(gpuMemsetAsync(in, 0, maxBytes * static_cast<size_t>(inputs), stream), "memset");

  const TypeCase types[] = {{"float32", weftFloat32, 4}, {"bfloat16", weftBfloat16, 2}, {"float16", weftFloat16, 2},
                            {"f8e4m3", weftFloat8e4m3, 1}, {"float64", weftFloat64, 8}, {"int32", weftInt32, 4}};
  std::printf("# gpu-kernel-bench: %s, %d inputs, sum; GB/s = bytes moved / time (1e9)\n", WEFT_GPU_RUNTIME_NAME,
              inputs);
  std::printf("%12s %10s %12s %12s %8s\n", "bytes", "type", "copy GB/s", "kernel GB/s", "ratio");
  for (size_t bytes = size_t{1} << 20; bytes <= maxBytes; bytes *= 4) {
    const float copyMs = timeMs(stream, iters, [&] {
      check(gpuMemcpyAsync(out, in, bytes, gpuMemcpyDeviceToDevice, stream), "copy");
    });
    const double copyGBs = 2.0 * static_cast<double>(bytes) / (copyMs * 1e6);
    for (const TypeCase& t : types) {
      weft::kernels::gpu::ReduceArgs args;
      args.inputs = in;
      args.inputStride = bytes / t.size;
      args.nInputs = inputs;
      args.out = out;
      args.count = bytes / t.size;
      args.type = t.type;
      args.op = weftSum;
      const float kernelMs = timeMs(stream, iters, [&] { check(weft::kernels::gpu::launchReduce(args, stream), "launch"); });
      const double kernelGBs = static_cast<double>(inputs + 1) * static_cast<double>(bytes) / (kernelMs * 1e6);
      std::printf("%12zu %10s %12.1f %12.1f %8.3f\n", bytes, t.name, copyGBs, kernelGBs, kernelGBs / copyGBs);
    }
  }
  (void)gpuFree(in);
  (void)gpuFree(out);
  (void)gpuStreamDestroy(stream);
  return 0;
}
