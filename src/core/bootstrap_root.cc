// The bootstrap root: a thread that collects one RankHello from each rank, checks them, and
// answers every rank with the full table (or with an error naming what went wrong).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/flood_eviction.h"
#include "util/log.h"

namespace weft::core {
namespace {

using transport::SocketAddress;
using transport::UniqueFd;

constexpr int kHelloDeadlineMs = 10000;  // a connection must say hello this fast
constexpr size_t kMaxPending = 1024;     // connections that have not said hello yet

struct PendingConnection {
  UniqueFd fd;
  SocketAddress from;
  RankHello hello{};
  size_t received = 0;
  Deadline deadline = Deadline::afterMs(kHelloDeadlineMs);
};

class RootServer;

// A retired root's listener, with the connections it had accepted but not yet heard a hello on.
// The new root on the same address takes it over: a rank that connected just before the handover
// (its connection queued on the listener, or half read) goes on with the new root, rather than
// being cut off by the old one's close.
struct Listener {
  UniqueFd fd;
  SocketAddress address;  // where it is bound
  std::vector<PendingConnection> pending;
};

// Roots whose rendezvous failed and that linger to tell latecomers why. A retry in this process
// with the same id starts a new root on the same port: it retires the lingering one first, so it
// does not find the port taken, and takes over its listener.
class LingeringRoots {
 public:
  static LingeringRoots& instance() {
    static std::once_flag once;
    std::call_once(once, [] {
      current_ = new LingeringRoots;  // never destroyed: root threads outlive main
      // A forked child has none of the roots' threads, and must not wake its parent's roots
      // through the pipes it inherited (nor wait on a lock a parent thread held).
      (void)::pthread_atfork(nullptr, nullptr, [] { current_ = new LingeringRoots; });
    });
    return *current_;
  }
  void add(RootServer* root) {
    std::lock_guard lock(mu_);
    roots_.push_back(root);
  }
  // A root stops lingering; one that was retired leaves its listener for the new root, if that
  // still waits (else the listener closes here).
  void leave(RootServer* root, std::optional<Listener> listener) {
    std::lock_guard lock(mu_);
    std::erase(roots_, root);
    const bool awaited = listener && std::ranges::find(awaited_, listener->address.port()) != awaited_.end();
    if (awaited) left_.push_back(std::move(*listener));
    changed_.notify_all();
  }
  // Retires every lingering root on `address`'s port and waits (a little) until they have left;
  // returns the listener of the one bound to exactly `address`, if there was one.
  std::optional<Listener> retire(const SocketAddress& address);

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<RootServer*> roots_;
  std::vector<int> awaited_;     // ports whose retired roots a new root waits for
  std::vector<Listener> left_;  // by retired roots, until the retiring root takes them
  static inline LingeringRoots* current_ = nullptr;
};

class RootServer {
 public:
  RootServer(Listener listener, const Secret& secret, int lifetimeMs, std::string idFile)
      : listenFd_(std::move(listener.fd)), address_(listener.address), secret_(secret),
        deadline_(Deadline::afterMs(lifetimeMs)), pending_(std::move(listener.pending)), idFile_(std::move(idFile)) {}

  int port() const { return address_.port(); }
  void retire() { (void)!::write(wakeWrite_.get(), "x", 1); }

  void serve() {
    if (gatherHellos() && joinedStillThere()) {
      // Every rank is in. A rank answered first may re-initialize before the last is answered:
      // it must find neither this root's port nor its id file.
      listenFd_.reset();
      pending_.clear();
      if (!idFile_.empty()) ::unlink(idFile_.c_str());
      replyAll();
      return;
    }
    // The rendezvous failed; fail() registered the root as lingering where it has time left.
    if (!wakeRead_.valid()) return;
    while (!deadline_.expired() && pollOnce()) {
    }
    std::optional<Listener> handed;
    if (retired_) handed = Listener{std::move(listenFd_), address_, std::move(pending_)};
    listenFd_.reset();
    LingeringRoots::instance().leave(this, std::move(handed));
  }

