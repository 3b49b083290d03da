// The C++ side of tests/interop/state_dict_round_trip.py: writes and reads state_dict files of a
// small network with a BatchNorm (float32 parameters and buffers, an int64 num_batches_tracked).
//   state_dict_tool save FILE           weights = pattern 0, saved with save_state_dict
//   state_dict_tool expect FILE         loads FILE (strict); exit 1 unless weights = pattern 5
//   state_dict_tool resave IN OUT       loads IN (strict), saves the weights to OUT
//   state_dict_tool load [--lax] FILE...  loads each FILE (strict unless --lax) into a fresh
//                                         network; prints "FILE: ok" or the error, one line each

#include <torch/torch.h>
#include <torchbus/error.hpp>
#include <torchbus/state_dict.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

namespace {

torch::nn::Sequential network() {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                               torch::nn::Linear(3, 2));
}

// Exactly representable values that differ per element and per tensor (k: the tensor's index in
// the sorted names); the Python script computes the same.
at::Tensor pattern(const at::Tensor& like, int64_t k, int64_t salt) {
  if (like.scalar_type() == at::kLong) return torch::full_like(like, 1000 + k + salt);
  const auto index = torch::arange(like.numel(), torch::kLong);
  return ((index * 37 + k * 11 + salt).remainder(101) - 50)
      .to(like.scalar_type())
      .div(64)
      .reshape(like.sizes());
}

std::vector<std::string> sorted_names(const torchbus::NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& named : tensors) names.push_back(named.first);
  std::sort(names.begin(), names.end());
  return names;
}

int64_t sorted_index(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) - names.begin();
}

int run(const std::vector<std::string>& args) {
  auto net = network();
  const auto tensors = torchbus::state_dict_of(*net);
  const auto names = sorted_names(tensors);
  const std::string& command = args.at(0);
  if (command == "save") {
    torch::NoGradGuard no_grad;
    for (const auto& [name, tensor] : tensors) {
      tensor.copy_(pattern(tensor, sorted_index(names, name), 0));
    }
    torchbus::save_state_dict(*net, args.at(1));
    return 0;
  }
  if (command == "expect") {
    torchbus::load_state_dict(*net, args.at(1));
    int wrong = 0;
    for (const auto& [name, tensor] : tensors) {
      const auto expected = pattern(tensor, sorted_index(names, name), 5);
      if (!torch::equal(tensor, expected)) {
        std::cerr << name << " differs: " << tensor << " expected " << expected << "\n";
        ++wrong;
      }
    }
    return wrong == 0 ? 0 : 1;
  }
  if (command == "resave") {
    torchbus::load_state_dict(*net, args.at(1));
    torchbus::save_state_dict(*net, args.at(2));
    return 0;
  }
  if (command == "load") {
    const bool strict = args.at(1) != "--lax";
    for (std::size_t i = strict ? 1 : 2; i < args.size(); ++i) {
      try {
        torchbus::load_state_dict(*network(), args[i], strict);
        std::cout << args[i] << ": ok\n";
      } catch (const torchbus::CheckpointError& error) {
        std::cout << error.what() << "\n";
      }
    }
    return 0;
  }
  std::cerr << "unknown command " << command << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: state_dict_tool save|expect|resave|load [--lax] FILE [OUT|FILE...]\n";
    return 2;
  }
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const torchbus::CheckpointError& error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
}
