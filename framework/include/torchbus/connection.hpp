#pragma once

/// \file
/// Handles to subscriptions: plain (disconnect explicitly) and scoped (disconnect on destruction).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace torchbus {

namespace detail {
struct Channels;
}

/// A handle to one subscription (on one event or several). Copies refer to the same
/// subscription; destroying a Connection leaves the subscription connected. It stays valid when
/// the bus reorders its subscribers, and does nothing once the bus is gone.
class Connection {
 public:
  Connection() = default;
  /// Used by EventBus: the subscription `id` of the bus whose state is `channels`.
  Connection(std::weak_ptr<detail::Channels> channels, std::uint64_t id)
      : channels_(std::move(channels)), id_(id) {}

  /// Disconnects the subscription from every event (a no-op when it is already disconnected).
  /// A class callback's connection also removes the callback from the bus's registry.
  void disconnect();
  /// Whether the subscription is still connected.
  bool connected() const;

 private:
  std::weak_ptr<detail::Channels> channels_;
  std::uint64_t id_ = 0;
};

/// A Connection that disconnects when it goes out of scope. Movable, not copyable.
class ScopedConnection {
 public:
  ScopedConnection() = default;
  /// Takes over `connection`.
  ScopedConnection(Connection connection) : connection_(std::move(connection)) {}  // NOLINT
  ScopedConnection(ScopedConnection&& other) noexcept : connection_(other.release()) {}
  ScopedConnection& operator=(ScopedConnection&& other) noexcept;
  ScopedConnection(const ScopedConnection&) = delete;
  ScopedConnection& operator=(const ScopedConnection&) = delete;
  ~ScopedConnection() { connection_.disconnect(); }

  /// Disconnects now.
  void disconnect() { connection_.disconnect(); }
  /// Whether the subscription is still connected.
  bool connected() const { return connection_.connected(); }
  /// Gives up ownership: the subscription stays connected after this object dies.
  Connection release() { return std::exchange(connection_, Connection{}); }

 private:
  Connection connection_;
};

/// The connection of one class callback: its hooks (one per overridden hook) and its place in the
/// bus's registry.
class CallbackConnection {
 public:
  CallbackConnection() = default;
  /// Takes the callback's connection and the number of hooks it connected.
  CallbackConnection(Connection connection, std::size_t hooks)
      : connection_(std::move(connection)), hooks_(hooks) {}
  /// Disconnects every hook of the callback and removes it from the bus's registry (its state no
  /// longer goes into checkpoints; it can be added again).
  void disconnect() { connection_.disconnect(); }
  /// Whether the callback is still connected.
  bool connected() const { return connection_.connected(); }
  /// Number of hooks that were connected.
  std::size_t size() const noexcept { return hooks_; }

 private:
  Connection connection_;
  std::size_t hooks_ = 0;
};

}  // namespace torchbus
