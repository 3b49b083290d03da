#include <torch/torch.h>
#include <torchbus/batch_source.hpp>
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
  return collate(std::vector<Batch>(examples.begin(), examples.end()));
}

}  // namespace detail
}  // namespace torchbus
