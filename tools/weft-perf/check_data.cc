#include "check_data.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace weftperf {

namespace {

// Sum and avg contributions are 1..kMaxMagnitude (negated for some elements in sum).
constexpr int kMaxMagnitude = 3;

// A small binary floating-point format: 1 sign bit, expBits exponent bits, mantBits mantissa.
struct MiniFloat {
  int expBits;
  int mantBits;
  int bias;
  bool ieeeSpecials;  // all-ones exponent means inf/NaN; false for e4m3 (only S.1111.111 is NaN)
};

constexpr MiniFloat kHalf{5, 10, 15, true};
constexpr MiniFloat kBfloat16{8, 7, 127, true};
constexpr MiniFloat kE4M3{4, 3, 7, false};
constexpr MiniFloat kE5M2{5, 2, 15, true};

// Encodes a value that the format represents exactly (the check data only uses such values).
uint32_t encode(const MiniFloat& f, double value) {
  const uint32_t sign = std::signbit(value) ? 1u : 0u;
  const double magnitude = std::fabs(value);
  uint32_t exponent = 0;
  uint32_t mantissa = 0;
  if (magnitude != 0.0) {
    int e = 0;
    const double m = std::frexp(magnitude, &e);  // magnitude = m * 2^e, m in [0.5, 1)
    const int biased = e - 1 + f.bias;
    if (biased >= 1) {
      exponent = static_cast<uint32_t>(biased);
      mantissa = static_cast<uint32_t>(std::lround(std::ldexp(m * 2.0 - 1.0, f.mantBits)));
    } else {  // subnormal: magnitude = mantissa * 2^(1 - bias - mantBits)
      mantissa = static_cast<uint32_t>(std::lround(std::ldexp(magnitude, f.mantBits - 1 + f.bias)));
    }
  }
  // Addition, not OR: a mantissa rounded up to 2^mantBits carries into the exponent.
  return (sign << (f.expBits + f.mantBits)) + (exponent << f.mantBits) + mantissa;
}

double decode(const MiniFloat& f, uint32_t bits) {
  const uint32_t expMask = (1u << f.expBits) - 1;
  const uint32_t mantMask = (1u << f.mantBits) - 1;
  const bool negative = ((bits >> (f.expBits + f.mantBits)) & 1u) != 0;
  const uint32_t exponent = (bits >> f.mantBits) & expMask;
  const uint32_t mantissa = bits & mantMask;
  double magnitude = 0.0;
  if (exponent == expMask && (f.ieeeSpecials || mantissa == mantMask)) {
    if (!f.ieeeSpecials || mantissa != 0) return std::numeric_limits<double>::quiet_NaN();
    magnitude = std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - f.bias - f.mantBits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa | (1u << f.mantBits)),
                           static_cast<int>(exponent) - f.bias - f.mantBits);
  }
  return negative ? -magnitude : magnitude;
}

template <typename T>
void storeAs(void* buffer, size_t index, T value) {
  std::memcpy(static_cast<char*>(buffer) + index * sizeof(T), &value, sizeof(T));
}

template <typename T>
T loadAs(const void* buffer, size_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(buffer) + index * sizeof(T), sizeof(T));
  return value;
}

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Whether `type` holds `value` exactly.
bool holdsExactly(const DataType& type, double value) {
  unsigned char element[8];
  storeValue(type, element, 0, value);
  return loadValue(type, element, 0) == value;
}

// Whether `value`, stored as `type`, is made of kPoisonByte.
bool isPoison(const DataType& type, double value) {
  unsigned char element[8];
  storeValue(type, element, 0, value);
  return std::all_of(element, element + type.size, [](unsigned char b) { return b == kPoisonByte; });
}

// splitmix64's finalizer: well-spread bits from consecutive inputs.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

const std::vector<DataType>& allDataTypes() {
  static const std::vector<DataType> types = {
      {"int8", weftInt8, 1, Kind::Signed, 64, 6, 0},
      {"uint8", weftUint8, 1, Kind::Unsigned, 64, 7, 0},
      {"int32", weftInt32, 4, Kind::Signed, 64, 16, 0},
      {"uint32", weftUint32, 4, Kind::Unsigned, 64, 16, 0},
      {"int64", weftInt64, 8, Kind::Signed, 64, 16, 0},
      {"uint64", weftUint64, 8, Kind::Unsigned, 64, 16, 0},
      {"half", weftFloat16, 2, Kind::Float, 64, 15, 10},
      {"float", weftFloat32, 4, Kind::Float, 64, 16, 23},
      {"double", weftFloat64, 8, Kind::Float, 64, 16, 52},
      {"bfloat16", weftBfloat16, 2, Kind::Float, 64, 16, 7},
      {"f8e4m3", weftFloat8e4m3, 1, Kind::Float, 16, 8, 3},
      {"f8e5m2", weftFloat8e5m2, 1, Kind::Float, 8, 15, 2},
  };
  return types;
}

