// Runs every built-in closed-form schedule and reduce-on-plateau on a real optimizer in a Trainer
// and writes, per optimizer step, the learning rate and the momentum (beta1 for Adam) the step ran
// with, next to the torch.optim.lr_scheduler call that should produce the same values;
// compare_schedules.py recomputes them with PyTorch. Usage: schedule_reference OUT.json

#include <nlohmann/json.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>

#include <fstream>
#include <iostream>

using namespace torchbus;
using namespace torchbus::testing;
using nlohmann::json;

namespace {

/// The momentum of group 0: SGD's momentum or Adam's beta1.
double momentum_of(torch::optim::Optimizer& optimizer) {
  auto& options = optimizer.param_groups()[0].options();
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) return sgd->momentum();
  return std::get<0>(dynamic_cast<torch::optim::AdamOptions&>(options).betas());
}

/// A case: what torchbus ran (lr and momentum per step) and the PyTorch scheduler to compare with.
json run_case(const std::string& name, const std::string& optimizer_kind, double base_lr,
              std::int64_t steps, std::shared_ptr<LearningRateScheduler> scheduler,
              const json& torch_scheduler, const std::vector<double>& metrics = {}) {
  auto model = make_model();
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (optimizer_kind == "sgd") {
    optimizer = std::make_unique<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(base_lr).momentum(0.9));
  } else {
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(),
                                                     torch::optim::AdamOptions(base_lr));
  }
  // With metrics: one step per epoch, the i-th metric recorded at the i-th validation.
  const bool plateau = !metrics.empty();
  Trainer trainer(model, *optimizer, cross_entropy,
                  TrainerOptions()
                      .max_epochs(plateau ? static_cast<std::int64_t>(metrics.size()) : 1)
                      .use_registered_subscriptions(false));
  json lrs = json::array(), momenta = json::array();
  trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    lrs.push_back(state.optimizer->param_groups()[0].options().get_lr());
    momenta.push_back(momentum_of(*state.optimizer));
  });
  std::size_t next = 0;
  trainer.on(
      Event::EvalEnd, [&](State& state) { state.record_metric("score", metrics.at(next++)); },
      with_role(Role::Metrics));
  trainer.add(std::move(scheduler));
  auto train = make_batches(plateau ? 1 : static_cast<int>(steps), 2);
  if (plateau) {
    auto validation = make_batches(1, 2);
    trainer.fit(train, validation);
  } else {
    trainer.fit(train);
  }
  return json{
      {"name", name},        {"optimizer", optimizer_kind}, {"base_lr", base_lr},      {"lr", lrs},
      {"momentum", momenta}, {"metrics", metrics},          {"torch", torch_scheduler}};
}

json torch_scheduler(const std::string& kind, json kwargs) {
  return json{{"class", kind}, {"kwargs", std::move(kwargs)}};
}

