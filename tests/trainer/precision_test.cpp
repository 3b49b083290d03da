// Precision: bfloat16 autocast around every step function, float16 refused on the CPU before
// training, and the LossScaler's arithmetic (PyTorch GradScaler's rules).

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/bf16_support.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>
#include <support/scratch.hpp>
#include <torchbus/torchbus.hpp>

#include "interop/libtorch_compat.hpp"  // autocast's state, whatever the LibTorch version
#include "loop/autocast_scope.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// What a step function saw: whether autocast was on and the model output's dtype.
struct SeenByStep {
  bool autocast = false;
  at::ScalarType output = at::kFloat;
};

/// Trains 4 batches and validates on 2, with custom train and eval steps recording what they saw.
std::pair<std::vector<SeenByStep>, std::vector<SeenByStep>> steps_seen(Precision precision) {
  Run run(TrainerOptions().precision(precision));
  std::vector<SeenByStep> train, eval;
  const auto record = [](std::vector<SeenByStep>& into) {
    return [&into](Trainer& trainer, Batch& batch) {
      const auto output = trainer.forward(batch.data);
      into.push_back(
          {torchbus::detail::autocast_enabled(c10::DeviceType::CPU), output.scalar_type()});
      return cross_entropy(output, batch.target);
    };
  };
  run.trainer.set_train_step(record(train));
  run.trainer.set_eval_step(record(eval));
  run.trainer.fit(make_batches(4, 8), make_batches(2, 8));
  return {train, eval};
}

/// Accuracy on `batches` of a model trained 3 epochs on them under `precision`.
double trained_accuracy(Precision precision, const std::vector<Batch>& batches) {
  torch::manual_seed(1);
  torch::nn::Sequential model(torch::nn::Linear(16, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 4));
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  Trainer trainer(
      model, optimizer, cross_entropy,
      TrainerOptions().max_epochs(3).precision(precision).use_registered_subscriptions(false));
  trainer.fit(batches);
  torch::NoGradGuard no_grad;
  std::int64_t correct = 0, total = 0;
  for (const auto& batch : batches) {
    correct += model->forward(batch.data).argmax(1).eq(batch.target).sum().item<std::int64_t>();
    total += batch.target.size(0);
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(total);
}

/// A learnable problem: the class is the argmax of the first 4 of 16 features.
std::vector<Batch> learnable_batches() {
  torch::manual_seed(3);
  std::vector<Batch> batches;
  for (int i = 0; i < 40; ++i) {
    auto data = torch::randn({32, 16});
    auto target = data.narrow(1, 0, 4).argmax(1);
    batches.emplace_back(data, target);
  }
  return batches;
}

/// Whether the kernel lists all of `flags` among the CPU's flags in /proc/cpuinfo.
bool cpuinfo_lists(const std::vector<std::string>& flags) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  BOOST_TEST_REQUIRE(cpuinfo.good(), "cannot read /proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    const std::set<std::string> listed{std::istream_iterator<std::string>(words), {}};
    return std::all_of(flags.begin(), flags.end(),
                       [&](const std::string& flag) { return listed.count(flag) == 1; });
  }
  BOOST_FAIL("/proc/cpuinfo has no flags line");
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(precision)

BOOST_AUTO_TEST_CASE(names_round_trip_and_unknown_ones_are_refused) {
  for (const auto p : {Precision::Float32, Precision::BF16Mixed, Precision::FP16Mixed}) {
    BOOST_TEST(parse_precision(to_string(p)) == p);
  }
  BOOST_TEST(to_string(Precision::BF16Mixed) == "bf16-mixed");
  try {
    parse_precision("bf16");
    BOOST_FAIL("expected ConfigError");
  } catch (const ConfigError& error) {
    BOOST_TEST(std::string(error.what())
                   .find("unknown precision 'bf16'; expected 32, bf16-mixed or 16-mixed") !=
               std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(bf16_autocasts_custom_train_and_eval_steps_and_restores_the_thread,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       return bf16_supported();
                     })) {
  const auto [train, eval] = steps_seen(Precision::BF16Mixed);
  BOOST_TEST_REQUIRE(train.size() == 4u);
  BOOST_TEST_REQUIRE(eval.size() == 2u);
  for (const auto& seen : train) {
    BOOST_TEST(seen.autocast);
    BOOST_TEST(seen.output == at::kBFloat16);
  }
  for (const auto& seen : eval) {
    BOOST_TEST(seen.autocast);
    BOOST_TEST(seen.output == at::kBFloat16);
  }
  BOOST_TEST(!torchbus::detail::autocast_enabled(c10::DeviceType::CPU));  // off again after fit()
}

// LibTorch 2.4+ deprecated the per-device autocast functions LibTorch 1.13 has, and each call of
// one prints a warning: on LibTorch 2.11 six per mixed-precision step. The scope uses the API of
// the version it is built against (libtorch_compat.cpp) and prints nothing.
BOOST_AUTO_TEST_CASE(an_autocast_scope_turns_autocast_on_and_back_off_without_a_warning) {
  const auto output = scratch("precision", "autocast_stderr") / "stderr.txt";
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  const int file = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BOOST_TEST_REQUIRE(file >= 0);
  dup2(file, STDERR_FILENO);
  close(file);
  bool inside = false, bfloat16 = false;
  for (const auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    const torchbus::detail::AutocastScope scope(Precision::BF16Mixed, device);
    inside = torchbus::detail::autocast_enabled(device);
    bfloat16 = torchbus::detail::autocast_dtype(device) == at::kBFloat16;
    if (!inside || !bfloat16) break;
  }
  const bool after = torchbus::detail::autocast_enabled(c10::DeviceType::CPU) ||
                     torchbus::detail::autocast_enabled(c10::DeviceType::CUDA);
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  BOOST_TEST(inside);
  BOOST_TEST(bfloat16);
  BOOST_TEST(!after);
  BOOST_TEST(read_text(output).empty(), read_text(output));
}

BOOST_AUTO_TEST_CASE(float32_never_autocasts) {
  const auto [train, eval] = steps_seen(Precision::Float32);
  for (const auto& seen : train) {
    BOOST_TEST(!seen.autocast);
    BOOST_TEST(seen.output == at::kFloat);
  }
  BOOST_TEST_REQUIRE(eval.size() == 2u);
  for (const auto& seen : eval) {
    BOOST_TEST(!seen.autocast);
    BOOST_TEST(seen.output == at::kFloat);
  }
}

// Parameters and optimizer state stay float32; the bf16 run differs from the float32 one (the
// forward really ran in bf16) but learns as well: accuracy within 1 point.
BOOST_AUTO_TEST_CASE(bf16_keeps_float32_parameters_and_learns_as_float32_does,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       return bf16_supported();
                     })) {
  const auto batches = learnable_batches();
  const auto float32 = trained_accuracy(Precision::Float32, batches);
  const auto bf16 = trained_accuracy(Precision::BF16Mixed, batches);
  BOOST_TEST_MESSAGE("accuracy float32 " << float32 << " %, bf16-mixed " << bf16 << " %");
  BOOST_TEST(float32 > 80.0);
  BOOST_TEST(std::abs(bf16 - float32) <= 1.0);

  Run a(TrainerOptions().precision(Precision::Float32));
  Run b(TrainerOptions().precision(Precision::BF16Mixed));
  a.trainer.fit(make_batches(3, 8));
  b.trainer.fit(make_batches(3, 8));
  bool differ = false;
  for (std::size_t i = 0; i < a.model->parameters().size(); ++i) {
    BOOST_TEST(b.model->parameters()[i].scalar_type() == at::kFloat);
    BOOST_TEST(b.model->parameters()[i].grad().defined() == false);
    differ = differ || !torch::equal(a.model->parameters()[i], b.model->parameters()[i]);
  }
  BOOST_TEST(differ);
}

