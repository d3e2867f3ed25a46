// The tokenizer core (data/tokenizer.h): choosing the kind by a folder's files, GPT-2's vocabulary
// files, byte-pair merging by rank (OpenAI's encoder.py, tiktoken's byte_pair_encode and Hugging Face's
// BPE give the same ids; long pieces go through a heap so they stay O(n log n)), added-token matching,
// normalization and pre-tokenization (Hugging Face's AddedVocabulary, Split and ByteLevel), decoding.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer.h"

#include <nlohmann/json.hpp>
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "data/tokenizer_build.h"
#include "data/tokenizer_sentencepiece.h"
#include "data/unicode_normalize.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/text.h"

namespace skew::data {

// GPT-2's pattern (encoder.py). \s is spelled out as Unicode White_Space (what Python's `regex`,
// tiktoken's Rust regex and Hugging Face's Oniguruma use).
static constexpr const char* kSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

const std::vector<std::string_view> kEndOfTextNames = {
    "<|endoftext|>", "<|end_of_text|>", "</s>", "<|end\xE2\x96\x81of\xE2\x96\x81sentence|>", "<eos>", "<EOT>"};

struct TokenizerRegex {
    pcre2_code* code = nullptr;
    bool jit = false;
    ~TokenizerRegex() { pcre2_code_free(code); }
};

// The word cache: a flat table of (hash, piece bytes, ids) with the bytes and ids in arenas.
struct WordCache {
    struct Slot {
        uint64_t hash = FlatTable64::kEmpty;
        uint32_t bytes_offset = 0, ids_offset = 0;
        uint16_t bytes = 0, ids = 0;
    };
    std::vector<Slot> slots;
    size_t used = 0;
    std::string arena;                 // piece bytes
    std::vector<int32_t> pool;         // token ids
    const Tokenizer* owner = nullptr;  // the tokenizer whose ids it holds
    void reset(size_t capacity) {
        slots.assign(capacity, Slot{});
        used = 0;
        arena.clear();
        pool.clear();
    }
};

struct TokenizerWorkspace::Impl {
    pcre2_match_data* match = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* jit_stack = nullptr;
    WordCache cache;
    std::string normalized, scratch;  // normalization output (and the input of a second form)
};

uint64_t tokenizer_hash_bytes(std::string_view bytes) {
    const char* p = bytes.data();
    size_t n = bytes.size();
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h == FlatTable64::kEmpty ? h - 1 : h;
}

static inline uint64_t mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

void tokenizer_table_init(FlatTable64& t, size_t entries) {
    size_t cap = 16;
    while (cap < entries * 2) cap <<= 1;
    t.keys.assign(cap, FlatTable64::kEmpty);
    t.values.assign(cap, 0);
    t.mask = cap - 1;
    t.size = 0;
}

// The table doubles before it is half full, so probing always ends (any number of merges).
bool tokenizer_table_insert(FlatTable64& t, uint64_t key, uint64_t value) {
    if (2 * (t.size + 1) > t.mask + 1) {
        FlatTable64 grown;
        tokenizer_table_init(grown, size_t(t.mask + 1));
        for (size_t i = 0; i <= t.mask; ++i)
            if (t.keys[i] != FlatTable64::kEmpty) tokenizer_table_insert(grown, t.keys[i], t.values[i]);
        t = std::move(grown);
    }
    for (uint64_t i = mix64(key) & t.mask;; i = (i + 1) & t.mask) {
        if (t.keys[i] == key) return false;
        if (t.keys[i] == FlatTable64::kEmpty) {
            t.keys[i] = key;
            t.values[i] = value;
            ++t.size;
            return true;
        }
    }
}

static inline bool flat_find(const FlatTable64& t, uint64_t key, uint64_t& value) {
    for (uint64_t i = mix64(key) & t.mask;; i = (i + 1) & t.mask) {
        uint64_t k = t.keys[i];
        if (k == key) {
            value = t.values[i];
            return true;
        }
        if (k == FlatTable64::kEmpty) return false;
    }
}

TokenizerWorkspace::TokenizerWorkspace() : impl(std::make_unique<Impl>()) {
    impl->match = pcre2_match_data_create(4, nullptr);
    impl->context = pcre2_match_context_create(nullptr);
    impl->jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(impl->context, nullptr, impl->jit_stack);
}

TokenizerWorkspace::~TokenizerWorkspace() {
    pcre2_match_data_free(impl->match);
    pcre2_match_context_free(impl->context);
    pcre2_jit_stack_free(impl->jit_stack);
}

const std::vector<uint32_t>& gpt2_byte_to_unicode() {
    static const std::vector<uint32_t> map = [] {
        std::vector<uint32_t> m(256, 0);
        std::vector<bool> printable(256, false);
        for (int b = '!'; b <= '~'; b++) printable[b] = true;
        for (int b = 0xA1; b <= 0xAC; b++) printable[b] = true;
        for (int b = 0xAE; b <= 0xFF; b++) printable[b] = true;
        uint32_t n = 0;
        for (int b = 0; b < 256; b++) m[b] = printable[b] ? uint32_t(b) : 256 + n++;
        return m;
    }();
    return map;
}

// ---- patterns

// `\s` / `\S` -> Unicode White_Space, everything else as written (escapes kept whole).
static std::string white_space_as_unicode(const std::string& pattern) {
    std::string out;
    out.reserve(pattern.size() + 32);
    for (size_t i = 0; i < pattern.size(); i++) {
        if (pattern[i] != '\\' || i + 1 == pattern.size()) {
            out.push_back(pattern[i]);
            continue;
        }
        const char next = pattern[++i];
        if (next == 's') out += "\\p{White_Space}";
        else if (next == 'S') out += "\\P{White_Space}";
        else {
            out.push_back('\\');
            out.push_back(next);
        }
    }
    return out;
}

// Plain text as a pattern: every ASCII character that is not a letter or digit escaped.
static std::string escaped(const std::string& text) {
    std::string out;
    for (char c : text) {
        const unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

std::shared_ptr<TokenizerRegex> tokenizer_compile_pattern(const std::string& pattern, bool literal,
                                                          const std::string& what) {
    const std::string text = literal ? escaped(pattern) : white_space_as_unicode(pattern);
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto re = std::make_shared<TokenizerRegex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fail("tokenizer: {}: PCRE2 cannot compile the pattern \"{}\" at offset {}: {}", what, escape_text(pattern),
             err_offset, reinterpret_cast<char*>(msg));
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return re;
}

std::shared_ptr<TokenizerRegex> tokenizer_gpt2_pattern() {
    static const std::shared_ptr<TokenizerRegex> re = [] {
        const std::string space = kSpace;
        return tokenizer_compile_pattern("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + space +
                                             "\\p{L}\\p{N}]+|[" + space + "]+(?![^" + space + "])|[" + space + "]+",
                                         false, "GPT-2's pattern");
    }();
    return re;
}

// ---- vocabulary

bool tokenizer_alphabet_to_bytes(std::string_view s, std::string& out) {
    static const std::vector<int> unicode_to_byte = [] {
        std::vector<int> u2b(512, -1);
        const auto& b2u = gpt2_byte_to_unicode();
        for (int b = 0; b < 256; b++) u2b[b2u[b]] = b;
        return u2b;
    }();
    out.clear();
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        uint32_t cp;
        int len;
        if (c < 0x80) {
            cp = c;
            len = 1;
        } else if ((c >> 5) == 6) {
            cp = c & 0x1F;
            len = 2;
        } else if ((c >> 4) == 14) {
            cp = c & 0x0F;
            len = 3;
        } else {
            cp = c & 0x07;
            len = 4;
        }
        if (i + len > s.size()) return false;
        for (int k = 1; k < len; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        i += len;
        if (cp >= unicode_to_byte.size() || unicode_to_byte[cp] < 0) return false;
        out.push_back(static_cast<char>(unicode_to_byte[cp]));
    }
    return true;
}

// What the merges and the whole-token table see of each id: its bytes, or a SentencePiece-style
// vocabulary's strings ("\u2581" for a space, <0xNN> for a byte).
static const std::vector<std::string>& model_strings(const Tokenizer& tok) {
    return tok.kind == TOKENIZER_HF_SENTENCEPIECE_BPE ? tok.pieces : tok.token_bytes;
}

// Whole-piece lookup: a piece whose bytes are a token is that token (tiktoken; Hugging Face's
// ignore_merges; a SentencePiece-style vocabulary's characters). Hash collisions are harmless: a hit
// is verified against the token's string.
void tokenizer_build_whole(Tokenizer& tok, const std::vector<char>& in_model) {
    const std::vector<std::string>& strings = model_strings(tok);
    tokenizer_table_init(tok.whole, strings.size());
    for (size_t id = 0; id < strings.size(); id++) {
        if (!in_model[id] || strings[id].empty()) continue;
        uint64_t h = tokenizer_hash_bytes(strings[id]);
        for (uint64_t i = mix64(h) & tok.whole.mask;; i = (i + 1) & tok.whole.mask)
            if (tok.whole.keys[i] == FlatTable64::kEmpty) {
                tok.whole.keys[i] = h;
                tok.whole.values[i] = id;
                ++tok.whole.size;
                break;
            }
    }
}

void tokenizer_normalize(const Tokenizer& tok, std::string_view text, std::string& out, std::string& scratch) {
    out.assign(text);
    for (const NormalizerStep& n : tok.normalizers) {
        scratch.swap(out);
        out.clear();
        switch (n.kind) {
            case NormalizerStep::UNICODE_FORM: unicode_normalize(n.form, scratch, out); break;
            case NormalizerStep::PREPEND:
                if (!scratch.empty()) out = n.text;
                out += scratch;
                break;
            case NormalizerStep::REPLACE:
                for (size_t pos = 0;;) {
                    const size_t hit = scratch.find(n.text, pos);
                    out.append(scratch, pos, hit == std::string::npos ? std::string::npos : hit - pos);
                    if (hit == std::string::npos) break;
                    out += n.replacement;
                    pos = hit + n.text.size();
                }
                break;
        }
    }
}

void tokenizer_prepare_added(Tokenizer& tok) {
    std::string scratch;
    for (AddedToken& t : tok.added_tokens) {
        t.match = t.content;
        if (t.normalized) tokenizer_normalize(tok, t.content, t.match, scratch);
    }
    // Longest first, so the first hit at a position is the longest (leftmost-longest matching).
    std::stable_sort(tok.added_tokens.begin(), tok.added_tokens.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.match.size() > b.match.size(); });
    std::erase_if(tok.added_tokens, [](const AddedToken& t) { return t.match.empty(); });
}

std::string tokenizer_main_file(const std::string& dir) {
    std::error_code ec;
    const std::filesystem::path d(dir);
    for (const char* f : {"tokenizer.json", "tokenizer.model"})
        if (std::filesystem::is_regular_file(d / f, ec)) return f;
    if (std::filesystem::is_regular_file(d / "encoder.json", ec) &&
        std::filesystem::is_regular_file(d / "vocab.bpe", ec))
        return "encoder.json";
    if (std::filesystem::is_regular_file(d / "vocab.json", ec) &&
        std::filesystem::is_regular_file(d / "merges.txt", ec))
        return "vocab.json";
    return "";
}

Tokenizer tokenizer_load(const std::string& dir) {
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
        fail(
            "tokenizer: {} is a file, not a tokenizer folder (one holding tokenizer.json, tokenizer.model, or GPT-2's "
            "encoder.json + vocab.bpe; pass --tokenizer DIR)",
            dir);
    const std::string main = tokenizer_main_file(dir);
    if (main == "tokenizer.json") return tokenizer_load_json(dir + "/tokenizer.json");
    if (main == "tokenizer.model") return tokenizer_load_sentencepiece(dir + "/tokenizer.model");
    if (main == "encoder.json") return tokenizer_load_files(dir + "/encoder.json", dir + "/vocab.bpe");
    if (main == "vocab.json") return tokenizer_load_files(dir + "/vocab.json", dir + "/merges.txt");
    fail(
        "tokenizer: {} holds no tokenizer.json, tokenizer.model, encoder.json + vocab.bpe or vocab.json + merges.txt "
        "(run scripts/fetch_data.sh, or pass --tokenizer DIR)",
        dir);
}

Tokenizer tokenizer_load_files(const std::string& vocab_json_path, const std::string& merges_path) {
    Tokenizer tok;
    tok.kind = TOKENIZER_GPT2_BPE;
    tok.source = vocab_json_path + " + " + merges_path;
    std::ifstream vf(vocab_json_path, std::ios::binary);
    if (!vf) fail("tokenizer: cannot open {}", vocab_json_path);
    const std::string vocab_text((std::istreambuf_iterator<char>(vf)), std::istreambuf_iterator<char>());
    nlohmann::json vocab;
    std::string json_error;
    if (!json_try_parse_strict(vocab_text, vocab, json_error))
        fail("tokenizer: {} is not valid JSON: {}", vocab_json_path, json_error);
    if (!vocab.is_object() || vocab.empty())
        fail("tokenizer: {} must be a JSON object mapping token -> id", vocab_json_path);

    std::unordered_map<std::string, int32_t> id_of;  // vocab string (unicode form) -> id
    id_of.reserve(vocab.size() * 2);
    int64_t max_id = -1;
    for (auto& [key, value] : vocab.items()) {
        // Ids index a dense table (token_bytes): one far beyond any real vocabulary (GPT-2 50,257;
        // the largest in use ~256k) would size it at gigabytes, so ids stop at 2^24.
        constexpr int64_t MAX_TOKEN_ID = (int64_t(1) << 24) - 1;
        if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > MAX_TOKEN_ID)
            fail("tokenizer: {}: token \"{}\" has id {}, expected an integer in [0, {}]", vocab_json_path, key,
                 value.dump(), MAX_TOKEN_ID);
        max_id = std::max<int64_t>(max_id, value.get<int64_t>());
    }
    tok.token_bytes.assign(size_t(max_id + 1), std::string());
    std::unordered_map<int32_t, std::string> holder;  // the token that took each id
    std::string bytes;
    for (auto& [key, value] : vocab.items()) {
        int32_t id = static_cast<int32_t>(value.get<int64_t>());
        if (const auto [it, fresh] = holder.emplace(id, key); !fresh)  // decoding the id would give one of two texts
            fail("tokenizer: {}: tokens \"{}\" and \"{}\" both have id {}", vocab_json_path, it->second, key, id);
        id_of[key] = id;
        if (key == kEndOfTextText) {
            tok.token_bytes[id] = key;
            continue;
        }
        if (!tokenizer_alphabet_to_bytes(key, bytes)) bytes = key;  // added tokens outside the byte alphabet: literal
        tok.token_bytes[id] = bytes;
    }
    auto eot = id_of.find(std::string(kEndOfTextText));
    tok.eot = eot == id_of.end() ? -1 : eot->second;
    if (tok.eot < 0) tok.eot_text.clear();
    const auto& b2u = gpt2_byte_to_unicode();
    for (int b = 0; b < 256; b++) {
        std::string u;
        uint32_t cp = b2u[b];
        if (cp < 0x80) u.push_back(char(cp));
        else {
            u.push_back(char(0xC0 | (cp >> 6)));
            u.push_back(char(0x80 | (cp & 0x3F)));
        }
        auto it = id_of.find(u);
        if (it == id_of.end()) fail("tokenizer: {} lacks the token for byte {} (\"{}\")", vocab_json_path, b, u);
        tok.byte_token[b] = it->second;
    }

    std::ifstream mf(merges_path, std::ios::binary);
    if (!mf) fail("tokenizer: cannot open {}", merges_path);
    std::string line;
    int64_t line_no = 0, rank = 0;
    tokenizer_table_init(tok.merges, 60000);
    while (std::getline(mf, line)) {
        line_no++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
            fail("tokenizer: {}:{}: expected two tokens separated by one space, got \"{}\"", merges_path, line_no,
                 line);
        std::string a = line.substr(0, sp), b = line.substr(sp + 1);
        auto ia = id_of.find(a), ib = id_of.find(b), im = id_of.find(a + b);
        if (ia == id_of.end() || ib == id_of.end() || im == id_of.end())
            fail("tokenizer: {}:{}: merge \"{}\" uses a token missing from {}", merges_path, line_no, line,
                 vocab_json_path);
        uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
        tokenizer_table_insert(tok.merges, key,
                               (uint64_t(rank) << 32) | uint32_t(im->second));  // first (lowest) rank wins
        rank++;
    }
    if (rank == 0) fail("tokenizer: {} holds no merges", merges_path);
    std::vector<char> in_model(tok.token_bytes.size(), 1);
    if (tok.eot >= 0) in_model[size_t(tok.eot)] = 0;
    tokenizer_build_whole(tok, in_model);
    tok.whole_piece_first = true;  // as tiktoken
    tok.size = int32_t(tok.token_bytes.size());
    PreTokenizerStep byte_level;
    byte_level.byte_level = true;
    byte_level.regex = tokenizer_gpt2_pattern();
    tok.pre_tokenizer = {byte_level};
    if (tok.eot >= 0) {
        AddedToken eot_token;
        eot_token.content = std::string(kEndOfTextText);
        eot_token.id = tok.eot;
        eot_token.special = true;
        tok.added_tokens = {eot_token};
    }
    tokenizer_prepare_added(tok);
    return tok;
}

// ---- byte-pair merging

static thread_local uint64_t merge_lookups = 0;  // work counter (tokenizer_merge_lookups)

uint64_t tokenizer_merge_lookups() { return merge_lookups; }

static inline bool lookup_merge(const Tokenizer& tok, int32_t left, int32_t right, uint32_t& rank, int32_t& merged) {
    ++merge_lookups;
    uint64_t v;
    if (!flat_find(tok.merges, (uint64_t(uint32_t(left)) << 32) | uint32_t(right), v)) return false;
    rank = uint32_t(v >> 32);
    merged = int32_t(v & 0xFFFFFFFFu);
    return true;
}

// The id of the token whose bytes (SentencePiece-style: vocabulary string) are exactly piece, or -1.
static inline int32_t lookup_whole(const Tokenizer& tok, std::string_view piece, uint64_t h) {
    const std::vector<std::string>& strings = model_strings(tok);
    for (uint64_t i = mix64(h) & tok.whole.mask;; i = (i + 1) & tok.whole.mask) {
        uint64_t k = tok.whole.keys[i];
        if (k == FlatTable64::kEmpty) return -1;
        if (k == h && strings[tok.whole.values[i]] == piece) return int32_t(tok.whole.values[i]);
    }
}

// The symbols a piece is merged from: the tokens of its bytes; for a SentencePiece-style vocabulary
// its characters, each the piece it is or else the <0xNN> pieces of its UTF-8 bytes (Hugging Face's
// BPE with byte_fallback; a byte that is not UTF-8 is a character of its own).
static void initial_symbols(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& ids) {
    ids.clear();
    if (tok.kind != TOKENIZER_HF_SENTENCEPIECE_BPE) {
        for (const char c : piece) ids.push_back(tok.byte_token[static_cast<unsigned char>(c)]);
        return;
    }
    for (size_t i = 0; i < piece.size();) {
        const std::string_view ch = piece.substr(i, std::max<size_t>(1, utf8_sequence_length(piece, i)));
        const int32_t id = lookup_whole(tok, ch, tokenizer_hash_bytes(ch));
        if (id >= 0) ids.push_back(id);
        else
            for (const char c : ch) ids.push_back(tok.byte_token[static_cast<unsigned char>(c)]);
        i += ch.size();
    }
}

static constexpr uint32_t kNoRank = 0xFFFFFFFFu;

// Short pieces (n <= 64 symbols): keep the rank of each adjacent pair; merge the leftmost lowest
// rank; update neighbours.
static void bpe_small(const Tokenizer& tok, const int32_t* symbols, size_t n, std::vector<int32_t>& out) {
    int32_t ids[64];
    uint32_t ranks[64];
    int32_t merged_ids[64];
    std::copy(symbols, symbols + n, ids);
    size_t count = n;
    for (size_t i = 0; i + 1 < count; i++)
        if (!lookup_merge(tok, ids[i], ids[i + 1], ranks[i], merged_ids[i])) ranks[i] = kNoRank;
    while (count > 1) {
        size_t best = 0;
        uint32_t best_rank = kNoRank;
        for (size_t i = 0; i + 1 < count; i++)
            if (ranks[i] < best_rank) {
                best_rank = ranks[i];
                best = i;
            }
        if (best_rank == kNoRank) break;
        ids[best] = merged_ids[best];
        for (size_t i = best + 1; i + 1 < count; i++) {
            ids[i] = ids[i + 1];
            ranks[i] = ranks[i + 1];
            merged_ids[i] = merged_ids[i + 1];
        }
        count--;
        if (best + 1 < count) {
            if (!lookup_merge(tok, ids[best], ids[best + 1], ranks[best], merged_ids[best])) ranks[best] = kNoRank;
        } else {
            ranks[best] = kNoRank;
        }
        if (best > 0 && !lookup_merge(tok, ids[best - 1], ids[best], ranks[best - 1], merged_ids[best - 1]))
            ranks[best - 1] = kNoRank;
    }
    out.insert(out.end(), ids, ids + count);
}

// Long pieces: a doubly linked list of symbols and a binary min-heap of (rank, position) with lazy
// deletion: an entry is stale when its left or right symbol has changed since it was pushed.
static void bpe_heap(const Tokenizer& tok, const int32_t* symbols, int32_t n, std::vector<int32_t>& out) {
    std::vector<int32_t> id(symbols, symbols + n), next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Entry {
        uint64_t key;
        int32_t left, right;
    };  // key = rank << 32 | position: leftmost lowest rank first
    auto later = [](const Entry& a, const Entry& b) { return a.key > b.key; };
    std::vector<Entry> heap;
    heap.reserve(static_cast<size_t>(n));
    auto entry = [&](int32_t pos, Entry& e) {
        if (pos < 0 || next[pos] < 0) return false;
        uint32_t rank;
        int32_t merged;
        if (!lookup_merge(tok, id[pos], id[next[pos]], rank, merged)) return false;
        e = {(uint64_t(rank) << 32) | uint32_t(pos), id[pos], id[next[pos]]};
        return true;
    };
    Entry e;
    for (int32_t i = 0; i + 1 < n; i++)
        if (entry(i, e)) heap.push_back(e);
    std::make_heap(heap.begin(), heap.end(), later);
    auto push = [&](int32_t pos) {
        if (entry(pos, e)) {
            heap.push_back(e);
            std::push_heap(heap.begin(), heap.end(), later);
        }
    };
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        Entry top = heap.back();
        heap.pop_back();
        const int32_t pos = int32_t(top.key & 0xFFFFFFFFu);
        const int32_t right = next[pos];
        if (id[pos] != top.left || right < 0 || id[right] != top.right) continue;  // stale
        uint32_t rank = 0;
        int32_t merged = -1;
        lookup_merge(tok, top.left, top.right, rank, merged);  // present: the entry was made from it
        id[pos] = merged;
        next[pos] = next[right];
        if (next[pos] >= 0) prev[next[pos]] = pos;
        id[right] = -1;
        push(prev[pos]);
        push(pos);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

void tokenizer_bpe(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& out) {
    static thread_local std::vector<int32_t> symbols;
    initial_symbols(tok, piece, symbols);
    if (symbols.size() <= 1) out.insert(out.end(), symbols.begin(), symbols.end());
    else if (symbols.size() <= 64) bpe_small(tok, symbols.data(), symbols.size(), out);
    else bpe_heap(tok, symbols.data(), int32_t(symbols.size()), out);
}

// ---- pre-tokenization

// A consumer of pieces: call(ctx, piece).
struct PieceSink {
    void* ctx;
    void (*call)(void* ctx, std::string_view piece);
    void operator()(std::string_view piece) const { call(ctx, piece); }
};

template <typename Fn>
static PieceSink piece_sink(Fn& fn) {
    return PieceSink{&fn, [](void* ctx, std::string_view piece) { (*static_cast<Fn*>(ctx))(piece); }};
}

// Calls fn(segment, is_match) for each match of re in text and each maximal stretch between matches
// (bytes that are not UTF-8 are never matched, so they fall in the stretches). An empty match is
// skipped and the search goes on one character later, as Oniguruma's iterator does.
template <typename Fn>
static void for_each_segment(const TokenizerRegex& re, std::string_view text, TokenizerWorkspace::Impl& w, Fn&& fn) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const size_t n = text.size();
    size_t pos = 0, gap = 0;
    while (pos < n) {
        int rc = re.jit ? pcre2_jit_match(re.code, subject, n, pos, 0, w.match, w.context)
                        : pcre2_match(re.code, subject, n, pos, 0, w.match, w.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fail("tokenizer: PCRE2 match failed at byte {}: {}", pos, reinterpret_cast<char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(w.match);
        const size_t start = ov[0], end = ov[1];
        if (end <= start) {
            if (start >= n) break;
            pos = start + std::max<size_t>(1, utf8_sequence_length(text, start));
            continue;
        }
        if (start > gap) fn(text.substr(gap, start - gap), false);
        fn(text.substr(start, end - start), true);
        pos = gap = end;
    }
    if (gap < n) fn(text.substr(gap), false);
}

// Applies pre-tokenizer steps k.. to piece, handing each final piece to sink. at_start: the piece
// begins the encoded text (a Metaspace step's prepend_scheme "first").
static void pre_tokenize(const Tokenizer& tok, size_t k, std::string_view piece, TokenizerWorkspace::Impl& w,
                         const PieceSink& sink, bool at_start) {
    if (k == tok.pre_tokenizer.size()) {
        sink(piece);
        return;
    }
    const PreTokenizerStep& step = tok.pre_tokenizer[k];
    std::string prefixed;
    if (step.byte_level && step.add_prefix_space && !piece.empty() && piece[0] != ' ') {
        prefixed.reserve(piece.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(piece);
        piece = prefixed;
    }
    if (step.metaspace) {  // spaces as the replacement character, which also goes before the piece
        const bool prepend = (step.prepend == METASPACE_ALWAYS || (step.prepend == METASPACE_FIRST && at_start)) &&
                             piece.substr(0, step.replacement.size()) != step.replacement;
        if (prepend) prefixed = step.replacement;
        for (const char c : piece) {
            if (c == ' ') prefixed += step.replacement;
            else prefixed.push_back(c);
        }
        piece = prefixed;
    }
    if (!step.regex) {
        pre_tokenize(tok, k + 1, piece, w, sink, at_start);
        return;
    }
    const SplitBehavior behavior = step.byte_level ? SPLIT_ISOLATED : step.behavior;
    const bool invert = !step.byte_level && step.invert;
    // A pending piece [begin, end) of `piece` and whether it is a delimiter (the merging behaviors
    // decide on it when the next segment comes).
    size_t begin = 0, end = 0;
    bool pending = false, pending_delimiter = false;
    auto emit = [&](size_t b, size_t e) {
        pre_tokenize(tok, k + 1, piece.substr(b, e - b), w, sink, at_start && b == 0);
    };
    auto on_segment = [&](std::string_view seg, bool is_match) {
        const size_t b = size_t(seg.data() - piece.data()), e = b + seg.size();
        const bool delimiter = is_match != invert;
        switch (behavior) {
            case SPLIT_ISOLATED: emit(b, e); break;
            case SPLIT_REMOVED:  // a stretch of bytes that are not UTF-8 is kept: removing it would lose them
                if (!delimiter || !utf8_valid(seg)) emit(b, e);
                break;
            case SPLIT_MERGED_WITH_PREVIOUS:  // a delimiter joins the piece before it (not another delimiter)
                if (delimiter && pending && !pending_delimiter) {
                    end = e;
                    pending_delimiter = true;
                    break;
                }
                if (pending) emit(begin, end);
                begin = b, end = e, pending = true, pending_delimiter = delimiter;
                break;
            case SPLIT_MERGED_WITH_NEXT:  // a delimiter joins the piece after it (not another delimiter)
                if (pending && pending_delimiter && !delimiter) {
                    emit(begin, e);
                    pending = false;
                    break;
                }
                if (pending) emit(begin, end);
                begin = b, end = e, pending = true, pending_delimiter = delimiter;
                break;
            case SPLIT_CONTIGUOUS:  // neighbouring delimiters are one piece
                if (pending && delimiter == pending_delimiter) {
                    end = e;
                    break;
                }
                if (pending) emit(begin, end);
                begin = b, end = e, pending = true, pending_delimiter = delimiter;
                break;
        }
    };
    for_each_segment(*step.regex, piece, w, on_segment);
    if (pending) emit(begin, end);
}

std::vector<std::string> tokenizer_pieces(const Tokenizer& tok, std::string_view text, TokenizerWorkspace& ws) {
    if (tok.kind == TOKENIZER_SENTENCEPIECE)
        fail("tokenizer: {} is a SentencePiece model: it has no pre-tokenizer", tok.source);
    std::vector<std::string> pieces;
    auto collect = [&](std::string_view p) { pieces.emplace_back(p); };
    if (!text.empty()) pre_tokenize(tok, 0, text, *ws.impl, piece_sink(collect), true);
    return pieces;
}

// One piece: a single byte; a whole token; a cached word; else byte-pair merging (then cached).
static void encode_piece(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& out,
                         TokenizerWorkspace& ws) {
    if (piece.size() == 1 && tok.kind != TOKENIZER_HF_SENTENCEPIECE_BPE) {
        out.push_back(tok.byte_token[static_cast<unsigned char>(piece[0])]);
        return;
    }
    if (piece.size() > 128) {  // long pieces are rare; caching them would only cost memory
        tokenizer_bpe(tok, piece, out);
        return;
    }
    const uint64_t h = tokenizer_hash_bytes(piece);
    if (tok.whole_piece_first) {
        int32_t whole = lookup_whole(tok, piece, h);
        if (whole >= 0) {
            out.push_back(whole);
            return;
        }
    }
    WordCache& c = ws.impl->cache;
    if (c.slots.empty() || c.owner != &tok) {
        c.reset(1 << 16);
        c.owner = &tok;
    }
    uint64_t mask = c.slots.size() - 1;
    uint64_t i = mix64(h) & mask;
    for (;; i = (i + 1) & mask) {
        const WordCache::Slot& s = c.slots[i];
        if (s.hash == FlatTable64::kEmpty) break;
        if (s.hash == h && s.bytes == piece.size() &&
            std::memcmp(c.arena.data() + s.bytes_offset, piece.data(), piece.size()) == 0) {
            out.insert(out.end(), c.pool.begin() + s.ids_offset, c.pool.begin() + s.ids_offset + s.ids);
            return;
        }
    }
    size_t before = out.size();
    tokenizer_bpe(tok, piece, out);
    if (c.used >= ws.max_cache_entries) {  // bounded memory: start over
        c.reset(c.slots.size());
        mask = c.slots.size() - 1;
        for (i = mix64(h) & mask; c.slots[i].hash != FlatTable64::kEmpty; i = (i + 1) & mask) {}
    } else if (2 * (c.used + 1) > c.slots.size()) {  // grow to keep the load under one half
        std::vector<WordCache::Slot> old;
        old.swap(c.slots);
        c.slots.assign(old.size() * 2, WordCache::Slot{});
        mask = c.slots.size() - 1;
        for (const auto& s : old) {
            if (s.hash == FlatTable64::kEmpty) continue;
            uint64_t j = mix64(s.hash) & mask;
            while (c.slots[j].hash != FlatTable64::kEmpty) j = (j + 1) & mask;
            c.slots[j] = s;
        }
        for (i = mix64(h) & mask; c.slots[i].hash != FlatTable64::kEmpty; i = (i + 1) & mask) {}
    }
    WordCache::Slot& s = c.slots[i];
    s.hash = h;
    s.bytes_offset = uint32_t(c.arena.size());
    s.bytes = uint16_t(piece.size());
    s.ids_offset = uint32_t(c.pool.size());
    s.ids = uint16_t(out.size() - before);
    c.arena.append(piece);
    c.pool.insert(c.pool.end(), out.begin() + before, out.end());
    c.used++;
}

// ---- added tokens

// Unicode White_Space (Rust's char::is_whitespace, the \s of Hugging Face's strip patterns).
static bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// The code point of the UTF-8 sequence at text[i] (len bytes, already validated).
static uint32_t code_point_at(std::string_view text, size_t i, size_t len) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data() + i);
    if (len == 1) return p[0];
    uint32_t cp = p[0] & (0x7F >> len);
    for (size_t k = 1; k < len; k++) cp = (cp << 6) | (p[k] & 0x3F);
    return cp;
}

// The start of the UTF-8 character that ends at text[end) (end itself when there is none).
static size_t char_start_before(std::string_view text, size_t end) {
    for (size_t back = 1; back <= 4 && back <= end; back++)
        if (utf8_sequence_length(text, end - back) == back) return end - back;
    return end;
}

// A Unicode word character (\w of Rust's regex: Alphabetic, marks, decimal digits, connectors, joiners).
static bool is_word_char_at(std::string_view text, size_t i, size_t len) {
    static const std::shared_ptr<TokenizerRegex> word = tokenizer_compile_pattern(
        "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", false, "the word-character class");
    if (len == 0) return false;
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    const int rc =
        pcre2_match(word->code, reinterpret_cast<PCRE2_SPTR>(text.data() + i), len, 0, PCRE2_ANCHORED, md, nullptr);
    pcre2_match_data_free(md);
    return rc >= 0;
}

// Splits text at the added tokens of this pass (normalized or not) as Hugging Face's
// AddedVocabulary::find_matches does: leftmost-longest matches, a special token skipped unless
// allowed (its text stays ordinary), single_word / lstrip / rstrip. Calls on_text(stretch) and
// on_token(id) in order.
template <typename TextFn, typename TokenFn>
static void split_added(const Tokenizer& tok, std::string_view text, bool normalized_pass, bool allow_special,
                        TextFn&& on_text, TokenFn&& on_token) {
    bool any = false;
    for (const AddedToken& t : tok.added_tokens)
        any |= t.normalized == normalized_pass && (allow_special || !t.special);
    if (!any) {
        if (!text.empty()) on_text(text);
        return;
    }
    bool starts[256] = {};
    for (const AddedToken& t : tok.added_tokens)
        if (t.normalized == normalized_pass) starts[static_cast<unsigned char>(t.match[0])] = true;
    size_t done = 0;  // text before this is handed on
    for (size_t pos = 0; pos < text.size();) {
        if (!starts[static_cast<unsigned char>(text[pos])]) {
            pos++;
            continue;
        }
        const AddedToken* hit = nullptr;
        for (const AddedToken& t : tok.added_tokens)  // longest first
            if (t.normalized == normalized_pass && text.compare(pos, t.match.size(), t.match) == 0) {
                hit = &t;
                break;
            }
        if (!hit) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + hit->match.size();
        pos = stop;  // matches do not overlap
        if (hit->special && !allow_special) continue;
        if (hit->single_word) {
            const size_t before = char_start_before(text, start);
            const bool word_before = before < start && is_word_char_at(text, before, start - before);
            const bool word_after = stop < text.size() && is_word_char_at(text, stop, utf8_sequence_length(text, stop));
            if (word_before || word_after) continue;
        }
        if (hit->lstrip)
            for (size_t b; start > done && (b = char_start_before(text, start)) < start &&
                           is_white_space(code_point_at(text, b, start - b));)
                start = b;
        if (hit->rstrip)
            for (size_t len; stop < text.size() && (len = utf8_sequence_length(text, stop)) > 0 &&
                             is_white_space(code_point_at(text, stop, len));)
                stop += len;
        if (start > done) on_text(text.substr(done, start - done));
        on_token(hit->id);
        done = stop;
        pos = std::max(pos, stop);
    }
    if (done < text.size()) on_text(text.substr(done));
}

// ---- encoding

// The BPE kinds: added tokens in the raw text, then in each stretch between them: normalize, added
// tokens of the normalized text, pre-tokenize, merge each piece.
static void encode_bpe(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out, TokenizerWorkspace& ws,
                       bool allow_special) {
    auto& w = *ws.impl;
    auto encode = [&](std::string_view piece) { encode_piece(tok, piece, out, ws); };
    const PieceSink sink = piece_sink(encode);
    auto on_token = [&](int32_t id) { out.push_back(id); };
    bool raw_first = false;          // the raw stretch being encoded begins the text
    std::string_view normalized_of;  // its normalized form
    auto pre = [&](std::string_view stretch) {
        pre_tokenize(tok, 0, stretch, w, sink, raw_first && stretch.data() == normalized_of.data());
    };
    auto on_raw = [&](std::string_view stretch) {
        std::string_view normalized = stretch;
        if (!tok.normalizers.empty()) {
            tokenizer_normalize(tok, stretch, w.normalized, w.scratch);
            normalized = w.normalized;
        }
        raw_first = stretch.data() == text.data();
        normalized_of = normalized;
        split_added(tok, normalized, true, allow_special, pre, on_token);
    };
    split_added(tok, text, false, allow_special, on_raw, on_token);
}

void tokenizer_encode(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out, TokenizerWorkspace& ws,
                      bool allow_special) {
    if (tok.kind == TOKENIZER_SENTENCEPIECE) {
        auto on_text = [&](std::string_view stretch) { sentencepiece_encode(*tok.sentencepiece, stretch, out); };
        auto on_token = [&](int32_t id) { out.push_back(id); };
        split_added(tok, text, false, allow_special, on_text, on_token);
        return;
    }
    if (allow_special && tok.kind == TOKENIZER_GPT2_BPE && tok.eot < 0)
        fail("tokenizer: {} has no <|endoftext|> token, so special tokens cannot be encoded", tok.source);
    encode_bpe(tok, text, out, ws, allow_special);
}

std::vector<int32_t> tokenizer_encode(const Tokenizer& tok, std::string_view text, bool allow_special) {
    TokenizerWorkspace ws;
    std::vector<int32_t> out;
    tokenizer_encode(tok, text, out, ws, allow_special);
    return out;
}

std::string tokenizer_decode(const Tokenizer& tok, std::span<const int32_t> ids) {
    for (size_t i = 0; i < ids.size(); i++)
        if (ids[i] < 0 || ids[i] >= tok.vocab_size())
            fail("tokenizer: id {} at position {} is outside the vocabulary [0, {})", ids[i], i, tok.vocab_size());
    if (tok.kind == TOKENIZER_SENTENCEPIECE) return sentencepiece_decode(*tok.sentencepiece, ids);
    std::string out;
    for (int32_t id : ids) out += tok.token_bytes[size_t(id)];
    size_t strip = 0;  // a SentencePiece-style decoder's Strip: the space the normalizer put first
    while (strip < size_t(tok.decode_strip_spaces) && strip < out.size() && out[strip] == ' ') ++strip;
    return out.erase(0, strip);
}

}  // namespace skew::data
