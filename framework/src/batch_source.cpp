#include <torch/torch.h>
#include <torchbus/batch_source.hpp>
#include <torchbus/error.hpp>

namespace torchbus::detail {

Batch stack_examples(const std::vector<Batch>& examples) {
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

}  // namespace torchbus::detail
