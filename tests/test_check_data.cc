// weft-perf's data check: the data it sends must make a wrong result visible. Ranks and blocks
// must not hold alike data (a swapped or misrouted block would pass), every rank must matter
// to a reduction (a dropped rank would pass), and a tolerance must not accept what was never
// written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "weft-perf/check_data.h"

using namespace weftperf;

namespace {

// Elements in [0, count) where a(i) != b(i).
template <typename A, typename B>
size_t differences(size_t count, A&& a, B&& b) {
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) n += a(i) != b(i);
  return n;
}

}  // namespace

TEST_CASE("check data: moved data differs between every two ranks and between blocks", "[unit]") {
  for (const DataType& type : allDataTypes()) {
    const CheckPattern pattern(type, kMovedOnly, 8);
    for (int a = 0; a < 8; ++a) {
      for (int b = a + 1; b < 8; ++b) {
        CAPTURE(type.name, a, b);
        CHECK(differences(1000, [&](size_t i) { return pattern.value(a, i); },
                          [&](size_t i) { return pattern.value(b, i); }) > 500);
      }
    }
    // Block sizes that are multiples of small periods (3 ranks at 1 MiB of floats, 7 at 64 KiB).
    for (size_t block : {size_t{87381}, size_t{2340}, size_t{20}}) {
      CAPTURE(type.name, block);
      CHECK(differences(block, [&](size_t i) { return pattern.value(1, i); },
                        [&](size_t i) { return pattern.value(1, i + block); }) > block / 2);
    }
  }
}

TEST_CASE("check data: reduced blocks differ, so a reduce-scatter that hands out block 0 fails", "[unit]") {
  for (const RedOp& op : allRedOps()) {
    for (const DataType& type : allDataTypes()) {
      const CheckPattern pattern(type, op.id, 3);
      const size_t block = 87381;  // 0 mod 9 and mod 3n
      CAPTURE(type.name, op.name);
      CHECK(differences(block, [&](size_t i) { return pattern.expected(i); },
                        [&](size_t i) { return pattern.expected(i + block); }) > 0);
    }
  }
}

TEST_CASE("check data: a reduction that leaves out any one rank fails", "[unit]") {
  for (const RedOp& op : allRedOps()) {
    for (int n : {3, 5, 8}) {
      const DataType& type = *findDataType("float");
      const CheckPattern pattern(type, op.id, n);
      for (int dropped = 0; dropped < n; ++dropped) {
        std::vector<double> partial(1000);
        size_t wrong = 0;
        for (size_t i = 0; i < partial.size(); ++i) {
          double acc = op.id == weftProd ? 1 : op.id == weftMax ? -1e300 : op.id == weftMin ? 1e300 : 0;
          for (int r = 0; r < n; ++r) {
            if (r == dropped) continue;
            const double v = pattern.value(r, i);
            acc = op.id == weftProd ? acc * v : op.id == weftMax ? std::max(acc, v) : op.id == weftMin ? std::min(acc, v) : acc + v;
          }
          if (op.id == weftAvg) acc /= n;
          wrong += acc != pattern.expected(i);
        }
        CAPTURE(op.name, n, dropped);
        CHECK(wrong > 0);
      }
    }
  }
}

TEST_CASE("check data: avg is exact where the type allows, and its tolerance rejects zeros", "[unit]") {
  const CheckPattern exact(*findDataType("bfloat16"), weftAvg, 3);
  for (size_t i = 0; i < 100; ++i) {
    for (int r = 0; r < 3; ++r) CHECK(static_cast<long>(exact.value(r, i)) % 3 == 0);
  }
  for (const char* name : {"f8e5m2", "f8e4m3"}) {
    for (int n : {5, 6, 7, 9, 17}) {  // exact with powers of two up to 7 (e5m2) or 15; then the tolerance
      const DataType& type = *findDataType(name);
      const CheckPattern pattern(type, weftAvg, n);
      std::vector<unsigned char> zeros(1000), poison(1000);
      for (size_t i = 0; i < poison.size(); ++i) storeValue(type, poison.data(), i, -0.0195);
      CAPTURE(name, n);
      CHECK(pattern.countWrong(zeros.data(), zeros.size()) > 0);
      CHECK(pattern.countWrong(poison.data(), poison.size()) == poison.size());
    }
  }
}

// fp8 avg on rank counts that are not powers of two: a result that leaves out a rank, or
// divides by one rank too few, must not pass (a tolerance wide enough for n + 2 roundings in
// fp8, 80% for e5m2 on 3 ranks, let both through).
TEST_CASE("check data: fp8 avg catches a rank left out and a wrong divisor", "[unit]") {
  for (const char* name : {"f8e5m2", "f8e4m3"}) {
    for (int n : {3, 5, 6, 7}) {
      const DataType& type = *findDataType(name);
      const CheckPattern pattern(type, weftAvg, n);
      const size_t count = 10000;
      std::vector<unsigned char> right(count), leftOut(count), wrongDivisor(count);
      for (size_t i = 0; i < count; ++i) {
        double all = 0, someone = 0;
        for (int r = 0; r < n; ++r) {
          all += pattern.value(r, i);
          if (r != n - 1) someone += pattern.value(r, i);
        }
        storeValue(type, right.data(), i, all / n);
        storeValue(type, leftOut.data(), i, someone / n);
        storeValue(type, wrongDivisor.data(), i, all / (n - 1));
      }
      CAPTURE(name, n);
      CHECK(pattern.countWrong(right.data(), count) == 0);
      CHECK(pattern.countWrong(leftOut.data(), count) > count / (2 * n));
      CHECK(pattern.countWrong(wrongDivisor.data(), count) > count / 2);
    }
  }
}

// weft-perf and weft-stress poison output buffers with kPoisonByte: an element the library
// never wrote must never look like a right one.
TEST_CASE("check data: no check value is made of the poison byte", "[unit]") {
  for (const DataType& type : allDataTypes()) {
    for (weftRedOp_t op : {kMovedOnly, weftSum, weftProd, weftMax, weftMin, weftAvg}) {
      for (int n : {2, 3, 8}) {
        const CheckPattern pattern(type, op, n);
        size_t poisoned = 0;
        unsigned char element[8];
        for (size_t i = 0; i < 20000; ++i) {
          for (int r = 0; r < n; ++r) {
            storeValue(type, element, 0, pattern.value(r, i));
            poisoned += std::all_of(element, element + type.size, [](unsigned char b) { return b == kPoisonByte; });
          }
        }
        CAPTURE(type.name, static_cast<int>(op), n);
        CHECK(poisoned == 0);
      }
    }
  }
}
