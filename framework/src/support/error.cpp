#include <c10/util/Exception.h>
#include <torchbus/error.hpp>

namespace torchbus::detail {

std::string first_line(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  std::string message = torch_error ? torch_error->what_without_backtrace() : error.what();
  return message.substr(0, message.find('\n'));
}

}  // namespace torchbus::detail
