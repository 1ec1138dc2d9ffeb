#include "topo/pci_bus_id.h"

#include <charconv>

namespace weft::topo {

namespace {

// Reads 1 to maxDigits hex digits at the front of `text`, then expects `separator` (or the end,
// for '\0').
bool readField(std::string_view& text, size_t maxDigits, char separator, uint32_t* value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value, 16);
  const size_t digits = static_cast<size_t>(end - text.data());
  if (error != std::errc() || digits > maxDigits) return false;
  text.remove_prefix(digits);
  if (separator == '\0') return text.empty();
  if (text.empty() || text.front() != separator) return false;
  text.remove_prefix(1);
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
