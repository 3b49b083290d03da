#pragma once

/// \file
/// Everything torchbus offers, in one include.

#include <torchbus/archive_value.hpp>
#include <torchbus/atomic_file.hpp>
#include <torchbus/batch_source.hpp>
#include <torchbus/bus.hpp>
#include <torchbus/callback.hpp>
#include <torchbus/checkpoint.hpp>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/connection.hpp>
#include <torchbus/control.hpp>
#include <torchbus/decorators.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/distributed_sampler.hpp>
#include <torchbus/error.hpp>
#include <torchbus/event.hpp>
#include <torchbus/event_list.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/gradient_reducer.hpp>
#include <torchbus/launch_environment.hpp>
#include <torchbus/logged_values.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/loss_scaler.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/phase.hpp>
#include <torchbus/placement.hpp>
#include <torchbus/precision.hpp>
#include <torchbus/role.hpp>
#include <torchbus/scalar_value.hpp>
#include <torchbus/state.hpp>
#include <torchbus/subscription.hpp>
#include <torchbus/system_error_text.hpp>
#include <torchbus/tensor_store.hpp>
#include <torchbus/trainer.hpp>
#include <torchbus/trainer_options.hpp>
