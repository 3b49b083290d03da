#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>
#include "interop/libtorch_compat.hpp"

#include <spdlog/spdlog.h>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <thread>

namespace torchbus {
namespace {

using Clock = std::chrono::steady_clock;

/// How long a rank that lost a connection waits for the other ranks' error reports (in a world of
/// more than two), so that the ranks reporting nothing are the ones that died.
constexpr std::chrono::milliseconds kReportGrace{2000};

/// While waiting at the rendezvous: how often a rank checks whether every rank arrived, how often
/// it shows it is alive, and how long another rank's silence there means it died or is stuck.
constexpr std::chrono::milliseconds kRendezvousPoll{50};
constexpr std::chrono::milliseconds kHeartbeatInterval{1000};
constexpr std::chrono::milliseconds kHeartbeatSilence{10000};

/// The last heartbeat heard from a rank at the rendezvous, and when it changed.
struct Heartbeat {
  std::vector<std::uint8_t> value;
  Clock::time_point heard;
};

std::string seconds_of(std::chrono::milliseconds duration) {
  return detail::concat(static_cast<double>(duration.count()) / 1000.0, " s");
}

std::string seconds_of(Clock::duration duration) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(duration).count());
}

std::string arrival_key(int rank) {
  return "arrived/" + std::to_string(rank);
}

std::string failure_key(int rank) {
  return "failed/" + std::to_string(rank);
}

std::vector<std::uint8_t> bytes_of(std::string_view text) {
  return {text.begin(), text.end()};
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Min:
      return c10d::ReduceOp::MIN;
    case ReduceOp::Max:
      return c10d::ReduceOp::MAX;
    case ReduceOp::Sum:
      break;
  }
  return c10d::ReduceOp::SUM;
}

/// Why a collective failed, from Gloo's error and the time the wait took.
enum class Failure : std::uint8_t { ConnectionLost, Timeout, Other };

bool contains_any(const std::string& text, std::initializer_list<const char*> needles) {
  return std::any_of(needles.begin(), needles.end(),
                     [&](const char* needle) { return text.find(needle) != std::string::npos; });
}

/// A lost connection (a peer exited or crashed: fails at once) is told apart from a wait that ran
/// out of time (a peer is stuck), by Gloo's message and by the time elapsed.
Failure classify(const std::string& cause, Clock::duration elapsed,
                 std::chrono::milliseconds timeout) {
  std::string text = cause;
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (contains_any(text, {"connection closed by peer", "connection reset by peer", "broken pipe",
                          "socket closed", "socket unexpectedly closed", "connection refused"})) {
    return Failure::ConnectionLost;
  }
  if (contains_any(text, {"timed out", "timeout"}) || elapsed >= timeout) return Failure::Timeout;
  return Failure::Other;
}

/// Gloo's message without its "[./gloo/...cc:589] " source location.
std::string without_location(const std::string& message) {
  if (message.rfind("[", 0) == 0) {
    const auto end = message.find("] ");
    if (end != std::string::npos && message.find(':') < end) return message.substr(end + 2);
  }
  return message;
}

/// Whether a process accepts TCP connections at `address`:`port` now: connects (waiting at most
/// `wait`) and closes at once.
bool accepts_connections(const std::string& address, int port, Clock::duration wait) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return false;
  }
  bool accepted = false;
  for (auto* candidate = found; candidate != nullptr && !accepted; candidate = candidate->ai_next) {
    const int fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_NONBLOCK,
                          candidate->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0) {
      accepted = true;
    } else if (errno == EINPROGRESS) {
      pollfd poll_fd{fd, POLLOUT, 0};
      const auto milliseconds = std::chrono::duration_cast<std::chrono::milliseconds>(wait);
      int error = 0;
      socklen_t length = sizeof error;
      accepted = poll(&poll_fd, 1,
                      static_cast<int>(std::max<std::int64_t>(0, milliseconds.count()))) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return accepted;
}

bool is_loopback(const std::string& address) {
  return address == "127.0.0.1" || address == "localhost" || address == "::1";
}

