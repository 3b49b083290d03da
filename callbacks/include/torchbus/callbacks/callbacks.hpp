#pragma once

/// \file
/// Every built-in callback, in one include.

#include <torchbus/callbacks/csv_logger.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/callbacks/progress_bar.hpp>
#include <torchbus/callbacks/simple_logger.hpp>
#include <torchbus/torchbus.hpp>
