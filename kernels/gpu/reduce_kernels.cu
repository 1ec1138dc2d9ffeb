// The GPU reduction kernel: one source for nvcc and hipcc (see gpu_runtime.h). Each thread
// reduces 16-byte packs of elements across the inputs in a grid-stride loop, four packs at a
// time; a scalar loop takes the tail, and everything when a pointer or the input stride is not
// 16-byte aligned.
#include "kernels/gpu/reduce_kernels.h"  // first: the runtime's device intrinsics

#if !defined(__HIPCC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/reduce.h"  // dataTypeSize
#include "kernels/float_formats.h"

namespace weft::kernels::gpu {
namespace {

// How an element type is stored, and what it is reduced in.
template <weftDataType_t T> struct Codec;
template <typename S>
struct Plain {
  using Storage = S;
  using Acc = S;
  __device__ static Acc load(S v) { return v; }
  __device__ static S store(Acc a) { return a; }
};
template <> struct Codec<weftInt8> : Plain<int8_t> {};
template <> struct Codec<weftUint8> : Plain<uint8_t> {};
template <> struct Codec<weftInt32> : Plain<int32_t> {};
template <> struct Codec<weftUint32> : Plain<uint32_t> {};
template <> struct Codec<weftInt64> : Plain<int64_t> {};
template <> struct Codec<weftUint64> : Plain<uint64_t> {};
template <> struct Codec<weftFloat32> : Plain<float> {};
template <> struct Codec<weftFloat64> : Plain<double> {};
template <typename S, float (*Load)(S), S (*Store)(float)>
struct Narrow {
  using Storage = S;
  using Acc = float;
  __device__ static float load(S v) { return Load(v); }
  __device__ static S store(float a) { return Store(a); }
};
// Half and bfloat16 through the hardware's conversions where it has them (one instruction each;
// the portable bit arithmetic held bfloat16 sums to 86% and half sums to 58% of copy bandwidth on
// an H100). Both round to nearest even, as the portable ones do; a NaN stays a NaN (its payload
// may differ).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ inline float deviceHalfToFloat(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ inline uint16_t deviceFloatToHalf(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ inline uint16_t deviceFloatToBf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
#else
__device__ inline float deviceHalfToFloat(uint16_t h) { return halfToFloat(h); }
__device__ inline uint16_t deviceFloatToHalf(float f) { return floatToHalf(f); }
__device__ inline uint16_t deviceFloatToBf16(float f) { return floatToBf16(f); }
#endif
template <> struct Codec<weftFloat16> : Narrow<uint16_t, deviceHalfToFloat, deviceFloatToHalf> {};
template <> struct Codec<weftBfloat16> : Narrow<uint16_t, bf16ToFloat, deviceFloatToBf16> {};
template <> struct Codec<weftFloat8e4m3> : Narrow<uint8_t, fp8e4m3ToFloat, floatToFp8e4m3> {};
template <> struct Codec<weftFloat8e5m2> : Narrow<uint8_t, fp8e5m2ToFloat, floatToFp8e5m2> {};

// Integers wrap: arithmetic in the unsigned type of the same width (uint8_t promotes to int,
// whose products of two bytes cannot overflow).
template <typename A>
__device__ A wrapAdd(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename A>
__device__ A wrapMul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

struct SumOp {
  template <typename A> __device__ static A apply(A a, A b) { return wrapAdd(a, b); }
};
struct ProdOp {
  template <typename A> __device__ static A apply(A a, A b) { return wrapMul(a, b); }
};
struct MaxOp {  // a NaN in either input wins (a != a only for NaN)
  template <typename A> __device__ static A apply(A a, A b) { return (a > b || a != a) ? a : b; }
};
struct MinOp {
  template <typename A> __device__ static A apply(A a, A b) { return (a < b || a != a) ? a : b; }
};

template <weftDataType_t T>
struct Element {
  using C = Codec<T>;
  using S = typename C::Storage;
  using A = typename C::Acc;

  // The input as it enters the reduction: scaled (and, for narrow types, rounded) for PreMulSum.
  __device__ static A pre(S v, bool scaled, S scalar) {
    if (!scaled) return C::load(v);
    return C::load(C::store(wrapMul(C::load(v), C::load(scalar))));
  }
  __device__ static S finish(A acc, uint64_t divisor) {
    if constexpr (std::is_integral_v<A>) {
      if (divisor <= 1) return C::store(acc);
      if constexpr (std::is_signed_v<A>) return static_cast<S>(static_cast<int64_t>(acc) / static_cast<int64_t>(divisor));
      return static_cast<S>(static_cast<uint64_t>(acc) / divisor);
    } else {
      return C::store(divided(acc, divisor));
    }
  }
  // A floating-point result averaged (Avg divides by the rank count), before it is rounded.
  __device__ static A divided(A acc, uint64_t divisor) { return divisor <= 1 ? acc : acc / static_cast<A>(divisor); }
  // A pack of finished elements. Half and bfloat16 on sm_80+ convert two floats per
  // instruction (cvt.rn.{f16,bf16}x2.f32, round to nearest even like the single one): on an
  // H200 the one-at-a-time conversions held these sums to 0.81-0.84 of copy bandwidth
  // (bench/results/2026-11-26-gpu-h200.md).
  template <int N>
  __device__ static void finishPack(S (&out)[N], const A (&acc)[N], uint64_t divisor) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr bool kPaired = (T == weftBfloat16 || T == weftFloat16) && N % 2 == 0;
#else
    constexpr bool kPaired = false;
#endif
    if constexpr (kPaired) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#pragma unroll
      for (int e = 0; e < N; e += 2) {
        const float2 pair = make_float2(divided(acc[e], divisor), divided(acc[e + 1], divisor));
        if constexpr (T == weftBfloat16) {
          const __nv_bfloat162 two = __float22bfloat162_rn(pair);
          out[e] = __bfloat16_as_ushort(two.x);
          out[e + 1] = __bfloat16_as_ushort(two.y);
        } else {
          const __half2 two = __float22half2_rn(pair);
          out[e] = __half_as_ushort(two.x);
          out[e + 1] = __half_as_ushort(two.y);
        }
      }
#endif
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) out[e] = finish(acc[e], divisor);
    }
  }
};

