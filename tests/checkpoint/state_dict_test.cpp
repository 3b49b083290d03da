// torchbus::save_state_dict / load_state_dict in C++ alone: a round trip bit for bit, Python's
// load_state_dict semantics (strict, one message, nothing half-loaded) and bad files. The
// exchange with Python PyTorch itself is tests/interop/state_dict_round_trip.py.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/scratch.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state_dict.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

torch::nn::Sequential network(int64_t outputs = 2) {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                               torch::nn::Linear(3, outputs));
}

/// A network with seeded weights whose BatchNorm statistics moved (num_batches_tracked = 1).
torch::nn::Sequential trained_network(uint64_t seed) {
  torch::manual_seed(seed);
  auto net = network();
  net->train();
  net->forward(torch::randn({8, 4}));
  return net;
}

std::vector<at::Tensor> state_dict_copies(const torch::nn::Module& module) {
  std::vector<at::Tensor> copies;
  for (const auto& named : state_dict_of(module)) copies.push_back(named.second.detach().clone());
  return copies;
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].scalar_type() != b[i].scalar_type() || !torch::equal(a[i], b[i])) return false;
  }
  return true;
}

/// Loading `file` into `target` throws a CheckpointError naming the file and each of `parts`, and
/// leaves `target` as it was.
void expect_state_dict_rejected(torch::nn::Module& target, const fs::path& file,
                                const std::vector<std::string>& parts, bool strict = true) {
  const auto before = state_dict_copies(target);
  try {
    load_state_dict(target, file, strict);
    BOOST_FAIL("no error loading " << file);
  } catch (const CheckpointError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find(file.string()) != std::string::npos, message);
    for (const auto& part : parts) BOOST_TEST(message.find(part) != std::string::npos, message);
  }
  BOOST_TEST(same(state_dict_copies(target), before), "the model changed although loading failed");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(state_dict)

BOOST_AUTO_TEST_CASE(round_trip_is_bit_equal_for_parameters_and_buffers) {
  TempDir dir("state_dict");
  auto source = trained_network(1);
  save_state_dict(*source, dir.path / "weights.pt");
  auto target = trained_network(2);
  BOOST_TEST(!same(state_dict_copies(*target), state_dict_copies(*source)));
  load_state_dict(*target, dir.path / "weights.pt");
  BOOST_TEST(same(state_dict_copies(*target), state_dict_copies(*source)));
  const auto read = read_state_dict(dir.path / "weights.pt");
  BOOST_TEST(read.size() == 9u);  // 6 parameters, 3 BatchNorm buffers
  BOOST_TEST(read.back().first == "1.num_batches_tracked");
  BOOST_TEST(read.back().second.scalar_type() == at::kLong);
  BOOST_TEST(read.back().second.item<int64_t>() == 1);
}

BOOST_AUTO_TEST_CASE(one_message_lists_missing_unexpected_and_mismatched_and_loads_nothing) {
  TempDir dir("state_dict");
  auto source = trained_network(1);
  save_state_dict(*source, dir.path / "weights.pt");
  // 1.* is a Linear here (shape mismatch, BatchNorm buffers unexpected); 3.* is missing. 0.* fits
  // and must not be copied either.
  auto target = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::Linear(3, 5),
                                      torch::nn::Linear(5, 1), torch::nn::Linear(1, 1));
  expect_state_dict_rejected(
      *target, dir.path / "weights.pt",
      {"missing keys: 3.weight, 3.bias",
       "unexpected keys: 1.running_mean, 1.running_var, 1.num_batches_tracked",
       "size mismatch for 1.weight: [3] in the file, [5, 3] in the model",
       "size mismatch for 2.weight: [2, 3] in the file, [1, 5] in the model",
       "nothing was loaded"});
}

BOOST_AUTO_TEST_CASE(not_strict_skips_missing_and_unexpected_but_not_shapes) {
  TempDir dir("state_dict");
  auto source = trained_network(1);
  save_state_dict(*source, dir.path / "weights.pt");
  auto smaller = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  expect_state_dict_rejected(*smaller, dir.path / "weights.pt",
                             {"unexpected keys: 2.weight, 2.bias"});
  load_state_dict(*smaller, dir.path / "weights.pt", /*strict=*/false);
  BOOST_TEST(torch::equal(smaller[0]->named_parameters()["weight"],
                          source[0]->named_parameters()["weight"]));
  BOOST_TEST(torch::equal(smaller[1]->named_buffers()["running_var"],
                          source[1]->named_buffers()["running_var"]));
  auto wider = network(5);
  expect_state_dict_rejected(*wider, dir.path / "weights.pt", {"size mismatch for 2.weight"},
                             false);
}

BOOST_AUTO_TEST_CASE(another_dtype_is_refused) {
  TempDir dir("state_dict");
  auto source = trained_network(1);
  source->to(torch::kDouble);
  save_state_dict(*source, dir.path / "double.pt");
  auto target = network();
  expect_state_dict_rejected(
      *target, dir.path / "double.pt",
      {"dtype mismatch for 0.weight: Double in the file, Float in the model"});
}

BOOST_AUTO_TEST_CASE(bad_files_are_named_with_what_is_wrong) {
  TempDir dir("state_dict");
  auto target = network();
  expect_state_dict_rejected(*target, dir.path / "absent.pt", {"no such file"});

  save_state_dict(*trained_network(1), dir.path / "whole.pt");
  std::ifstream in(dir.path / "whole.pt", std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::ofstream(dir.path / "truncated.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_state_dict_rejected(*target, dir.path / "truncated.pt", {"truncated or corrupt"});

  std::ofstream(dir.path / "text.pt") << "not weights\n";
  expect_state_dict_rejected(*target, dir.path / "text.pt", {"not a zip archive"});

  torch::save(trained_network(1), (dir.path / "module.pt").string());  // a TorchScript archive
  expect_state_dict_rejected(*target, dir.path / "module.pt", {"TorchScript archive"});
}

BOOST_AUTO_TEST_SUITE_END()
