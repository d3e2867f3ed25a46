// libFuzzer target: the GPT-2 BPE tokenizer (tests/fixtures/data/gpt2). Encoding never fails, and
// for valid UTF-8 text decode(encode(s)) == s (byte-level BPE is lossless).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/tokenizer.h"
#include "engine/text.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const skew::data::Tokenizer tok = skew::data::tokenizer_load(SKEW_SOURCE_DIR "/tests/fixtures/data/gpt2");
    const std::string_view text = skew::fuzz::as_text(data, size);
    const std::vector<int32_t> ids = skew::data::tokenizer_encode(tok, text, false);
    for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) std::abort();
    if (skew::utf8_valid(text) && skew::data::tokenizer_decode(tok, ids) != text) std::abort();
    // With special tokens allowed "<|endoftext|>" becomes one id; decoding gives the text back all the same.
    const std::vector<int32_t> special = skew::data::tokenizer_encode(tok, text, true);
    if (skew::utf8_valid(text) && skew::data::tokenizer_decode(tok, special) != text) std::abort();
    return 0;
}
