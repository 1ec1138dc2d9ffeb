// scale(), PreMulSum's first step, against definitions: every type, in place and out of place,
// integers wrapping, narrow floats multiplied in float and rounded to nearest even once.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/float_formats.h"

using namespace weft::kernels;

namespace {

// Random bytes for `count` elements of `type`, scaled both out of place and in place; `expect`
// gives element i's expected bits from its input bits and the scalar's.
template <typename Storage, typename Expect>
void checkScale(weftDataType_t type, Storage scalar, Expect&& expect) {
  std::mt19937_64 rng(static_cast<uint64_t>(type) * 7919 + 1);
  for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{1003}}) {
    std::vector<Storage> in(count), out(count, Storage{}), inPlace;
    for (Storage& v : in) {
      const uint64_t bits = rng();
      std::memcpy(&v, &bits, sizeof v);
    }
    inPlace = in;
    scale(out.data(), in.data(), count, type, &scalar);
    scale(inPlace.data(), inPlace.data(), count, type, &scalar);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      const Storage want = expect(in[i], scalar);
      wrong += std::memcmp(&out[i], &want, sizeof want) != 0 || std::memcmp(&inPlace[i], &want, sizeof want) != 0;
    }
    CAPTURE(dataTypeName(type), count);
    CHECK(wrong == 0);
  }
}

template <typename T>
void checkInteger(weftDataType_t type, T scalar) {
  using Unsigned = std::make_unsigned_t<T>;
  checkScale<T>(type, scalar, [](T x, T s) {  // wraps: multiply as unsigned
    return static_cast<T>(static_cast<Unsigned>(static_cast<Unsigned>(x) * static_cast<Unsigned>(s)));
  });
}

template <typename Storage, typename ToFloat, typename FromFloat>
void checkNarrow(weftDataType_t type, float scalar, ToFloat toFloat, FromFloat fromFloat) {
  const Storage stored = fromFloat(scalar);
  checkScale<Storage>(type, stored, [&](Storage x, Storage s) {
    const float product = toFloat(x) * toFloat(s);
    return fromFloat(product);
  });
}

}  // namespace

TEST_CASE("scale: integers wrap, floats multiply in their own precision", "[scale]") {
  checkInteger<int8_t>(weftInt8, -7);
  checkInteger<uint8_t>(weftUint8, 201);
  checkInteger<int32_t>(weftInt32, 65539);
  checkInteger<uint32_t>(weftUint32, 4000000007u);
  checkInteger<int64_t>(weftInt64, -3000000019LL);
  checkInteger<uint64_t>(weftUint64, 0x9e3779b97f4a7c15ull);
  checkScale<float>(weftFloat32, 0.3f, [](float x, float s) { return x * s; });
  checkScale<double>(weftFloat64, -1.7, [](double x, double s) { return x * s; });
}

TEST_CASE("scale: narrow floats multiply in float and round once", "[scale]") {
  // NaN inputs: the product is NaN, which encodes to the format's NaN; compared as bits.
  for (float scalar : {0.3333f, -2.5f, 0.125f}) {
    CAPTURE(scalar);
    checkNarrow<uint16_t>(weftFloat16, scalar, halfToFloat, floatToHalf);
    checkNarrow<uint16_t>(weftBfloat16, scalar, bf16ToFloat, floatToBf16);
    checkNarrow<uint8_t>(weftFloat8e4m3, scalar, fp8e4m3ToFloat, floatToFp8e4m3);
    checkNarrow<uint8_t>(weftFloat8e5m2, scalar, fp8e5m2ToFloat, floatToFp8e5m2);
  }
}
