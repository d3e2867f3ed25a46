// Document-hash split (docs/design.md "Data"): MD5 through OpenSSL's EVP interface over the first 1024
// code points, bucket mod 1000, train below round(1000 * (1 - val_ratio)).
#include "data/split.h"

#include <openssl/evp.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "engine/error.h"

namespace skew::data {

std::string md5_hex(std::string_view bytes) {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1 ||
        EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1 ||
        EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1)
        fail("split: OpenSSL MD5 failed");
    static const char* hex = "0123456789abcdef";
    std::string out(2 * len, '0');
    for (unsigned i = 0; i < len; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    return out;
}

size_t utf8_prefix_bytes(std::string_view text, size_t code_points) {
    size_t seen = 0;
    for (size_t i = 0; i < text.size(); i++) {
        if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;  // continuation byte
        if (seen == code_points) return i;
        seen++;
    }
    return text.size();
}

int split_bucket(std::string_view text) {
    std::string hex = md5_hex(text.substr(0, utf8_prefix_bytes(text, kSplitCodePoints)));
    return static_cast<int>(std::strtoull(hex.substr(0, 8).c_str(), nullptr, 16) % 1000);
}

int split_train_buckets(double val_ratio) {
    if (!(val_ratio >= 0.0 && val_ratio <= 1.0)) fail("split: val_ratio must be in [0, 1], got {}", val_ratio);
    return static_cast<int>(std::lround(1000.0 * (1.0 - val_ratio)));
}

}  // namespace skew::data
