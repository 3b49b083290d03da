#include <torchbus/callback.hpp>
#include <torchbus/error.hpp>

#include "type_name.hpp"

namespace torchbus {

Callback::Callback(std::string name, int priority) : name_(std::move(name)), priority_(priority) {}

std::string Callback::name() const {
  return name_.empty() ? type_name(typeid(*this)) : name_;
}

Callback& Callback::set_priority(int priority) noexcept {
  priority_ = priority;
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

#if defined(__GNUC__) && !defined(__clang__)
// GCC's bound-member-function extension gives the address a virtual call would reach, so the hooks
// a subclass overrides are found exactly, whatever static type the callback is passed as.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpmf-conversions"
#pragma GCC diagnostic ignored "-Wpedantic"
EventSet overridden_hooks(const Callback& callback) {
  using Hook = void (*)(Callback*, State&);
  static Callback base;
  auto& object = const_cast<Callback&>(callback);
  EventSet hooks;
#define TORCHBUS_DETECT_HOOK(Name, name)                                              \
  if ((Hook)(object.*(&Callback::on_##name)) != /* NOLINT: GCC bound-PMF extension */ \
      (Hook)(base.*(&Callback::on_##name))) {   /* NOLINT */                          \
    hooks.set(index_of(Event::Name));                                                 \
  }
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_DETECT_HOOK)
#undef TORCHBUS_DETECT_HOOK
  return hooks;
}
#pragma GCC diagnostic pop
#else
EventSet overridden_hooks(const Callback& /*callback*/) {
  return EventSet{}.set();
}
#endif

}  // namespace torchbus
