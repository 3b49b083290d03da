// LRFinder: the swept learning rates against the formula, the restore of weights, optimizer state
// and options bit for bit, the stop on divergence, the suggestion on a known problem and against a
// hand computation, the CSV read back (also by read_csv, and its errors), bad options.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/lr_finder.hpp>
#include <torchbus/optimizer_state.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A model with buffers (batch norm) trained by Adam, whose state the sweep must not disturb.
struct AdamRun {
  torch::nn::Sequential model = [] {
    torch::manual_seed(3);
    return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                 torch::nn::ReLU(), torch::nn::Linear(8, 3));
  }();
  torch::optim::Adam optimizer{model->parameters(), torch::optim::AdamOptions(0.01)};
  Trainer trainer{model, optimizer, cross_entropy,
                  TrainerOptions().max_epochs(1).use_registered_subscriptions(false)};
};

/// Clones of the model's parameters, then its buffers.
std::vector<at::Tensor> weights_of(torch::nn::Module& model) {
  std::vector<at::Tensor> copies;
  for (const auto& tensor : model.parameters()) copies.push_back(tensor.detach().clone());
  for (const auto& tensor : model.buffers()) copies.push_back(tensor.detach().clone());
  return copies;
}

/// Adam's state per parameter: step (as a tensor), exp_avg, exp_avg_sq; empty when it has none.
std::vector<at::Tensor> adam_state(torch::optim::Adam& optimizer) {
  std::vector<at::Tensor> tensors;
  for (const auto& parameter : optimizer.param_groups()[0].params()) {
    const auto* found = torchbus::optimizer_state_of(optimizer, parameter);
    if (found == nullptr) continue;
    const auto& state = static_cast<const torch::optim::AdamParamState&>(*found);
    tensors.push_back(torch::tensor(state.step()));
    tensors.push_back(state.exp_avg().clone());
    tensors.push_back(state.exp_avg_sq().clone());
  }
  return tensors;
}

/// A sweep that never diverges, with few enough points to check one by one.
LRFinderOptions short_sweep(LRSweepMode mode) {
  return LRFinderOptions()
      .min_lr(1e-5)
      .max_lr(1e-2)
      .num_steps(12)
      .mode(mode)
      .divergence_threshold(std::nullopt)
      .skip_begin(2);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lr_finder)

BOOST_AUTO_TEST_CASE(the_swept_learning_rates_follow_the_formula_and_win_over_schedulers) {
  for (const auto mode : {LRSweepMode::Exponential, LRSweepMode::Linear}) {
    Run run;  // one epoch of 5 batches: the sweep needs three fits for its 12 steps
    run.trainer.on(Event::StepStart, [](State& state) {  // a scheduler the sweep overrides
      state.optimizer->param_groups()[0].options().set_lr(123.0);
    });
    std::vector<double> used;
    run.trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
      used.push_back(state.optimizer->param_groups()[0].options().get_lr());
    });
    const auto options = short_sweep(mode);
    const auto result = find_learning_rate(run.trainer, make_batches(5, 8), options);

    BOOST_TEST_REQUIRE(result.lrs.size() == 12u);
    BOOST_TEST(result.lrs == used, boost::test_tools::per_element());
    BOOST_TEST(result.lrs.front() == 1e-5);
    BOOST_TEST(result.lrs.back() == 1e-2);
    for (std::size_t i = 0; i < result.lrs.size(); ++i) {
      const double fraction = static_cast<double>(i) / 11.0;
      const double expected = mode == LRSweepMode::Linear ? 1e-5 + (1e-2 - 1e-5) * fraction
                                                          : 1e-5 * std::pow(1e-2 / 1e-5, fraction);
      if (i + 1 < result.lrs.size()) BOOST_TEST(result.lrs[i] == expected);
      BOOST_TEST(result.lrs[i] == sweep_learning_rate(options, static_cast<std::int64_t>(i)));
    }
    if (mode == LRSweepMode::Exponential) {  // equal ratios: 1000^(1/11)
      for (std::size_t i = 1; i < result.lrs.size(); ++i) {
        BOOST_TEST(result.lrs[i] / result.lrs[i - 1] == std::pow(1000.0, 1.0 / 11.0),
                   boost::test_tools::tolerance(1e-12));
      }
    }
    BOOST_TEST(!result.diverged);
    BOOST_TEST(has(run.trainer.state().stop_reason(), "LRFinder: 12 steps done"));
  }
}

