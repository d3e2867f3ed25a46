// ICU Normalizer2 over the valid UTF-8 runs of a byte string (data/unicode_normalize.h).
#include "data/unicode_normalize.h"

#include <climits>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include "engine/error.h"
#include "engine/text.h"

namespace skew::data {

static const icu::Normalizer2& normalizer_of(NormalizationForm form) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    switch (form) {
        case NORMALIZE_NFC: n = icu::Normalizer2::getNFCInstance(status); break;
        case NORMALIZE_NFD: n = icu::Normalizer2::getNFDInstance(status); break;
        case NORMALIZE_NFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
        case NORMALIZE_NFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
    }
    if (U_FAILURE(status) || !n)
        fail("tokenizer: ICU cannot load its {} normalization data: {}", choice_name(form), u_errorName(status));
    return *n;
}

void unicode_normalize(NormalizationForm form, std::string_view text, std::string& out) {
    const icu::Normalizer2& n = normalizer_of(form);
    icu::StringByteSink<std::string> sink(&out);
    size_t i = 0;
    while (i < text.size()) {
        size_t run = i;  // [i, run) is valid UTF-8
        for (size_t len; run < text.size() && (len = utf8_sequence_length(text, run)) > 0;) run += len;
        if (run - i > size_t(INT32_MAX))
            fail("tokenizer: a run of {} bytes is too long for ICU's normalizer (2 GiB at most)", run - i);
        if (run > i) {
            UErrorCode status = U_ZERO_ERROR;
            n.normalizeUTF8(0, icu::StringPiece(text.data() + i, int32_t(run - i)), sink, nullptr, status);
            if (U_FAILURE(status))
                fail("tokenizer: ICU {} normalization failed: {}", choice_name(form), u_errorName(status));
        }
        i = run;
        while (i < text.size() && utf8_sequence_length(text, i) == 0) out.push_back(text[i++]);
    }
}

}  // namespace skew::data
