#include <torchbus/callback.hpp>
#include <torchbus/error.hpp>

#include "support/type_name.hpp"

namespace torchbus {

Callback::Callback(std::string name, int priority) : name_(std::move(name)), placement_(priority) {}

std::string Callback::name() const {
  return name_.empty() ? type_name(typeid(*this)) : name_;
}

Callback& Callback::set_priority(int priority) noexcept {
  placement_.with_priority(priority);
  return *this;
}

Callback& Callback::set_role(Role role) noexcept {
  placement_.with_role(role);
  return *this;
}

Callback& Callback::after(std::string_view name) {
  TORCHBUS_CHECK(!name.empty(), ConfigError, "Callback::after needs a non-empty name");
  placement_.after(name);
  return *this;
}

Callback& Callback::before(std::string_view name) {
  TORCHBUS_CHECK(!name.empty(), ConfigError, "Callback::before needs a non-empty name");
  placement_.before(name);
  return *this;
}

Callback& Callback::after(Role role) {
  placement_.after(role);
  return *this;
}

Callback& Callback::before(Role role) {
  placement_.before(role);
  return *this;
}

Callback& Callback::skip_during(RunStage stage) noexcept {
  placement_.skip_during(stage);
  return *this;
}

Callback& Callback::run_during(RunStage stage) noexcept {
  placement_.run_during(stage);
  return *this;
}

Callback& Callback::set_error_policy(ErrorPolicy policy) noexcept {
  placement_.with_error_policy(policy);
  return *this;
}

Callback& Callback::run_on_rank(int rank) {
  TORCHBUS_CHECK(rank >= 0, ConfigError, "run_on_rank needs a rank >= 0, got ", rank);
  rank_ = rank;
  return *this;
}

Callback& Callback::run_on_every_rank() noexcept {
  rank_.reset();
  return *this;
}

}  // namespace torchbus
