// Batches with named tensors through the loop: the fields reach the step and the subscribers
// (State::batch), extra fields change nothing of a run that does not read them (bit-equal weights),
// a masked step trains exactly as the same step written by hand, samples are counted from the
// fields, and a run stopped mid-epoch resumes to the uninterrupted run's weights.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/torchbus.hpp>

#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// `count` batches of `rows` samples: `features` (4 inputs), `labels` (3 classes) and a 0/1 `mask`
/// over the samples, with the pair left empty (all the step reads is named).
std::vector<Batch> named_batches(int count, int rows, std::uint64_t seed = 7) {
  torch::manual_seed(seed);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    Batch batch;
    batch.set("features", torch::randn({rows, 4}))
        .set("labels", torch::randint(3, {rows}, torch::kLong))
        .set("mask", (torch::rand({rows}) > 0.3).to(torch::kFloat));
    batches.push_back(std::move(batch));
  }
  return batches;
}

/// Cross entropy of the samples the mask keeps, averaged over them.
at::Tensor masked_loss(torch::nn::Sequential& model, const Batch& batch) {
  const auto per_sample = torch::nn::functional::cross_entropy(
      model->forward(batch.get("features")), batch.get("labels"),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const auto& mask = batch.get("mask");
  return (per_sample * mask).sum() / mask.sum().clamp_min(1);
}

/// A Run whose train step is `masked_loss`.
struct MaskedRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;

  explicit MaskedRun(TrainerOptions options = TrainerOptions().max_epochs(2))
      : trainer(model, optimizer, cross_entropy, options.use_registered_subscriptions(false)) {
    trainer.set_train_step([this](Trainer&, Batch& batch) { return masked_loss(model, batch); });
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(structured_batch)

BOOST_AUTO_TEST_CASE(fields_reach_the_step_and_subscribers_between_batch_start_and_end) {
  MaskedRun run(TrainerOptions().max_epochs(1));
  auto batches = named_batches(3, 5);
  std::vector<std::string> seen;
  run.trainer.on(Event::BatchStart, [&](State& state) {
    BOOST_TEST_REQUIRE(state.batch() != nullptr);
    seen.push_back(state.batch()->field_names());
    BOOST_TEST(state.batch()->get("mask").device() == state.device);
  });
  run.trainer.on(Event::BatchEnd, [&](State& state) { BOOST_TEST(state.batch() != nullptr); });
  run.trainer.on(Event::StepEnd, [&](State& state) { BOOST_TEST(state.batch() == nullptr); });
  run.trainer.fit(batches);
  BOOST_TEST(seen == std::vector<std::string>(3, "features, labels, mask"));
  BOOST_TEST(run.trainer.state().batch() == nullptr);
}

BOOST_AUTO_TEST_CASE(fields_the_step_does_not_read_change_nothing) {
  auto plain = make_batches(6, 8);
  auto with_extra = plain;
  for (auto& batch : with_extra) {
    batch.set("mask", torch::ones({8}))
        .set_list("boxes", {torch::rand({2, 4}), torch::rand({0, 4})});
  }
  Run a(TrainerOptions().max_epochs(2).accumulate_grad_batches(2));
  Run b(TrainerOptions().max_epochs(2).accumulate_grad_batches(2));
  a.trainer.fit(plain);
  b.trainer.fit(with_extra);
  BOOST_TEST(all_equal(snapshot(*a.model), snapshot(*b.model)));
  BOOST_TEST(a.trainer.state().metrics.latest("train_loss_epoch").value ==
             b.trainer.state().metrics.latest("train_loss_epoch").value);
}

BOOST_AUTO_TEST_CASE(a_masked_step_trains_as_the_same_loop_written_by_hand) {
  const auto batches = named_batches(8, 6);
  MaskedRun run(TrainerOptions().max_epochs(2).accumulate_grad_batches(2));
  auto data = batches;
  run.trainer.fit(data);
  // By hand: the same loss, each window of two batches averaged, one SGD step per window.
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (std::size_t i = 0; i < batches.size(); ++i) {
      (masked_loss(model, batches[i]) / 2.0).backward();
      if (i % 2 == 1) {
        optimizer.step();
        optimizer.zero_grad();
      }
    }
  }
  BOOST_TEST(all_equal(snapshot(*run.model), snapshot(*model)));
}

BOOST_AUTO_TEST_CASE(evaluation_weighs_each_batch_by_the_samples_its_fields_hold) {
  // Validation batches of 2 and 6 samples with the pair empty: the mean loss weighs them 2:6.
  MaskedRun run(TrainerOptions().max_epochs(1));
  run.trainer.set_eval_step([&](Trainer&, Batch& batch) { return masked_loss(run.model, batch); });
  auto small = named_batches(1, 2, 3);
  auto large = named_batches(1, 6, 4);
  std::vector<Batch> validation{small.front(), large.front()};
  const double mean = run.trainer.evaluate(validation);
  torch::NoGradGuard no_grad;
  const double expected = (masked_loss(run.model, small.front()).item<double>() * 2 +
                           masked_loss(run.model, large.front()).item<double>() * 6) /
                          8;
  BOOST_TEST(mean == expected, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(a_run_stopped_mid_epoch_resumes_to_the_uninterrupted_weights) {
  const auto batches = named_batches(10, 4);
  const auto options = TrainerOptions().max_epochs(3).accumulate_grad_batches(2).seed(5);
  MaskedRun whole(options);
  auto data = batches;
  whole.trainer.fit(data);

  // Stopped at step 7 (mid-epoch 1), checkpointed, resumed by another trainer.
  const auto path = scratch("structured_batch", "resume") / "stopped.tbckpt";
  MaskedRun first(options);
  first.trainer.on(Event::StepEnd, [](State& state) {
    if (state.step == 7) state.request_stop("test stop", StopKind::Interrupted);
  });
  data = batches;
  first.trainer.fit(data);
  BOOST_TEST_REQUIRE(first.trainer.state().step == 7);
  first.trainer.save_checkpoint(path);
  MaskedRun resumed(options);
  resumed.trainer.resume_from(path);
  data = batches;
  resumed.trainer.fit(data);
  BOOST_TEST(resumed.trainer.state().step == whole.trainer.state().step);
  BOOST_TEST(all_equal(snapshot(*resumed.model), snapshot(*whole.model)));
}

BOOST_AUTO_TEST_SUITE_END()
