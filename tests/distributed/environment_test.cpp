// In one process: reading launcher environments, sharding with DistributedSampler, the process
// group event, and the collective helpers in a world of one.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>
#include <torchbus/torchbus.hpp>

#include "interop/libtorch_compat.hpp"  // zeroing gradients, whatever the LibTorch version

#include <map>
#include <set>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

LaunchEnvironment read(const std::map<std::string, std::string>& variables) {
  return LaunchEnvironment::from([&](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    return found == variables.end() ? std::nullopt : std::optional(found->second);
  });
}

std::string error_of(const std::map<std::string, std::string>& variables) {
  try {
    read(variables);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "no error";
}

std::vector<std::size_t> drain(DistributedSampler& sampler, std::size_t batch) {
  std::vector<std::size_t> indices;
  while (auto next = sampler.next(batch)) indices.insert(indices.end(), next->begin(), next->end());
  return indices;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launch_environment)

BOOST_AUTO_TEST_CASE(no_launcher_is_a_single_process) {
  const auto environment = read({});
  BOOST_TEST(to_string(environment.launcher) == to_string(Launcher::None));
  BOOST_TEST(environment.world_size == 1);
  BOOST_TEST(environment.rank == 0);
}

BOOST_AUTO_TEST_CASE(torchrun_variables) {
  const auto environment = read({{"RANK", "3"},
                                 {"LOCAL_RANK", "1"},
                                 {"WORLD_SIZE", "4"},
                                 {"MASTER_ADDR", "node0"},
                                 {"MASTER_PORT", "1234"}});
  BOOST_TEST(to_string(environment.launcher) == to_string(Launcher::Torchrun));
  BOOST_TEST(environment.rank == 3);
  BOOST_TEST(environment.local_rank == 1);
  BOOST_TEST(environment.world_size == 4);
  BOOST_TEST(environment.master_addr == "node0");
  BOOST_TEST(environment.master_port == 1234);
  BOOST_TEST(!environment.agent_store);
}

BOOST_AUTO_TEST_CASE(torchrun_agent_store_is_joined_under_the_attempt_prefix) {
  const auto environment = read({{"RANK", "0"},
                                 {"WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "127.0.0.1"},
                                 {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                 {"TORCHELASTIC_RESTART_COUNT", "2"}});
  BOOST_TEST(environment.agent_store);
  BOOST_TEST(environment.store_prefix == "/worker/attempt_2");
  BOOST_TEST(environment.master_port == LaunchEnvironment::kDefaultPort);
}

BOOST_AUTO_TEST_CASE(mpirun_variables_default_to_this_machine) {
  const auto environment = read({{"OMPI_COMM_WORLD_RANK", "1"},
                                 {"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  BOOST_TEST(to_string(environment.launcher) == to_string(Launcher::Mpirun));
  BOOST_TEST(environment.rank == 1);
  BOOST_TEST(environment.local_rank == 1);
  BOOST_TEST(environment.master_addr == "127.0.0.1");
}

BOOST_AUTO_TEST_CASE(slurm_variables_use_the_launch_node) {
  const auto environment = read({{"SLURM_PROCID", "5"},
                                 {"SLURM_NTASKS", "8"},
                                 {"SLURM_LOCALID", "1"},
                                 {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}});
  BOOST_TEST(to_string(environment.launcher) == to_string(Launcher::Slurm));
  BOOST_TEST(environment.rank == 5);
  BOOST_TEST(environment.world_size == 8);
  BOOST_TEST(environment.master_addr == "10.0.0.7");
}

BOOST_AUTO_TEST_CASE(inconsistent_variables_are_named) {
  BOOST_TEST(error_of({{"WORLD_SIZE", "2"}}).find("WORLD_SIZE is set but RANK is not") !=
             std::string::npos);
  BOOST_TEST(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}})
                 .find("RANK='2' is not valid: expected an integer in [0, 1]") !=
             std::string::npos);
  BOOST_TEST(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'") != std::string::npos);
  BOOST_TEST(error_of({{"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})
                 .find("MASTER_ADDR is not set") != std::string::npos);
  BOOST_TEST(
      error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}})
          .find("MASTER_PORT='70000'") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(distributed_sampler)

BOOST_AUTO_TEST_CASE(ranks_get_disjoint_interleaved_shards_of_one_permutation) {
  torch::manual_seed(5);
  const auto permutation = torch::randperm(10, torch::kLong);
  std::multiset<std::size_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    DistributedSampler sampler(10, rank, 3);
    torch::manual_seed(5);  // every rank holds rank 0's generator at the epoch start
    sampler.reset();
    const auto shard = drain(sampler, 3);
    BOOST_TEST(shard.size() == 4u);  // 10 samples padded to 12 for 3 ranks
    for (std::size_t j = 0; j < shard.size(); ++j) {
      BOOST_TEST(shard[j] ==
                 static_cast<std::size_t>(permutation[(rank + 3 * j) % 10].item<std::int64_t>()));
    }
    seen.insert(shard.begin(), shard.end());
  }
  BOOST_TEST(std::set<std::size_t>(seen.begin(), seen.end()).size() == 10u);  // all covered
  BOOST_TEST(seen.size() == 12u);  // only the two padding indices repeat
}

BOOST_AUTO_TEST_CASE(each_epoch_is_reshuffled_and_drop_last_trims) {
  torch::manual_seed(5);
  DistributedSampler sampler(64, 1, 2);
  sampler.reset();
  const auto first = drain(sampler, 8);
  sampler.reset();
  BOOST_TEST(first != drain(sampler, 8));
  DistributedSampler trimmed(11, 0, 2, /*shuffle=*/false, /*drop_last=*/true);
  trimmed.reset();
  BOOST_TEST(drain(trimmed, 4) == (std::vector<std::size_t>{0, 2, 4, 6, 8}));
}

BOOST_AUTO_TEST_CASE(a_saved_position_resumes_the_same_indices) {
  DistributedSampler sampler(40, 0, 2);
  sampler.reset();
  sampler.next(5);
  const auto rest_copy = [&] {
    torch::serialize::OutputArchive archive;
    sampler.save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    DistributedSampler restored(40, 0, 2);
    torch::serialize::InputArchive input;
    std::istringstream in(bytes.str());
    input.load_from(in);
    restored.load(input);
    return drain(restored, 5);
  }();
  BOOST_TEST(rest_copy == drain(sampler, 5));
  BOOST_TEST(rest_copy.size() == 15u);
}

BOOST_AUTO_TEST_CASE(bad_ranks_are_rejected) {
  BOOST_CHECK_THROW(DistributedSampler(10, 2, 2), ConfigError);
  BOOST_CHECK_THROW(DistributedSampler(1, 0, 2, true, /*drop_last=*/true), ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(process_group_of_one)

BOOST_AUTO_TEST_CASE(process_group_start_follows_action_start_and_ranks_reach_the_state) {
  Run run;
  auto group = ProcessGroup::connect(LaunchEnvironment{});
  run.trainer.set_process_group(group);
  auto recorder = std::make_shared<RecordingCallback>();
  run.trainer.add(recorder);
  run.trainer.fit(make_batches(2, 4));
  BOOST_TEST(recorder->events.at(0) == "ActionStart");
  BOOST_TEST(recorder->events.at(1) == "ProcessGroupStart");
  BOOST_TEST(recorder->events.at(2) == "EpochStart");
  BOOST_TEST(run.trainer.state().process_group == group.get());
  BOOST_TEST(run.trainer.state().world_size == 1);
  BOOST_TEST(group->collectives() == 0);  // a world of one never communicates
}

BOOST_AUTO_TEST_CASE(collective_helpers_are_identities_in_a_world_of_one) {
  State state;
  const auto scalar = torch::tensor(2.5);
  BOOST_TEST(torch::equal(all_reduce_mean(state, scalar), scalar));
  BOOST_TEST(torch::equal(gather(state, scalar), torch::tensor({2.5})));
  auto group = ProcessGroup::connect(LaunchEnvironment{});
  state.process_group = group.get();
  const auto rows = torch::arange(6).reshape({3, 2});
  BOOST_TEST(torch::equal(gather(state, rows), rows));
  BOOST_TEST(group->ranks_with(true) == std::vector<int>{0});
  BOOST_TEST(group->ranks_with(false).empty());
}

// Buckets in a world of one: the layout (last layer first, a 1 MiB first bucket, then
// bucket_bytes), the hooks copying gradients while armed, and reduce() leaving gradients as they
// were (the mean of one rank), an unused parameter's undefined, and the status as written.
BOOST_AUTO_TEST_CASE(a_gradient_reducer_in_a_world_of_one_leaves_gradients_as_they_are) {
  auto group = ProcessGroup::connect(LaunchEnvironment{});
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(600, 500), torch::nn::ReLU(),
                              torch::nn::Linear(500, 4));
  model->register_parameter("unused", torch::ones({3}));
  const auto parameters = model->parameters();
  // In reverse order: the last layer's bias and weight and the first layer's bias (10,016 bytes)
  // fill the first bucket (at most 1 MiB), the first layer's weight (1.2 MB) and the Sequential's
  // own parameter (registered first) the second (at most 1.5 MB). Without the small first bucket
  // all would fit in one.
  GradientReducer reducer(*group, parameters, 1500000, 3);
  BOOST_TEST(reducer.bucket_count() == 2u);
  BOOST_TEST(reducer.status().numel() == 3);

  const auto input = torch::randn({5, 600});
  model->forward(input).sum().backward();
  std::vector<at::Tensor> expected;
  for (const auto& parameter : parameters) {
    expected.push_back(parameter.grad().defined() ? parameter.grad().clone() : at::Tensor());
    parameter.mutable_grad().reset();
  }
  reducer.arm();
  model->forward(input).sum().backward();
  reducer.status().copy_(torch::tensor({1.0, 2.0, 3.0}));
  reducer.reduce();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    BOOST_TEST_CONTEXT("parameter " << i) {
      BOOST_TEST(parameters[i].grad().defined() == expected[i].defined());
      if (expected[i].defined()) BOOST_TEST(torch::equal(parameters[i].grad(), expected[i]));
    }
  }
  BOOST_TEST(torch::equal(reducer.status(), torch::tensor({1.0F, 2.0F, 3.0F})));
}

// attach() makes every gradient its place in the bucket, with the parameter's strides: autograd
// accumulates the window's backwards there, reduce() leaves the sums where they are (the mean of
// one rank), and zeroing them as TrainerOptions::set_grads_to_none(false) does (1.13's
// Optimizer::zero_grad: detach_ and zero_) works on them. A gradient replaced by hand is copied
// into its place, which becomes the gradient again.
BOOST_AUTO_TEST_CASE(attached_gradients_live_in_the_buckets) {
  auto group = ProcessGroup::connect(LaunchEnvironment{});
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Conv2d(2, 3, 3), torch::nn::Flatten(),
                              torch::nn::Linear(12, 4));
  const auto parameters = model->parameters();
  {
    torch::NoGradGuard no_grad;
    parameters[0].set_data(parameters[0].contiguous(at::MemoryFormat::ChannelsLast));
  }
  const auto input = torch::randn({2, 2, 4, 4});
  model->forward(input).sum().backward();
  model->forward(input * 2).sum().backward();
  std::vector<at::Tensor> expected;
  for (const auto& parameter : parameters) {
    expected.push_back(parameter.grad().clone());
    parameter.mutable_grad().reset();
  }

  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.1));
  GradientReducer reducer(*group, parameters, 1 << 20, 0);
  reducer.attach();
  std::vector<const void*> places;
  for (const auto& parameter : parameters) {
    BOOST_TEST(parameter.grad().is_alias_of(parameters.front().grad()));  // one bucket
    BOOST_TEST(parameter.grad().strides() == parameter.strides());
    places.push_back(parameter.grad().data_ptr());
  }
  model->forward(input).sum().backward();
  reducer.arm();
  model->forward(input * 2).sum().backward();
  reducer.reduce();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    BOOST_TEST_CONTEXT("parameter " << i) {
      BOOST_TEST(parameters[i].grad().data_ptr() == places[i]);
      BOOST_TEST(torch::equal(parameters[i].grad(), expected[i]));
    }
  }
  torchbus::detail::zero_gradients(optimizer);
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    BOOST_TEST(parameters[i].grad().data_ptr() == places[i]);
    BOOST_TEST(torch::equal(parameters[i].grad(), torch::zeros_like(parameters[i])));
  }
  parameters[1].mutable_grad() = torch::full_like(parameters[1], 2.0);
  reducer.reduce();
  BOOST_TEST(parameters[1].grad().data_ptr() == places[1]);
  BOOST_TEST(torch::equal(parameters[1].grad(), torch::full_like(parameters[1], 2.0)));
}

BOOST_AUTO_TEST_CASE(bad_options_are_rejected) {
  BOOST_CHECK_THROW(
      ProcessGroup::connect(LaunchEnvironment{}, DistributedOptions().bucket_bytes(0)),
      ConfigError);
  BOOST_CHECK_THROW(ProcessGroup::connect(LaunchEnvironment{}, DistributedOptions().timeout(
                                                                   std::chrono::milliseconds(0))),
                    ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()
