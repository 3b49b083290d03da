// PredictionWriter: a predict run's outputs in a CSV file (read back cell by cell) or a
// torch.save-format file (read back with read_state_dict), ordered by the samples' index with a
// sampler's repeats dropped, per run or per batch, and nothing written when the run fails.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/prediction_writer.hpp>
#include <torchbus/torchbus.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// The comma-separated cells of `line`.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  return cells;
}

/// A trainer of the fixtures' classifier predicting `class` and `probability` per sample.
struct PredictRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer{model, optimizer, cross_entropy,
                  TrainerOptions().use_registered_subscriptions(false)};

  PredictRun() {
    trainer.set_predict_step([this](Trainer&, Batch& batch) {
      const auto logits = model->forward(batch.data);
      return Output{{"class", logits.argmax(1)}, {"probability", logits.softmax(1)}};
    });
  }
};

/// `batches` with the field "index" set to `indices`, `rows` per batch in order.
std::vector<Batch> with_indices(std::vector<Batch> batches,
                                const std::vector<std::int64_t>& indices) {
  std::size_t next = 0;
  for (auto& batch : batches) {
    const auto rows = batch.data.size(0);
    std::vector<std::int64_t> part(indices.begin() + next, indices.begin() + next + rows);
    batch.set("index", torch::tensor(part, torch::kLong));
    next += rows;
  }
  return batches;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(prediction_writer)

BOOST_AUTO_TEST_CASE(a_csv_file_has_one_row_per_sample_with_each_value_read_back_exactly) {
  TempDir dir("prediction_writer");
  PredictRun run;
  const auto path = dir.path / "out" / "predictions.csv";
  run.trainer.add(std::make_shared<PredictionWriter>(
      PredictionWriterOptions(path).outputs({"class", "probability"})));
  const auto batches = make_batches(3, 5);
  const auto predictions = run.trainer.predict(batches);

  const auto lines = read_lines(path);
  BOOST_REQUIRE(lines.size() == 16u);
  BOOST_TEST(lines[0] == "class,probability_0,probability_1,probability_2");
  for (std::size_t row = 0; row < 15; ++row) {
    const auto cells = cells_of(lines[row + 1]);
    BOOST_REQUIRE(cells.size() == 4u);
    const auto& output = predictions[row / 5];
    const auto r = static_cast<std::int64_t>(row % 5);
    BOOST_TEST(std::stoll(cells[0]) == output.get("class")[r].item<std::int64_t>());
    for (std::int64_t k = 0; k < 3; ++k) {
      // Read as Python's float() would, then rounded to the tensor's float32: exact.
      BOOST_TEST(static_cast<float>(std::stod(cells[1 + k])) ==
                 output.get("probability")[r][k].item<float>());
    }
  }
}

BOOST_AUTO_TEST_CASE(rows_are_put_in_index_order_and_a_samplers_repeats_are_dropped) {
  TempDir dir("prediction_writer");
  PredictRun run;
  const auto path = dir.path / "predictions.pt";
  auto writer = std::make_shared<PredictionWriter>(
      PredictionWriterOptions(path).outputs({"class", "probability", "data"}));
  run.trainer.add(writer);
  // Samples 0..6 out of order, 0 and 1 repeated at the end as a DistributedSampler pads.
  const std::vector<std::int64_t> indices{3, 5, 0, 6, 2, 4, 1, 0, 1};
  auto batches = with_indices(make_batches(3, 3), indices);
  run.trainer.predict(batches);

  const auto read = read_state_dict(path);
  BOOST_REQUIRE(read.size() == 4u);
  BOOST_TEST(read[0].first == "index");
  BOOST_TEST(torch::equal(read[0].second, torch::arange(7, torch::kLong)));
  BOOST_TEST(read[3].first == "data");
  // Row i holds sample i's input: where index i first appears among the batches.
  std::vector<at::Tensor> inputs;
  for (const auto& batch : batches) inputs.push_back(batch.data);
  const auto all_inputs = torch::cat(inputs);
  for (std::int64_t i = 0; i < 7; ++i) {
    const auto first = std::find(indices.begin(), indices.end(), i) - indices.begin();
    BOOST_TEST(torch::equal(read[3].second[i], all_inputs[first]));
  }
  BOOST_TEST(torch::equal(writer->predictions()[1].second, read[1].second));
}

BOOST_AUTO_TEST_CASE(writes_per_batch_give_the_same_rows_and_one_tensor_file_per_batch) {
  TempDir dir("prediction_writer");
  const auto batches = make_batches(3, 4);
  const auto predict_to = [&](const fs::path& path, PredictionWriteInterval interval) {
    PredictRun run;
    run.trainer.add(std::make_shared<PredictionWriter>(
        PredictionWriterOptions(path).outputs({"probability"}).write_interval(interval)));
    return run.trainer.predict(batches);
  };
  predict_to(dir.path / "run.csv", PredictionWriteInterval::Run);
  predict_to(dir.path / "batch.csv", PredictionWriteInterval::Batch);
  BOOST_TEST(read_lines(dir.path / "run.csv") == read_lines(dir.path / "batch.csv"));
  const auto predictions = predict_to(dir.path / "part.pt", PredictionWriteInterval::Batch);
  for (int k = 0; k < 3; ++k) {
    const auto read = read_state_dict(dir.path / ("part_" + std::to_string(k) + ".pt"));
    BOOST_REQUIRE(read.size() == 1u);
    BOOST_TEST(torch::equal(read[0].second, predictions[k].get("probability")));
  }
  BOOST_TEST(!fs::exists(dir.path / "part.pt"));
}

BOOST_AUTO_TEST_CASE(bad_outputs_are_named_and_a_failed_run_writes_nothing) {
  TempDir dir("prediction_writer");
  const auto path = dir.path / "predictions.csv";
  {
    PredictRun run;
    run.trainer.add(
        std::make_shared<PredictionWriter>(PredictionWriterOptions(path).outputs({"logits"})));
    BOOST_TEST(has(message_of<DataError>([&] { run.trainer.predict(make_batches(2, 3)); }),
                   "PredictionWriter 'prediction_writer': no tensor 'logits' at PredictBatchEnd "
                   "(predict batch 0); present: "));
  }
  {
    PredictRun run;
    run.trainer.set_predict_step([](Trainer&, Batch& batch) {
      return Output(batch.data.unsqueeze(1).expand({-1, 2, -1}));
    });
    run.trainer.add(std::make_shared<PredictionWriter>(PredictionWriterOptions(path)));
    BOOST_TEST(has(message_of<DataError>([&] { run.trainer.predict(make_batches(2, 3)); }),
                   "'output' has shape [3, 2, 4]; a CSV file takes [N] or [N, K] (write a .pt "
                   "file for other shapes)"));
  }
  {
    PredictRun run;
    run.trainer.add(std::make_shared<PredictionWriter>(
        PredictionWriterOptions(path).outputs({"class"}).write_interval(
            PredictionWriteInterval::Batch)));
    run.trainer.on(Event::PredictBatchStart, [](State& state) {
      if (state.predict_batch == 1) throw std::runtime_error("the second batch fails");
    });
    BOOST_CHECK_THROW(run.trainer.predict(make_batches(3, 3)), std::runtime_error);
  }
  BOOST_TEST(!fs::exists(path));  // no run completed: no file, and no temporary one left
  BOOST_TEST(entry_names(dir.path).empty());
  BOOST_TEST(has(message_of<ConfigError>([] { PredictionWriterOptions("").validate(); }),
                 "PredictionWriter: path is empty"));
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { PredictionWriterOptions("p.csv").outputs({"index"}).validate(); }),
                 "other than the index 'index'"));
}

BOOST_AUTO_TEST_CASE(an_indexed_dataset_gives_each_sample_its_index) {
  struct Squares : torch::data::datasets::Dataset<Squares> {
    torch::data::Example<> get(std::size_t i) override {
      const auto x = static_cast<float>(i);
      return {torch::tensor({x}), torch::tensor(x * x)};
    }
    torch::optional<std::size_t> size() const override { return 5; }
  };
  auto loader = torch::data::make_data_loader(IndexedDataset<Squares>(Squares()),
                                              torch::data::samplers::SequentialSampler(5),
                                              torch::data::DataLoaderOptions(2));
  std::vector<std::int64_t> seen;
  for (auto& samples : *loader) {
    const auto batch = collate(samples);
    for (std::int64_t i = 0; i < batch.samples(); ++i) {
      const auto index = batch.get("index")[i].item<std::int64_t>();
      BOOST_TEST(batch.data[i].item<float>() == static_cast<float>(index));
      seen.push_back(index);
    }
  }
  BOOST_TEST(seen == (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

BOOST_AUTO_TEST_SUITE_END()
