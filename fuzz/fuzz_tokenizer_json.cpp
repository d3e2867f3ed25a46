// libFuzzer target: the Hugging Face tokenizer.json loader (tokenizer_parse_json) and, when a file
// loads, encoding with it: its normalizer, its own Split patterns and added tokens run on a fixed
// multilingual text and on the input's first bytes. Loading refuses with skew::Error or succeeds;
// every id it encodes is in its vocabulary and decodes.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/tokenizer.h"
#include "engine/error.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text = skew::fuzz::as_text(data, size);
    skew::data::Tokenizer tok;
    try {
        tok = skew::data::tokenizer_parse_json(text, "fuzz input");
    } catch (const skew::Error&) {
        return 0;
    }
    static const std::string sample =
        "The quick brown fox's 12 jumps — naïve café, e\xCC\x81, "
        "日本語 한국어 🙂 <|endoftext|> <think>\n\t  "
        "x\xFF\xC3";
    skew::data::TokenizerWorkspace ws;
    for (const std::string_view t : {std::string_view(sample), text.substr(0, 512)})
        for (bool special : {false, true}) {
            std::vector<int32_t> ids;
            try {
                skew::data::tokenizer_encode(tok, t, ids, ws, special);
            } catch (const skew::Error&) {
                continue;  // a pattern past PCRE2's match limits: refused with the reason
            }
            for (int32_t id : ids)
                if (id < 0 || id >= tok.vocab_size()) std::abort();
            (void)skew::data::tokenizer_decode(tok, ids);
        }
    return 0;
}
