// A transformer encoder classifier on synthetic token sequences of different lengths: each sample
// is `input_ids`, `attention_mask` and `labels`, padded into batches by collate; the forward reads
// the ids and the mask, ClassificationMetrics reads the named logits and labels. Every sequence
// holds one token 3 and one token 4; the label says whether the 3 comes first, which the model
// can only tell from the order of the tokens.
// docs/any-model.md.
//
//   example_transformer_encoder    exits 1 unless the held-out accuracy is well above chance

#include <torch/torch.h>
#include <torchbus/callbacks/callbacks.hpp>

#include <cmath>
#include <iostream>
#include <vector>

namespace {

constexpr std::int64_t kVocabulary = 20;
constexpr std::int64_t kWidth = 32;
constexpr std::int64_t kLongest = 12;

/// One encoder layer (single-head self-attention over the unpadded tokens, then a feed-forward
/// block, each with a residual and layer norm), masked mean pooling and a linear head.
struct EncoderClassifierImpl : torch::nn::Module {
  EncoderClassifierImpl() {
    tokens = register_module("tokens", torch::nn::Embedding(kVocabulary, kWidth));
    positions = register_module("positions", torch::nn::Embedding(kLongest, kWidth));
    query = register_module("query", torch::nn::Linear(kWidth, kWidth));
    key = register_module("key", torch::nn::Linear(kWidth, kWidth));
    value = register_module("value", torch::nn::Linear(kWidth, kWidth));
    norm1 = register_module("norm1", torch::nn::LayerNorm(std::vector<std::int64_t>{kWidth}));
    feed_forward = register_module(
        "feed_forward", torch::nn::Sequential(torch::nn::Linear(kWidth, 64), torch::nn::ReLU(),
                                              torch::nn::Linear(64, kWidth)));
    norm2 = register_module("norm2", torch::nn::LayerNorm(std::vector<std::int64_t>{kWidth}));
    head = register_module("head", torch::nn::Linear(kWidth, 2));
  }

  /// Logits [batch, 2] of ids [batch, length] whose padding `mask` (1: a token, 0: padding) hides.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& mask) {
    const auto length = ids.size(1);
    auto x = tokens(ids) + positions(torch::arange(length, ids.options()));
    const auto scores = torch::matmul(query(x), key(x).transpose(1, 2)) / std::sqrt(kWidth);
    const auto hidden = mask.unsqueeze(1).eq(0);  // [batch, 1, length]: keys a query may not see
    const auto attention = scores.masked_fill(hidden, -1e9).softmax(-1);
    x = norm1(x + torch::matmul(attention, value(x)));
    x = norm2(x + feed_forward->forward(x));
    const auto weights = mask.unsqueeze(2).to(x.dtype());
    return head((x * weights).sum(1) / weights.sum(1));
  }

  torch::nn::Embedding tokens{nullptr}, positions{nullptr};
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, head{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Sequential feed_forward{nullptr};
};
TORCH_MODULE(EncoderClassifier);

/// `count` samples of 4 to 12 tokens, in batches of `batch`: each padded to its longest sequence.
std::vector<torchbus::Batch> sequences(int count, int batch, std::uint64_t seed) {
  torch::manual_seed(seed);
  const auto options = torchbus::CollateOptions().pad("input_ids", 0).pad("attention_mask", 0);
  std::vector<torchbus::Batch> batches, samples;
  for (int i = 0; i < count; ++i) {
    const auto length = torch::randint(4, kLongest + 1, {1}).item<std::int64_t>();
    // Tokens 5..19 (0 is padding) with one 3 and one 4 at two random places; the label is
    // whether the 3 comes first: a question of order, not of which tokens occur.
    auto ids = torch::randint(5, kVocabulary, {length}, torch::kLong);
    const auto places = torch::randperm(length, torch::kLong);
    const auto three = places[0].item<std::int64_t>();
    const auto four = places[1].item<std::int64_t>();
    ids[three] = 3;
    ids[four] = 4;
    const bool three_first = three < four;
    torchbus::Batch sample;
    sample.set("input_ids", ids)
        .set("attention_mask", torch::ones({length}, torch::kLong))
        .set("labels", torch::tensor(three_first ? 1 : 0, torch::kLong));
    samples.push_back(std::move(sample));
    if (static_cast<int>(samples.size()) == batch) {
      batches.push_back(torchbus::collate(samples, options));
      samples.clear();
    }
  }
  return batches;
}

}  // namespace

int main() {
  torch::manual_seed(0);
  EncoderClassifier model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(3e-3));
  torchbus::Trainer trainer(
      model.ptr(), torchbus::Trainer::BatchForward([&](const torchbus::Batch& batch) {
        return torchbus::Output{
            {"logits", model->forward(batch.get("input_ids"), batch.get("attention_mask"))}};
      }),
      optimizer,
      [](const torchbus::Output& output, const torchbus::Batch& batch) {
        return torch::nn::functional::cross_entropy(output.get("logits"), batch.get("labels"));
      },
      torchbus::TrainerOptions().max_epochs(8).seed(1));
  trainer.add(std::make_shared<torchbus::ClassificationMetrics>(
      torchbus::ClassificationMetricsOptions().output("logits").target("labels").per_class(false)));
  trainer.on(torchbus::Event::EvalEnd, [](torchbus::State& state) {
    if (state.action != torchbus::Action::Fit) return;  // test() ends with an EvalEnd too
    std::cout << "epoch " << state.epoch << ": val accuracy "
              << state.metrics.latest("val_accuracy").value << "\n";
  });
  const auto train = sequences(1024, 32, 1);
  const auto held_out = sequences(256, 64, 2);
  const auto first = train.front().get("input_ids").sizes();
  std::cout << "batches of input_ids [" << first[0] << ", " << first[1]
            << "] (padded to the longest), attention_mask and labels\n";
  trainer.fit(train, held_out);
  trainer.test(sequences(512, 64, 3));
  const double accuracy = trainer.state().metrics.latest("test_accuracy").value;
  std::cout << "test accuracy " << accuracy << " (chance 0.5)\n";
  return accuracy > 0.8 ? 0 : 1;
}
