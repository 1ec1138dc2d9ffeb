// Element-wise reductions on the GPU for every weftDataType_t x weftRedOp_t: one kernel source
// (reduce_kernels.cu) built by nvcc for NVIDIA and by hipcc for AMD.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_runtime.h"
#include "weft/weft.h"

namespace weft::kernels::gpu {

// out[i] = op over j < nInputs of pre(inputs[j * inputStride + i]), for i < count, then divided by
// `divisor` (Avg: the rank count; 1 otherwise). pre multiplies by *scalar (PreMulSum; read by the
// kernel, so device-accessible) when scalar is non-null, and is the identity otherwise. Half, bfloat16 and fp8 accumulate in float and round
// once, to nearest even (a scaled input is rounded before it is summed, as on the CPU); integers
// wrap; float Max and Min return NaN if any input is NaN. `inputs` and `out` may be device memory
// or mapped pinned host memory (read and written over the bus); out may alias inputs' first row.
// With several outputs, each gets the result (an all-reduce writing every rank's recvbuff at
// once); each element is read from every input before it is written anywhere, so an output may
// alias the same element of any input.
constexpr int kMaxListedInputs = 16;

struct ReduceArgs {
  const void* inputs = nullptr;
  size_t inputStride = 0;  // elements between one input and the next
  int nInputs = 1;
  // Or nInputs (<= kMaxListedInputs) inputs anywhere: peers' buffers, read over CUDA IPC.
  bool listed = false;
  const void* inputList[kMaxListedInputs] = {};
  void* out = nullptr;
  // Or nOutputs (<= kMaxListedInputs) outputs, each receiving the result (out is unused then).
  int nOutputs = 1;
  void* outputList[kMaxListedInputs] = {};
  size_t count = 0;
  weftDataType_t type = weftFloat32;
  weftRedOp_t op = weftSum;  // Sum, Prod, Max or Min (Avg is Sum with divisor = rank count)
  uint64_t divisor = 1;
  const void* scalar = nullptr;  // PreMulSum: one element of `type`
  // Device-accessible; when it holds non-zero as the kernel starts, the kernel does nothing (an
  // operation that already failed must not read its peers' memory).
  const int* skipIf = nullptr;
  // Device memory that a peer sets non-zero (through CUDA IPC) once an all-reduce failed on its
  // side: read as skipIf is, so that no kernel touches the memory of a peer that has given up.
  const uint32_t* skipIfMarked = nullptr;
};

// Launches the reduction on `stream` with a grid sized from the current device's properties.
// Returns the runtime's launch error (gpuSuccess when queued), or gpuErrorInvalidValue for an
// invalid type, op, input or output count. With one input and no scaling it is a copy.
gpuError_t launchReduce(const ReduceArgs& args, gpuStream_t stream);

}  // namespace weft::kernels::gpu
