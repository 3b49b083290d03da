#include "support/exception_text.hpp"

namespace torchbus::detail {

std::string exception_text(const std::exception_ptr& error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& exception) {
    return exception.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

}  // namespace torchbus::detail