/// The Gloo device: the interface in GLOO_SOCKET_IFNAME, loopback for a run on this machine,
/// else the address this machine's hostname resolves to.
std::shared_ptr<gloo::transport::Device> make_device(const LaunchEnvironment& environment) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  }
  if (is_loopback(environment.master_addr)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

void DistributedOptions::validate() const {
  TORCHBUS_CHECK(timeout().count() > 0, ConfigError,
                 "DistributedOptions::timeout must be positive, got ", timeout().count(), " ms");
  TORCHBUS_CHECK(bucket_bytes() > 0, ConfigError,
                 "DistributedOptions::bucket_bytes must be positive, got ", bucket_bytes());
  TORCHBUS_CHECK(wait_report_interval().count() > 0, ConfigError,
                 "DistributedOptions::wait_report_interval must be positive, got ",
                 wait_report_interval().count(), " ms");
}

/// The c10d objects of a world of more than one process.
struct ProcessGroup::Backend {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;  // started by start_all_reduce

  Backend(const LaunchEnvironment& environment, const DistributedOptions& options) {
    const auto where = detail::concat(environment.master_addr, ":", environment.master_port);
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(environment.master_port);
    store_options.isServer = environment.rank == 0 && !environment.agent_store;
    store_options.waitWorkers = false;
    store_options.timeout = options.timeout();
    detail::use_classic_store_loop(store_options);
    c10::intrusive_ptr<c10d::Store> tcp;
    try {
      if (store_options.isServer) {
        tcp = c10::make_intrusive<c10d::TCPStore>(environment.master_addr, store_options);
      } else {
        tcp = reach_store(environment, options, store_options, where);
      }
    } catch (const std::exception& error) {
      throw DistributedError(detail::concat(
          "rank ", environment.rank, " could not ", store_options.isServer ? "host" : "reach",
          " the rendezvous store at ", where, " within ", seconds_of(options.timeout()),
          " (MASTER_ADDR/MASTER_PORT): ", detail::first_line(error)));
    }
    store = c10::make_intrusive<c10d::PrefixStore>(environment.store_prefix + "/torchbus", tcp);
    await_every_rank(environment, options, where);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout());
    try {
      gloo_options->devices.push_back(make_device(environment));
      group = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c10::make_intrusive<c10d::PrefixStore>("gloo", store), environment.rank,
          environment.world_size, gloo_options);
    } catch (const std::exception& error) {
      throw DistributedError(
          detail::concat("rank ", environment.rank,
                         " could not set up the Gloo process group: ", detail::first_line(error)));
    }
  }

  /// Connects to the store another process hosts once something listens at its address (probed
  /// with plain connections, which c10d neither sees nor logs), saying every report interval what
  /// it waits for and since when; fails at the timeout.
  static c10::intrusive_ptr<c10d::Store> reach_store(const LaunchEnvironment& environment,
                                                     const DistributedOptions& options,
                                                     c10d::TCPStoreOptions store_options,
                                                     const std::string& where) {
    const auto start = Clock::now();
    auto next_report = start + options.wait_report_interval();
    for (;;) {
      const auto now = Clock::now();
      const auto left = options.timeout() - (now - start);
      if (accepts_connections(environment.master_addr, environment.master_port,
                              std::min<Clock::duration>(left, kRendezvousPoll * 10))) {
        store_options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(left);
        auto store = c10::make_intrusive<c10d::TCPStore>(environment.master_addr, store_options);
        store->setTimeout(options.timeout());
        return store;
      }
      if (Clock::now() - start >= options.timeout()) {
        throw std::runtime_error(detail::concat("nothing accepted a connection at ", where));
      }
      if (Clock::now() >= next_report) {
        logger()->info(
            "rank {} of {}: the rendezvous store at {} (hosted by {}) is not up after {}; waiting "
            "for it until {} (DistributedOptions::timeout)",
            environment.rank, environment.world_size, where,
            environment.agent_store ? "torchrun's agent" : "rank 0",
            seconds_of(Clock::now() - start), seconds_of(options.timeout()));
        next_report += options.wait_report_interval();
      }
      std::this_thread::sleep_for(kRendezvousPoll);
    }
  }

  /// Waits until every rank has checked in at the store. A waiting rank counts up its arrival
  /// key every kHeartbeatInterval; throws DistributedError naming the ranks that did not arrive
  /// within the timeout, a rank that arrived and then fell silent for kHeartbeatSilence (killed,
  /// crashed or stuck), or the store's host when the store went away.
  void await_every_rank(const LaunchEnvironment& environment, const DistributedOptions& options,
                        const std::string& where) {
    std::vector<std::string> keys;
    for (int rank = 0; rank < environment.world_size; ++rank) keys.push_back(arrival_key(rank));
    const auto start = Clock::now();
    std::vector<Heartbeat> heard(static_cast<std::size_t>(environment.world_size));
    std::int64_t beats = 0;
    auto next_beat = start;
    auto next_report = start;
    try {
      for (;;) {
        const auto now = Clock::now();
        const bool beat = now >= next_beat;
        if (beat) {
          store->set(arrival_key(environment.rank), bytes_of(std::to_string(++beats)));
          next_beat = now + kHeartbeatInterval;
        }
        if (store->check(keys)) return;
        const bool timed_out = now - start >= options.timeout();
        if (beat || timed_out) {
          const auto missing = missing_ranks(environment);
          TORCHBUS_CHECK(!timed_out, DistributedError, "rendezvous at ", where, " timed out after ",
                         seconds_of(options.timeout()), ": rank(s) ", detail::join_or_none(missing),
                         " of ", environment.world_size, " did not arrive (started by ",
                         to_string(environment.launcher), ")");
          if (beats == 1) {
            logger()->info("rank {} of {} is at the rendezvous at {}, waiting for rank(s) {}",
                           environment.rank, environment.world_size, where,
                           detail::join_or_none(missing));
          } else if (now >= next_report) {
            logger()->info(
                "rank {} of {}: still waiting at the rendezvous at {} for rank(s) {} after {}; "
                "until {} (DistributedOptions::timeout)",
                environment.rank, environment.world_size, where, detail::join_or_none(missing),
                seconds_of(now - start), seconds_of(options.timeout()));
          }
          if (now >= next_report) next_report = now + options.wait_report_interval();
          listen(environment, where, missing, heard, now);
        }
        std::this_thread::sleep_for(kRendezvousPoll);
      }
    } catch (const DistributedError&) {
      throw;
    } catch (const std::exception& error) {
      throw DistributedError(detail::concat(
          "rank ", environment.rank, " lost the rendezvous store at ", where,
          " while waiting for the other ranks: ",
          environment.agent_store ? "torchrun's agent, which hosts it, is gone"
                                  : "rank 0, which hosted it, has exited (killed, crashed or "
                                    "failed before the rendezvous)",
          " (", detail::first_line(error), ")"));
    }
  }

  /// The ranks whose arrival key is not in the store yet.
  std::vector<std::string> missing_ranks(const LaunchEnvironment& environment) const {
    std::vector<std::string> missing;
    for (int rank = 0; rank < environment.world_size; ++rank) {
      if (!store->check({arrival_key(rank)})) missing.push_back(std::to_string(rank));
    }
    return missing;
  }

  /// Reads the heartbeats of the other ranks that arrived into `heard`; throws DistributedError
  /// for one silent for kHeartbeatSilence.
  void listen(const LaunchEnvironment& environment, const std::string& where,
              const std::vector<std::string>& missing, std::vector<Heartbeat>& heard,
              Clock::time_point now) const {
    for (int rank = 0; rank < environment.world_size; ++rank) {
      if (rank == environment.rank ||
          std::find(missing.begin(), missing.end(), std::to_string(rank)) != missing.end()) {
        continue;
      }
      auto& last = heard[static_cast<std::size_t>(rank)];
      const auto value = store->get(arrival_key(rank));
      if (value != last.value || last.heard == Clock::time_point()) {
        last = {value, now};
        continue;
      }
      TORCHBUS_CHECK(
          now - last.heard < kHeartbeatSilence, DistributedError, "rendezvous at ", where,
          ": rank ", rank, " arrived, then fell silent for ", seconds_of(now - last.heard),
          " (killed, crashed or stuck) while waiting for rank(s) ", detail::join_or_none(missing),
          " of ", environment.world_size, " (started by ", to_string(environment.launcher), ")");
    }
  }

  /// What the other ranks reported before failing and which reported nothing, for the error of
  /// a collective that failed with `failure`. After a lost connection in a world of more than two,
  /// first waits up to `grace` for the surviving ranks' reports, so the silent ones are the dead.
  std::string diagnosis(const LaunchEnvironment& environment, Failure failure,
                        std::chrono::milliseconds grace) const {
    std::vector<std::string> others;
    for (int rank = 0; rank < environment.world_size; ++rank) {
      if (rank != environment.rank) others.push_back(failure_key(rank));
    }
    std::string reports;
    std::vector<std::string> silent;
    try {
      if (failure == Failure::ConnectionLost && environment.world_size > 2) {
        const auto deadline = Clock::now() + grace;
        while (!store->check(others) && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
      for (int rank = 0; rank < environment.world_size; ++rank) {
        if (rank == environment.rank) continue;
        if (!store->check({failure_key(rank)})) {
          silent.push_back(std::to_string(rank));
          continue;
        }
        const auto bytes = store->get(failure_key(rank));
        reports +=
            detail::concat("; rank ", rank, " failed: ", std::string(bytes.begin(), bytes.end()));
      }
    } catch (const std::exception&) {
      return reports + (environment.agent_store
                            ? "; the rendezvous store (torchrun's agent) is unreachable too"
                            : "; rank 0 has exited: the rendezvous store it hosted is gone too");
    }
    if (silent.empty()) return reports;
    const auto who = detail::concat(silent.size() == 1 ? "rank " : "ranks ",
                                    detail::join_or_none(silent), " reported no error");
    switch (failure) {
      case Failure::ConnectionLost:
        return detail::concat(reports, "; ", who,
                              environment.world_size == 2
                                  ? ": killed, crashed or exited early"
                                  : ": killed, crashed, stuck or exited early");
      case Failure::Timeout:
        return detail::concat(reports, "; ", who, ": stuck, or slower than the timeout");
      case Failure::Other:
        break;
    }
    return detail::concat(reports, "; ", who);
  }
};

ProcessGroup::ProcessGroup(LaunchEnvironment environment, DistributedOptions options)
    : environment_(std::move(environment)), options_(options) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::from_environment(DistributedOptions options) {
  return connect(LaunchEnvironment::detect(), options);
}

std::shared_ptr<ProcessGroup> ProcessGroup::connect(const LaunchEnvironment& environment,
                                                    DistributedOptions options) {
  options.validate();
  TORCHBUS_CHECK(environment.world_size >= 1 && environment.rank >= 0 &&
                     environment.rank < environment.world_size,
                 ConfigError, "rank ", environment.rank, " is not in [0, world size ",
                 environment.world_size, ")");
  std::shared_ptr<ProcessGroup> group(new ProcessGroup(environment, options));
  if (environment.world_size > 1) {
    logger()->info("rank {} of {} is joining the process group at {}:{} (started by {})",
                   environment.rank, environment.world_size, environment.master_addr,
                   environment.master_port, to_string(environment.launcher));
    group->backend_ = std::make_unique<Backend>(environment, options);
    logger()->info("rank {} of {} joined the process group at {}:{} (started by {})",
                   environment.rank, environment.world_size, environment.master_addr,
                   environment.master_port, to_string(environment.launcher));
  }
  return group;
}

template <typename Operation>
void ProcessGroup::run(const char* what, Operation&& operation) {
  TORCHBUS_CHECK(failure_.empty(), DistributedError, "rank ", rank(), ": ", what,
                 " not attempted: the process group is broken since an earlier collective failed (",
                 failure_, ")");
  const auto start = Clock::now();
  try {
    operation();
  } catch (const std::exception& error) {
    const auto elapsed = Clock::now() - start;
    const auto cause = without_location(detail::first_line(error));
    const auto failure = classify(cause, elapsed, options_.timeout());
    std::string message;
    switch (failure) {
      case Failure::ConnectionLost:
        message = detail::concat(
            "rank ", rank(), ": ", what, " failed after ", seconds_of(elapsed), ": ",
            world_size() == 2 ? detail::concat("rank ", 1 - rank()) : std::string("a peer"),
            " closed the connection (", cause, ")");
        break;
      case Failure::Timeout:
        message = detail::concat("rank ", rank(), ": ", what, " timed out after ",
                                 seconds_of(elapsed), " (DistributedOptions::timeout ",
                                 seconds_of(options_.timeout()), "): ", cause);
        break;
      case Failure::Other:
        message = detail::concat("rank ", rank(), ": ", what, " failed after ", seconds_of(elapsed),
                                 ": ", cause);
        break;
    }
    failure_ = message;
    report_failure(message);  // before waiting for the others' reports: they wait for this one
    throw DistributedError(
        message +
        backend_->diagnosis(environment_, failure, std::min(kReportGrace, options_.timeout())));
  }
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (!backend_) return;
  for (auto& tensor : tensors) {
    std::vector<at::Tensor> buffer{tensor.is_contiguous() ? tensor : tensor.contiguous()};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    ++collectives_;
    run("broadcast",
        [&] { backend_->group->broadcast(buffer, options)->wait(options_.timeout()); });
    if (!buffer[0].is_same(tensor)) tensor.copy_(buffer[0]);
  }
}

void ProcessGroup::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (!backend_) return;
  std::vector<at::Tensor> buffer{tensor.is_contiguous() ? tensor : tensor.contiguous()};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op);
  ++collectives_;
  run("all_reduce", [&] { backend_->group->allreduce(buffer, options)->wait(options_.timeout()); });
  if (!buffer[0].is_same(tensor)) tensor.copy_(buffer[0]);
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& tensor) {
  const auto input = tensor.dim() == 0 ? tensor.reshape({1}) : tensor.contiguous();
  if (!backend_) return input;
  std::vector<std::vector<at::Tensor>> outputs(1);
  {
    // Normal tensors also under inference mode (a PredictEnd subscriber gathering predictions):
    // the backend's threads, outside that mode, write them.
    const c10::InferenceMode normal_tensors(/*enabled=*/false);
    for (int rank = 0; rank < world_size(); ++rank) outputs[0].push_back(torch::empty_like(input));
  }
  std::vector<at::Tensor> inputs{input};
  ++collectives_;
  run("all_gather", [&] { backend_->group->allgather(outputs, inputs)->wait(options_.timeout()); });
  return torch::cat(outputs[0]);
}

