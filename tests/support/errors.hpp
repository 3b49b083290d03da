#pragma once

// Test support: the message of an expected error, and substring checks that explain a failure.

#include <boost/test/unit_test.hpp>

#include <string>

namespace torchbus::testing {

/// The message of the ErrorType thrown by `action`; fails the test when none is thrown.
template <typename ErrorType, typename Action>
std::string message_of(Action&& action) {
  try {
    action();
  } catch (const ErrorType& error) {
    return error.what();
  }
  BOOST_FAIL("the expected error was not thrown");
  return "";
}

/// Whether `text` contains `part`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Whether `text` contains `part`; logs both when it does not.
inline bool has(const std::string& text, const std::string& part) {
  const bool found = contains(text, part);
  if (!found) BOOST_TEST_MESSAGE("'" << part << "' not in: " << text);
  return found;
}

/// Whether `text` does not contain `part`; logs both when it does.
inline bool lacks(const std::string& text, const std::string& part) {
  const bool found = contains(text, part);
  if (found) BOOST_TEST_MESSAGE("'" << part << "' unexpectedly in: " << text);
  return !found;
}

}  // namespace torchbus::testing
