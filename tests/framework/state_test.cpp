#include <ATen/ATen.h>
#include <boost/test/unit_test.hpp>
#include <torchbus/torchbus.hpp>

using namespace torchbus;

BOOST_AUTO_TEST_SUITE(state)

BOOST_AUTO_TEST_CASE(tensor_store_sets_and_gets_by_name) {
  TensorStore store;
  const auto loss = at::tensor(0.5);
  store.set("loss", loss);
  store.set("output", at::ones({2, 3}), Scope::Step);
  BOOST_TEST(store.get("loss").equal(loss));
  BOOST_TEST(store.contains("output"));
  BOOST_TEST(store.find("missing") == nullptr);
  store.set("loss", at::tensor(0.25));  // replaces in place
  BOOST_TEST(store.get("loss").item<double>() == 0.25);
  BOOST_TEST(store.names() == (std::vector<std::string>{"loss", "output"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(tensor_store_clears_each_scope_separately) {
  TensorStore store;
  store.set("batch", at::zeros({1}));
  store.set("step", at::zeros({1}), Scope::Step);
  store.set("epoch", at::zeros({1}), Scope::Epoch);
  store.set("action", at::zeros({1}), Scope::Action);
  store.clear(Scope::Batch);
  BOOST_TEST(store.names() == (std::vector<std::string>{"step", "epoch", "action"}),
             boost::test_tools::per_element());
  store.clear(Scope::Step);
  BOOST_TEST(store.names() == (std::vector<std::string>{"epoch", "action"}),
             boost::test_tools::per_element());
  store.clear(Scope::Epoch);
  BOOST_TEST(store.names() == (std::vector<std::string>{"action"}),
             boost::test_tools::per_element());
  store.set("batch", at::ones({1}));  // a cleared name can be set again
  BOOST_TEST(store.contains("batch"));
}

BOOST_AUTO_TEST_CASE(missing_tensor_error_lists_the_names_present) {
  TensorStore store;
  store.set("loss", at::tensor(1.0));
  store.set("output", at::zeros({1}));
  try {
    store.get("accuracy");
    BOOST_FAIL("no error for a missing tensor");
  } catch (const Error& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("no tensor named 'accuracy'") != std::string::npos);
    BOOST_TEST(message.find("present: loss, output") != std::string::npos);
  }
  TensorStore empty;
  BOOST_CHECK_EXCEPTION(empty.get("loss"), Error, [](const Error& error) {
    return std::string(error.what()).find("present: none") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(metric_history_records_numbers_and_tensors) {
  MetricHistory history;
  history.record("val_loss", 10, 0, 0.9);
  history.record("val_loss", 20, 1, 0.4);
  history.record("val_loss", 30, 2, 0.6);
  history.record("train_loss", 1, 0, at::tensor(2.0));
  history.record("train_loss", 2, 0, at::tensor(4.0));
  history.record("train_loss", 3, 1, at::tensor(1.0));
  BOOST_TEST(history.latest("val_loss").value == 0.6);
  BOOST_TEST(history.best("val_loss", Mode::Min).step == 20);
  BOOST_TEST(history.best("val_loss", Mode::Max).epoch == 0);
  const auto& train = history.series("train_loss");
  BOOST_TEST(train.size() == 3u);
  BOOST_TEST(train[1].value == 4.0);
  BOOST_TEST(train[2].step == 3);
  BOOST_TEST(history.epoch_mean("train_loss", 0) == 3.0);
  BOOST_TEST(history.names() == (std::vector<std::string>{"val_loss", "train_loss"}),
             boost::test_tools::per_element());
}

// Plain CPU tensors are read when recorded. Negative views cannot be read from memory, so they
// take the deferred path that accelerator tensors take: pending, then read in one batch.
BOOST_AUTO_TEST_CASE(metric_history_records_many_tensor_values) {
  MetricHistory history;
  const auto count = static_cast<std::int64_t>(MetricHistory::kMaxPending) + 10;
  for (std::int64_t i = 0; i < count; ++i) {
    history.record("loss", i, 0, at::tensor(double(i)));
    history.record("deferred", i, 0, at::tensor(double(i))._neg_view());
  }
  const auto& series = history.series("loss");
  const auto& deferred = history.series("deferred");
  BOOST_TEST(series.size() == static_cast<std::size_t>(count));
  BOOST_TEST(deferred.size() == static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    BOOST_TEST(series[i].value == double(i));
    BOOST_TEST(deferred[i].value == -double(i));
  }
}

// erase removes a range of points, deferred values included (negative views are deferred like
// accelerator tensors); a series it empties leaves names() as if it had never been recorded.
BOOST_AUTO_TEST_CASE(metric_history_erases_a_range_of_points) {
  MetricHistory history;
  history.record("first", 1, 0, 1.0);
  for (int i = 0; i < 6; ++i) {
    const auto value = at::tensor(double(i));
    history.record("loss", i, 0, i < 2 ? value : value._neg_view());  // 2..5 deferred
  }
  history.erase("loss", 1, 4);  // a read point and two deferred ones
  BOOST_TEST(history.length("loss") == 3u);
  const auto& loss = history.series("loss");
  BOOST_TEST_REQUIRE(loss.size() == 3u);
  BOOST_TEST(loss[0].step == 0);
  BOOST_TEST(loss[0].value == 0.0);
  BOOST_TEST(loss[1].step == 4);
  BOOST_TEST(loss[1].value == -4.0);
  BOOST_TEST(loss[2].value == -5.0);
  history.erase("loss", 2, 99);  // past its end: as far as it has points
  BOOST_TEST(history.length("loss") == 2u);
  history.erase("missing", 0, 1);
  history.erase("first", 0, 1);
  BOOST_TEST(!history.contains("first"));
  BOOST_TEST(history.length("first") == 0u);
  history.record("first", 2, 0, 2.0);
  BOOST_TEST(history.names() == (std::vector<std::string>{"loss", "first"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(host_scalar_reads_plain_cpu_numbers_and_declines_the_rest) {
  BOOST_TEST(host_scalar(at::tensor(2.5)).value() == 2.5);
  BOOST_TEST(host_scalar(at::tensor(7, at::kLong)).value() == 7.0);
  BOOST_TEST(host_scalar(at::ones({}, at::kBool)).value() == 1.0);
  BOOST_TEST(host_scalar(at::tensor(0.5).to(at::kHalf)).value() == 0.5);
  BOOST_TEST(host_scalar(at::full({1, 1}, 3.0)).value() == 3.0);
  BOOST_TEST(host_scalar(at::arange(4.0).select(0, 3)).value() == 3.0);  // offset view
  BOOST_TEST(!host_scalar(at::Tensor()).has_value());
  BOOST_TEST(!host_scalar(at::zeros({2})).has_value());
  BOOST_TEST(!host_scalar(at::tensor(1.5)._neg_view()).has_value());
  BOOST_TEST(!host_scalar(at::complex(at::tensor(1.0), at::tensor(2.0))).has_value());
  // scalar_value falls back to item() where host_scalar declines.
  BOOST_TEST(scalar_value(at::tensor(1.5)._neg_view()) == -1.5);
  BOOST_TEST(scalar_value(at::tensor(4.0)) == 4.0);
  BOOST_CHECK_THROW(scalar_value(at::zeros({2})), c10::Error);
}

BOOST_AUTO_TEST_CASE(metric_history_errors_name_what_is_recorded) {
  MetricHistory history;
  history.record("train_loss", 1, 0, 1.0);
  BOOST_CHECK_EXCEPTION(history.latest("val_acc"), Error, [](const Error& error) {
    return std::string(error.what()).find("recorded: train_loss") != std::string::npos;
  });
  BOOST_CHECK_THROW(history.record("bad", 0, 0, at::zeros({2})), Error);
  BOOST_CHECK_THROW(history.record("bad", 0, 0, at::complex(at::tensor(1.0), at::tensor(2.0))),
                    Error);
  BOOST_CHECK_THROW(history.epoch_mean("train_loss", 5), Error);
}

BOOST_AUTO_TEST_CASE(state_records_metrics_at_its_counters_and_keeps_the_first_stop_reason) {
  State state;
  state.step = 7;
  state.epoch = 2;
  state.record_metric("lr", 0.1);
  BOOST_TEST(state.metrics.latest("lr").step == 7);
  BOOST_TEST(state.metrics.latest("lr").epoch == 2);
  BOOST_TEST(!state.stop_requested());
  state.request_stop("nan loss");
  state.request_stop("time limit");
  BOOST_TEST(state.stop_requested());
  BOOST_TEST(state.stop_reason() == "nan loss");
  state.clear_stop();
  BOOST_TEST(!state.stop_requested());
}

BOOST_AUTO_TEST_SUITE_END()
