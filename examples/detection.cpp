// A detection-shaped model: images with one to three bright squares each, and per image a list of
// its boxes (a tensor [n_i, 4] whose n_i differs from image to image), kept as a list by collate.
// The model predicts three box slots and whether each holds an object; the loss matches slot j to
// the image's j-th box (boxes sorted left to right). docs/any-model.md.
//
//   example_detection    exits 1 unless the loss of the last epoch is below half the first's

#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include <iostream>
#include <vector>

namespace {

constexpr std::int64_t kSize = 16;
constexpr std::int64_t kSlots = 3;

/// A small CNN: per slot, a box (x0, y0, x1, y1 in [0, 1]) and an objectness logit.
struct DetectorImpl : torch::nn::Module {
  DetectorImpl() {
    features = register_module(
        "features",
        torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)),
                              torch::nn::ReLU(), torch::nn::MaxPool2d(2),
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)),
                              torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Flatten()));
    head = register_module("head", torch::nn::Linear(16 * 4 * 4, kSlots * 5));
  }
  /// Boxes [N, slots, 4] and objectness logits [N, slots].
  torchbus::Output forward(const at::Tensor& images) {
    const auto out = head(features->forward(images)).view({-1, kSlots, 5});
    return torchbus::Output{{"boxes", out.narrow(2, 0, 4).sigmoid()},
                            {"objectness", out.select(2, 4)}};
  }
  torch::nn::Sequential features{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Detector);

/// Images [N, 1, 16, 16] in batches of `batch`, each with its list of boxes sorted by x0.
std::vector<torchbus::Batch> images(int count, int batch, std::uint64_t seed) {
  torch::manual_seed(seed);
  const auto options = torchbus::CollateOptions().as_list("boxes");
  std::vector<torchbus::Batch> batches, samples;
  for (int i = 0; i < count; ++i) {
    auto image = 0.1 * torch::rand({1, kSize, kSize});
    const auto objects = torch::randint(1, kSlots + 1, {1}).item<std::int64_t>();
    std::vector<at::Tensor> boxes;
    for (std::int64_t k = 0; k < objects; ++k) {
      // Squares of side 3 to 5 in their own third of the image, left to right.
      const auto side = torch::randint(3, 6, {1}).item<std::int64_t>();
      const auto x0 = k * 5 + torch::randint(0, 6 - side + 1, {1}).item<std::int64_t>();
      const auto y0 = torch::randint(0, kSize - side + 1, {1}).item<std::int64_t>();
      image.slice(1, y0, y0 + side).slice(2, x0, x0 + side).fill_(1.0);
      boxes.push_back(
          torch::tensor({static_cast<float>(x0), static_cast<float>(y0),
                         static_cast<float>(x0 + side), static_cast<float>(y0 + side)}) /
          kSize);
    }
    torchbus::Batch sample;
    sample.set("data", image).set("boxes", torch::stack(boxes));
    samples.push_back(std::move(sample));
    if (static_cast<int>(samples.size()) == batch) {
      batches.push_back(torchbus::collate(samples, options));
      samples.clear();
    }
  }
  return batches;
}

/// Objectness of every slot (slot j holds an object when the image has more than j boxes), and
/// the L1 distance of each occupied slot to its box.
at::Tensor detection_loss(const torchbus::Output& output, const torchbus::Batch& batch) {
  const auto& boxes = batch.list("boxes");
  const auto& predicted = output.get("boxes");
  auto occupied = torch::zeros_like(output.get("objectness"));
  auto box_loss = torch::zeros({}, predicted.options());
  std::int64_t matched = 0;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const auto n = boxes[i].size(0);
    occupied[static_cast<std::int64_t>(i)].narrow(0, 0, n).fill_(1.0);
    box_loss =
        box_loss + (predicted[static_cast<std::int64_t>(i)].narrow(0, 0, n) - boxes[i]).abs().sum();
    matched += n;
  }
  return torch::nn::functional::binary_cross_entropy_with_logits(output.get("objectness"),
                                                                 occupied) +
         box_loss / static_cast<double>(matched * 4);
}

}  // namespace

int main() {
  torch::manual_seed(0);
  Detector model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(3e-3));
  torchbus::Trainer trainer(
      model.ptr(), torchbus::Trainer::BatchForward([&](const torchbus::Batch& batch) {
        return model->forward(batch.data);
      }),
      optimizer, detection_loss, torchbus::TrainerOptions().max_epochs(8).seed(1));
  std::vector<double> epoch_losses;
  trainer.on(torchbus::Event::EpochEnd, [&](torchbus::State& state) {
    epoch_losses.push_back(state.metrics.latest("train_loss_epoch").value);
    std::cout << "epoch " << state.epoch << ": loss " << epoch_losses.back() << "\n";
  });
  const auto batches = images(512, 32, 1);
  std::cout << "batches of images [32, 1, 16, 16] with a list of 32 box tensors, e.g. ["
            << batches.front().list("boxes")[0].size(0) << ", 4], ["
            << batches.front().list("boxes")[1].size(0) << ", 4], ...\n";
  trainer.fit(batches);
  const bool fell = epoch_losses.back() < 0.5 * epoch_losses.front();
  std::cout << "the loss fell from " << epoch_losses.front() << " to " << epoch_losses.back()
            << (fell ? "" : ": not by half") << "\n";
  return fell ? 0 : 1;
}
