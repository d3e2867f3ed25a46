// skew tokenize: a tokenizer (GPT-2's, a tokenizer.json or a tokenizer.model; data/tokenizer.h) on
// standard input, for users and scripts. Encodes stdin bytes to one line of space-separated token
// ids, or with --decode turns whitespace-separated ids back into bytes.
#include <cstdio>
#include <string>

#include "data/tokenizer.h"
#include "engine/error.h"
#include "tools/commands.h"

namespace skew::tools {

namespace {

/// Standard input `skew tokenize` reads at most (one line of ids out; corpora go through
/// `skew prepare`, which streams).
constexpr size_t TOKENIZE_MAX_INPUT_BYTES = size_t(64) << 20;

/// All of standard input, or skew::Error once it passes TOKENIZE_MAX_INPUT_BYTES (an endless
/// stream such as /dev/zero ends with that error instead of exhausting memory).
std::string read_stdin_bounded() {
    std::string input;
    char buf[1 << 16];
    while (true) {
        const size_t got = std::fread(buf, 1, sizeof buf, stdin);
        if (got == 0) break;
        if (input.size() + got > TOKENIZE_MAX_INPUT_BYTES)
            skew::fail("tokenize: standard input is larger than {} MiB; tokenize corpora with `skew prepare`",
                       TOKENIZE_MAX_INPUT_BYTES >> 20);
        input.append(buf, got);
    }
    if (std::ferror(stdin)) skew::fail("tokenize: reading standard input failed");
    return input;
}

}  // namespace

void register_tokenize_command(CLI::App& app) {
    auto dir = std::make_shared<std::string>("data/tokenizer");
    auto decode = std::make_shared<bool>(false);
    auto special = std::make_shared<bool>(false);
    CLI::App* cmd =
        app.add_subcommand("tokenize", "Encode standard input to token ids (one line), or decode ids with --decode");
    cmd->add_option("--tokenizer", *dir,
                    "Directory with tokenizer.json, tokenizer.model, or GPT-2's encoder.json + vocab.bpe (or "
                    "vocab.json + merges.txt)")
        ->capture_default_str();
    cmd->add_flag("--decode", *decode, "Read whitespace-separated ids from stdin and write the text they encode");
    cmd->add_flag("--allow-special", *special,
                  "Encode the literal text of special tokens as their ids (GPT-2: <|endoftext|> as 50256)");
    cmd->callback([dir, decode, special] {
        data::Tokenizer tok = data::tokenizer_load(*dir);
        const std::string input = read_stdin_bounded();
        if (*decode) {
            std::vector<int32_t> ids;
            size_t pos = 0;
            while (true) {
                pos = input.find_first_not_of(" \t\r\n", pos);
                if (pos == std::string::npos) break;
                size_t end = input.find_first_of(" \t\r\n", pos);
                std::string word = input.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
                size_t used = 0;
                long long id = -1;
                try {
                    id = std::stoll(word, &used);
                } catch (const std::exception&) {
                    used = 0;
                }
                if (used != word.size() || word.empty())
                    skew::fail("tokenize: \"{}\" at byte {} of the input is not a token id", word, pos);
                if (id < 0 || id >= tok.vocab_size())
                    skew::fail("tokenize: id {} at byte {} is outside the vocabulary [0, {})", id, pos,
                               tok.vocab_size());
                ids.push_back(int32_t(id));
                pos = end;
            }
            std::string text = data::tokenizer_decode(tok, ids);
            std::fwrite(text.data(), 1, text.size(), stdout);
            return;
        }
        std::vector<int32_t> ids = data::tokenizer_encode(tok, input, *special);
        std::string line;
        for (size_t i = 0; i < ids.size(); i++) {
            if (i) line.push_back(' ');
            line += std::to_string(ids[i]);
        }
        line.push_back('\n');
        std::fwrite(line.data(), 1, line.size(), stdout);
    });
}

}  // namespace skew::tools
