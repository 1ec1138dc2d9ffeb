// Fuzz target: a shared-memory connection's receive path reading a ring its peer filled with
// arbitrary slot headers and payloads (a peer that is buggy or hostile can write anything into
// the shared ring). Input: 8 control bytes (two receive sizes, 16 bits each, the published slot
// count, a tag byte, a mode byte: bit 0 forwards what is received out through the connection's
// own outbound ring, as a 2-rank ring does, bit 1 also reduces it as float32 on receipt), then
// the ring's slots. The receives complete only for well-formed slots, and otherwise fail with an
// error; nothing is written past a receive buffer or an outbound slot.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "guarded_receives.h"
#include "transport/shm/shm_connection.h"

using namespace weft;
using namespace weft::transport;

namespace {
constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 256;

struct Ring {
  Ring() : memory(static_cast<char*>(::operator new(shm::ringBytes(kSlots, kSlotBytes), std::align_val_t(64)))) {
    std::memset(memory, 0, shm::ringBytes(kSlots, kSlotBytes));
    control = new (memory) shm::RingControl{};
  }
  ~Ring() { ::operator delete(memory, std::align_val_t(64)); }
  shm::RingView view() { return {control, memory + sizeof(shm::RingControl), kSlots, kSlotBytes}; }
  char* memory;
  shm::RingControl* control;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint16_t sizes[2];
  std::memcpy(sizes, data, 4);
  const uint32_t published = data[4] % (2 * kSlots + 1);
  const MessageTag tag = data[5];
  const bool forward = (data[6] & 1) != 0, reduce = (data[6] & 2) != 0;
  data += 8;
  size -= 8;

  Ring in, out;
  const size_t slotArea = kSlots * shm::slotStride(kSlotBytes);
  std::memcpy(in.memory + sizeof(shm::RingControl), data, size < slotArea ? size : slotArea);
  in.control->head.store(published);

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) != 0) return 0;
  ShmConnectionParams params;
  params.peerRank = 1;
  params.peerName = "fuzz";
  params.peerPid = ::getpid();  // a "remote" slot may point anywhere: process_vm_readv checks it
  params.control = UniqueFd(fds[0]);
  UniqueFd peerEnd(fds[1]);
  params.in = in.view();
  params.out = out.view();
  ShmConnection connection(std::move(params));
  // The ring holds what it holds: once a round moves nothing, nothing more will come.
  weft::fuzz::receiveGuarded(connection, sizes, tag, 64, true, forward ? &connection : nullptr, reduce);
  return 0;
}
