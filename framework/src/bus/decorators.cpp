#include <torchbus/decorators.hpp>

namespace torchbus {
namespace {
std::vector<Subscription>& registry() {
  static std::vector<Subscription> subscriptions;
  return subscriptions;
}
}  // namespace

const std::vector<Subscription>& registered_subscriptions() {
  return registry();
}

bool register_subscription(Subscription subscription) {
  registry().push_back(std::move(subscription));
  return true;
}

}  // namespace torchbus