// channels_last: every 4-d parameter (also a one-channel weight, which already "is" channels_last
// by its sizes) and every 4-d batch in NHWC strides; the model learns as in NCHW.
BOOST_AUTO_TEST_CASE(channels_last_keeps_weights_and_batches_in_nhwc) {
  const auto fit = [](bool channels_last, std::vector<bool>* nhwc_batches) {
    torch::manual_seed(4);
    // The depthwise convolution's weight is 4x1x3x3: one input channel.
    torch::nn::Sequential model(torch::nn::Conv2d(2, 4, 3), torch::nn::ReLU(),
                                torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 4, 3).groups(4)),
                                torch::nn::Flatten(), torch::nn::Linear(4 * 4 * 4, 3));
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
    Trainer trainer(
        model, optimizer, cross_entropy,
        TrainerOptions().channels_last(channels_last).use_registered_subscriptions(false));
    trainer.set_train_step([nhwc_batches](Trainer& t, Batch& batch) {
      if (nhwc_batches) {
        nhwc_batches->push_back(batch.data.is_contiguous(at::MemoryFormat::ChannelsLast) &&
                                !batch.data.is_contiguous());
      }
      return cross_entropy(t.forward(batch.data), batch.target);
    });
    torch::manual_seed(5);
    std::vector<Batch> batches;
    for (int i = 0; i < 4; ++i) {
      batches.emplace_back(torch::randn({6, 2, 8, 8}), torch::randint(3, {6}, torch::kLong));
    }
    trainer.fit(batches);
    return model;
  };
  std::vector<bool> nhwc;
  const auto nhwc_model = fit(true, &nhwc);
  const auto nchw_model = fit(false, nullptr);
  BOOST_TEST(nhwc == std::vector<bool>(4, true), boost::test_tools::per_element());
  const auto a = nhwc_model->parameters();
  const auto b = nchw_model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST_CONTEXT("parameter " << i) {
      if (a[i].dim() == 4) {
        BOOST_TEST(a[i].stride(1) == 1);  // channels innermost, the one-channel weight too
        BOOST_TEST(b[i].is_contiguous());
      }
      BOOST_TEST(torch::allclose(a[i], b[i], 1e-5, 1e-6));
    }
  }
}

