// ModelSummary and summarize_model: each layer's type and parameters, the totals, the log line.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/model_summary.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace summary_test {

/// Linear(8, 8) and ReLU.
struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : linear(register_module("linear", torch::nn::Linear(8, 8))),
        relu(register_module("relu", torch::nn::ReLU())) {}
  torch::nn::Linear linear;
  torch::nn::ReLU relu;
};

/// Linear(4, 8), BatchNorm1d(8) in eval mode, a Block, Linear(8, 3) whose bias is frozen.
struct NestedImpl : torch::nn::Module {
  NestedImpl()
      : input(register_module("input", torch::nn::Linear(4, 8))),
        norm(register_module("norm", torch::nn::BatchNorm1d(8))),
        block(register_module("block", std::make_shared<BlockImpl>())),
        output(register_module("output", torch::nn::Linear(8, 3))) {
    norm->eval();
    output->bias.set_requires_grad(false);
  }
  torch::nn::Linear input;
  torch::nn::BatchNorm1d norm;
  std::shared_ptr<BlockImpl> block;
  torch::nn::Linear output;
};

}  // namespace summary_test

namespace {

std::shared_ptr<summary_test::NestedImpl> make_nested_model() {
  return std::make_shared<summary_test::NestedImpl>();
}

/// Each row as "name type parameters trainable mode".
std::vector<std::string> rows_of(const ModelSummaryTable& table) {
  std::vector<std::string> rows;
  for (const auto& row : table.rows) {
    rows.push_back(row.name + " " + row.type + " " + std::to_string(row.parameters) + " " +
                   std::to_string(row.trainable_parameters) + " " +
                   (row.training ? "train" : "eval"));
  }
  return rows;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_summary)

BOOST_AUTO_TEST_CASE(children_with_their_parameters_and_the_totals) {
  const auto model = make_nested_model();
  const auto table = summarize_model(*model);
  // Linear(4, 8): 4*8 + 8; BatchNorm1d(8): weight and bias; the block: 8*8 + 8; Linear(8, 3):
  // 8*3 + 3, its 3 biases frozen.
  const std::vector<std::string> expected{
      "input torch::nn::Linear 40 40 train", "norm torch::nn::BatchNorm1d 16 16 eval",
      "block summary_test::Block 72 72 train", "output torch::nn::Linear 27 24 train"};
  BOOST_TEST(rows_of(table) == expected, boost::test_tools::per_element());
  BOOST_TEST(table.total_parameters == 155);
  BOOST_TEST(table.trainable_parameters == 152);
  BOOST_TEST(table.parameter_bytes == 155 * 4);
  // running_mean and running_var (8 floats each) and num_batches_tracked (one int64).
  BOOST_TEST(table.buffer_bytes == 2 * 8 * 4 + 8);
  // The totals agree with the model's own count.
  std::int64_t elements = 0;
  for (const auto& parameter : model->parameters()) elements += parameter.numel();
  BOOST_TEST(table.total_parameters == elements);
}

BOOST_AUTO_TEST_CASE(depth_every_module_or_none) {
  const auto model = make_nested_model();
  const auto every = summarize_model(*model, -1);
  BOOST_TEST_REQUIRE(every.rows.size() == 6u);
  BOOST_TEST(every.rows[3].name == "block.linear");
  BOOST_TEST(every.rows[3].depth == 2);
  BOOST_TEST(every.rows[3].parameters == 72);
  BOOST_TEST(every.rows[4].name == "block.relu");
  BOOST_TEST(every.rows[4].type == "torch::nn::ReLU");
  BOOST_TEST(summarize_model(*model, 0).rows.empty());
  BOOST_TEST(summarize_model(*model, 0).total_parameters == 155);
  BOOST_TEST(has(message_of<ConfigError>([&] { summarize_model(*model, -2); }),
                 "max_depth must be >= -1"));
  BOOST_TEST(has(message_of<ConfigError>([] { ModelSummary(ModelSummaryOptions().max_depth(-3)); }),
                 "ModelSummary: max_depth must be >= -1"));
}

BOOST_AUTO_TEST_CASE(a_layer_used_twice_counts_once_in_the_totals) {
  torch::nn::Linear shared(4, 4);
  torch::nn::Sequential model(shared, torch::nn::ReLU(), shared);
  const auto table = summarize_model(*model);
  BOOST_TEST_REQUIRE(table.rows.size() == 3u);
  BOOST_TEST(table.rows[0].parameters == 20);
  BOOST_TEST(table.rows[2].parameters == 20);
  BOOST_TEST(table.total_parameters == 20);
  BOOST_TEST(table.parameter_bytes == 80);
}

BOOST_AUTO_TEST_CASE(logs_the_table_when_fit_starts) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().fast_dev_run(1).use_registered_subscriptions(false));
  auto summary = std::make_shared<ModelSummary>();
  trainer.add(summary);
  const CapturedLog log;
  auto batches = make_batches(2, 4);
  trainer.fit(batches);
  const auto lines = log.messages("info", "model summary:");
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  BOOST_TEST(summary->summary().total_parameters == 67);  // 4*8+8 + 8*3+3
  const auto text = format_model_summary(summary->summary());
  BOOST_TEST(has(text, "Name  Type"), text);
  BOOST_TEST(has(text, "Total parameters: 67 (268 B)"), text);
  BOOST_TEST(has(text, "torch::nn::ReLU"), text);
  // Not in evaluate().
  trainer.evaluate(batches);
  BOOST_TEST(log.messages("info", "model summary:").size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
