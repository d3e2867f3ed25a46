// libFuzzer target: llm.c token shards (uint16 and uint32 layouts): the header check and readers
// (shard_check, shard_read, shard_read_ids) and the memory-mapped split reader
// (token_split_open_files, token_split_read, token_split_check_ids).
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "data/batch_stream.h"
#include "data/shard.h"
#include "engine/error.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = skew::fuzz::write_scratch("train_000000.bin", data, size);
    int64_t tokens = -1;
    try {
        tokens = skew::data::shard_check(path);
        const std::vector<int32_t> all = skew::data::shard_read_ids(path);
        if (int64_t(all.size()) != tokens) std::abort();
        if (skew::data::shard_header(path).token_bytes == 2 && skew::data::shard_read(path).size() != all.size())
            std::abort();
    } catch (const skew::Error&) {}
    try {
        const skew::data::TokenSplit split = skew::data::token_split_open_files({path}, "train");
        if (tokens >= 0 && split.tokens != tokens) std::abort();
        const int64_t n = std::min<int64_t>(split.tokens, 4096);
        std::vector<int32_t> out(static_cast<size_t>(n));
        skew::data::token_split_read(split, 0, n, out.data());
        skew::data::token_split_check_ids(split, 0, out.data(), n, 50257);
    } catch (const skew::Error&) {}
    return 0;
}
