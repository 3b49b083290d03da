// Training on a GPU (label cuda): each case is skipped, with its message, where no CUDA device is
// visible. What they check: a run on cuda:0 equals the CPU's within float tolerance; a run resumed
// on CUDA from its own checkpoint ends bit for bit where the uninterrupted one does; checkpoints
// cross devices both ways; bf16-mixed autocasts there; fp16-mixed skips overflowing steps and
// checkpoints its loss scale; TerminateOnNaN stops without a host sync per step; the default
// callbacks make no host sync per step (c10's sync-debug mode set to error); torchbus-train
// --device cuda, killed with SIGKILL mid-run, resumes bit-exact.

#include <torch/cuda.h>
#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/default_callbacks.hpp>
#include <torchbus/callbacks/terminate_on_nan.hpp>
#include <torchbus/torchbus.hpp>

#if __has_include(<cuda_runtime_api.h>) && __has_include(<c10/cuda/CUDAFunctions.h>)
#include <c10/cuda/CUDAFunctions.h>
#define TORCHBUS_HAS_CUDA_HEADERS 1
#endif

#ifdef TORCHBUS_TRAIN_PATH
#include <apps/run_train.hpp>
#include <apps/summary_json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

boost::test_tools::assertion_result cuda_present(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result present(torch::cuda::is_available());
  present.message() << "skipped: no CUDA device is visible (or this LibTorch has no CUDA)";
  return present;
}

const c10::Device kGpu(c10::kCUDA, 0);

/// A trainer of a fresh copy of make_model() (same weights on every call), Adam, on `device`.
struct DeviceRun {
  torch::nn::Sequential model = make_model();
  torch::optim::Adam optimizer{model->parameters(), torch::optim::AdamOptions(1e-2)};
  Trainer trainer;

  DeviceRun(c10::Device device, TrainerOptions options)
      : trainer(model, optimizer, cross_entropy,
                options.device(device).seed(7).use_registered_subscriptions(false)) {}
};

/// The largest absolute difference between two lists of tensors (on any devices).
double largest_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double largest = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, (a[i].cpu() - b[i].cpu()).abs().max().item<double>());
  }
  return largest;
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i].cpu(), b[i].cpu())) return false;
  }
  return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda, *boost::unit_test::precondition(&cuda_present))

BOOST_AUTO_TEST_CASE(training_on_cuda_equals_the_cpu_run_within_float_tolerance) {
  const auto batches = make_batches(24, 16);
  DeviceRun cpu(c10::kCPU, TrainerOptions().max_epochs(2));
  DeviceRun gpu(kGpu, TrainerOptions().max_epochs(2));
  cpu.trainer.fit(batches);
  gpu.trainer.fit(batches);
  BOOST_TEST(gpu.model->parameters().front().device() == kGpu);
  BOOST_TEST(largest_difference(snapshot(*cpu.model), snapshot(*gpu.model)) < 1e-4);
}

// `torch::kCUDA` without an index is the current device (cuda:0 in this process): state.device
// names it with its index, as the model's parameters and the batch targets moved there do, and the
// options keep what the user wrote.
BOOST_AUTO_TEST_CASE(cuda_without_an_index_is_the_current_device_with_its_index) {
  const auto batches = make_batches(4, 16);
  DeviceRun run(c10::Device(c10::kCUDA), TrainerOptions().max_epochs(1));
  std::vector<c10::Device> state_devices, target_devices;
  run.trainer.on(Event::BatchEnd, [&](State& state) {
    state_devices.push_back(state.device);
    target_devices.push_back(state.batch_target().device());
  });
  run.trainer.fit(batches);
  BOOST_TEST_REQUIRE(state_devices.size() == 4u);
  for (std::size_t i = 0; i < state_devices.size(); ++i) {
    BOOST_TEST(state_devices[i] == kGpu);
    BOOST_TEST(target_devices[i] == kGpu);
  }
  BOOST_TEST(run.model->parameters().front().device() == kGpu);
  BOOST_TEST(!run.trainer.options().device().has_index());
}