BOOST_AUTO_TEST_CASE(float16_on_the_cpu_is_refused_before_training) {
  Run run(TrainerOptions().precision(Precision::FP16Mixed));
  auto recorder = std::make_shared<RecordingCallback>();
  run.trainer.add(recorder);
  try {
    run.trainer.fit(make_batches(2, 4));
    BOOST_FAIL("expected ConfigError");
  } catch (const ConfigError& error) {
    BOOST_TEST(std::string(error.what())
                   .find("precision 16-mixed (float16 autocast with loss "
                         "scaling) needs a CUDA device, got cpu") != std::string::npos);
  }
  BOOST_TEST(recorder->events.empty());
}

// bf16-mixed runs exactly where the CPU has AVX-512 BW, VL and DQ (as the kernel reports them);
// elsewhere the trainer refuses it before the first event, naming the missing features.
BOOST_AUTO_TEST_CASE(bf16_is_refused_before_training_exactly_where_the_cpu_lacks_avx512) {
  const bool avx512 = cpuinfo_lists({"avx512bw", "avx512vl", "avx512dq"});
  BOOST_TEST(bf16_supported() == avx512);
  if (avx512) return;  // the bf16 tests above run
  BOOST_TEST_MESSAGE("this CPU lacks AVX-512: checking that bf16-mixed is refused");
  Run run(TrainerOptions().precision(Precision::BF16Mixed));
  auto recorder = std::make_shared<RecordingCallback>();
  run.trainer.add(recorder);
  try {
    run.trainer.fit(make_batches(2, 4));
    BOOST_FAIL("expected ConfigError");
  } catch (const ConfigError& error) {
    BOOST_TEST(std::string(error.what()) == kBf16Refusal);
  }
  BOOST_TEST(recorder->events.empty());
}

BOOST_AUTO_TEST_CASE(the_scaler_scales_unscales_and_finds_overflow) {
  LossScaler scaler(LossScalerOptions().init_scale(8.0));
  BOOST_TEST(scaler.scale(torch::tensor(1.5)).item<double>() == 12.0);
  auto a = torch::zeros({2}, torch::requires_grad());
  auto b = torch::zeros({3}, torch::requires_grad());
  auto unused = torch::zeros({1}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({8.0F, -16.0F});
  b.mutable_grad() = torch::tensor({4.0F, 0.0F, 2.0F});
  BOOST_TEST(!scaler.unscale({a, b, unused}));
  BOOST_TEST(torch::equal(a.grad(), torch::tensor({1.0F, -2.0F})));
  BOOST_TEST(torch::equal(b.grad(), torch::tensor({0.5F, 0.0F, 0.25F})));
  BOOST_TEST(!unused.grad().defined());
  b.mutable_grad() = torch::tensor({std::numeric_limits<float>::infinity(), 0.0F, 1.0F});
  BOOST_TEST(scaler.unscale({a, b}));
  b.mutable_grad() = torch::tensor({std::numeric_limits<float>::quiet_NaN(), 0.0F, 1.0F});
  BOOST_TEST(scaler.unscale({a, b}));
}

BOOST_AUTO_TEST_CASE(the_scale_backs_off_on_overflow_and_grows_after_a_run_of_good_steps) {
  LossScaler scaler(LossScalerOptions().init_scale(1024.0).growth_interval(3));
  scaler.update(false);
  scaler.update(false);
  BOOST_TEST(scaler.growth_tracker() == 2);
  scaler.update(true);  // an overflow resets the run of good steps
  BOOST_TEST(scaler.current_scale() == 512.0);
  BOOST_TEST(scaler.growth_tracker() == 0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  BOOST_TEST(scaler.current_scale() == 1024.0);
  BOOST_TEST(scaler.growth_tracker() == 0);

  LossScaler restored(LossScalerOptions().growth_interval(3));
  restored.restore(256.0, 2);
  restored.update(false);
  BOOST_TEST(restored.current_scale() == 512.0);
  BOOST_CHECK_THROW(restored.restore(0.0, 0), CheckpointError);
  BOOST_CHECK_THROW(restored.restore(2.0, 3), CheckpointError);
  BOOST_CHECK_THROW(LossScaler(LossScalerOptions().backoff_factor(1.0)), ConfigError);
  BOOST_CHECK_THROW(LossScaler(LossScalerOptions().growth_interval(0)), ConfigError);
  BOOST_CHECK_THROW(Run(TrainerOptions().loss_scaler(LossScalerOptions().init_scale(-1.0)))
                        .trainer.fit(make_batches(1, 4)),
                    ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()
