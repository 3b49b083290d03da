#pragma once

// Stop signals during start-up: before training, a stop signal ends the process with 128+N and
// nothing of the run written, also while it waits at the rendezvous of a distributed run.

#include <torchbus/distributed.hpp>

#include <memory>

namespace train {

/// When a stop signal arrived, logs "<SIGNAL> during start-up: exiting before training, nothing
/// written" and throws StartupExit with 128+N.
void exit_if_signalled_during_startup();

/// ProcessGroup::from_environment() on a thread with the stop signals blocked, while this thread
/// watches for them: a stop signal while connecting to the rendezvous store or waiting for the
/// other ranks ends the process within 0.1 s, as exit_if_signalled_during_startup() does (the
/// blocking c10d calls cannot be cancelled, so it exits without unwinding).
std::shared_ptr<torchbus::ProcessGroup> join_process_group();

}  // namespace train