const std::vector<RedOp>& allRedOps() {
  static const std::vector<RedOp> ops = {
      {"sum", weftSum}, {"prod", weftProd}, {"max", weftMax}, {"min", weftMin}, {"avg", weftAvg},
  };
  return ops;
}

const DataType* findDataType(std::string_view name) {
  for (const DataType& type : allDataTypes()) {
    if (name == type.name) return &type;
  }
  return nullptr;
}

const RedOp* findRedOp(std::string_view name) {
  for (const RedOp& op : allRedOps()) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

void storeValue(const DataType& type, void* buffer, size_t index, double value) {
  switch (type.id) {
    case weftInt8: storeAs(buffer, index, static_cast<int8_t>(value)); break;
    case weftUint8: storeAs(buffer, index, static_cast<uint8_t>(value)); break;
    case weftInt32: storeAs(buffer, index, static_cast<int32_t>(value)); break;
    case weftUint32: storeAs(buffer, index, static_cast<uint32_t>(value)); break;
    case weftInt64: storeAs(buffer, index, static_cast<int64_t>(value)); break;
    case weftUint64: storeAs(buffer, index, static_cast<uint64_t>(value)); break;
    case weftFloat32: storeAs(buffer, index, static_cast<float>(value)); break;
    case weftFloat64: storeAs(buffer, index, value); break;
    case weftFloat16: storeAs(buffer, index, static_cast<uint16_t>(encode(kHalf, value))); break;
    case weftBfloat16:
      storeAs(buffer, index, static_cast<uint16_t>(encode(kBfloat16, value)));
      break;
    case weftFloat8e4m3: storeAs(buffer, index, static_cast<uint8_t>(encode(kE4M3, value))); break;
    case weftFloat8e5m2: storeAs(buffer, index, static_cast<uint8_t>(encode(kE5M2, value))); break;
    default: break;
  }
}

double loadValue(const DataType& type, const void* buffer, size_t index) {
  switch (type.id) {
    case weftInt8: return loadAs<int8_t>(buffer, index);
    case weftUint8: return loadAs<uint8_t>(buffer, index);
    case weftInt32: return loadAs<int32_t>(buffer, index);
    case weftUint32: return loadAs<uint32_t>(buffer, index);
    case weftInt64: return static_cast<double>(loadAs<int64_t>(buffer, index));
    case weftUint64: return static_cast<double>(loadAs<uint64_t>(buffer, index));
    case weftFloat32: return loadAs<float>(buffer, index);
    case weftFloat64: return loadAs<double>(buffer, index);
    case weftFloat16: return decode(kHalf, loadAs<uint16_t>(buffer, index));
    case weftBfloat16: return decode(kBfloat16, loadAs<uint16_t>(buffer, index));
    case weftFloat8e4m3: return decode(kE4M3, loadAs<uint8_t>(buffer, index));
    case weftFloat8e5m2: return decode(kE5M2, loadAs<uint8_t>(buffer, index));
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

CheckPattern::CheckPattern(const DataType& type, weftRedOp_t op, int nranks)
    : type_(type),
      op_(op),
      nranks_(nranks),
      activeRanks_(std::clamp(type.exactBound / kMaxMagnitude, 1, nranks)),
      maxTwos_(std::min(nranks, type.maxPow2)),
      avgMultiple_(1),
      avgPowersOfTwo_(false),
      avgTolerance_(0.0) {
  if (op == weftAvg && type.kind == Kind::Float && !isPowerOfTwo(nranks)) {
    // Inputs that are multiples of n keep avg exact both ways it may be computed: each input
    // divided by n first, or the sum divided last. The format holds every integer up to
    // 2^(mantissaBits + 1), which bounds the ranks that may contribute to one element.
    const double exactInts = std::ldexp(1.0, type.mantissaBits + 1);
    const int active = static_cast<int>(std::min<double>(nranks, exactInts / (nranks * kMaxMagnitude)));
    if (active >= 1) {
      avgMultiple_ = nranks;
      activeRanks_ = active;
    } else if (holdsExactly(type, nranks) && holdsExactly(type, 4.0 * nranks)) {
      // fp8: one rank per element (rotating) gives n * 2^j, j in 0..2, and the others 0. Every
      // partial sum is then exact, and so is the avg, 2^j, whichever way it is computed; a rank
      // left out or a wrong divisor still shows.
      avgMultiple_ = nranks;
      activeRanks_ = 1;
      avgPowersOfTwo_ = true;
    } else {
      // Too narrow (fp8 on some rank counts): the worst case of n + 2 roundings (the divide,
      // n - 1 additions, the final conversion), each off by at most half an ulp of the type.
      const double unitRoundoff = std::ldexp(1.0, -(type.mantissaBits + 1));
      avgTolerance_ = std::expm1((nranks + 2) * std::log1p(unitRoundoff));  // (1+u)^(n+2) - 1
    }
  }
}

double CheckPattern::value(int rank, size_t index) const {
  const size_t n = static_cast<size_t>(nranks_);
  const uint64_t element = mix(index);                                          // alike on every rank
  const uint64_t mine = mix(index ^ (static_cast<uint64_t>(rank) + 1) << 40);  // this rank's own
  // Which ranks contribute specially to an element rotates with it, so every rank's data is used.
  const size_t slot = (static_cast<size_t>(rank) + index) % n;
  const bool mayBeNegative = type_.kind != Kind::Unsigned;
  switch (op_) {
    case weftSum:
    case weftAvg: {
      if (slot >= static_cast<size_t>(activeRanks_)) return 0.0;
      const double magnitude =
          (avgPowersOfTwo_ ? std::ldexp(1.0, static_cast<int>(mine % 3)) : static_cast<double>(1 + mine % kMaxMagnitude)) *
          avgMultiple_;
      // Avg stays non-negative so integer truncation is unambiguous.
      const bool negative = op_ == weftSum && mayBeNegative && (mine >> 8) % 3 == 2;
      return negative ? -magnitude : magnitude;
    }
    case weftProd: {
      // An element multiplies up to maxTwos factors of 2; the rest are 1.
      const size_t twos = element % static_cast<size_t>(maxTwos_ + 1);
      const double factor = slot < twos ? 2.0 : 1.0;
      const bool negative = mayBeNegative && (mine >> 8) % 5 == 0;
      return negative ? -factor : factor;
    }
    case weftMax:
    case weftMin: {
      // One rank per element holds the extreme (5..7 for max, 0..2 for min) and the others
      // hold what cannot reach it, so dropping any rank's data changes some result, and
      // results vary from element to element. 0..7, shifted to -4..3 where negatives exist.
      const bool holder = static_cast<size_t>(rank) == element % n;
      const double extreme = static_cast<double>((element >> 16) % 3);
      const double other = static_cast<double>(mine % 5);
      const double v = op_ == weftMax ? (holder ? 5 + extreme : other) : (holder ? extreme : 3 + other);
      return mayBeNegative ? v - 4.0 : v;
    }
    default: return movedValue(mine);
  }
}

// Any value the type holds but NaN, infinity and kPoisonByte's pattern, from the bits of
// `bits`: data that is moved, not reduced, so that no two ranks or blocks look alike.
double CheckPattern::movedValue(uint64_t bits) const {
  for (;;) {
    const double v = anyFiniteValue(bits);
    if (!isPoison(type_, v)) return v;
    bits = mix(bits);
  }
}

double CheckPattern::anyFiniteValue(uint64_t bits) const {
  switch (type_.kind) {
    case Kind::Signed: {
      const int width = std::min<int>(52, static_cast<int>(8 * type_.size));
      return static_cast<double>(static_cast<int64_t>(bits << (64 - width)) >> (64 - width));
    }
    case Kind::Unsigned: return static_cast<double>(bits >> (64 - std::min<int>(52, static_cast<int>(8 * type_.size))));
    case Kind::Float: break;
  }
  switch (type_.id) {
    case weftFloat64: return std::ldexp(static_cast<double>(static_cast<int64_t>(bits) >> 11), -26);
    case weftFloat32: {
      auto word = static_cast<uint32_t>(bits);
      if ((word & 0x7f800000u) == 0x7f800000u) word &= ~0x40000000u;  // inf / NaN: a finite value
      float f;
      std::memcpy(&f, &word, sizeof f);
      return f;
    }
    default: {
      const MiniFloat& f = type_.id == weftFloat16    ? kHalf
                           : type_.id == weftBfloat16 ? kBfloat16
                           : type_.id == weftFloat8e4m3 ? kE4M3
                                                        : kE5M2;
      const auto word = static_cast<uint32_t>(bits & ((1u << (1 + f.expBits + f.mantBits)) - 1));
      const double v = decode(f, word);
      return std::isfinite(v) ? v : decode(f, word & ~(1u << (f.mantBits + f.expBits - 1)));
    }
  }
}

double CheckPattern::expected(size_t index) const {
  double result = value(0, index);
  for (int rank = 1; rank < nranks_; ++rank) {
    const double v = value(rank, index);
    switch (op_) {
      case weftSum:
      case weftAvg: result += v; break;
      case weftProd: result *= v; break;
      case weftMax: result = std::max(result, v); break;
      case weftMin: result = std::min(result, v); break;
      default: break;
    }
  }
  if (op_ == weftAvg) {
    result /= nranks_;
    if (type_.kind != Kind::Float) result = std::trunc(result);
  }
  return result;
}

void CheckPattern::fill(void* buffer, int rank, size_t count) const {
  for (size_t i = 0; i < count; ++i) storeValue(type_, buffer, i, value(rank, i));
}

size_t CheckPattern::countWrong(const void* buffer, size_t count) const {
  return countMismatches(buffer, count, [this](size_t i) { return expected(i); });
}

bool CheckPattern::matches(double got, double want) const {
  if (avgTolerance_ == 0.0) return got == want;
  // Avg inputs are non-negative: an all-zero element stays exactly 0, any other stays positive.
  if (want == 0.0 || !(got > 0.0)) return got == want;
  return std::fabs(got - want) <= avgTolerance_ * want;
}

}  // namespace weftperf
