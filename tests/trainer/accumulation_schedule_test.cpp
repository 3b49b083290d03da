// TrainerOptions::accumulation_schedule: k changing at given epochs (Lightning's
// GradientAccumulationScheduler), its windows, scaling, filters and exact resume.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/event_sequence.hpp>
#include <support/scratch.hpp>

#include <filesystem>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

const AccumulationSchedule kSchedule{{0, 1}, {1, 2}, {2, 4}};

struct Killed : std::runtime_error {
  Killed() : std::runtime_error("killed after saving") {}
};

/// A trainer with SGD with momentum (state a resume must restore) over make_model().
struct MomentumRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  Trainer trainer;

  explicit MomentumRun(AccumulationSchedule schedule, std::int64_t epochs = 3)
      : trainer(model, optimizer, cross_entropy,
                TrainerOptions()
                    .max_epochs(epochs)
                    .accumulation_schedule(std::move(schedule))
                    .use_registered_subscriptions(false)) {}
};

/// The same training written by hand in LibTorch: per epoch, windows of k consecutive batches
/// (the last one shorter), each batch's loss divided by its window's size, one step per window.
std::vector<at::Tensor> hand_trained_per_epoch(const std::vector<Batch>& batches,
                                               const std::vector<std::int64_t>& k_per_epoch) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto count = static_cast<std::int64_t>(batches.size());
  for (const auto k : k_per_epoch) {
    for (std::int64_t start = 0; start < count; start += k) {
      const auto end = std::min(count, start + k);
      sgd.zero_grad();
      for (auto i = start; i < end; ++i) {
        const auto& batch = batches[static_cast<std::size_t>(i)];
        const auto loss = cross_entropy(model->forward(batch.data), batch.target);
        (loss / static_cast<double>(end - start)).backward();
      }
      sgd.step();
    }
  }
  return snapshot(*model);
}

void zero_weights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& parameter : module.parameters()) parameter.zero_();
}

/// Trains `run` until StepEnd at `step`, saves to `file` and dies.
void run_until_killed(MomentumRun& run, std::vector<Batch>& train, std::int64_t step,
                      const fs::path& file) {
  run.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step == step) {
      run.trainer.save_checkpoint(file);
      throw Killed();
    }
  });
  BOOST_CHECK_THROW(run.trainer.fit(train), Killed);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(accumulation_schedule)

BOOST_AUTO_TEST_CASE(k_follows_the_schedule_and_the_weights_equal_a_hand_written_loop) {
  MomentumRun run(kSchedule);
  std::vector<std::int64_t> k_at_epoch_start, steps_per_epoch, window_sizes;
  std::vector<std::int64_t> every_third_step;
  run.trainer.on(Event::EpochStart,
                 [&](State& s) { k_at_epoch_start.push_back(s.accumulate_grad_batches); });
  run.trainer.on(Event::StepStart, [&](State& s) { window_sizes.push_back(s.window_size); });
  run.trainer.on(Event::StepEnd, every(3), [&](State& s) { every_third_step.push_back(s.step); });
  auto train = make_batches(10, 4);
  run.trainer.fit(train);

  BOOST_TEST(k_at_epoch_start == (std::vector<std::int64_t>{1, 2, 4}),
             boost::test_tools::per_element());
  // 10 windows of 1, 5 of 2, then 4, 4, 2.
  std::vector<std::int64_t> expected_windows(10, 1);
  expected_windows.insert(expected_windows.end(), 5, 2);
  expected_windows.insert(expected_windows.end(), {4, 4, 2});
  BOOST_TEST(window_sizes == expected_windows, boost::test_tools::per_element());
  BOOST_TEST(run.trainer.state().step == 18);
  BOOST_TEST(every_third_step == (std::vector<std::int64_t>{3, 6, 9, 12, 15, 18}),
             boost::test_tools::per_element());

  const auto expected = hand_trained_per_epoch(train, {1, 2, 4});
  const auto actual = snapshot(*run.model);
  for (std::size_t i = 0; i < actual.size(); ++i) {
    BOOST_TEST(torch::allclose(actual[i], expected[i], /*rtol=*/0, /*atol=*/1e-6));
  }
}

BOOST_AUTO_TEST_CASE(epochs_before_the_first_entry_use_accumulate_grad_batches) {
  const auto options =
      TrainerOptions().accumulate_grad_batches(3).accumulation_schedule({{2, 5}, {4, 1}});
  const std::vector<std::int64_t> expected{3, 3, 5, 5, 1, 1};
  for (std::int64_t epoch = 0; epoch < 6; ++epoch) {
    BOOST_TEST(options.accumulate_grad_batches_at(epoch) == expected[epoch]);
  }
}

