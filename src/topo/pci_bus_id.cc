#include "topo/pci_bus_id.h"

#include <cctype>

namespace weft::topo {

namespace {

// Reads 1 to maxDigits hex digits at `text`, then expects `separator` (or the end, for '\0').
bool readField(std::string_view& text, size_t maxDigits, char separator, uint32_t* value) {
  size_t digits = 0;
  uint32_t v = 0;
  while (digits < text.size() && std::isxdigit(static_cast<unsigned char>(text[digits]))) {
    if (++digits > maxDigits) return false;
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text[digits - 1])));
    v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  if (digits == 0) return false;
  text.remove_prefix(digits);
  if (separator == '\0') {
    if (!text.empty()) return false;
  } else {
    if (text.empty() || text.front() != separator) return false;
    text.remove_prefix(1);
  }
  *value = v;
  return true;
}

}  // namespace

std::optional<PciAddress> parsePciBusId(std::string_view busId) {
  PciAddress a;
  if (!readField(busId, 8, ':', &a.domain) || !readField(busId, 2, ':', &a.bus) ||
      !readField(busId, 2, '.', &a.device) || !readField(busId, 1, '\0', &a.function)) {
    return std::nullopt;
  }
  return a;
}

int gpuIndexByBusId(const HostTopology& host, std::string_view busId) {
  const auto wanted = parsePciBusId(busId);
  if (!wanted) return -1;
  for (size_t g = 0; g < host.gpus.size(); ++g) {
    if (parsePciBusId(host.gpus[g].busId) == wanted) return static_cast<int>(g);
  }
  return -1;
}

}  // namespace weft::topo
