// Narrow float conversions against their format definitions: every code decoded with ldexp,
// and rounding checked as "nearest, ties to even" against the neighbouring codes.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/float_formats.h"
#include "tests/float_format_spec.h"

using namespace weft::kernels;
using namespace weft::test;

namespace {


// Returns why encode(value) is not the correctly rounded code, or "" when it is.
std::string roundingError(const FormatSpec& format, float value) {
  const uint32_t code = format.encode(value);
  const std::string where = std::string(format.name) + " of float " +
                            hex(std::bit_cast<uint32_t>(value)) + " gave " + hex(code);
  if (code > (format.signBit() | format.magnitudeMask())) return where + ": too wide";
  if (std::isnan(value)) return format.isNanCode(code) ? "" : where + ": NaN lost";
  if (((code & format.signBit()) != 0) != std::signbit(value)) return where + ": wrong sign";
  const uint32_t magnitude = code & format.magnitudeMask();
  const uint32_t largest = format.largestFiniteCode();
  const double target = std::fabs(static_cast<double>(value));
  const double largestValue = format.referenceValue(largest);
  const double pastLargest = 2 * largestValue - format.referenceValue(largest - 1);
  if (target > largestValue) {
    // IEEE rounding: infinity from halfway past the largest (the largest is odd, so a tie goes
    // up too). Saturating formats keep the largest finite, except that e5m2 keeps infinity.
    bool toInfinity = target >= (largestValue + pastLargest) / 2;
    if (format.saturates) toInfinity = std::isinf(target) && format.ieeeSpecials;
    const uint32_t expected = toInfinity ? largest + 1 : largest;
    return magnitude == expected ? "" : where + ": expected " + hex(expected) + " on overflow";
  }
  if (magnitude > largest) return where + ": overflowed";
  const double error = std::fabs(format.referenceValue(magnitude) - target);
  const double below = magnitude > 0 ? target - format.referenceValue(magnitude - 1) : error;
  const double above = magnitude < largest ? format.referenceValue(magnitude + 1) - target
                                           : pastLargest - target;
  if (error > below || error > above) return where + ": not the nearest";
  if ((error == below || error == above) && error > 0 && (magnitude & 1u)) {
    return where + ": tie not rounded to even";
  }
  return "";
}

}  // namespace

TEST_CASE("narrow float decoders match the format definitions for every code", "[formats]") {
  for (const FormatSpec* format : kFormats) {
    INFO(format->name);
    checkAll(format->signBit() * 2, [&](uint64_t code) -> std::string {
      const float decoded = format->decode(static_cast<uint32_t>(code));
      if (format->isNanCode(static_cast<uint32_t>(code))) {
        return std::isnan(decoded) ? "" : hex(code) + " should decode to NaN";
      }
      const double expected = format->referenceValue(static_cast<uint32_t>(code));
      const bool same = decoded == expected && std::signbit(decoded) == std::signbit(expected);
      return same ? "" : hex(code) + " decoded to " + std::to_string(decoded);
    });
  }
}

TEST_CASE("every non-NaN narrow float code round-trips through float", "[formats]") {
  for (const FormatSpec* format : kFormats) {
    INFO(format->name);
    checkAll(format->signBit() * 2, [&](uint64_t code64) -> std::string {
      const uint32_t code = static_cast<uint32_t>(code64);
      const uint32_t back = format->encode(format->decode(code));
      if (format->isNanCode(code)) return format->isNanCode(back) ? "" : hex(code) + ": NaN lost";
      return back == code ? "" : hex(code) + " came back as " + hex(back);
    });
  }
}

TEST_CASE("float to narrow float rounds to nearest even", "[formats]") {
  for (const FormatSpec* format : kFormats) {
    INFO(format->name);
    // Every exact midpoint between neighbouring codes (a float in every format), the floats
    // either side of it, and its negation.
    const uint32_t largest = format->largestFiniteCode();
    checkAll(largest + 1, [&](uint64_t code) -> std::string {
      const double low = format->referenceValue(static_cast<uint32_t>(code));
      const double high = code < largest ? format->referenceValue(static_cast<uint32_t>(code + 1))
                                         : 2 * low - format->referenceValue(largest - 1);
      const float midpoint = static_cast<float>((low + high) / 2);
      if (midpoint != (low + high) / 2) return "midpoint above " + hex(code) + " is no float";
      for (float value : {midpoint, std::nextafter(midpoint, 0.0f),
                          std::nextafter(midpoint, INFINITY), -midpoint}) {
        std::string error = roundingError(*format, value);
        if (!error.empty()) return error;
      }
      return "";
    });
    // A sweep across all float bit patterns.
    checkAll((1ull << 32) / 4099, [&](uint64_t i) {
      return roundingError(*format, std::bit_cast<float>(static_cast<uint32_t>(i * 4099 + 7)));
    });
  }
}

