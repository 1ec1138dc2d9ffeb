// reduceMany (kernels/cpu/reduce.h) against a chain of scalar reduce() calls, for every
// implementation this CPU supports, every type x op, 1-5 inputs and 0-3 outputs, counts around
// a cache line, outputs aligned alike (the streamed body with a head and a tail), aligned
// differently (plain stores) and one output in place on an input. Results must be bit-identical
// (NaN payloads and the sign of a max/min zero aside, as for reduce()), with every byte around
// each output untouched.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_data.h"

using namespace weft::kernels;
using namespace weft::test;

namespace {

struct Shape {
  int inCount;
  int outCount;
  size_t count;
  size_t outOffsets[3];  // elements past a 64-byte boundary, per output
  bool firstOutIsFirstIn;  // outs[0] == ins[0]: in place
  bool streaming;
};

constexpr Shape kShapes[] = {
    {2, 2, 0, {0, 0}, false, true},
    {2, 2, 1, {0, 0}, false, true},
    {2, 2, 4099, {0, 0}, false, true},
    {2, 2, 4099, {3, 3}, false, true},      // a head before the first whole line
    {2, 2, 1000, {0, 1}, false, true},      // alignments differ: plain stores
    {2, 2, 65, {1, 1}, true, false},        // in place, plain
    {2, 2, 4099, {5, 5}, true, true},       // in place, streamed
    {3, 3, 1000, {0, 0, 0}, false, true},
    {5, 1, 4099, {7}, false, true},
    {5, 3, 127, {2, 2, 2}, true, false},
    {1, 2, 200, {0, 0}, false, true},       // one input: a copy
    {1, 1, 63, {1}, true, true},            // a copy onto itself
    {4, 0, 100, {}, false, true},           // no outputs: nothing written
    {2, 1, 17, {0}, false, false},
};

void checkShape(const char* isa, const TypeInfo& info, weftRedOp_t op, const Shape& shape, std::mt19937_64& rng) {
  const size_t size = dataTypeSize(info.type);
  const size_t bytes = shape.count * size;
  std::vector<GuardedArray> ins, outs;
  ins.reserve(5);
  outs.reserve(3);
  for (int k = 0; k < shape.inCount; ++k) {
    ins.emplace_back(bytes, (static_cast<size_t>(k) % 3) * size, rng);
    for (size_t i = 0; i < shape.count; ++i) {
      const uint64_t x = randomElement(info, rng);
      std::memcpy(ins.back().data + i * size, &x, size);
    }
  }
  for (int o = 0; o < shape.outCount; ++o) outs.emplace_back(bytes, shape.outOffsets[o] * size, rng);

  // The reference: ins[0] op ins[1], then op each further input, in order.
  std::vector<uint8_t> expected(bytes + 1);
  std::memcpy(expected.data(), ins[0].data, bytes);
  for (int k = 1; k < shape.inCount; ++k) {
    REQUIRE(reduceWithIsa("scalar", expected.data(), expected.data(), ins[static_cast<size_t>(k)].data, shape.count,
                          info.type, op));
  }

  std::vector<const void*> inPointers;
  for (const GuardedArray& in : ins) inPointers.push_back(in.data);
  std::vector<void*> outPointers;
  for (GuardedArray& out : outs) outPointers.push_back(out.data);
  GuardedArray* firstOut = outs.empty() ? nullptr : &outs[0];
  if (shape.firstOutIsFirstIn && firstOut != nullptr) {
    outPointers[0] = ins[0].data;
    firstOut = &ins[0];
  }
  std::vector<std::vector<uint8_t>> before;
  for (int o = 0; o < shape.outCount; ++o) {
    before.push_back(o == 0 ? firstOut->storage : outs[static_cast<size_t>(o)].storage);
  }
  const std::vector<uint8_t> inputsBefore = ins.back().storage;

  REQUIRE(reduceManyWithIsa(isa, ReduceMany{.outs = outPointers.data(), .outCount = shape.outCount,
                                            .ins = inPointers.data(), .inCount = shape.inCount,
                                            .count = shape.count, .type = info.type, .op = op,
                                            .streaming = shape.streaming}));

  INFO(isa << " " << dataTypeName(info.type) << " " << redOpName(op) << " " << shape.inCount << " in, "
           << shape.outCount << " out, count " << shape.count << (shape.streaming ? " streaming" : "")
           << (shape.firstOutIsFirstIn ? " in place" : ""));
  for (int o = 0; o < shape.outCount; ++o) {
    const GuardedArray& out = o == 0 ? *firstOut : outs[static_cast<size_t>(o)];
    INFO("output " << o);
    const std::string errors =
        compareElements(info, op == weftMax || op == weftMin, expected.data(), out.data, shape.count);
    if (!errors.empty()) FAIL_CHECK(errors);
    CHECK(guardsIntact(out, before[static_cast<size_t>(o)], bytes));
  }
  // An input no output aliases is left as it was.
  if (shape.inCount > 1 || !shape.firstOutIsFirstIn) CHECK(ins.back().storage == inputsBefore);
}

}  // namespace

TEST_CASE("reduceMany matches a chain of scalar reduces for every type, op and shape", "[reduce][many]") {
  std::vector<const char*> isas = simdIsasToTest();
  isas.insert(isas.begin(), "scalar");
  for (const char* isa : isas) {
    for (const TypeInfo& info : kTypes) {
      std::mt19937_64 rng(static_cast<uint64_t>(info.type) * 6151 + 29);
      for (weftRedOp_t op : {weftSum, weftProd, weftMax, weftMin}) {
        for (const Shape& shape : kShapes) checkShape(isa, info, op, shape, rng);
      }
    }
  }
}

TEST_CASE("reduceMany goes through the active implementation", "[reduce][many]") {
  const float a[20] = {1, 2, 3}, b[20] = {4, 5, 6}, c[20] = {10, 20, 30};
  float x[20] = {}, y[20] = {};
  const void* ins[] = {a, b, c};
  void* outs[] = {x, y};
  reduceMany({.outs = outs, .outCount = 2, .ins = ins, .inCount = 3, .count = 20, .type = weftFloat32,
              .op = weftSum, .streaming = true});
  CHECK((x[0] == 15 && x[1] == 27 && x[2] == 39 && x[19] == 0));
  CHECK(std::memcmp(x, y, sizeof(x)) == 0);
  CHECK_FALSE(reduceManyWithIsa("no-such-isa", ReduceMany{.outs = outs, .outCount = 2, .ins = ins, .inCount = 3,
                                                          .count = 20, .type = weftFloat32, .op = weftProd,
                                                          .streaming = false}));
  CHECK(x[0] == 15);
}
