// The paper's document-hash train/validation split (docs/design.md "Data"): MD5 of the UTF-8 bytes of a
// document's first 1024 Unicode code points; bucket = (first 8 hex digits as an integer) mod 1000;
// a document is in train when bucket < 1000 * (1 - val_ratio), i.e. < 950 for the default 0.05.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace skew::data {

inline constexpr size_t kSplitCodePoints = 1024;

/// Lowercase hex MD5 (OpenSSL EVP) of bytes.
std::string md5_hex(std::string_view bytes);

/// Number of leading bytes of text that hold its first code_points code points. A code point starts
/// at every byte that is not a UTF-8 continuation byte (10xxxxxx), so invalid bytes count one each.
size_t utf8_prefix_bytes(std::string_view text, size_t code_points);

/// The document's bucket in [0, 1000): int(md5(first 1024 code points)[:8], 16) % 1000.
int split_bucket(std::string_view text);

/// Buckets below this are train: round(1000 * (1 - val_ratio)). Throws skew::Error unless 0 <= val_ratio <= 1.
int split_train_buckets(double val_ratio);

/// True when the document belongs to the training split.
inline bool split_is_train(std::string_view text, double val_ratio) {
    return split_bucket(text) < split_train_buckets(val_ratio);
}

}  // namespace skew::data
