// libFuzzer target: the corpus readers: one input as a .jsonl file, as a .jsonl.gz file (zlib) and
// as a .txt file, each read to the end with document_reader_next and document_parse.
#include <cstdint>
#include <string>

#include "data/reader.h"
#include "engine/error.h"
#include "fuzz/fuzz_util.h"

namespace {

void read_all(const std::string& path) {
    try {
        skew::data::DocumentReader r = skew::data::document_reader_open({path});
        skew::data::DocumentRecord rec;
        std::string text, error;
        while (skew::data::document_reader_next(r, rec)) skew::data::document_parse(rec, "text", text, error);
    } catch (const skew::Error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    read_all(skew::fuzz::write_scratch("corpus.jsonl", data, size));
    read_all(skew::fuzz::write_scratch("corpus.jsonl.gz", data, size));
    read_all(skew::fuzz::write_scratch("corpus.txt", data, size));
    return 0;
}
