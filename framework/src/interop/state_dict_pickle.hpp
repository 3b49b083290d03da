#pragma once

// Python's state_dict pickles in a form LibTorch 1.13's unpickler reads.

#include <string>

namespace torchbus::detail {

/// Rewrites a protocol-2 pickle as written by Python's torch.save so that LibTorch 1.13's
/// unpickler reads it: every `collections.OrderedDict()` (a state_dict, a tensor's empty backward
/// hooks) becomes an empty dict, BUILD (the OrderedDict's `_metadata` attribute: per-module
/// versions) is dropped with its argument, and SETITEM (a dict of one item) becomes MARK ...
/// SETITEMS. Throws DataError naming the problem for other protocols and for opcodes a state_dict
/// does not hold.
std::string unpicklable_state_dict(const std::string& pickle);

}  // namespace torchbus::detail