 private:
  // Returns false when the rendezvous has failed (every rank that joined was told why).
  bool gatherHellos() {
    while (joinedCount_ < nranks_ || nranks_ == 0) {
      if (deadline_.expired()) {
        failTimeout();
        return false;
      }
      if (!pollOnce()) return false;
    }
    return true;
  }

  // Accepts connections and reads hellos for up to a second; false when the rendezvous fails.
  bool pollOnce() {
    std::vector<pollfd> fds{{listenFd_.get(), POLLIN, 0}, {wakeRead_.get(), POLLIN, 0}};
    for (auto& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), deadline_.remainingMs(1000));
    if (n < 0 && errno != EINTR) {
      fail(weftSystemError, "bootstrap root: poll failed: " + errnoString(errno));
      return false;
    }
    if (fds[1].revents & POLLIN) {  // retired while lingering: a new root takes the listener
      retired_ = true;
      return false;
    }
    if (fds[0].revents & POLLIN) acceptNew();
    return readHellos();
  }

  void acceptNew() {
    // At most a full table's worth per look, so that a flood cannot keep the root from reading
    // hellos and from its deadline.
    for (size_t accepted = 0; accepted < kMaxPending; ++accepted) {
      PendingConnection p;
      auto fd = transport::acceptNow(listenFd_.get(), &p.from);
      if (!fd.isOk()) {
        // Accept failed (out of descriptors): the connection stays queued and the listener
        // readable, so wait a little before trying again, not spin.
        if (acceptError_.empty()) WEFT_WARN("bootstrap root: %s; retrying", fd.status().message().c_str());
        acceptError_ = fd.status().message();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return;
      }
      if (!fd.value().valid()) return;  // nothing left to accept
      p.fd = fd.take();
      if (pending_.size() >= kMaxPending) {  // a flood: the flooding host's oldest makes room
        const size_t victim = connectionToEvict(pending_);
        WEFT_WARN("bootstrap root: %zu connections without a hello; dropping the one from %s",
                  pending_.size(), pending_[victim].from.toString().c_str());
        pending_.erase(pending_.begin() + static_cast<long>(victim));
      }
      pending_.push_back(std::move(p));
    }
  }

  enum class Outcome { Waiting, Dropped, Admitted, Failed };

  // Returns false when the rendezvous has failed and the server must stop.
  bool readHellos() {
    for (size_t i = 0; i < pending_.size();) {
      Outcome outcome = readHello(pending_[i]);
      if (outcome == Outcome::Waiting) {
        ++i;
        continue;
      }
      // The hello that failed the rendezvous has been answered like the rest: it must not stay
      // pending, to be read again (or handed to the next root, as if just said).
      pending_.erase(pending_.begin() + static_cast<long>(i));
      if (outcome == Outcome::Failed) return false;
    }
    return true;
  }