BOOST_AUTO_TEST_CASE(losses_are_the_steps_losses_and_smoothed_as_documented) {
  Run run(TrainerOptions().max_epochs(-1).max_steps(100));
  std::vector<double> step_losses;
  run.trainer.on(Event::StepEnd, [&](State& state) {
    step_losses.push_back(state.tensors.get("step_loss").item<double>());
  });
  const auto result = find_learning_rate(run.trainer, make_batches(5, 8),
                                         short_sweep(LRSweepMode::Exponential).smoothing(0.3));
  BOOST_TEST(result.losses == step_losses, boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(result.smoothed_losses.size() == step_losses.size());
  double smoothed = step_losses[0];
  for (std::size_t i = 0; i < step_losses.size(); ++i) {
    if (i > 0) smoothed = 0.3 * step_losses[i] + 0.7 * smoothed;
    BOOST_TEST(result.smoothed_losses[i] == smoothed, boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(weights_optimizer_state_and_options_are_restored_bit_for_bit) {
  AdamRun run;
  const auto data = make_batches(6, 8);
  run.trainer.fit(data);  // Adam has state now, batch norm running statistics moved
  run.model->eval();
  const auto weights = weights_of(*run.model);
  const auto state = adam_state(run.optimizer);
  BOOST_TEST_REQUIRE(state.size() == 3 * run.model->parameters().size());
  const auto& options =
      static_cast<torch::optim::AdamOptions&>(run.optimizer.param_groups()[0].options());
  const auto betas = options.betas();

  const auto result =
      find_learning_rate(run.trainer, data, LRFinderOptions().num_steps(30).max_lr(1.0));
  BOOST_TEST(result.lrs.size() >= 2u);

  BOOST_TEST(all_equal(weights_of(*run.model), weights));
  BOOST_TEST(all_equal(adam_state(run.optimizer), state));
  const auto& restored =
      static_cast<torch::optim::AdamOptions&>(run.optimizer.param_groups()[0].options());
  BOOST_TEST(restored.lr() == 0.01);
  BOOST_TEST(std::get<0>(restored.betas()) == std::get<0>(betas));
  BOOST_TEST(!run.model->is_training());

  // Training on continues exactly as without the sweep, and the sweep's subscriptions are gone.
  AdamRun reference;
  reference.trainer.fit(data);
  std::vector<double> lrs;
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& s) {
    lrs.push_back(s.optimizer->param_groups()[0].options().get_lr());
  });
  run.trainer.fit(data);
  reference.trainer.fit(data);
  BOOST_TEST(all_equal(weights_of(*run.model), weights_of(*reference.model)));
  BOOST_TEST(lrs == std::vector<double>(6, 0.01), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_fresh_optimizer_has_no_state_after_the_sweep) {
  AdamRun run;
  const auto weights = weights_of(*run.model);
  find_learning_rate(run.trainer, make_batches(6, 8), LRFinderOptions().num_steps(8));
  BOOST_TEST(run.optimizer.state().empty());
  BOOST_TEST(all_equal(weights_of(*run.model), weights));
  BOOST_TEST(run.model->is_training());
}

BOOST_AUTO_TEST_CASE(an_exception_restores_and_disconnects_before_it_is_rethrown) {
  Run run(TrainerOptions().max_epochs(3));
  const auto weights = weights_of(*run.model);
  const auto data = make_batches(5, 8);
  auto failing = run.trainer.on(Event::StepEnd, [](State& state) {
    if (state.step == 4) throw std::runtime_error("boom");
  });
  BOOST_TEST(has(message_of<std::runtime_error>(
                     [&] { find_learning_rate(run.trainer, data, LRFinderOptions()); }),
                 "boom"));
  failing.disconnect();
  BOOST_TEST(all_equal(weights_of(*run.model), weights));
  std::vector<double> lrs;
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& s) {
    lrs.push_back(s.optimizer->param_groups()[0].options().get_lr());
  });
  run.trainer.fit(data);
  BOOST_TEST(lrs == std::vector<double>(15, 0.1), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_sweep_stops_when_the_loss_diverges) {
  Run run(TrainerOptions().max_epochs(-1).max_steps(1000));
  const auto weights = weights_of(*run.model);
  const auto result = find_learning_rate(run.trainer, make_batches(5, 8),
                                         LRFinderOptions().min_lr(1e-3).max_lr(1e12));
  BOOST_TEST(result.diverged);
  BOOST_TEST_REQUIRE(!result.lrs.empty());
  BOOST_TEST(result.lrs.size() < 100u);
  const double last = result.smoothed_losses.back();
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i + 1 < result.smoothed_losses.size(); ++i) {
    best = std::min(best, result.smoothed_losses[i]);
    BOOST_TEST(result.smoothed_losses[i] <= 4.0 * best, "diverged earlier, at point " << i);
  }
  BOOST_TEST((!std::isfinite(last) || last > 4.0 * std::min(best, last)));
  BOOST_TEST(has(run.trainer.state().stop_reason(), "LRFinder: the loss diverged"));
  BOOST_TEST(all_equal(weights_of(*run.model), weights));
}

BOOST_AUTO_TEST_CASE(the_suggestion_for_a_linear_regression_lies_in_a_sensible_range) {
  // y = x w + noise with standard normal x: plain SGD on the mean squared error converges for
  // lr below 2 / (2 * largest eigenvalue of E[x x^T]) = 1 and diverges above it.
  torch::manual_seed(11);
  const auto w = torch::randn({4, 1});
  std::vector<Batch> data;
  for (int i = 0; i < 40; ++i) {
    const auto x = torch::randn({32, 4});
    data.emplace_back(x, x.mm(w) + 0.01 * torch::randn({32, 1}));
  }
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(
      model, optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::mse_loss(output, target);
      },
      TrainerOptions().max_epochs(1).use_registered_subscriptions(false));
  const auto result = find_learning_rate(trainer, data, LRFinderOptions().min_lr(1e-5));
  BOOST_TEST_MESSAGE("suggested lr " << result.suggestion.value_or(-1.0) << " after "
                                     << result.lrs.size() << " steps");
  BOOST_TEST(result.diverged);  // max_lr 10 is far past 1
  BOOST_TEST_REQUIRE(result.suggestion.has_value());
  BOOST_TEST(*result.suggestion >= 1e-3);
  BOOST_TEST(*result.suggestion <= 1.0);
  BOOST_TEST((result.suggestion_index ==
              steepest_descent_index(result.lrs, result.smoothed_losses, 10, 1)));
  BOOST_TEST(*result.suggestion == result.lrs[*result.suggestion_index]);
}

