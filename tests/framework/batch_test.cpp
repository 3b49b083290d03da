// Batch's named fields and collate: what each field holds, how many samples a batch counts, and
// the batches collate makes from samples (compared with torch::stack and hand-padded tensors), with
// the errors of samples that disagree.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <torchbus/torchbus.hpp>

#include <string>
#include <vector>

using namespace torchbus;
using torchbus::testing::has;
using torchbus::testing::message_of;

namespace {

/// A sample of a token model: `length` token ids, its attention mask, a label, and `boxes` boxes.
Batch token_sample(std::int64_t length, std::int64_t label, std::int64_t boxes = 1) {
  Batch sample;
  sample.set("input_ids", torch::arange(1, length + 1, torch::kLong))
      .set("attention_mask", torch::ones({length}, torch::kLong))
      .set("labels", torch::tensor(label, torch::kLong))
      .set("boxes", torch::rand({boxes, 4}));
  return sample;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch)

BOOST_AUTO_TEST_CASE(named_fields_sit_beside_the_pair_and_data_and_target_name_it) {
  Batch batch(torch::ones({3, 2}), torch::zeros({3}, torch::kLong));
  BOOST_TEST(!batch.structured());
  const auto mask = torch::ones({3, 5});
  batch.set("mask", mask).set_list("boxes", {torch::rand({2, 4}), torch::rand({0, 4})});
  BOOST_TEST(batch.structured());
  BOOST_TEST(batch.has("mask"));
  BOOST_TEST(!batch.has("boxes"));
  BOOST_TEST(batch.has_list("boxes"));
  BOOST_TEST(batch.get("mask").is_same(mask));
  BOOST_TEST(batch.get("data").is_same(batch.data));
  BOOST_TEST(batch.get("target").is_same(batch.target));
  BOOST_TEST(batch.list("boxes").size() == 2u);
  BOOST_TEST(batch.field_names() == "data, target, mask, boxes (list)");
  // Setting "data" sets the pair's field; setting a name again replaces it in place.
  const auto other = torch::zeros({3, 2});
  batch.set("data", other).set("mask", torch::zeros({3, 5}));
  BOOST_TEST(batch.data.is_same(other));
  BOOST_TEST(batch.tensors().size() == 1u);
  BOOST_TEST(torch::equal(batch.get("mask"), torch::zeros({3, 5})));
  // An Example<> converts, and a Batch is one.
  const torch::data::Example<> example(torch::ones({2}), torch::ones({2}));
  const Batch converted = example;
  BOOST_TEST(converted.data.is_same(example.data));
  const torch::data::Example<>& as_example = batch;
  BOOST_TEST(as_example.target.is_same(batch.target));
  batch.clear_named();
  BOOST_TEST(!batch.structured());
  BOOST_TEST(batch.data.is_same(other));
}

BOOST_AUTO_TEST_CASE(a_missing_or_clashing_field_is_a_data_error_naming_the_fields) {
  Batch batch(torch::ones({2, 2}), at::Tensor());
  batch.set("mask", torch::ones({2})).set_list("boxes", {});
  BOOST_TEST(has(message_of<DataError>([&] { batch.get("labels"); }),
                 "the batch has no tensor 'labels'; its fields: data, mask, "
                 "boxes (list)"));
  BOOST_TEST(has(message_of<DataError>([&] { batch.get("target"); }), "no tensor 'target'"));
  BOOST_TEST(has(message_of<DataError>([&] { batch.get("boxes"); }),
                 "(it is a list: read it with list())"));
  BOOST_TEST(has(message_of<DataError>([&] { batch.list("mask"); }),
                 "the batch has no list 'mask'; its fields: data, mask, boxes "
                 "(list) (it is a tensor: read it with get())"));
  BOOST_TEST(has(message_of<DataError>([&] { batch.set("boxes", torch::ones({1})); }),
                 "the batch has a list 'boxes': a tensor cannot have its name"));
  BOOST_TEST(has(message_of<DataError>([&] { batch.set_list("mask", {}); }),
                 "the batch has a tensor 'mask': a list cannot have its name"));
  BOOST_TEST(has(message_of<DataError>([&] { batch.set_list("target", {}); }),
                 "'target' is a tensor of every batch"));
  BOOST_TEST(has(message_of<DataError>([&] { batch.set("", torch::ones({1})); }), "needs a name"));
}

BOOST_AUTO_TEST_CASE(samples_come_from_data_then_target_then_the_named_fields) {
  BOOST_TEST(Batch(torch::ones({5, 3}), torch::zeros({5})).samples() == 5);
  BOOST_TEST(Batch(at::Tensor(), torch::zeros({4})).samples() == 4);
  BOOST_TEST(Batch(torch::tensor(2.0), at::Tensor()).samples() == 1);
  Batch named;
  named.set("input_ids", torch::ones({7, 12}));
  BOOST_TEST(named.samples() == 7);
  Batch listed;
  listed.set_list("boxes", {torch::rand({3, 4}), torch::rand({1, 4})});
  BOOST_TEST(listed.samples() == 2);
  BOOST_TEST(Batch().samples() == 1);  // no field: a custom step reads its data elsewhere
}

BOOST_AUTO_TEST_CASE(to_moves_every_field_and_keeps_tensors_already_there) {
  Batch batch(torch::ones({2, 2}), torch::zeros({2}));
  batch.set("mask", torch::ones({2})).set_list("boxes", {torch::rand({1, 4})});
  const auto mask = batch.get("mask");
  batch.to(torch::kCPU);
  BOOST_TEST(batch.get("mask").is_same(mask));  // already on the CPU: not copied
  // Every field, also in lists, gets the device (meta tensors need no GPU).
  batch.to(torch::Device(torch::kMeta));
  BOOST_TEST(batch.data.is_meta());
  BOOST_TEST(batch.target.is_meta());
  BOOST_TEST(batch.get("mask").is_meta());
  BOOST_TEST(batch.list("boxes").front().is_meta());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(collate_samples)

BOOST_AUTO_TEST_CASE(equal_shapes_are_stacked_in_sample_order) {
  std::vector<Batch> samples;
  for (int i = 0; i < 3; ++i) samples.emplace_back(torch::randn({4}), torch::tensor(i));
  samples[0].set("weight", torch::tensor(0.5));
  samples[1].set("weight", torch::tensor(1.0));
  samples[2].set("weight", torch::tensor(2.0));
  const auto batch = collate(samples);
  BOOST_TEST(
      torch::equal(batch.data, torch::stack({samples[0].data, samples[1].data, samples[2].data})));
  BOOST_TEST(torch::equal(batch.target, torch::tensor({0, 1, 2})));
  BOOST_TEST(torch::equal(batch.get("weight"), torch::tensor({0.5, 1.0, 2.0})));
  BOOST_TEST(batch.samples() == 3);
}

BOOST_AUTO_TEST_CASE(padded_fields_grow_to_the_longest_and_listed_ones_stay_per_sample) {
  const std::vector<Batch> samples{token_sample(3, 1, 2), token_sample(5, 0, 0),
                                   token_sample(1, 2, 1)};
  const auto options =
      CollateOptions().pad("input_ids", 0).pad("attention_mask", 0).as_list("boxes");
  const auto batch = collate(samples, options);
  const auto expected_ids =
      torch::tensor({1, 2, 3, 0, 0, 1, 2, 3, 4, 5, 1, 0, 0, 0, 0}, torch::kLong).reshape({3, 5});
  BOOST_TEST(torch::equal(batch.get("input_ids"), expected_ids));
  BOOST_TEST(torch::equal(batch.get("attention_mask"), (expected_ids != 0).to(torch::kLong)));
  BOOST_TEST(torch::equal(batch.get("labels"), torch::tensor({1, 0, 2}, torch::kLong)));
  const auto& boxes = batch.list("boxes");
  BOOST_TEST_REQUIRE(boxes.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(boxes[i].is_same(samples[i].get("boxes")));
  BOOST_TEST(!batch.has("boxes"));
  // Padding with another value, in every dimension.
  const std::vector<Batch> images{Batch().set("image", torch::ones({1, 2, 3})),
                                  Batch().set("image", torch::ones({1, 3, 2}))};
  const auto padded = collate(images, CollateOptions().pad("image", -1)).get("image");
  BOOST_TEST(padded.sizes().vec() == std::vector<std::int64_t>({2, 1, 3, 3}));
  BOOST_TEST(padded[0].sum().item<double>() == 6 - 3);  // six ones, three -1
  BOOST_TEST(padded[1].sum().item<double>() == 6 - 3);
  BOOST_TEST(padded[0][0][2][0].item<double>() == -1);
}

BOOST_AUTO_TEST_CASE(sample_lists_are_concatenated_in_sample_order) {
  std::vector<Batch> samples(2);
  const auto a = torch::ones({2}), b = torch::zeros({3}), c = torch::ones({1});
  samples[0].set("x", torch::ones({2})).set_list("parts", {a, b});
  samples[1].set("x", torch::ones({2})).set_list("parts", {c});
  const auto batch = collate(samples);
  const auto& parts = batch.list("parts");
  BOOST_TEST_REQUIRE(parts.size() == 3u);
  BOOST_TEST(parts[0].is_same(a));
  BOOST_TEST(parts[1].is_same(b));
  BOOST_TEST(parts[2].is_same(c));
  // A temporary batch's fields come by value (a reference would outlive it).
  const auto from_temporary = collate(samples).list("parts");
  BOOST_TEST(from_temporary.size() == 3u);
  BOOST_TEST(from_temporary[0].is_same(a));
  BOOST_TEST(collate(samples).get("x").sizes().vec() == std::vector<std::int64_t>({2, 2}));
}

BOOST_AUTO_TEST_CASE(samples_that_disagree_are_a_data_error_naming_the_field_and_shapes) {
  const std::vector<Batch> lengths{token_sample(3, 1), token_sample(5, 0)};
  BOOST_TEST(has(
      message_of<DataError>([&] { collate(lengths); }),
      "collate: field 'input_ids' of sample 1 has shape [5], sample 0's [3]; stacking needs equal "
      "shapes: pad it (CollateOptions().pad(\"input_ids\", value)) or keep it as a list "
      "(CollateOptions().as_list(\"input_ids\"))"));
  std::vector<Batch> dtypes{Batch().set("x", torch::ones({2})),
                            Batch().set("x", torch::ones({2}, torch::kLong))};
  BOOST_TEST(has(message_of<DataError>([&] { collate(dtypes); }),
                 "field 'x' of sample 1 is Long, sample 0's Float"));
  std::vector<Batch> fields{Batch().set("x", torch::ones({2})),
                            Batch().set("x", torch::ones({2})).set("mask", torch::ones({2}))};
  BOOST_TEST(
      has(message_of<DataError>([&] { collate(fields); }),
          "collate: sample 1 has the fields x, mask; sample 0 has x (every sample needs the same "
          "fields)"));
  std::vector<Batch> ranks{Batch().set("x", torch::ones({2})),
                           Batch().set("x", torch::ones({2, 1}))};
  BOOST_TEST(has(message_of<DataError>([&] { collate(ranks, CollateOptions().pad("x")); }),
                 "padding needs as many dimensions in every sample"));
  BOOST_TEST(has(message_of<DataError>([&] { collate({}); }), "collate: no samples"));
  BOOST_TEST(has(message_of<DataError>([&] {
                   collate({Batch(torch::ones({1}), torch::ones({1}))},
                           CollateOptions().as_list("data"));
                 }),
                 "'data' cannot be kept as a list"));
  BOOST_TEST(has(message_of<ConfigError>([&] { CollateOptions().pad("x").as_list("x"); }),
                 "a field is padded or listed, not both"));
}

BOOST_AUTO_TEST_CASE(a_range_of_sample_vectors_is_collated_by_its_source) {
  // What a dataset of samples gives without a Stack transform: each element a vector of samples.
  std::vector<std::vector<Batch>> loader{{token_sample(2, 0), token_sample(2, 1)},
                                         {token_sample(2, 2)}};
  RangeSource<decltype(loader)> source(loader);
  source.start_epoch(0);
  Batch batch;
  BOOST_TEST_REQUIRE(source.next(batch));
  BOOST_TEST(torch::equal(batch.get("labels"), torch::tensor({0, 1}, torch::kLong)));
  BOOST_TEST(batch.samples() == 2);
  BOOST_TEST_REQUIRE(source.next(batch));
  BOOST_TEST(batch.get("input_ids").sizes().vec() == std::vector<std::int64_t>({1, 2}));
  BOOST_TEST(!source.next(batch));
}

BOOST_AUTO_TEST_SUITE_END()