BOOST_AUTO_TEST_CASE(bad_schedules_are_refused) {
  BOOST_TEST(has(message_of<ConfigError>([] {
                   TrainerOptions().accumulation_schedule({{0, 1}, {2, 0}}).validate();
                 }),
                 "accumulation_schedule gives epoch 2 k = 0; expected batches per optimizer step "
                 ">= 1"));
  BOOST_TEST(has(message_of<ConfigError>([] {
                   TrainerOptions().accumulation_schedule({{-1, 2}}).validate();
                 }),
                 "accumulation_schedule has the negative epoch -1"));
}

BOOST_AUTO_TEST_CASE(a_run_killed_mid_epoch_resumes_bit_for_bit) {
  auto train = make_batches(10, 4);
  MomentumRun uninterrupted(kSchedule);
  uninterrupted.trainer.fit(train);

  // Step 12 is the second of epoch 1's five windows of 2.
  const auto file = scratch("accumulation_schedule", "kill") / "step12.tbckpt";
  MomentumRun interrupted(kSchedule);
  run_until_killed(interrupted, train, 12, file);

  MomentumRun resumed(kSchedule);
  zero_weights(*resumed.model);  // the checkpoint must restore them
  std::vector<std::int64_t> k_at_epoch_start;
  resumed.trainer.on(Event::EpochStart,
                     [&](State& s) { k_at_epoch_start.push_back(s.accumulate_grad_batches); });
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train);
  BOOST_TEST(k_at_epoch_start == (std::vector<std::int64_t>{2, 4}),
             boost::test_tools::per_element());
  BOOST_TEST(resumed.trainer.state().step == 18);
  const auto a = snapshot(*uninterrupted.model);
  const auto b = snapshot(*resumed.model);
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
}

BOOST_AUTO_TEST_CASE(a_resume_that_changes_the_checkpoints_k_is_refused) {
  auto train = make_batches(10, 4);
  const auto file = scratch("accumulation_schedule", "changed_k") / "step12.tbckpt";
  MomentumRun interrupted(kSchedule);
  run_until_killed(interrupted, train, 12, file);

  MomentumRun changed({{0, 1}, {1, 3}, {2, 4}});
  changed.trainer.resume_from(file);
  const auto message = message_of<CheckpointError>([&] { changed.trainer.fit(train); });
  BOOST_TEST(has(message,
                 "was written with accumulate_grad_batches 2; this trainer uses 3 in "
                 "epoch 1"));
  BOOST_TEST(changed.trainer.state().step == 0);
}

BOOST_AUTO_TEST_CASE(a_resume_that_changes_only_later_epochs_k_is_allowed) {
  auto train = make_batches(10, 4);
  const AccumulationSchedule later{{0, 1}, {1, 2}, {2, 8}};
  MomentumRun uninterrupted(later);
  uninterrupted.trainer.fit(train);

  const auto file = scratch("accumulation_schedule", "later_k") / "step12.tbckpt";
  MomentumRun interrupted(kSchedule);
  run_until_killed(interrupted, train, 12, file);
  MomentumRun resumed(later);
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train);
  // Epoch 2 ran with the new k (windows 8, 2): as a run with that schedule from the start.
  BOOST_TEST(resumed.trainer.state().step == 17);
  const auto a = snapshot(*uninterrupted.model);
  const auto b = snapshot(*resumed.model);
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
}

BOOST_AUTO_TEST_CASE(a_checkpoint_at_an_epoch_end_lets_the_next_epoch_change_k) {
  auto train = make_batches(10, 4);
  const auto file = scratch("accumulation_schedule", "epoch_end") / "epoch0.tbckpt";
  {
    MomentumRun first(kSchedule, /*epochs=*/1);
    first.trainer.fit(train);
    first.trainer.save_checkpoint(file);  // after epoch 0 (k 1): resumes at epoch 1
  }
  MomentumRun resumed({{0, 1}, {1, 5}});
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train);
  BOOST_TEST(resumed.trainer.state().step == 10 + 2 + 2);

  MomentumRun refused({{0, 2}, {1, 5}});
  refused.trainer.resume_from(file);
  BOOST_TEST(has(message_of<CheckpointError>([&] { refused.trainer.fit(train); }),
                 "was written with accumulate_grad_batches 1; this trainer uses 2 in epoch 0"));
}

BOOST_AUTO_TEST_SUITE_END()