BOOST_AUTO_TEST_CASE(a_run_resumed_on_cuda_ends_bit_for_bit_where_the_uninterrupted_one_does) {
  const auto batches = make_batches(24, 16);
  const auto file = scratch("cuda_test", "resume") / "step8.tbckpt";
  DeviceRun whole(kGpu, TrainerOptions().max_epochs(2));
  whole.trainer.fit(batches);
  DeviceRun first(kGpu, TrainerOptions().max_epochs(2).max_steps(8));
  first.trainer.fit(batches);
  first.trainer.save_checkpoint(file);
  DeviceRun second(kGpu, TrainerOptions().max_epochs(2));
  second.trainer.resume_from(file);
  second.trainer.fit(batches);
  BOOST_TEST(bitwise_equal(snapshot(*whole.model), snapshot(*second.model)));
}

BOOST_AUTO_TEST_CASE(checkpoints_cross_devices_both_ways) {
  const auto batches = make_batches(24, 16);
  const auto dir = scratch("cuda_test", "across");
  DeviceRun reference(c10::kCPU, TrainerOptions().max_epochs(2));
  reference.trainer.fit(batches);
  for (const bool from_gpu : {true, false}) {
    BOOST_TEST_CONTEXT((from_gpu ? "cuda -> cpu" : "cpu -> cuda")) {
      const auto file = dir / (from_gpu ? "from_gpu.tbckpt" : "from_cpu.tbckpt");
      DeviceRun first(from_gpu ? kGpu : c10::Device(c10::kCPU),
                      TrainerOptions().max_epochs(2).max_steps(8));
      first.trainer.fit(batches);
      first.trainer.save_checkpoint(file);
      const auto to = from_gpu ? c10::Device(c10::kCPU) : kGpu;
      DeviceRun second(to, TrainerOptions().max_epochs(2));
      second.trainer.resume_from(file);
      second.trainer.fit(batches);
      BOOST_TEST(second.model->parameters().front().device() == to);
      BOOST_TEST(largest_difference(snapshot(*reference.model), snapshot(*second.model)) < 1e-4);
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_mixed_autocasts_the_forward_on_cuda) {
  DeviceRun run(kGpu, TrainerOptions().max_epochs(1).precision(Precision::BF16Mixed));
  std::vector<at::ScalarType> outputs;
  run.trainer.on(Event::BeforeBackward,
                 [&](State& state) { outputs.push_back(state.batch_output().scalar_type()); });
  run.trainer.fit(make_batches(4, 8));
  BOOST_TEST_REQUIRE(outputs.size() == 4u);
  for (const auto type : outputs) BOOST_TEST(type == at::kBFloat16);
}

// Float16 with loss scaling: a first step that overflows is skipped and lowers the scale (here from
// 1e30 to 1e4 at once); the scale is in checkpoints, so a resumed run continues it.
BOOST_AUTO_TEST_CASE(fp16_mixed_skips_overflowing_steps_and_checkpoints_the_scale) {
  const auto options = [] { return TrainerOptions().precision(Precision::FP16Mixed); };
  DeviceRun run(kGpu, options().max_epochs(1).loss_scaler(
                          LossScalerOptions().init_scale(1e30).backoff_factor(1e-26)));
  std::vector<bool> skipped;
  std::vector<at::ScalarType> outputs;
  run.trainer.on(Event::BeforeBackward,
                 [&](State& state) { outputs.push_back(state.batch_output().scalar_type()); });
  run.trainer.on(Event::StepEnd, [&](State& state) { skipped.push_back(state.update_skipped); });
  run.trainer.fit(make_batches(4, 8));
  BOOST_TEST_REQUIRE(skipped.size() == 4u);
  BOOST_TEST(skipped.front());  // 1e30 * loss overflows float16
  BOOST_TEST(!skipped.back());
  for (const auto type : outputs) BOOST_TEST(type == at::kHalf);
  const auto file = scratch("cuda_test", "fp16") / "scale.tbckpt";
  run.trainer.save_checkpoint(file);
  const auto scale = run.trainer.loss_scaler()->current_scale();
  BOOST_TEST(scale < 1e30);
  DeviceRun resumed(kGpu, options().max_epochs(2));
  resumed.trainer.resume_from(file);
  double resumed_scale = 0.0;
  resumed.trainer.on(Event::ActionStart, [&](State&) {
    resumed_scale = resumed.trainer.loss_scaler()->current_scale();
  });
  resumed.trainer.fit(make_batches(4, 8));
  BOOST_TEST(resumed_scale == scale);
}

// On a GPU TerminateOnNaN reads a step's flags once they reached the host (docs: one step late):
// a NaN loss at step 3 stops the run at step 4, whose update is skipped.
BOOST_AUTO_TEST_CASE(terminate_on_nan_stops_a_step_late_without_waiting_for_the_gpu) {
  int calls = 0;
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(
      model, sgd,
      [&calls](const at::Tensor& output, const at::Tensor& target) {
        auto loss = cross_entropy(output, target);
        if (calls++ == 3) loss = loss * std::numeric_limits<double>::quiet_NaN();
        return loss;
      },
      TrainerOptions().device(kGpu).max_epochs(1).use_registered_subscriptions(false));
  auto nan = std::make_shared<TerminateOnNaN>();
  trainer.add(nan);
  trainer.fit(make_batches(16, 8));
  BOOST_TEST(nan->triggered());
  BOOST_TEST(nan->reason().find("at step 3 (0-based)") != std::string::npos, nan->reason());
  BOOST_TEST(trainer.state().step <= 6);  // read within a few steps, not at the epoch's end
}

#ifdef TORCHBUS_HAS_CUDA_HEADERS
// The default callbacks make no host sync between steps 5 and 40: c10's sync-debug mode, set to
// error there, throws at the first synchronizing call (item(), a blocking copy, a stream sync).
BOOST_AUTO_TEST_CASE(the_default_callbacks_make_no_host_sync_per_step) {
  const auto dir = scratch("cuda_test", "no_sync");
  DeviceRun run(kGpu, TrainerOptions().max_epochs(1));
  add_default_callbacks(run.trainer,
                        DefaultCallbacksOptions().run_dir(dir.string()).log_every(1000));
  run.trainer.on(Event::StepStart, [](State& state) {
    if (state.step == 5) {
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    }
  });
  run.trainer.on(Event::StepEnd, [](State& state) {
    if (state.step == 40) {
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    }
  });
  auto batches = make_batches(48, 16);
  for (auto& batch : batches) {  // as a loader with pin_memory gives them
    batch.data = batch.data.pin_memory();
    batch.target = batch.target.pin_memory();
  }
  BOOST_CHECK_NO_THROW(run.trainer.fit(batches));
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  BOOST_TEST(run.trainer.state().step == 48);
}
#endif

#ifdef TORCHBUS_TRAIN_PATH
// torchbus-train --device cuda on its built-in data, killed with SIGKILL mid-run, resumed: the
// same final parameters (params_sha256) as a run that was never interrupted.
BOOST_AUTO_TEST_CASE(torchbus_train_on_cuda_killed_mid_run_resumes_bit_exact) {
  // 5,120 steps: the kill after step 200 lands mid-run however fast the GPU.
  const auto flags = std::string(" --device cuda --epochs 40 --checkpoint-every 40 --no-progress ");
  const auto whole = scratch("cuda_test", "train_whole");
  const auto reference = run_train(flags + "--out " + whole.string());
  BOOST_TEST_REQUIRE(reference.status == 0, reference.output);
  BOOST_TEST(has(reference.output, "device: cuda:0"), reference.output);
  const auto killed = scratch("cuda_test", "train_killed");
  const pid_t pid = fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    const auto log = (killed / "console.txt").string();
    execl("/bin/sh", "sh", "-c",
          (std::string("exec ") + TORCHBUS_TRAIN_PATH + flags + "--out " + killed.string() + " > " +
           log + " 2>&1")
              .c_str(),
          nullptr);
    _exit(127);
  }
  // Killed once the checkpoint of step 200 is written.
  BOOST_TEST_REQUIRE(wait_until_written(killed / "train.log", "step 200 epoch"));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  BOOST_TEST_REQUIRE(WIFSIGNALED(status));
  const auto resumed = run_train(flags + "--resume --out " + killed.string());
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  BOOST_TEST(has(resumed.output, "resumed from"), resumed.output);
  BOOST_TEST(json_string(read_text(killed / "summary.json"), "params_sha256") ==
             json_string(read_text(whole / "summary.json"), "params_sha256"));
  BOOST_TEST(json_string(read_text(killed / "summary.json"), "device") == "cuda:0");
}
#endif

BOOST_AUTO_TEST_SUITE_END()
