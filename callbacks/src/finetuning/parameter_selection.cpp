#include <fnmatch.h>
#include <torch/nn/module.h>
#include <torchbus/callbacks/parameter_selection.hpp>
#include <torchbus/error.hpp>

#include <algorithm>

namespace torchbus {
namespace {

bool matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

/// What a pattern that matched nothing is told: some of `module`'s parameter names ("a.weight,
/// a.bias, ... (12 in all)") and how patterns read.
std::string names_hint(const torch::nn::Module& module) {
  const auto named = module.named_parameters();
  std::vector<std::string> names;
  for (const auto& item : named) {
    if (names.size() == 6) break;
    names.push_back(item.key());
  }
  auto text = detail::join_or_none(names);
  if (named.size() > names.size()) text += detail::concat(", ... (", named.size(), " in all)");
  return detail::concat("; the names are dotted paths such as ", text,
                        " (a glob: '*' matches any characters, e.g. 'encoder.*')");
}

}  // namespace

std::vector<at::Tensor> parameters_matching(const torch::nn::Module& module,
                                            const std::string& pattern) {
  std::vector<at::Tensor> chosen;
  for (const auto& item : module.named_parameters()) {
    if (matches(pattern, item.key())) chosen.push_back(item.value());
  }
  TORCHBUS_CHECK(!chosen.empty(), ConfigError, "no parameter name matches '", pattern, "'",
                 names_hint(module));
  return chosen;
}

std::vector<std::vector<at::Tensor>> split_parameters(const torch::nn::Module& module,
                                                      const std::vector<std::string>& patterns) {
  std::vector<std::vector<at::Tensor>> groups(patterns.size() + 1);
  for (const auto& item : module.named_parameters()) {
    const auto first = std::find_if(patterns.begin(), patterns.end(),
                                    [&](const std::string& p) { return matches(p, item.key()); });
    groups[static_cast<std::size_t>(first - patterns.begin())].push_back(item.value());
  }
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    TORCHBUS_CHECK(!groups[i].empty(), ConfigError, "split_parameters: pattern ", i + 1, " '",
                   patterns[i], "' matches no parameter",
                   i > 0 ? " the patterns before it left" : "", names_hint(module));
  }
  return groups;
}

std::int64_t set_trainable(torch::nn::Module& module, const std::string& pattern, bool trainable) {
  const auto chosen = parameters_matching(module, pattern);
  for (auto parameter : chosen) parameter.set_requires_grad(trainable);
  return static_cast<std::int64_t>(chosen.size());
}

}  // namespace torchbus
