// Fuzz target: a socket connection's receive path fed an arbitrary byte stream from its peer.
// Input: 8 control bytes (two receive sizes, 16 bits each, and a 32-bit tag), then the stream.
// The connection must complete the receives only when the frames are right, and otherwise fail
// with an error; it must never write past a receive buffer or hang.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "guarded_receives.h"
#include "transport/socket/socket_connection.h"

using namespace weft;
using namespace weft::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint16_t sizes[2];
  MessageTag tag;
  std::memcpy(sizes, data, 4);
  std::memcpy(&tag, data + 4, 4);
  data += 8;
  size -= 8;

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  UniqueFd reader(fds[0]), writer(fds[1]);
  if (!configureStreamSocket(reader.get()).isOk()) return 0;
  // The whole stream fits the socket buffer (the peer then hangs up), so nothing blocks.
  int buffer = 1 << 20;
  ::setsockopt(writer.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(writer.get(), data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  writer = UniqueFd();

  std::vector<UniqueFd> streams;
  streams.push_back(std::move(reader));
  SocketConnection connection(1, "fuzz", std::move(streams));
  // Every round either moves bytes or reaches EOF (an error), so this ends well before the cap.
  weft::fuzz::receiveGuarded(connection, sizes, tag, 100000, false);
  return 0;
}
