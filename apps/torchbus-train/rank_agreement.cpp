#include "rank_agreement.hpp"

#include "exit_status.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/logging.hpp>

#include <cstring>

namespace train {

void run_agreed(torchbus::ProcessGroup& group, const std::function<void()>& phase) {
  std::exception_ptr error;
  try {
    phase();
  } catch (...) {
    error = std::current_exception();
  }
  const auto failed = first_nonzero(group, error ? exit_code_of(error, false) : 0);
  if (!failed) return;
  const auto [failed_rank, code] = *failed;
  const auto reason = broadcast_text(group, error ? reason_of(error) : std::string(), failed_rank);
  if (failed_rank == group.rank()) std::rethrow_exception(error);
  if (error) {
    torchbus::logger()->error("rank {} failed too: {}", group.rank(), reason_of(error));
  }
  throw StartupExit(static_cast<int>(code),
                    torchbus::detail::concat("rank ", group.rank(), " stops: rank ", failed_rank,
                                             " ended its start-up with exit code ", code,
                                             reason.empty() ? std::string() : ": " + reason));
}

std::string broadcast_text(torchbus::ProcessGroup& group, const std::string& text, int root) {
  if (group.world_size() == 1) return text;
  std::vector<at::Tensor> size{torch::tensor({static_cast<std::int64_t>(text.size())})};
  group.broadcast(size, root);
  const auto length = size[0].item<std::int64_t>();
  if (length == 0) return {};
  std::vector<at::Tensor> bytes{torch::empty({length}, torch::kUInt8)};
  if (group.rank() == root) std::memcpy(bytes[0].data_ptr(), text.data(), text.size());
  group.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes[0].data_ptr()),
                     static_cast<std::size_t>(length));
}

std::optional<std::pair<int, std::int64_t>> first_nonzero(torchbus::ProcessGroup& group,
                                                          std::int64_t value) {
  const auto values = group.all_gather(torch::tensor({value})).contiguous();
  const auto* each = values.data_ptr<std::int64_t>();
  for (int rank = 0; rank < group.world_size(); ++rank) {
    if (each[rank] != 0) return std::make_pair(rank, each[rank]);
  }
  return std::nullopt;
}

}  // namespace train
