#pragma once

/// \file
/// Every built-in callback, in one include.

#include <torchbus/torchbus.hpp>
