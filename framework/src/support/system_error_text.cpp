#include <torchbus/system_error_text.hpp>

#include <cstring>

namespace torchbus {
namespace {

// strerror_r comes in two flavours: GNU's returns the text, XSI's fills the buffer and returns 0.
// Only the one of the C library is called.
[[maybe_unused]] const char* text_of(const char* gnu_text, const char* /*buffer*/) {
  return gnu_text;
}
[[maybe_unused]] const char* text_of(int xsi_result, const char* buffer) {
  return xsi_result == 0 ? buffer : nullptr;
}

}  // namespace

std::string system_error_text(int error_number) {
  if (error_number == 0) return "unknown error";
  char buffer[256] = {};
  const char* text = text_of(::strerror_r(error_number, buffer, sizeof buffer), buffer);
  return text != nullptr ? std::string(text) : "error " + std::to_string(error_number);
}

}  // namespace torchbus
