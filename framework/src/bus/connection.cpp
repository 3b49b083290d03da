#include <torchbus/connection.hpp>

#include "bus/channels.hpp"

namespace torchbus {

void Connection::disconnect() {
  if (auto channels = channels_.lock()) channels->disconnect(id_);
}

bool Connection::connected() const {
  const auto channels = channels_.lock();
  return channels != nullptr && channels->subscribers[id_]->connected;
}

ScopedConnection& ScopedConnection::operator=(ScopedConnection&& other) noexcept {
  if (this != &other) {
    connection_.disconnect();
    connection_ = other.release();
  }
  return *this;
}

}  // namespace torchbus
