#pragma once

/// \file
/// Every built-in callback and the helpers they share with callbacks of your own, in one include.

#include <torchbus/callbacks/all_predictions_same.hpp>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/classification_metrics.hpp>
#include <torchbus/callbacks/csv_logger.hpp>
#include <torchbus/callbacks/default_callbacks.hpp>
#include <torchbus/callbacks/device_stats_monitor.hpp>
#include <torchbus/callbacks/early_stopping.hpp>
#include <torchbus/callbacks/ema.hpp>
#include <torchbus/callbacks/gradient_stats.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/lr_finder.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/callbacks/model_summary.hpp>
#include <torchbus/callbacks/parameter_selection.hpp>
#include <torchbus/callbacks/prediction_writer.hpp>
#include <torchbus/callbacks/profiler.hpp>
#include <torchbus/callbacks/progress_bar.hpp>
#include <torchbus/callbacks/regression_metrics.hpp>
#include <torchbus/callbacks/run_report.hpp>
#include <torchbus/callbacks/simple_logger.hpp>
#include <torchbus/callbacks/swa.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>
#include <torchbus/callbacks/terminate_on_nan.hpp>
#include <torchbus/callbacks/timer.hpp>
#include <torchbus/callbacks/value_scheduler.hpp>
#include <torchbus/torchbus.hpp>
