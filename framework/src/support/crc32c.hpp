#pragma once

// CRC-32C (Castagnoli), the checksum of checkpoint files. Private to the framework.

#include <boost/crc.hpp>

namespace torchbus {

/// CRC-32C (RFC 3720): polynomial 0x1EDC6F41, reflected, initial value and final XOR all ones.
/// `process_bytes` as often as needed, then `checksum()`.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

}  // namespace torchbus
