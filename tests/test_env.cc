// Settings from the environment: sizes and integers parse as written or are refused, never
// read as something else; the tuning settings among them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "coll/tuner.h"
#include "util/env.h"

using weft::parseByteSize;

TEST_CASE("env: byte sizes take digits and one K/M/G suffix, nothing else", "[unit]") {
  CHECK(parseByteSize("0") == 0u);
  CHECK(parseByteSize("4096") == 4096u);
  CHECK(parseByteSize("1K") == 1024u);
  CHECK(parseByteSize("8m") == 8u << 20);
  CHECK(parseByteSize("2G") == uint64_t{2} << 30);
  for (const char* bad : {"", "-1", " -1", " 5", "+5", "1e9", "1KB", "K", "99999999999999999999", "17179869184G"}) {
    CAPTURE(bad);
    CHECK_FALSE(parseByteSize(bad).has_value());
  }
}

TEST_CASE("env: integers outside their range or malformed are errors naming the variable", "[unit]") {
  for (const char* bad : {"abc", "5x", "-1", "2147483648", "", " 5", "+5", "5 "}) {
    CAPTURE(bad);
    setenv("WEFT_TEST_INT", bad, 1);
    auto value = weft::envInt("WEFT_TEST_INT", 0, 2147483647);
    if (std::string(bad).empty()) {
      CHECK((!value.isOk() || !value.value().has_value()));  // empty: unset or refused, never 0
    } else {
      REQUIRE_FALSE(value.isOk());
      CHECK(value.status().message().find("WEFT_TEST_INT") != std::string::npos);
    }
  }
  setenv("WEFT_TEST_INT", "42", 1);
  CHECK(weft::envInt("WEFT_TEST_INT", 0, 100).value() == 42);
  setenv("WEFT_TEST_INT", "-7", 1);
  CHECK(weft::envInt("WEFT_TEST_INT", -10, 100).value() == -7);
  unsetenv("WEFT_TEST_INT");
  CHECK_FALSE(weft::envInt("WEFT_TEST_INT", 0, 100).value().has_value());
}

TEST_CASE("env: the tuning sizes are read, and a bad one is an error naming it", "[unit]") {
  for (const char* name : {"WEFT_CHUNK_BYTES", "WEFT_RD_MAX_BYTES", "WEFT_ONESHOT_MAX_BYTES", "WEFT_TREE_MAX_BYTES",
                           "WEFT_STREAMING_MIN_BYTES"}) {
    for (const char* bad : {"0", "5G", "1KB", "-4"}) {
      CAPTURE(name, bad);
      setenv(name, bad, 1);
      auto config = weft::coll::loadTuningConfig();
      REQUIRE_FALSE(config.isOk());
      CHECK(config.status().code() == weftInvalidArgument);
      CHECK(config.status().message().find(name) != std::string::npos);
    }
    unsetenv(name);
  }
  setenv("WEFT_STREAMING_MIN_BYTES", "8M", 1);
  CHECK(weft::coll::loadTuningConfig().value().pipeline.streamingMinBytes == size_t{8} << 20);
  unsetenv("WEFT_STREAMING_MIN_BYTES");
  CHECK(weft::coll::loadTuningConfig().value().pipeline.streamingMinBytes == SIZE_MAX);  // init decides
  // A chunk below 1 KiB would make schedules of a step per element: refused, naming the floor.
  for (const char* tiny : {"4", "1000"}) {
    setenv("WEFT_CHUNK_BYTES", tiny, 1);
    auto config = weft::coll::loadTuningConfig();
    REQUIRE_FALSE(config.isOk());
    CHECK(config.status().message().find("from 1024 to") != std::string::npos);
  }
  setenv("WEFT_CHUNK_BYTES", "1K", 1);
  CHECK(weft::coll::loadTuningConfig().value().pipeline.chunkBytes == 1024);
  unsetenv("WEFT_CHUNK_BYTES");
}

TEST_CASE("env: sizes take K, M and G, within their bounds", "[unit]") {
  setenv("WEFT_TEST_SIZE", "256M", 1);
  CHECK(*weft::envByteSize("WEFT_TEST_SIZE", 1, uint64_t{1} << 40).value() == uint64_t{256} << 20);
  for (const char* bad : {"2x", "-1", "1T", "4"}) {
    setenv("WEFT_TEST_SIZE", bad, 1);
    auto size = weft::envByteSize("WEFT_TEST_SIZE", 16, uint64_t{1} << 40);
    REQUIRE_FALSE(size.isOk());
    CHECK(size.status().message().find("WEFT_TEST_SIZE") != std::string::npos);
  }
  setenv("WEFT_TEST_SIZE", "", 1);  // empty is unset, as for every variable
  CHECK_FALSE(weft::envByteSize("WEFT_TEST_SIZE", 16, 32).value().has_value());
  unsetenv("WEFT_TEST_SIZE");
}
