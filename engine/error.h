// Errors with context. Every failure a user can cause (bad config, bad data, bad path, a plan that
// does not fit) is a skew::Error whose message names the file, key, line, tensor or step; the
// command boundary (tools/main.cpp) prints it once and exits non-zero.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace skew {

/// A user-facing error; what() is the complete message.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Throw skew::Error with an fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace skew