std::vector<int> ProcessGroup::ranks_with(bool flag) {
  if (!backend_) return flag ? std::vector<int>{rank()} : std::vector<int>{};
  auto flags = torch::zeros({world_size()}, torch::kInt32);
  flags[rank()] = flag ? 1 : 0;
  all_reduce(flags);
  std::vector<int> ranks;
  const auto* values = flags.data_ptr<std::int32_t>();
  for (int rank = 0; rank < world_size(); ++rank) {
    if (values[rank] != 0) ranks.push_back(rank);
  }
  return ranks;
}

void ProcessGroup::start_all_reduce(at::Tensor& tensor) {
  if (!backend_) return;
  TORCHBUS_CHECK(tensor.is_contiguous(), ConfigError,
                 "start_all_reduce needs a contiguous tensor, got sizes ", tensor.sizes(),
                 " and strides ", tensor.strides());
  ++collectives_;
  run("all_reduce", [&] {
    std::vector<at::Tensor> buffer{tensor};
    backend_->pending.push_back(backend_->group->allreduce(buffer));
  });
}

void ProcessGroup::wait_pending() {
  if (!backend_) return;
  struct Clear {
    std::vector<c10::intrusive_ptr<c10d::Work>>& pending;
    ~Clear() { pending.clear(); }
  } clear{backend_->pending};
  for (auto& work : backend_->pending) {
    run("all_reduce", [&] { work->wait(options_.timeout()); });
  }
}

void ProcessGroup::report_failure(std::string_view message) noexcept {
  if (!backend_) return;
  try {
    backend_->store->set(failure_key(rank()), bytes_of(message));
  } catch (...) {
    // The store may be gone already (rank 0 exited); the other ranks then report a lost peer.
  }
}

at::Tensor all_reduce_mean(const State& state, const at::Tensor& tensor) {
  if (!state.process_group || state.process_group->world_size() == 1) return tensor;
  auto sum = tensor.detach().clone();
  state.process_group->all_reduce(sum);
  return sum / static_cast<double>(state.process_group->world_size());
}

at::Tensor gather(const State& state, const at::Tensor& tensor) {
  if (!state.process_group) return tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  return state.process_group->all_gather(tensor);
}

}  // namespace torchbus
