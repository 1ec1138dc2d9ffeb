// Data types, reduction operators, and the deterministic data weft-perf uses to check results.
//
// For the reducing collectives every rank fills its send buffer with small integers (or +-1 and
// 2 for prod) hashed from its rank and the element index, sized per type so that every partial
// result the library may form, in any order, is exactly representable (fp8 e5m2 keeps every
// integer up to 8 exact, e4m3 up to 16). The reference for each element is then computed in
// double from the same formula, and the received value must match exactly. Avg on a floating
// type with a rank count that is not a power of two takes multiples of n, exact whether the
// inputs are divided first or the sum last; where the type is too narrow for those (fp8), one
// rank per element contributes n times a power of two, whose average is as exact, and only
// where n is too wide for even that does it use a tolerance. Data that is only moved
// (kMovedOnly) is hashed bits: any finite value of the type, so that no two ranks or blocks
// hold alike data, but never kPoisonByte's pattern.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "weft/weft.h"

namespace weftperf {

enum class Kind { Signed, Unsigned, Float };

struct DataType {
  const char* name;  // nccl-tests name
  weftDataType_t id;
  size_t size;
  Kind kind;
  int exactBound;    // every integer of magnitude <= exactBound is exact (capped at 64)
  int maxPow2;       // 2^maxPow2 is representable (capped at 16)
  int mantissaBits;  // stored mantissa bits of floating types, 0 for integers
};

struct RedOp {
  const char* name;
  weftRedOp_t id;
};

const std::vector<DataType>& allDataTypes();
const std::vector<RedOp>& allRedOps();
const DataType* findDataType(std::string_view name);
const RedOp* findRedOp(std::string_view name);

// Element access through double; stored values must be exactly representable.
void storeValue(const DataType& type, void* buffer, size_t index, double value);
double loadValue(const DataType& type, const void* buffer, size_t index);

// What weft-perf and weft-stress fill output buffers and guard bytes with before a checked
// call: no value of any check pattern is made of these bytes, so an element the library never
// wrote always counts as wrong.
constexpr unsigned char kPoisonByte = 0xA5;

// The op of a CheckPattern for the collectives that move data without reducing it.
constexpr weftRedOp_t kMovedOnly = weftNumOps;

class CheckPattern {
 public:
  CheckPattern(const DataType& type, weftRedOp_t op, int nranks);

  // What `rank` contributes at element `index`.
  double value(int rank, size_t index) const;
  // The correct reduction at element `index`.
  double expected(size_t index) const;

  // Writes this rank's contribution for elements [0, count).
  void fill(void* buffer, int rank, size_t count) const;
  // Number of elements in [0, count) that do not hold the expected result.
  size_t countWrong(const void* buffer, size_t count) const;
  // Number of elements i in [0, count) that do not hold want(i).
  template <typename Want>
  size_t countMismatches(const void* buffer, size_t count, Want&& want) const {
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += !matches(loadValue(type_, buffer, i), want(i));
    return wrong;
  }

 private:
  bool matches(double got, double want) const;
  double movedValue(uint64_t bits) const;
  double anyFiniteValue(uint64_t bits) const;

  const DataType& type_;
  weftRedOp_t op_;
  int nranks_;
  int activeRanks_;      // sum/avg: ranks contributing a non-zero value to each element
  int maxTwos_;          // prod: most factors of 2 in one element's product
  int avgMultiple_;      // avg: inputs are multiples of this
  bool avgPowersOfTwo_;  // avg: ... times 1, 2 or 4 (fp8), rather than 1..kMaxMagnitude
  double avgTolerance_;  // relative; 0 means exact comparison
};

}  // namespace weftperf