  Outcome readHello(PendingConnection& p) {
    char* into = reinterpret_cast<char*>(&p.hello) + p.received;
    ssize_t n = ::recv(p.fd.get(), into, sizeof(RankHello) - p.received, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return Outcome::Dropped;
    if (n > 0) p.received += static_cast<size_t>(n);
    if (p.received >= kHelloVersionedPrefix && p.hello.magic == kHelloMagic && p.hello.version != kProtocolVersion) {
      return answerOtherVersion(p);
    }
    if (p.received < sizeof(RankHello)) {
      if (!p.deadline.expired()) return Outcome::Waiting;
      WEFT_WARN("bootstrap root: dropped a connection from %s that sent no hello in time", p.from.toString().c_str());
      return Outcome::Dropped;
    }
    std::string why = validate(p.hello);
    if (!why.empty()) {
      WEFT_WARN("bootstrap root: dropped a connection from %s: %s", p.from.toString().c_str(), why.c_str());
      return Outcome::Dropped;
    }
    if (failure_) {
      if (std::ranges::find(told_, processOf(p.hello)) != told_.end()) {
        // A rank that heard the failure came again: the job retries with this id, and the
        // process that hosts this root starts a new one on the same port, which takes over this
        // listener. Until then the rank connects again and again: to that one at last.
        RootReply again{kReplyMagic, kReplyTryAgain, nranks_, 0, {}};
        std::snprintf(again.message, sizeof(again.message), "the rendezvous on this id failed before: connect again");
        (void)transport::sendAll(p.fd.get(), &again, sizeof(again), Deadline::afterMs(1000));
      } else {
        tell(p.fd, p.hello);
      }
      return Outcome::Dropped;
    }
    return admit(p) ? Outcome::Admitted : Outcome::Failed;
  }

  // A hello of another protocol version (another Weft) is shorter or longer than ours, so it is
  // checked as soon as its prefix is in, which every version lays out alike: one that proves the
  // secret is a rank of this job built with another Weft, and is told so (RootReply is the same
  // in every version) rather than left to time out; anything else is dropped.
  Outcome answerOtherVersion(PendingConnection& p) {
    const RankHello& h = p.hello;
    if (!transport::constantTimeEqual(h.secret, secret_.data(), secret_.size())) {
      WEFT_WARN("bootstrap root: dropped a connection from %s: protocol version %u, expected %u, and the wrong secret",
                p.from.toString().c_str(), h.version, kProtocolVersion);
      return Outcome::Dropped;
    }
    RootReply reply{kReplyMagic, weftInvalidUsage, 0, 0, {}};
    std::snprintf(reply.message, sizeof(reply.message),
                  "bootstrap: this rank speaks Weft's bootstrap protocol version %u and the root (%s) version %u: "
                  "every rank must run the same Weft",
                  h.version, localHostName().c_str(), kProtocolVersion);
    WEFT_WARN("bootstrap root: a rank at %s speaks protocol version %u, this root %u: told it so",
              p.from.toString().c_str(), h.version, kProtocolVersion);
    (void)transport::sendAll(p.fd.get(), &reply, sizeof(reply), Deadline::afterMs(1000));
    return Outcome::Dropped;
  }

  // A hello that does not prove the secret, or is not ours, is dropped; nothing else happens.
  std::string validate(const RankHello& h) const { return rankHelloProblem(h, secret_); }

  // A hello with the right secret from a confused rank fails the whole rendezvous, loudly.
  bool admit(PendingConnection& p) {
    const RankHello& h = p.hello;
    std::string host(h.hostName, strnlen(h.hostName, sizeof(h.hostName)));
    if (std::string why = rankHelloFieldsProblem(h); !why.empty()) {
      fail(weftInvalidUsage, "bootstrap: " + why);
      return false;
    }
    if (nranks_ == 0) {
      nranks_ = h.nranks;
      joined_.resize(static_cast<size_t>(nranks_));
      records_.resize(static_cast<size_t>(nranks_));
      // Until a rank comes, the root lives as long as the default timeout (an id nobody uses
      // must not hold a thread and a port for good). From the first rank's hello on, the job's
      // own timeout counts, though it be longer: the first rank waits that long, and the
      // root answers a little before, so that its error is the one the ranks see.
      int timeoutMs = std::max(1, h.timeoutMs);
      deadline_ = Deadline::afterMs(timeoutMs - timeoutMs / 10);
    }
    if (h.nranks != nranks_) {
      fail(weftInvalidUsage, formatString("bootstrap: rank %d on %s says there are %d ranks, rank(s) before it said %d",
                                          h.rank, host.c_str(), h.nranks, nranks_));
      return false;
    }
    auto& slot = joined_[static_cast<size_t>(h.rank)];
    if (slot.valid()) {
      fail(weftInvalidUsage, formatString("bootstrap: rank %d joined twice (second time from %s)", h.rank, host.c_str()));
      return false;
    }
    PeerRecord& rec = records_[static_cast<size_t>(h.rank)];
    rec.listen = h.listen;
    std::memcpy(rec.rails, h.rails, sizeof(rec.rails));
    rec.pid = h.pid;
    rec.pidNamespace = h.pidNamespace;
    rec.settingsDigest = h.settingsDigest;
    rec.hostHash = h.hostHash;
    std::memcpy(rec.hostName, h.hostName, sizeof(rec.hostName));
    rec.hostName[sizeof(rec.hostName) - 1] = '\0';
    rec.placement = h.placement;
    slot = std::move(p.fd);
    ++joinedCount_;
    return true;
  }

  // A rank that went after its hello (its socket hung up: it exited, or was killed) would leave
  // the others to find out one connection at a time: the rendezvous fails for all instead.
  bool joinedStillThere() {
    std::vector<int> fds;
    for (const UniqueFd& fd : joined_) fds.push_back(fd.get());
    const int r = transport::firstHungUp(fds);
    if (r < 0) return true;
    fail(weftRemoteError, formatString("bootstrap: %s hung up after joining, before every rank had: it gave up "
                                       "(aborted, timed out) or exited",
                                       describeRank(r).c_str()));
    return false;
  }

  std::string describeRank(int rank) const {
    const PeerRecord& rec = records_[static_cast<size_t>(rank)];
    return formatString("rank %d (%s, pid %u)", rank, rec.hostName, rec.pid);
  }

  // Replies go out from the highest rank down: the root usually lives in rank 0's process, and
  // rank 0 must not finish (and perhaps exit, taking this thread along) before the others heard.
  void replyAll() {
    RootReply reply{kReplyMagic, weftSuccess, nranks_, 0, {}};
    for (int rank = nranks_ - 1; rank >= 0; --rank) {
      const int fd = joined_[static_cast<size_t>(rank)].get();
      Deadline d = Deadline::afterMs(kHelloDeadlineMs);
      Status s = transport::sendAll(fd, &reply, sizeof(reply), d);
      if (s.isOk()) s = transport::sendAll(fd, records_.data(), records_.size() * sizeof(PeerRecord), d);
      if (!s.isOk()) {
        WEFT_WARN("bootstrap root: could not answer %s: %s", describeRank(rank).c_str(), s.message().c_str());
      }
    }
  }

  void failTimeout() {
    if (nranks_ == 0) {  // the rank count comes with the first rank's hello
      fail(weftTimeout, "bootstrap: no rank joined before the timeout");
      return;
    }
    std::string missing;
    int count = 0;
    for (int r = 0; r < nranks_; ++r) {
      if (joined_[static_cast<size_t>(r)].valid()) continue;
      if (count++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (count > 16) missing += formatString(" and %d more", count - 16);
    fail(weftTimeout, formatString("bootstrap: %d of %d ranks joined before the timeout; missing rank(s): %s%s%s",
                                   joinedCount_, nranks_, missing.c_str(),
                                   acceptError_.empty() ? "" : "; the root could not accept: ", acceptError_.c_str()));
  }

  // Tells every rank that has joined, or has said a valid hello, why the rendezvous failed; the
  // root answers later ones the same (see serve).
  void fail(weftResult_t code, const std::string& message) {
    if (failure_) return;
    WEFT_WARN("%s", message.c_str());
    lingerFromNowOn();
    failure_ = RootReply{kReplyMagic, code, nranks_, 0, {}};
    std::snprintf(failure_->message, sizeof(failure_->message), "%s", message.c_str());
    for (auto& p : pending_) {
      if (p.received == sizeof(RankHello) && validate(p.hello).empty()) tell(p.fd, p.hello);
    }
    for (int r = static_cast<int>(joined_.size()) - 1; r >= 0; --r) {  // highest rank first, as in replyAll
      const PeerRecord& rec = records_[static_cast<size_t>(r)];
      tell(joined_[static_cast<size_t>(r)], Process{rec.hostHash, rec.pid, r});
    }
    joined_.clear();
  }

  // A rank that comes later hears the same failure for as long as the root would have lived,
  // rather than find the port closed and retry until its timeout; until the job retries with
  // this id and a new root in this process wants the port (LingeringRoots). Registered before
  // any rank is told, so that a retry at once in this process finds the root to retire.
  void lingerFromNowOn() {
    int wake[2];
    if (deadline_.expired() || ::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) return;
    wakeRead_.reset(wake[0]);
    wakeWrite_.reset(wake[1]);
    LingeringRoots::instance().add(this);
  }

  struct Process {  // a rank of a process, which may hold several (group init, init-all)
    uint64_t hostHash;
    uint32_t pid;
    int32_t rank;
    bool operator==(const Process&) const = default;
  };
  static Process processOf(const RankHello& h) { return {h.hostHash, h.pid, h.rank}; }

  void tell(UniqueFd& fd, const RankHello& hello) { tell(fd, processOf(hello)); }
  void tell(UniqueFd& fd, Process process) {
    if (!fd.valid()) return;
    (void)transport::sendAll(fd.get(), &*failure_, sizeof(*failure_), Deadline::afterMs(1000));
    told_.push_back(process);
  }

  UniqueFd listenFd_;
  SocketAddress address_;  // where listenFd_ is bound
  UniqueFd wakeRead_, wakeWrite_;  // while lingering: a byte here retires the root
  std::string acceptError_;  // why accept last failed; warned once
  Secret secret_;
  Deadline deadline_;
  int nranks_ = 0;
  int joinedCount_ = 0;
  std::vector<PendingConnection> pending_;
  std::vector<UniqueFd> joined_;
  std::vector<PeerRecord> records_;
  std::string idFile_;
  std::optional<RootReply> failure_;  // set once the rendezvous has failed
  std::vector<Process> told_;         // the ranks that heard it
  bool retired_ = false;              // by a new root on the same port, which takes the listener
};

std::optional<Listener> LingeringRoots::retire(const SocketAddress& address) {
  const int port = address.port();
  std::unique_lock lock(mu_);
  auto onPort = [&] { return std::ranges::any_of(roots_, [&](RootServer* r) { return r->port() == port; }); };
  if (!onPort()) return std::nullopt;
  for (RootServer* root : roots_) {
    if (root->port() == port) root->retire();
  }
  awaited_.push_back(port);
  changed_.wait_for(lock, std::chrono::seconds(2), [&] { return !onPort(); });
  awaited_.erase(std::ranges::find(awaited_, port));
  std::optional<Listener> taken;
  const std::string wanted = address.toString();
  for (Listener& l : left_) {  // another address on the port closes here: the new root binds its own
    if (!taken && l.address.toString() == wanted) taken = std::move(l);
  }
  std::erase_if(left_, [&](const Listener& l) { return l.address.port() == port; });
  return taken;
}

}  // namespace

Status startBootstrapRoot(const SocketAddress& bindAddress, const Secret& secret, int lifetimeMs,
                          SocketAddress* bound, std::string idFile) {
  std::optional<Listener> listener;
  if (bindAddress.port() != 0) listener = LingeringRoots::instance().retire(bindAddress);
  if (listener) {
    *bound = listener->address;
    WEFT_INFO("bootstrap root listening on %s (taken over from the failed rendezvous before)",
              bound->toString().c_str());
  } else {
    listener.emplace();
    WEFT_ASSIGN_OR_RETURN(listener->fd, transport::listenOn(bindAddress, bound));
    listener->address = *bound;
    WEFT_INFO("bootstrap root listening on %s", bound->toString().c_str());
  }
  try {
    std::thread([server = std::make_shared<RootServer>(std::move(*listener), secret, lifetimeMs, std::move(idFile))] {
      server->serve();
    }).detach();
  } catch (const std::system_error& e) {
    return Status(weftSystemError, std::string("cannot start the bootstrap root thread: ") + e.what());
  }
  return Status::ok();
}

}  // namespace weft::core