BOOST_AUTO_TEST_CASE(steepest_descent_against_a_hand_computation) {
  // Kept after skip_begin 1, skip_end 1 and the NaN: x = log10(lr) = -3, -2, -1, 1 with losses
  // 4, 3.9, 2.0, 1.8. numpy.gradient: -0.1 (one-sided), (2.0 - 4) / 2 = -1.0, with spacings 1
  // and 2: -2/3 * 3.9 + 1/2 * 2.0 + 1/6 * 1.8 = -1.3, and (1.8 - 2.0) / 2 = -0.1 (one-sided).
  // The steepest is lr 0.1, index 4 (a plain central difference would give -0.7 there and pick
  // lr 0.01). The first and last points would be steeper but are skipped.
  const std::vector<double> lrs = {1e-4, 1e-3, 1e-2, 3e-2, 1e-1, 10, 100};
  const std::vector<double> losses = {9, 4, 3.9, std::nan(""), 2.0, 1.8, -50};
  BOOST_TEST(steepest_descent_index(lrs, losses, 1, 1).value_or(99) == 4u);
  // Without skipping, the last point's one-sided (-50 - 1.8) / 1 = -51.8 is the steepest.
  BOOST_TEST(steepest_descent_index(lrs, losses, 0, 0).value_or(99) == 6u);
  // Evenly spaced (an exponential sweep): central differences (y[i+1] - y[i-1]) / 2.
  const std::vector<double> even_lrs = {1e-3, 1e-2, 1e-1, 1, 10};
  // Gradients -0.1, -0.5, -1.95, -1.0, 1.0.
  BOOST_TEST(steepest_descent_index(even_lrs, {5, 4.9, 4, 1, 2}, 0, 0).value_or(99) == 2u);
  // Fewer than two points left: no suggestion.
  BOOST_TEST(!steepest_descent_index(even_lrs, {5, 4.9, 4, 1, 2}, 2, 2).has_value());
  BOOST_TEST(!steepest_descent_index({}, {}, 0, 0).has_value());
  BOOST_TEST(!steepest_descent_index(even_lrs, {5, 4.9, 4, 1, 2}, 10, 1).has_value());
  // Bad input.
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   steepest_descent_index(lrs, {1, 2}, 0, 0);
                 }),
                 "7 learning rates but 2 losses"));
  BOOST_TEST(has(message_of<ConfigError>([] {
                   steepest_descent_index({1, 0.5}, {1, 2}, 0, 0);
                 }),
                 "must increase"));
}

