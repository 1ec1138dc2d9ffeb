// A main() for the fuzz targets where libFuzzer is not linked (GCC builds, sanitizer builds):
// runs the target once on every file named on the command line (directories: every file in
// them), so the seed corpus doubles as a regression test in ctest.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int ran = 0;
  for (int a = 1; a < argc; ++a) {
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(argv[a])) {
      for (const auto& entry : std::filesystem::directory_iterator(argv[a])) files.push_back(entry.path());
    } else {
      files.emplace_back(argv[a]);
    }
    for (const auto& file : files) {
      std::ifstream in(file, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++ran;
    }
  }
  std::printf("ran %d input(s)\n", ran);
  return ran > 0 ? 0 : 1;
}
