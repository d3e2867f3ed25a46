// GPT-2 byte-level BPE: loading encoder.json/vocab.bpe (or vocab.json/merges.txt), PCRE2
// pre-tokenization with GPT-2's pattern, and rank-ordered pair merging (OpenAI's encoder.py and
// tiktoken's byte_pair_encode give the same ids; long pieces go through a heap so they stay O(n log n)).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "engine/error.h"
#include "engine/json_strict.h"

namespace skew::data {

// GPT-2's pattern (encoder.py). \s is spelled out as Unicode White_Space (what Python's `regex`
// and tiktoken's Rust regex use), since PCRE2's \s under UCP leaves out U+0085.
static constexpr const char* kSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

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
    std::string arena;          // piece bytes
    std::vector<int32_t> pool;  // token ids
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

static void flat_init(FlatTable64& t, size_t entries) {
    size_t cap = 16;
    while (cap < entries * 2) cap <<= 1;
    t.keys.assign(cap, FlatTable64::kEmpty);
    t.values.assign(cap, 0);
    t.mask = cap - 1;
}

// Insert unless the key is present (the first value wins). Returns false when it was present.
// The table doubles before it is half full, so probing always ends (any number of merges).
static bool flat_insert(FlatTable64& t, uint64_t key, uint64_t value) {
    if (2 * (t.size + 1) > t.mask + 1) {
        FlatTable64 grown;
        flat_init(grown, size_t(t.mask + 1));
        for (size_t i = 0; i <= t.mask; ++i)
            if (t.keys[i] != FlatTable64::kEmpty) flat_insert(grown, t.keys[i], t.values[i]);
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

static std::shared_ptr<TokenizerRegex> compile_gpt2_regex() {
    std::string space = kSpace;
    std::string pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + space + "\\p{L}\\p{N}]+|[" + space +
                          "]+(?![^" + space + "])|[" + space + "]+";
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto re = std::make_shared<TokenizerRegex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fail("tokenizer: PCRE2 cannot compile GPT-2's pattern at offset {}: {}", err_offset, reinterpret_cast<char*>(msg));
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return re;
}

// Decode one vocab string (code points standing for bytes) back to raw bytes.
static bool vocab_string_to_bytes(const std::string& s, std::string& out, const std::vector<int>& unicode_to_byte) {
    out.clear();
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        uint32_t cp;
        int len;
        if (c < 0x80) { cp = c; len = 1; }
        else if ((c >> 5) == 6) { cp = c & 0x1F; len = 2; }
        else if ((c >> 4) == 14) { cp = c & 0x0F; len = 3; }
        else { cp = c & 0x07; len = 4; }
        if (i + len > s.size()) return false;
        for (int k = 1; k < len; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        i += len;
        if (cp >= unicode_to_byte.size() || unicode_to_byte[cp] < 0) return false;
        out.push_back(static_cast<char>(unicode_to_byte[cp]));
    }
    return true;
}

static bool file_exists(const std::string& p) { return std::ifstream(p).good(); }

Tokenizer tokenizer_load(const std::string& dir) {
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
        fail("tokenizer: {} is a file, not a tokenizer folder (one holding encoder.json + vocab.bpe, or vocab.json + "
             "merges.txt; pass --tokenizer DIR)", dir);
    if (file_exists(dir + "/encoder.json") && file_exists(dir + "/vocab.bpe"))
        return tokenizer_load_files(dir + "/encoder.json", dir + "/vocab.bpe");
    if (file_exists(dir + "/vocab.json") && file_exists(dir + "/merges.txt"))
        return tokenizer_load_files(dir + "/vocab.json", dir + "/merges.txt");
    fail("tokenizer: {} holds neither encoder.json + vocab.bpe nor vocab.json + merges.txt "
         "(run scripts/fetch_data.sh, or pass --tokenizer DIR)", dir);
}

Tokenizer tokenizer_load_files(const std::string& vocab_json_path, const std::string& merges_path) {
    Tokenizer tok;
    tok.source = vocab_json_path + " + " + merges_path;
    std::ifstream vf(vocab_json_path, std::ios::binary);
    if (!vf) fail("tokenizer: cannot open {}", vocab_json_path);
    const std::string vocab_text((std::istreambuf_iterator<char>(vf)), std::istreambuf_iterator<char>());
    nlohmann::json vocab;
    std::string json_error;
    if (!json_try_parse_strict(vocab_text, vocab, json_error))
        fail("tokenizer: {} is not valid JSON: {}", vocab_json_path, json_error);
    if (!vocab.is_object() || vocab.empty()) fail("tokenizer: {} must be a JSON object mapping token -> id", vocab_json_path);

    const auto& b2u = gpt2_byte_to_unicode();
    std::vector<int> u2b(512, -1);
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = b;

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
        if (!vocab_string_to_bytes(key, bytes, u2b)) bytes = key;  // added tokens outside the byte alphabet: literal
        tok.token_bytes[id] = bytes;
    }
    auto eot = id_of.find(std::string(kEndOfTextText));
    tok.eot = eot == id_of.end() ? -1 : eot->second;
    for (int b = 0; b < 256; b++) {
        std::string u;
        uint32_t cp = b2u[b];
        if (cp < 0x80) u.push_back(char(cp));
        else { u.push_back(char(0xC0 | (cp >> 6))); u.push_back(char(0x80 | (cp & 0x3F))); }
        auto it = id_of.find(u);
        if (it == id_of.end()) fail("tokenizer: {} lacks the token for byte {} (\"{}\")", vocab_json_path, b, u);
        tok.byte_token[b] = it->second;
    }

    std::ifstream mf(merges_path, std::ios::binary);
    if (!mf) fail("tokenizer: cannot open {}", merges_path);
    std::string line;
    int64_t line_no = 0, rank = 0;
    flat_init(tok.merges, 60000);
    while (std::getline(mf, line)) {
        line_no++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
            fail("tokenizer: {}:{}: expected two tokens separated by one space, got \"{}\"", merges_path, line_no, line);
        std::string a = line.substr(0, sp), b = line.substr(sp + 1);
        auto ia = id_of.find(a), ib = id_of.find(b), im = id_of.find(a + b);
        if (ia == id_of.end() || ib == id_of.end() || im == id_of.end())
            fail("tokenizer: {}:{}: merge \"{}\" uses a token missing from {}", merges_path, line_no, line, vocab_json_path);
        uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
        flat_insert(tok.merges, key, (uint64_t(rank) << 32) | uint32_t(im->second));  // first (lowest) rank wins
        rank++;
    }
    if (rank == 0) fail("tokenizer: {} holds no merges", merges_path);
    // Whole-piece lookup: a piece whose bytes are a token is that token (tiktoken does the same).
    // Hash collisions are harmless: a hit is verified against the token's bytes, and probing goes on.
    flat_init(tok.whole, tok.token_bytes.size());
    for (size_t id = 0; id < tok.token_bytes.size(); id++) {
        if (int32_t(id) == tok.eot || tok.token_bytes[id].empty()) continue;
        uint64_t h = tokenizer_hash_bytes(tok.token_bytes[id]);
        for (uint64_t i = mix64(h) & tok.whole.mask;; i = (i + 1) & tok.whole.mask)
            if (tok.whole.keys[i] == FlatTable64::kEmpty) {
                tok.whole.keys[i] = h;
                tok.whole.values[i] = id;
                break;
            }
    }
    tok.regex = compile_gpt2_regex();
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

// The id of the token whose bytes are exactly piece, or -1.
static inline int32_t lookup_whole(const Tokenizer& tok, std::string_view piece, uint64_t h) {
    for (uint64_t i = mix64(h) & tok.whole.mask;; i = (i + 1) & tok.whole.mask) {
        uint64_t k = tok.whole.keys[i];
        if (k == FlatTable64::kEmpty) return -1;
        if (k == h && tok.token_bytes[tok.whole.values[i]] == piece) return int32_t(tok.whole.values[i]);
    }
}

static constexpr uint32_t kNoRank = 0xFFFFFFFFu;

// Short pieces: keep the rank of each adjacent pair; merge the leftmost lowest rank; update neighbours.
static void bpe_small(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& out) {
    const size_t n = piece.size();
    int32_t ids[64];
    uint32_t ranks[64];
    int32_t merged_ids[64];
    for (size_t i = 0; i < n; i++) ids[i] = tok.byte_token[static_cast<unsigned char>(piece[i])];
    size_t count = n;
    for (size_t i = 0; i + 1 < count; i++)
        if (!lookup_merge(tok, ids[i], ids[i + 1], ranks[i], merged_ids[i])) ranks[i] = kNoRank;
    while (count > 1) {
        size_t best = 0;
        uint32_t best_rank = kNoRank;
        for (size_t i = 0; i + 1 < count; i++)
            if (ranks[i] < best_rank) { best_rank = ranks[i]; best = i; }
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
static void bpe_heap(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& out) {
    const int32_t n = static_cast<int32_t>(piece.size());
    std::vector<int32_t> id(static_cast<size_t>(n)), next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; i++) {
        id[i] = tok.byte_token[static_cast<unsigned char>(piece[i])];
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Entry { uint64_t key; int32_t left, right; };  // key = rank << 32 | position: leftmost lowest rank first
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
    if (piece.empty()) return;
    if (piece.size() == 1) {
        out.push_back(tok.byte_token[static_cast<unsigned char>(piece[0])]);
        return;
    }
    if (piece.size() <= 64) bpe_small(tok, piece, out);
    else bpe_heap(tok, piece, out);
}

// ---- pre-tokenization

// Calls fn(piece) for each piece of text in order; gaps the pattern cannot match (invalid UTF-8) are pieces too.
template <typename Fn>
static void for_each_piece(const Tokenizer& tok, std::string_view text, TokenizerWorkspace& ws, Fn&& fn) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const size_t n = text.size();
    auto& w = *ws.impl;
    size_t pos = 0;
    while (pos < n) {
        int rc = tok.regex->jit ? pcre2_jit_match(tok.regex->code, subject, n, pos, 0, w.match, w.context)
                                : pcre2_match(tok.regex->code, subject, n, pos, 0, w.match, w.context);
        if (rc == PCRE2_ERROR_NOMATCH) {
            fn(text.substr(pos));
            return;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fail("tokenizer: PCRE2 match failed at byte {}: {}", pos, reinterpret_cast<char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(w.match);
        size_t start = ov[0], end = ov[1];
        if (start > pos) fn(text.substr(pos, start - pos));
        if (end <= start) fail("tokenizer: empty match at byte {}", start);  // the pattern never matches empty
        fn(text.substr(start, end - start));
        pos = end;
    }
}

std::vector<std::string_view> tokenizer_pieces(const Tokenizer& tok, std::string_view text, TokenizerWorkspace& ws) {
    std::vector<std::string_view> pieces;
    for_each_piece(tok, text, ws, [&](std::string_view p) { pieces.push_back(p); });
    return pieces;
}

// One piece: a single byte; a whole token; a cached word; else byte-pair merging (then cached).
static void encode_piece(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& out, TokenizerWorkspace& ws) {
    if (piece.size() == 1) {
        out.push_back(tok.byte_token[static_cast<unsigned char>(piece[0])]);
        return;
    }
    if (piece.size() > 128) {  // long pieces are rare; caching them would only cost memory
        tokenizer_bpe(tok, piece, out);
        return;
    }
    const uint64_t h = tokenizer_hash_bytes(piece);
    int32_t whole = lookup_whole(tok, piece, h);
    if (whole >= 0) {
        out.push_back(whole);
        return;
    }
    WordCache& c = ws.impl->cache;
    if (c.slots.empty()) c.reset(1 << 16);
    uint64_t mask = c.slots.size() - 1;
    uint64_t i = mix64(h) & mask;
    for (;; i = (i + 1) & mask) {
        const WordCache::Slot& s = c.slots[i];
        if (s.hash == FlatTable64::kEmpty) break;
        if (s.hash == h && s.bytes == piece.size() && std::memcmp(c.arena.data() + s.bytes_offset, piece.data(), piece.size()) == 0) {
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

static void encode_ordinary(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out, TokenizerWorkspace& ws) {
    for_each_piece(tok, text, ws, [&](std::string_view piece) { encode_piece(tok, piece, out, ws); });
}

void tokenizer_encode(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out, TokenizerWorkspace& ws,
                      bool allow_special) {
    if (!allow_special) {
        encode_ordinary(tok, text, out, ws);
        return;
    }
    if (tok.eot < 0) fail("tokenizer: {} has no <|endoftext|> token, so special tokens cannot be encoded", tok.source);
    size_t pos = 0;
    while (true) {
        size_t hit = text.find(kEndOfTextText, pos);
        encode_ordinary(tok, text.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos), out, ws);
        if (hit == std::string_view::npos) break;
        out.push_back(tok.eot);
        pos = hit + kEndOfTextText.size();
    }
}

std::vector<int32_t> tokenizer_encode(const Tokenizer& tok, std::string_view text, bool allow_special) {
    TokenizerWorkspace ws;
    std::vector<int32_t> out;
    tokenizer_encode(tok, text, out, ws, allow_special);
    return out;
}

std::string tokenizer_decode(const Tokenizer& tok, std::span<const int32_t> ids) {
    std::string out;
    for (size_t i = 0; i < ids.size(); i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok.vocab_size())
            fail("tokenizer: id {} at position {} is outside the vocabulary [0, {})", id, i, tok.vocab_size());
        out += tok.token_bytes[id];
    }
    return out;
}

}  // namespace skew::data