std::shared_ptr<LearningRateScheduler> scheduler(LrSchedule schedule) {
  return std::make_shared<LearningRateScheduler>(std::move(schedule));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: schedule_reference OUT.json\n";
    return 2;
  }
  json cases = json::array();
  const auto add = [&](json result) { cases.push_back(std::move(result)); };

  add(run_case("step_decay", "sgd", 0.1, 12, scheduler(StepDecayOptions(3).gamma(0.5)),
               torch_scheduler("StepLR", {{"step_size", 3}, {"gamma", 0.5}})));
  add(run_case("multi_step_decay", "sgd", 0.1, 12,
               scheduler(MultiStepDecayOptions({2, 5, 5, 9}).gamma(0.3)),
               torch_scheduler("MultiStepLR", {{"milestones", {2, 5, 5, 9}}, {"gamma", 0.3}})));
  add(run_case("exponential_decay", "sgd", 0.1, 15, scheduler(ExponentialDecayOptions(0.9)),
               torch_scheduler("ExponentialLR", {{"gamma", 0.9}})));
  add(run_case("cosine_decay", "sgd", 0.1, 11, scheduler(CosineDecayOptions(10).min_lr(0.001)),
               torch_scheduler("CosineAnnealingLR", {{"T_max", 10}, {"eta_min", 0.001}})));
  add(run_case(
      "cosine_decay_with_warmup", "sgd", 0.1, 11,
      scheduler(CosineDecayOptions(10).warmup_steps(3).warmup_start_factor(0.1)),
      json{{"class", "SequentialLR"},
           {"schedulers",
            {torch_scheduler("LinearLR",
                             {{"start_factor", 0.1}, {"end_factor", 1.0}, {"total_iters", 3}}),
             torch_scheduler("CosineAnnealingLR", {{"T_max", 7}, {"eta_min", 0.0}})}},
           {"milestones", {3}}}));
  add(run_case("cosine_restarts", "sgd", 0.1, 25,
               scheduler(CosineRestartsOptions(3).period_mult(2).min_lr(0.01)),
               torch_scheduler("CosineAnnealingWarmRestarts",
                               {{"T_0", 3}, {"T_mult", 2}, {"eta_min", 0.01}})));
  add(run_case("cosine_restarts_constant_period", "sgd", 0.1, 10,
               scheduler(CosineRestartsOptions(4)),
               torch_scheduler("CosineAnnealingWarmRestarts", {{"T_0", 4}})));
  add(run_case("polynomial_decay", "sgd", 0.1, 9, scheduler(PolynomialDecayOptions(6).power(2.0)),
               torch_scheduler("PolynomialLR", {{"total_iters", 6}, {"power", 2.0}})));
  add(run_case(
      "linear_factor", "sgd", 0.1, 7,
      scheduler(LinearFactorOptions(4).start_factor(0.25).end_factor(0.75)),
      torch_scheduler("LinearLR",
                      {{"start_factor", 0.25}, {"end_factor", 0.75}, {"total_iters", 4}})));
  add(run_case("linear_warmup", "sgd", 0.1, 7, scheduler(LinearWarmupOptions(4).start_factor(0.25)),
               torch_scheduler("LinearLR",
                               {{"start_factor", 0.25}, {"end_factor", 1.0}, {"total_iters", 4}})));
  add(run_case("constant_factor", "sgd", 0.1, 6, scheduler(ConstantFactorOptions(3).factor(0.5)),
               torch_scheduler("ConstantLR", {{"factor", 0.5}, {"total_iters", 3}})));
  add(run_case("one_cycle_sgd", "sgd", 0.1, 20, scheduler(OneCycleOptions(20)),
               torch_scheduler("OneCycleLR", {{"max_lr", 0.1}, {"total_steps", 20}})));
  add(run_case("one_cycle_adam", "adam", 0.01, 16,
               scheduler(OneCycleOptions(16).pct_start(0.25).div_factor(10).final_div_factor(100)),
               torch_scheduler("OneCycleLR", {{"max_lr", 0.01},
                                              {"total_steps", 16},
                                              {"pct_start", 0.25},
                                              {"div_factor", 10.0},
                                              {"final_div_factor", 100.0}})));
  add(run_case(
      "cyclic_triangular", "sgd", 0.01, 14, scheduler(CyclicOptions(0.1, 3)),
      torch_scheduler("CyclicLR", {{"base_lr", 0.01}, {"max_lr", 0.1}, {"step_size_up", 3}})));
  add(run_case("cyclic_triangular2", "sgd", 0.01, 20,
               scheduler(CyclicOptions(0.1, 2).step_size_down(4).mode(CyclicMode::Triangular2)),
               torch_scheduler("CyclicLR", {{"base_lr", 0.01},
                                            {"max_lr", 0.1},
                                            {"step_size_up", 2},
                                            {"step_size_down", 4},
                                            {"mode", "triangular2"}})));
  add(run_case("cyclic_exp_range", "sgd", 0.01, 16,
               scheduler(CyclicOptions(0.1, 4).mode(CyclicMode::ExpRange).gamma(0.9)),
               torch_scheduler("CyclicLR", {{"base_lr", 0.01},
                                            {"max_lr", 0.1},
                                            {"step_size_up", 4},
                                            {"mode", "exp_range"},
                                            {"gamma", 0.9}})));
  add(run_case(
      "sequential", "sgd", 0.1, 12,
      scheduler(SequentialOptions({ConstantFactorOptions(2).factor(0.5),
                                   ExponentialDecayOptions(0.8), MultiStepDecayOptions({2})},
                                  {3, 7})),
      json{{"class", "SequentialLR"},
           {"schedulers",
            {torch_scheduler("ConstantLR", {{"factor", 0.5}, {"total_iters", 2}}),
             torch_scheduler("ExponentialLR", {{"gamma", 0.8}}),
             torch_scheduler("MultiStepLR", {{"milestones", {2}}, {"gamma", 0.1}})}},
           {"milestones", {3, 7}}}));

  // Reduce-on-plateau: one check per epoch (PyTorch: scheduler.step(metric) after each epoch).
  add(run_case("plateau_eps", "sgd", 1e-6, 6,
               std::make_shared<LearningRateScheduler>(
                   ReduceOnPlateauOptions().monitor("score").patience(0).factor(0.1)),
               torch_scheduler("ReduceLROnPlateau", {{"mode", "min"},
                                                     {"patience", 0},
                                                     {"factor", 0.1},
                                                     {"threshold", 0.0},
                                                     {"threshold_mode", "abs"}}),
               {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}));
  add(run_case(
      "plateau_cooldown_min_lr", "sgd", 0.1, 12,
      std::make_shared<LearningRateScheduler>(
          ReduceOnPlateauOptions().monitor("score").patience(1).factor(0.5).cooldown(1).min_lr(
              0.02)),
      torch_scheduler("ReduceLROnPlateau", {{"mode", "min"},
                                            {"patience", 1},
                                            {"factor", 0.5},
                                            {"cooldown", 1},
                                            {"min_lr", 0.02},
                                            {"threshold", 0.0},
                                            {"threshold_mode", "abs"}}),
      {1.0, 0.9, 0.95, 0.96, 0.97, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1}));
  add(run_case("plateau_max_min_delta", "sgd", 0.1, 10,
               std::make_shared<LearningRateScheduler>(ReduceOnPlateauOptions()
                                                           .monitor("score")
                                                           .mode(Mode::Max)
                                                           .patience(1)
                                                           .factor(0.3)
                                                           .min_delta(0.05)),
               torch_scheduler("ReduceLROnPlateau", {{"mode", "max"},
                                                     {"patience", 1},
                                                     {"factor", 0.3},
                                                     {"threshold", 0.05},
                                                     {"threshold_mode", "abs"}}),
               {0.5, 0.54, 0.53, 0.7, 0.72, 0.74, 0.9, 0.91, 0.92, 0.93}));
  // threshold_mode: 'rel' scales the best value (PyTorch's default, with threshold 1e-4), 'abs'
  // above; the metrics are chosen so that the two modes reduce at different checks.
  add(run_case("plateau_rel_min", "sgd", 0.1, 10,
               std::make_shared<LearningRateScheduler>(ReduceOnPlateauOptions()
                                                           .monitor("score")
                                                           .patience(1)
                                                           .factor(0.5)
                                                           .min_delta(0.1)
                                                           .threshold_mode(ThresholdMode::Rel)),
               torch_scheduler("ReduceLROnPlateau", {{"mode", "min"},
                                                     {"patience", 1},
                                                     {"factor", 0.5},
                                                     {"threshold", 0.1},
                                                     {"threshold_mode", "rel"}}),
               {10.0, 9.5, 9.2, 8.9, 8.5, 8.0, 7.0, 6.9, 6.8, 6.0}));
  add(run_case("plateau_rel_max_negative", "sgd", 0.1, 10,
               std::make_shared<LearningRateScheduler>(ReduceOnPlateauOptions()
                                                           .monitor("score")
                                                           .mode(Mode::Max)
                                                           .patience(0)
                                                           .factor(0.5)
                                                           .min_delta(0.1)
                                                           .threshold_mode(ThresholdMode::Rel)),
               torch_scheduler("ReduceLROnPlateau", {{"mode", "max"},
                                                     {"patience", 0},
                                                     {"factor", 0.5},
                                                     {"threshold", 0.1},
                                                     {"threshold_mode", "rel"}}),
               {-1.0, -0.95, -0.93, -0.5, -0.47, -0.46, 0.2, 0.21, 0.3, 0.31}));
  add(run_case("plateau_pytorch_defaults", "sgd", 0.1, 10,
               std::make_shared<LearningRateScheduler>(ReduceOnPlateauOptions()
                                                           .monitor("score")
                                                           .patience(2)
                                                           .threshold_mode(ThresholdMode::Rel)
                                                           .min_delta(1e-4)),
               torch_scheduler("ReduceLROnPlateau", {{"patience", 2}}),
               {10.0, 9.9995, 9.999, 9.9985, 9.998, 5.0, 4.9999, 4.9998, 4.9997, 4.9996}));
  add(run_case(
      "plateau_abs_same_metrics_as_rel", "sgd", 0.1, 10,
      std::make_shared<LearningRateScheduler>(
          ReduceOnPlateauOptions().monitor("score").patience(1).factor(0.5).min_delta(0.1)),
      torch_scheduler("ReduceLROnPlateau", {{"mode", "min"},
                                            {"patience", 1},
                                            {"factor", 0.5},
                                            {"threshold", 0.1},
                                            {"threshold_mode", "abs"}}),
      {10.0, 9.5, 9.2, 8.9, 8.5, 8.0, 7.0, 6.9, 6.8, 6.0}));

  std::ofstream out(argv[1]);
  out << json{{"cases", cases}}.dump(1) << '\n';
  if (!out) {
    std::cerr << "schedule_reference: cannot write " << argv[1] << '\n';
    return 1;
  }
  std::cout << "schedule_reference: " << cases.size() << " cases written to " << argv[1] << '\n';
  return 0;
}
