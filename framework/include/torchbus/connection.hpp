#pragma once

/// \file
/// Handles to subscriptions: plain (disconnect explicitly) and scoped (disconnect on destruction).

#include <boost/signals2/connection.hpp>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace torchbus {

namespace detail {
struct LiveCounts;
}

/// A handle to one subscription. Copies refer to the same subscription; destroying a Connection
/// leaves the subscription connected.
class Connection {
 public:
  Connection() = default;
  /// Used by EventBus: wraps a Signals2 connection on channel `channel`.
  Connection(boost::signals2::connection connection, std::weak_ptr<detail::LiveCounts> counts,
             std::size_t channel);

  /// Disconnects the subscription (a no-op when it is already disconnected).
  void disconnect();
  /// Whether the subscription is still connected.
  bool connected() const { return connection_.connected(); }

 private:
  boost::signals2::connection connection_;
  std::weak_ptr<detail::LiveCounts> counts_;
  std::size_t channel_ = 0;
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

/// The connections of one class callback (one per overridden hook).
class CallbackConnection {
 public:
  CallbackConnection() = default;
  /// Takes the hooks' connections.
  explicit CallbackConnection(std::vector<Connection> connections)
      : connections_(std::move(connections)) {}
  /// Disconnects every hook of the callback.
  void disconnect() {
    for (auto& connection : connections_) connection.disconnect();
  }
  /// Number of hooks that were connected.
  std::size_t size() const noexcept { return connections_.size(); }

 private:
  std::vector<Connection> connections_;
};

}  // namespace torchbus
