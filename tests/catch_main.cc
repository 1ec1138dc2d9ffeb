// Catch2's main() for all test binaries.
// GCC 12 reports false -Wmaybe-uninitialized warnings inside <regex> (used by Catch's main)
// when building with sanitizers; they are not in project code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