BOOST_AUTO_TEST_CASE(the_csv_reads_back_as_the_result) {
  const TempDir dir("lr_finder");
  Run run;
  const auto result =
      find_learning_rate(run.trainer, make_batches(5, 8), short_sweep(LRSweepMode::Exponential));
  const auto path = dir.path / "lr_finder.csv";
  result.write_csv(path);
  std::istringstream lines(read_text(path));
  std::string line;
  std::getline(lines, line);
  BOOST_TEST(line == "step,lr,loss,smoothed_loss");
  std::size_t rows = 0;
  while (std::getline(lines, line)) {
    std::istringstream cells(line);
    std::string step, lr, loss, smoothed;
    std::getline(cells, step, ',');
    std::getline(cells, lr, ',');
    std::getline(cells, loss, ',');
    std::getline(cells, smoothed, ',');
    BOOST_TEST_REQUIRE(rows < result.lrs.size());
    BOOST_TEST(std::stoul(step) == rows);
    BOOST_TEST(std::stod(lr) == result.lrs[rows]);  // 17 digits: the same double
    BOOST_TEST(std::stod(loss) == result.losses[rows]);
    BOOST_TEST(std::stod(smoothed) == result.smoothed_losses[rows]);
    ++rows;
  }
  BOOST_TEST(rows == result.lrs.size());

  // read_csv gives the result back, the suggestion decided again under the same options.
  const auto options = short_sweep(LRSweepMode::Exponential);
  const auto back = LRFinderResult::read_csv(path, options);
  BOOST_TEST(back.lrs == result.lrs, boost::test_tools::per_element());
  BOOST_TEST(back.losses == result.losses, boost::test_tools::per_element());
  BOOST_TEST(back.smoothed_losses == result.smoothed_losses, boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(result.suggestion.has_value());
  BOOST_TEST((back.suggestion_index == result.suggestion_index));
  BOOST_TEST((back.suggestion == result.suggestion));
  BOOST_TEST(!back.diverged);
  // Under other skips the suggestion is that of steepest_descent_index with them.
  const auto skipped = LRFinderResult::read_csv(path, LRFinderOptions(options).skip_begin(6));
  BOOST_TEST((skipped.suggestion_index ==
              steepest_descent_index(result.lrs, result.smoothed_losses, 6, 1)));
}

BOOST_AUTO_TEST_CASE(a_diverged_sweep_reads_back_as_diverged) {
  const TempDir dir("lr_finder");
  Run run(TrainerOptions().max_epochs(-1).max_steps(1000));
  const auto result = find_learning_rate(run.trainer, make_batches(5, 8),
                                         LRFinderOptions().min_lr(1e-3).max_lr(1e12));
  BOOST_TEST_REQUIRE(result.diverged);
  const auto path = dir.path / "lr_finder.csv";
  result.write_csv(path);
  const auto back = LRFinderResult::read_csv(path, LRFinderOptions().min_lr(1e-3).max_lr(1e12));
  BOOST_TEST(back.diverged);
  BOOST_TEST(back.lrs == result.lrs, boost::test_tools::per_element());
  BOOST_TEST((back.suggestion == result.suggestion));
  // Without a threshold only a non-finite smoothed loss diverges.
  const auto last = result.smoothed_losses.back();
  BOOST_TEST(LRFinderResult::read_csv(path, LRFinderOptions().divergence_threshold(std::nullopt))
                 .diverged == !std::isfinite(last));
}

BOOST_AUTO_TEST_CASE(a_file_that_is_not_the_table_is_an_error_naming_file_and_line) {
  const TempDir dir("lr_finder");
  const auto path = dir.path / "lr_finder.csv";
  const auto error_of = [&](const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
    return message_of<Error>([&] { LRFinderResult::read_csv(path); });
  };
  const std::string header = "step,lr,loss,smoothed_loss\n";
  const std::string row0 = "0,1e-07,2.5,2.5\n";
  BOOST_TEST(
      has(message_of<Error>([&] { LRFinderResult::read_csv(dir.path / "none.csv"); }),
          "cannot open '" + (dir.path / "none.csv").string() + "': No such file or directory"));
  BOOST_TEST(has(error_of("lr,loss\n"), path.string() + " line 1: the header is 'lr,loss'"));
  BOOST_TEST(has(error_of(""), "line 1: the header is ''"));
  BOOST_TEST(
      has(error_of(header + row0 + "2,1e-06,2.4,2.4\n"), "line 3: step 2 where step 1 belongs"));
  BOOST_TEST(has(error_of(header + row0 + "1,1e-08,2.4,2.4\n"),
                 "line 3: lr 1e-08 is not finite, > 0 and above the row before"));
  BOOST_TEST(has(error_of(header + "0,-1,2.5,2.5\n"), "line 2: lr -1 is not finite"));
  BOOST_TEST(
      has(error_of(header + "0,1e-07,abc,2.5\n"), "line 2: '0,1e-07,abc,2.5' is not 4 numbers"));
  BOOST_TEST(has(error_of(header + "0,0x1p-20,2.5,2.5\n"), "is not 4 numbers"));
  BOOST_TEST(has(error_of(header + "0,1e-07,2.5\n"), "line 2: '0,1e-07,2.5' is not 4 cells"));
  BOOST_TEST(has(error_of(header + "0,1e-07,2.5,2.5,\n"), "is not 4 cells"));
  BOOST_TEST(has(error_of(header + row0 + "\n"), "line 3: '' is not 4 cells"));
  // The sweep stops at its first diverged point: a row after it is not of a sweep.
  BOOST_TEST(has(error_of(header + "0,1e-07,nan,nan\n1,1e-06,2.4,2.4\n"),
                 "line 3: a row after the sweep diverged"));
  BOOST_TEST(has(error_of("x\n"), "(expected the table write_csv writes: step,lr,loss,"));
  // What write_csv writes for a diverged point reads back.
  std::ofstream(path, std::ios::binary) << header << row0 << "1,1e-06,inf,inf\n";
  const auto back = LRFinderResult::read_csv(path);
  BOOST_TEST(back.diverged);
  BOOST_TEST(back.lrs.size() == 2u);
  BOOST_TEST(!back.suggestion.has_value());  // too few points after skip_begin 10
}

BOOST_AUTO_TEST_CASE(invalid_options_are_config_errors) {
  const auto error = [](const LRFinderOptions& options) {
    return message_of<ConfigError>([&] { options.validate(); });
  };
  BOOST_TEST(has(error(LRFinderOptions().min_lr(0)), "min_lr must be finite and > 0, got 0"));
  BOOST_TEST(has(error(LRFinderOptions().max_lr(1e-8)), "max_lr must be finite and > min_lr"));
  BOOST_TEST(has(error(LRFinderOptions().num_steps(1)), "num_steps must be >= 2, got 1"));
  BOOST_TEST(has(error(LRFinderOptions().smoothing(0)), "smoothing must be in (0, 1]"));
  BOOST_TEST(
      has(error(LRFinderOptions().divergence_threshold(1.0)), "divergence_threshold must be > 1"));
  BOOST_TEST(has(error(LRFinderOptions().skip_end(-1)), "skip_begin and skip_end must be >= 0"));
  Run run;
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   find_learning_rate(run.trainer, make_batches(2, 4),
                                      LRFinderOptions().min_lr(-1));
                 }),
                 "min_lr"));
}

BOOST_AUTO_TEST_SUITE_END()
