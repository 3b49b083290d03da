#include <torch/torch.h>
#include <torchbus/batch_source.hpp>
#include <torchbus/collate.hpp>
#include <torchbus/error.hpp>

namespace torchbus {

std::int64_t BatchSource::skip(std::int64_t count) {
  Batch scratch;
  std::int64_t skipped = 0;
  while (skipped < count && next(scratch)) ++skipped;
  return skipped;
}

namespace detail {

Batch stack_examples(const std::vector<torch::data::Example<>>& examples) {
  TORCHBUS_CHECK(!examples.empty(), DataError, "the data loader yielded an empty batch");
  std::vector<at::Tensor> data, targets;
  data.reserve(examples.size());
  targets.reserve(examples.size());
  for (const auto& example : examples) {
    data.push_back(example.data);
    targets.push_back(example.target);
  }
  return Batch(torch::stack(data), torch::stack(targets));
}

Batch collate_samples(const std::vector<Batch>& samples) {
  return collate(samples);
}

}  // namespace detail
}  // namespace torchbus