struct KernelParams {
  const void* inputs[kMaxListedInputs];  // input j: inputs[j], or inputs[0] + j * stride
  bool listed;
  size_t stride;
  int nInputs;
  void* outputs[kMaxListedInputs];
  int nOutputs;
  size_t count;
  size_t packs;  // leading elements reduced as 16-byte packs (in packs); 0 when unaligned
  uint64_t divisor;
  const void* scalar;  // null: no PreMulSum
  const int* skipIf;
  const uint32_t* skipIfMarked;
};

template <weftDataType_t T, class Op>
__global__ void reduceKernel(KernelParams p) {
  using E = Element<T>;
  using S = typename E::S;
  using A = typename E::A;
  constexpr int kPack = 16 / sizeof(S);
  // Four packs at a time, but for the 8-bit floats, whose long portable conversions would spill.
  constexpr int kUnroll = sizeof(S) == 1 && std::is_floating_point_v<A> ? 1 : 4;
  union Pack {
    uint4 raw;
    S e[kPack];
  };
  // The skip flag and the scalar are in device memory (callers copy them there): one thread per
  // block reads them.
  __shared__ int skip;
  __shared__ S sharedScalar;
  if (threadIdx.x == 0) {
    skip = (p.skipIf != nullptr && *static_cast<const volatile int*>(p.skipIf) != 0) ||
           (p.skipIfMarked != nullptr && *static_cast<const volatile uint32_t*>(p.skipIfMarked) != 0);
    sharedScalar = p.scalar != nullptr ? *static_cast<const S*>(p.scalar) : S{};
  }
  __syncthreads();
  if (skip != 0) return;
  const bool scaled = p.scalar != nullptr;
  const S scalar = sharedScalar;
  const S* in = static_cast<const S*>(p.inputs[0]);
  auto input = [&](int j) { return p.listed ? static_cast<const S*>(p.inputs[j]) : in + j * p.stride; };
  auto output = [&](int k) { return static_cast<S*>(p.outputs[k]); };
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;

  // kUnroll packs per thread and input, all loaded before any is reduced: more loads in flight.
  size_t v = first;
  for (; v + (kUnroll - 1) * step < p.packs; v += kUnroll * step) {
    A acc[kUnroll][kPack];
    Pack pack[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) pack[u].raw = reinterpret_cast<const uint4*>(in)[v + u * step];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int e = 0; e < kPack; ++e) acc[u][e] = E::pre(pack[u].e[e], scaled, scalar);
    }
    for (int j = 1; j < p.nInputs; ++j) {
      const uint4* from = reinterpret_cast<const uint4*>(input(j));
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) pack[u].raw = from[v + u * step];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int e = 0; e < kPack; ++e) acc[u][e] = Op::apply(acc[u][e], E::pre(pack[u].e[e], scaled, scalar));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) E::finishPack(pack[u].e, acc[u], p.divisor);
    for (int k = 0; k < p.nOutputs; ++k) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) reinterpret_cast<uint4*>(output(k))[v + u * step] = pack[u].raw;
    }
  }
  for (; v < p.packs; v += step) {
    A acc[kPack];
    Pack pack;
    pack.raw = reinterpret_cast<const uint4*>(in)[v];
#pragma unroll
    for (int e = 0; e < kPack; ++e) acc[e] = E::pre(pack.e[e], scaled, scalar);
    for (int j = 1; j < p.nInputs; ++j) {
      pack.raw = reinterpret_cast<const uint4*>(input(j))[v];
#pragma unroll
      for (int e = 0; e < kPack; ++e) acc[e] = Op::apply(acc[e], E::pre(pack.e[e], scaled, scalar));
    }
    E::finishPack(pack.e, acc, p.divisor);
    for (int k = 0; k < p.nOutputs; ++k) reinterpret_cast<uint4*>(output(k))[v] = pack.raw;
  }
  for (size_t i = p.packs * kPack + first; i < p.count; i += step) {
    A acc = E::pre(in[i], scaled, scalar);
    for (int j = 1; j < p.nInputs; ++j) acc = Op::apply(acc, E::pre(input(j)[i], scaled, scalar));
    const S result = E::finish(acc, p.divisor);
    for (int k = 0; k < p.nOutputs; ++k) output(k)[i] = result;
  }
}

