#include <torchbus/bus.hpp>
#include <torchbus/connection.hpp>

namespace torchbus {

Connection::Connection(boost::signals2::connection connection,
                       std::weak_ptr<detail::LiveCounts> counts, std::size_t channel)
    : connection_(std::move(connection)), counts_(std::move(counts)), channel_(channel) {}

void Connection::disconnect() {
  if (!connection_.connected()) return;
  connection_.disconnect();
  if (auto counts = counts_.lock()) --(*counts)[channel_];
}

ScopedConnection& ScopedConnection::operator=(ScopedConnection&& other) noexcept {
  if (this != &other) {
    connection_.disconnect();
    connection_ = other.release();
  }
  return *this;
}

}  // namespace torchbus
