// A CUDA generator's state saved by one LibTorch is put in the layout of another: 1.13 and 2.0
// write 800 bytes of padding (all bits set) before the seed and the Philox offset, 2.1 and later
// the seed and the offset alone; each version's set_state takes only its own.

#include <ATen/Functions.h>
#include <boost/test/unit_test.hpp>

#include "interop/cuda_rng_layout.hpp"  // private to torchbus_framework

#include <cstdint>
#include <cstring>

using torchbus::detail::cuda_generator_state_in_layout;

namespace {

/// The seed and the offset as LibTorch writes them: two 8-byte integers in the machine's order.
at::Tensor seed_and_offset(std::uint64_t seed, std::int64_t offset) {
  auto bytes = at::empty({16}, at::kByte);
  std::memcpy(bytes.data_ptr(), &seed, 8);
  std::memcpy(static_cast<char*>(bytes.data_ptr()) + 8, &offset, 8);
  return bytes;
}

at::Tensor padding() {
  return at::full({800}, 0xFF, at::kByte);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_rng_layout)

BOOST_AUTO_TEST_CASE(a_padded_state_loses_its_padding_where_the_generator_has_none) {
  const auto tail = seed_and_offset(1234567890123ULL, 4096);
  const auto saved = at::cat({padding(), tail});
  BOOST_TEST(at::equal(cuda_generator_state_in_layout(saved, 16), tail));
  const auto seed_only = tail.slice(0, 0, 8);  // a state without its offset
  BOOST_TEST(
      at::equal(cuda_generator_state_in_layout(at::cat({padding(), seed_only}), 16), seed_only));
}

BOOST_AUTO_TEST_CASE(an_unpadded_state_gets_the_padding_where_the_generator_has_it) {
  const auto saved = seed_and_offset(42, 8);
  const auto padded = cuda_generator_state_in_layout(saved, 816);
  BOOST_TEST_REQUIRE(padded.numel() == 816);
  BOOST_TEST(at::equal(padded.slice(0, 0, 800), padding()));
  BOOST_TEST(at::equal(padded.slice(0, 800), saved));
  BOOST_TEST(cuda_generator_state_in_layout(saved.slice(0, 0, 8), 816).numel() == 808);
}

BOOST_AUTO_TEST_CASE(a_state_in_this_layout_or_in_neither_is_left_as_it_is) {
  const auto own = seed_and_offset(7, 0);
  BOOST_TEST(cuda_generator_state_in_layout(own, 16).is_same(own));
  const auto odd = at::zeros({24}, at::kByte);  // set_state names the size it expected
  BOOST_TEST(cuda_generator_state_in_layout(odd, 16).is_same(odd));
  BOOST_TEST(cuda_generator_state_in_layout(odd, 816).is_same(odd));
  const auto floats = at::zeros({816});  // set_state names the dtype
  BOOST_TEST(cuda_generator_state_in_layout(floats, 16).is_same(floats));
}

BOOST_AUTO_TEST_SUITE_END()
