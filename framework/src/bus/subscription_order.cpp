// The order of an event's subscribers: declared after/before constraints on names and roles first
// (a stable topological order, Kahn's algorithm), then priority, then role, then registration
// order.

#include <torchbus/error.hpp>

#include "bus/channels.hpp"

#include <algorithm>
#include <cstddef>
#include <set>
#include <tuple>
#include <utility>

namespace torchbus::detail {
namespace {

/// The members of a cycle among `remaining` nodes, each of which has a remaining predecessor, in
/// the order the constraints want them to run, from the first registered.
std::vector<std::size_t> find_cycle(const std::vector<std::vector<std::size_t>>& predecessors,
                                    const std::vector<bool>& remaining) {
  const auto start = static_cast<std::size_t>(std::find(remaining.begin(), remaining.end(), true) -
                                              remaining.begin());
  std::vector<std::size_t> walk;  // each node's predecessor follows it
  std::vector<std::size_t> position(remaining.size(), remaining.size());
  auto node = start;
  while (position[node] == remaining.size()) {
    position[node] = walk.size();
    walk.push_back(node);
    node = *std::find_if(predecessors[node].begin(), predecessors[node].end(),
                         [&](std::size_t p) { return remaining[p]; });
  }
  std::vector<std::size_t> cycle(walk.begin() + static_cast<std::ptrdiff_t>(position[node]),
                                 walk.end());
  std::reverse(cycle.begin(), cycle.end());
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
  return cycle;
}

}  // namespace

std::vector<SubscriberId> resolve_order(const Channels& channels, std::size_t channel) {
  const auto members = channels.members(channel);
  const auto count = members.size();
  const auto member_named = [&](const std::string& name) {
    for (std::size_t i = 0; i < count; ++i) {
      if (channels.subscribers[members[i]]->name == name) return i;
    }
    return count;
  };
  std::vector<std::vector<std::size_t>> successors(count);
  std::vector<std::vector<std::size_t>> predecessors(count);
  std::vector<std::size_t> waiting_for(count, 0);
  const auto add_edge = [&](std::size_t first, std::size_t then) {
    successors[first].push_back(then);
    predecessors[then].push_back(first);
    ++waiting_for[then];
  };
  const auto placement_of = [&](std::size_t i) -> const Placement& {
    return channels.subscribers[members[i]]->placement;
  };
  // Calls add(j) for every other member j of role `role`.
  const auto for_each_other_in_role = [&](std::size_t i, Role role, auto add) {
    for (std::size_t j = 0; j < count; ++j) {
      if (j != i && placement_of(j).role() == role) add(j);
    }
  };
  for (std::size_t i = 0; i < count; ++i) {
    const auto& placement = placement_of(i);
    for (const auto& name : placement.after_names()) {
      if (const auto j = member_named(name); j != count) add_edge(j, i);
    }
    for (const auto& name : placement.before_names()) {
      if (const auto j = member_named(name); j != count) add_edge(i, j);
    }
    for (const auto role : placement.after_roles()) {
      for_each_other_in_role(i, role, [&](std::size_t j) { add_edge(j, i); });
    }
    for (const auto role : placement.before_roles()) {
      for_each_other_in_role(i, role, [&](std::size_t j) { add_edge(i, j); });
    }
  }
  // Ready members by (priority, role, registration order); members are in registration order.
  std::set<std::tuple<int, Role, std::size_t>> ready;
  const auto make_ready = [&](std::size_t i) {
    ready.emplace(placement_of(i).priority(), placement_of(i).role(), i);
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (waiting_for[i] == 0) make_ready(i);
  }
  std::vector<SubscriberId> order;
  order.reserve(count);
  std::vector<bool> remaining(count, true);
  while (!ready.empty()) {
    const auto i = std::get<2>(*ready.begin());
    ready.erase(ready.begin());
    order.push_back(members[i]);
    remaining[i] = false;
    for (const auto next : successors[i]) {
      if (--waiting_for[next] == 0) make_ready(next);
    }
  }
  if (order.size() != count) {
    std::string cycle;
    const auto nodes = find_cycle(predecessors, remaining);
    for (const auto i : nodes) cycle += channels.short_label(members[i]) + " -> ";
    cycle += channels.short_label(members[nodes.front()]);
    throw ConfigError(concat("the subscribers of ", channels.channel_name(channel),
                             " cannot be ordered: their after/before constraints form a cycle: ",
                             cycle, " (each must run before the next)"));
  }
  return order;
}

void check_constraint_names(const Channels& channels) {
  for (std::size_t id = 0; id < channels.subscribers.size(); ++id) {
    const auto& subscriber = *channels.subscribers[id];
    if (!subscriber.connected) continue;
    const auto& placement = subscriber.placement;
    for (const auto& [kind, names] : {std::pair("after", &placement.after_names()),
                                      std::pair("before", &placement.before_names())}) {
      for (const auto& name : *names) {
        if (channels.find_named(name) != nullptr) continue;
        std::vector<std::string> known;
        for (const auto& other : channels.subscribers) {
          if (other->connected && !other->name.empty()) known.push_back(other->name);
        }
        throw ConfigError(concat(subscriber.callback != nullptr ? "callback " : "", "'",
                                 channels.short_label(id), "' asks to run ", kind, " '", name,
                                 "', which is neither a callback nor a named subscription on this "
                                 "bus; known names: ",
                                 join_or_none(known)));
      }
    }
  }
}

}  // namespace torchbus::detail
