#include "core/unique_id.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace weft::core {
namespace {

constexpr uint32_t kIdMagic = 0x44494657;  // "WFID"
constexpr uint16_t kIdVersion = 1;

struct PackedId {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  transport::WireAddress root;
  uint8_t secret[32];
  uint8_t zero[128 - 4 - 2 - 2 - 20 - 32 - 8];
  uint64_t checksum;  // FNV-1a of every byte before it
};
static_assert(sizeof(PackedId) == WEFT_UNIQUE_ID_BYTES);

}  // namespace

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t hash = seed;
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

void encodeUniqueId(const UniqueIdContents& contents, weftUniqueId* id) {
  PackedId packed{};
  packed.magic = kIdMagic;
  packed.version = kIdVersion;
  packed.root = transport::toWire(contents.root);
  std::memcpy(packed.secret, contents.secret.data(), sizeof(packed.secret));
  packed.checksum = fnv1a64(&packed, offsetof(PackedId, checksum));
  std::memcpy(id->internal, &packed, sizeof(packed));
}

Result<UniqueIdContents> decodeUniqueId(const weftUniqueId& id) {
  PackedId packed;
  std::memcpy(&packed, id.internal, sizeof(packed));
  if (packed.magic != kIdMagic) {
    return Status(weftInvalidArgument, "the unique id is not a Weft id (bad magic): was it made by weftGetUniqueId?");
  }
  if (packed.version != kIdVersion) {
    return Status(weftInvalidArgument, formatString("the unique id has version %u; this Weft reads version %u",
                                                    packed.version, kIdVersion));
  }
  if (packed.checksum != fnv1a64(&packed, offsetof(PackedId, checksum))) {
    return Status(weftInvalidArgument, "the unique id is corrupted (checksum mismatch)");
  }
  auto root = transport::fromWire(packed.root);
  if (!root.isOk()) return root.status().withContext("the unique id is corrupted");
  UniqueIdContents contents;
  contents.root = root.value();
  std::memcpy(contents.secret.data(), packed.secret, sizeof(packed.secret));
  return contents;
}

Status randomBytes(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    ssize_t n = ::getrandom(p, bytes, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status(weftSystemError, "getrandom: " + errnoString(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Result<Secret> newSecret() {
  Secret secret;
  WEFT_TRY(randomBytes(secret.data(), secret.size()));
  return secret;
}

}  // namespace weft::core