// Streaming multiprocessors (compute units) of each device, read once.
int multiprocessorCount(int device) {
  static std::atomic<int> cached[64];
  if (device < 0 || device >= 64) return 16;
  int sms = cached[device].load(std::memory_order_relaxed);
  if (sms > 0) return sms;
  if (gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, device) != gpuSuccess || sms <= 0) {
    (void)gpuGetLastError();
    sms = 16;
  }
  cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

template <weftDataType_t T, class Op>
gpuError_t launch(const KernelParams& params, gpuStream_t stream) {
  // 256 threads per block, up to 8 resident blocks per multiprocessor: enough loads in flight to
  // saturate HBM on every device Weft targets, without a grid larger than the work.
  constexpr unsigned kThreads = 256;
  constexpr size_t kPack = 16 / sizeof(typename Element<T>::S);
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess) return gpuGetLastError();
  const size_t work = params.packs + (params.count - params.packs * kPack);
  const size_t maxBlocks = static_cast<size_t>(multiprocessorCount(device)) * 8;
  size_t blocks = (work + kThreads - 1) / kThreads;
  blocks = blocks < 1 ? 1 : blocks > maxBlocks ? maxBlocks : blocks;
  reduceKernel<T, Op><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(params);
  return gpuGetLastError();
}

template <weftDataType_t T>
gpuError_t launchForOp(const KernelParams& params, weftRedOp_t op, gpuStream_t stream) {
  switch (op) {
    case weftSum:
    case weftAvg: return launch<T, SumOp>(params, stream);
    case weftProd: return launch<T, ProdOp>(params, stream);
    case weftMax: return launch<T, MaxOp>(params, stream);
    case weftMin: return launch<T, MinOp>(params, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace

gpuError_t launchReduce(const ReduceArgs& args, gpuStream_t stream) {
  if (args.count == 0) return gpuSuccess;
  if (args.nInputs < 1 || (args.listed && args.nInputs > kMaxListedInputs)) return gpuErrorInvalidValue;
  if (args.nOutputs < 1 || args.nOutputs > kMaxListedInputs) return gpuErrorInvalidValue;
  const size_t size = dataTypeSize(args.type);
  if (size == 0) return gpuErrorInvalidValue;
  KernelParams p{};
  p.listed = args.listed;
  if (args.listed) {
    for (int j = 0; j < args.nInputs; ++j) p.inputs[j] = args.inputList[j];
  } else {
    p.inputs[0] = args.inputs;
  }
  p.stride = args.inputStride;
  p.nInputs = args.nInputs;
  p.nOutputs = args.nOutputs;
  bool aligned = true;
  for (int k = 0; k < args.nOutputs; ++k) {
    p.outputs[k] = args.nOutputs == 1 ? args.out : args.outputList[k];
    aligned = aligned && reinterpret_cast<uintptr_t>(p.outputs[k]) % 16 == 0;
  }
  p.count = args.count;
  p.divisor = args.op == weftAvg ? args.divisor : 1;
  p.scalar = args.scalar;
  p.skipIf = args.skipIf;
  p.skipIfMarked = args.skipIfMarked;
  if (args.listed) {
    for (int j = 0; j < args.nInputs; ++j) aligned = aligned && reinterpret_cast<uintptr_t>(args.inputList[j]) % 16 == 0;
  } else {
    aligned = aligned && reinterpret_cast<uintptr_t>(args.inputs) % 16 == 0 &&
              (args.nInputs == 1 || (args.inputStride * size) % 16 == 0);
  }
  p.packs = aligned ? args.count * size / 16 : 0;
  switch (args.type) {
    case weftInt8: return launchForOp<weftInt8>(p, args.op, stream);
    case weftUint8: return launchForOp<weftUint8>(p, args.op, stream);
    case weftInt32: return launchForOp<weftInt32>(p, args.op, stream);
    case weftUint32: return launchForOp<weftUint32>(p, args.op, stream);
    case weftInt64: return launchForOp<weftInt64>(p, args.op, stream);
    case weftUint64: return launchForOp<weftUint64>(p, args.op, stream);
    case weftFloat16: return launchForOp<weftFloat16>(p, args.op, stream);
    case weftFloat32: return launchForOp<weftFloat32>(p, args.op, stream);
    case weftFloat64: return launchForOp<weftFloat64>(p, args.op, stream);
    case weftBfloat16: return launchForOp<weftBfloat16>(p, args.op, stream);
    case weftFloat8e4m3: return launchForOp<weftFloat8e4m3>(p, args.op, stream);
    case weftFloat8e5m2: return launchForOp<weftFloat8e5m2>(p, args.op, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace weft::kernels::gpu