TEST_CASE("narrow float conversions on hand-picked values", "[formats]") {
  struct Example {
    const FormatSpec* format;
    float value;
    uint32_t code;
    const char* what;
  };
  const float lowPayloadNan = std::bit_cast<float>(0x7f800001u);  // truncation would give inf
  const Example examples[] = {
      {&kHalf, 1.0f + 0x1p-11f, 0x3c00, "tie, down to even"},
      {&kHalf, 1.0f + 3 * 0x1p-11f, 0x3c02, "tie, up to even"},
      {&kHalf, 65519.0f, 0x7bff, "just below the overflow threshold"},
      {&kHalf, 65520.0f, 0x7c00, "overflow rounds to infinity"},
      {&kHalf, -INFINITY, 0xfc00, "infinity"},
      {&kHalf, 0x1p-24f, 0x0001, "smallest subnormal"},
      {&kHalf, -0x1p-25f, 0x8000, "subnormal tie, down to zero"},
      {&kHalf, 0x1.8p-24f, 0x0002, "subnormal tie, up to even"},
      {&kHalf, 1023.5f * 0x1p-24f, 0x0400, "up from the largest subnormal"},
      {&kHalf, lowPayloadNan, 0x7e00, "NaN"},
      {&kBf16, 1.0f + 0x1p-8f, 0x3f80, "tie, down to even"},
      {&kBf16, 1.0f + 3 * 0x1p-8f, 0x3f82, "tie, up to even"},
      {&kBf16, std::numeric_limits<float>::max(), 0x7f80, "overflow rounds to infinity"},
      {&kBf16, lowPayloadNan, 0x7fc0, "NaN"},
      {&kBf16, -lowPayloadNan, 0xffc0, "negative NaN"},
      {&kBf16, std::bit_cast<float>(0x00008000u), 0x0000, "subnormal tie, down to zero"},
      {&kBf16, std::bit_cast<float>(0x00018000u), 0x0002, "subnormal tie, up to even"},
      {&kE4M3, 1.0f + 1.0f / 16, 0x38, "tie, down to even"},
      {&kE4M3, 1.0f + 3.0f / 16, 0x3a, "tie, up to even"},
      {&kE4M3, 464.0f, 0x7e, "saturates"},
      {&kE4M3, 1e30f, 0x7e, "saturates"},
      {&kE4M3, INFINITY, 0x7e, "infinity saturates"},
      {&kE4M3, -INFINITY, 0xfe, "negative infinity saturates"},
      {&kE4M3, NAN, 0x7f, "NaN"},
      {&kE4M3, 0x1p-10f, 0x00, "subnormal tie, down to zero"},
      {&kE4M3, 3 * 0x1p-10f, 0x02, "subnormal tie, up to even"},
      {&kE5M2, 1.0f + 1.0f / 8, 0x3c, "tie, down to even"},
      {&kE5M2, 1.0f + 3.0f / 8, 0x3e, "tie, up to even"},
      {&kE5M2, 61440.0f, 0x7b, "saturates"},
      {&kE5M2, -1e30f, 0xfb, "saturates"},
      {&kE5M2, INFINITY, 0x7c, "infinity stays infinity"},
      {&kE5M2, -INFINITY, 0xfc, "negative infinity stays infinity"},
      {&kE5M2, 0x1p-16f, 0x01, "smallest subnormal"},
  };
  for (const Example& example : examples) {
    INFO(example.format->name << " " << example.what);
    CHECK(example.format->encode(example.value) == example.code);
  }
  CHECK(kE5M2.isNanCode(floatToFp8e5m2(NAN)));
  CHECK(fp8e4m3ToFloat(0x7e) == 448.0f);
  CHECK(fp8e4m3ToFloat(0x78) == 256.0f);  // exponent 15 is finite in E4M3FN
  CHECK(fp8e5m2ToFloat(0x7b) == 57344.0f);
  CHECK(halfToFloat(0x7bff) == 65504.0f);
}
