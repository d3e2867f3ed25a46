// The four multiple-choice tasks built as the LM Evaluation Harness v0.4 builds them
// (docs/evaluation.md): the worked examples of each task with their exact prompt strings,
// continuations, token ids (GPT-2 BPE) and code-point lengths, HellaSwag's preprocessing,
// truncation, acc / acc_norm on hand-computed log-likelihoods, and the standard error.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/tokenizer.h"
#include "engine/error.h"
#include "eval/py_text.h"
#include "eval/scoring.h"
#include "eval/tasks.h"

using namespace skew;
using namespace skew::eval;

namespace {

std::string fixture(const std::string& name) { return std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/eval/" + name; }

const data::Tokenizer& gpt2() {
    static const data::Tokenizer tok = data::tokenizer_load(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/data/gpt2");
    return tok;
}

std::vector<int32_t> enc(const std::string& s) { return data::tokenizer_encode(gpt2(), s); }

std::vector<int32_t> continuation_ids(const McItem& it, size_t c) {
    const TokenRequest r = encode_request(gpt2(), it.contexts[c], it.continuations[c], 1 << 20);
    return std::vector<int32_t>(r.tokens.end() - r.n_continuation, r.tokens.end());
}

std::string write_temp(const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::temp_directory_path() / name).string();
    std::ofstream(path) << text;
    return path;
}

}  // namespace

TEST_CASE("PIQA: 'Question: goal', a newline, 'Answer:' and each solution after a space", "[eval][tasks]") {
    const auto items = read_task_file(fixture("piqa.jsonl"), TaskFormat::PIQA);
    REQUIRE(items.size() == 3);
    const McItem& it = items[0];
    CHECK(it.contexts[0] == "Question: How do you keep a paintbrush from drying out overnight?\nAnswer:");
    CHECK(it.contexts[1] == it.contexts[0]);
    CHECK(it.continuations[0] == " Wrap the wet bristles in plastic cling film.");
    CHECK(it.continuations[1] == " Leave the wet bristles in direct sunlight.");
    CHECK(it.norm_chars == std::vector<int64_t>{44, 42});
    CHECK(it.gold == 0);
    CHECK(enc(it.contexts[0]).size() == 17);
    CHECK(continuation_ids(it, 0) == std::vector<int32_t>{41028, 262, 9583, 48197, 829, 287, 7309, 36331, 2646, 13});
    CHECK(continuation_ids(it, 1).size() == 9);
    CHECK(items[1].gold == 0);  // label given as the string "0"
    CHECK(items[2].gold == 1);
    CHECK(items[2].line == 3);
}

TEST_CASE("WinoGrande: the option fills the blank in the context, the rest of the sentence is scored",
          "[eval][tasks]") {
    const auto items = read_task_file(fixture("winogrande.jsonl"), TaskFormat::WINOGRANDE);
    REQUIRE(items.size() == 5);
    const McItem& it = items[0];
    CHECK(it.contexts[0] == "The kettle would not fit in the cupboard because the kettle");
    CHECK(it.contexts[1] == "The kettle would not fit in the cupboard because the cupboard");
    CHECK(it.continuations[0] == " was too small.");
    CHECK(it.continuations[1] == " was too small.");
    CHECK(enc(it.contexts[0]).size() == 12);
    CHECK(enc(it.contexts[1]).size() == 13);
    CHECK(continuation_ids(it, 0) == std::vector<int32_t>{373, 1165, 1402, 13});
    CHECK(it.gold == 1);
    // the harness's quirk: a space before the punctuation that follows the blank
    const McItem& q = items[1];
    CHECK(q.contexts[0] == "Anna lent Beth an umbrella because Anna");
    CHECK(q.contexts[1] == "Anna lent Beth an umbrella because Beth");
    CHECK(q.continuations[0] == " 's was broken.");
    CHECK(continuation_ids(q, 0) == std::vector<int32_t>{705, 82, 373, 5445, 13});
    CHECK(items[2].gold == 0);
}

TEST_CASE("HellaSwag: capitalize ctx_b, strip, [title] to '. ', brackets removed, double spaces once",
          "[eval][tasks]") {
    const auto items = read_task_file(fixture("hellaswag.jsonl"), TaskFormat::HELLASWAG);
    REQUIRE(items.size() == 4);
    const McItem& it = items[0];
    CHECK(it.contexts[0] ==
          "Cleaning a kettle: How to descale a kettle. Fill it with vinegar. Let it soak for an hour. Then rinse it "
          "with water");
    CHECK(enc(it.contexts[0]).size() == 29);
    CHECK(it.continuations[0] == "  Boil fresh water twice and pour it away.");
    CHECK(it.continuations[1] == " paint the kettle bright red.");
    CHECK(it.continuations[2] == " throw the kettle into the sea.");
    CHECK(it.continuations[3] == " eat the vinegar with a spoon.");
    CHECK(it.norm_chars == std::vector<int64_t>{41, 28, 30, 29});
    const auto x0 = continuation_ids(it, 0);
    REQUIRE(x0.size() >= 4);
    CHECK(std::vector<int32_t>(x0.begin(), x0.begin() + 4) == std::vector<int32_t>{220, 3248, 346, 4713});
    CHECK(continuation_ids(it, 1).size() == 6);
    CHECK(continuation_ids(it, 2).size() == 7);
    CHECK(continuation_ids(it, 3).size() == 7);
    CHECK(it.gold == 0);
    CHECK(items[1].contexts[0] == "Baking: A woman mixes flour and eggs in a bowl. She");
    CHECK(items[1].gold == 0);  // an integer label (the original JSONL)
}

// tests/reference/eval/make_task_requests.py builds the same requests with Python's own strip,
// capitalize and re, from the harness's task definitions; the fixtures include non-ASCII text
// (capitalize of É, NBSP stripped, an em dash counted as one character), a tag at the start of an
// ending, a bracket across a newline, trailing spaces after a WinoGrande blank, five ARC choices.
TEST_CASE("every fixture item's requests equal the Python reference's, byte for byte", "[eval][tasks]") {
    std::ifstream in(fixture("expected_requests.json"));
    REQUIRE(in.good());
    const nlohmann::json want = nlohmann::json::parse(in);
    for (const char* name : {"piqa", "winogrande", "hellaswag", "arc"}) {
        const auto items = read_task_file(fixture(std::string(name) + ".jsonl"), task_format_from_name(name));
        REQUIRE(items.size() == want[name].size());
        for (size_t i = 0; i < items.size(); ++i) {
            INFO(name << " item " << i);
            const nlohmann::json& w = want[name][i];
            CHECK(items[i].contexts == w["contexts"].get<std::vector<std::string>>());
            CHECK(items[i].continuations == w["continuations"].get<std::vector<std::string>>());
            CHECK(items[i].norm_chars == w["norm_chars"].get<std::vector<int64_t>>());
            CHECK(items[i].gold == w["gold"].get<int64_t>());
            // each request split as HFLM._encode_pair splits it (str.rstrip), then encoded
            for (size_t c = 0; c < items[i].contexts.size(); ++c) {
                const auto pair = w["encode_pairs"][c].get<std::vector<std::string>>();
                const std::vector<int32_t> ctx = enc(pair[0]), whole = enc(pair[0] + pair[1]);
                const TokenRequest r = encode_request(gpt2(), items[i].contexts[c], items[i].continuations[c], 1 << 20);
                CHECK(r.tokens == whole);
                CHECK(r.n_continuation == int64_t(whole.size() - ctx.size()));
            }
        }
    }
}

TEST_CASE("HellaSwag's text helpers follow Python: strip, capitalize, one pass of double-space replacement",
          "[eval][tasks]") {
    CHECK(hellaswag_preprocess("a   b") == "a  b");  // three spaces -> two (one left-to-right pass)
    CHECK(hellaswag_preprocess("  x [step] y ") == "x y");
    CHECK(hellaswag_preprocess("a [b\nc] d") == "a [b\nc] d");  // a tag does not cross a newline
    CHECK(hellaswag_preprocess("a [x] [y] b") == "a  b");       // non-greedy; three spaces left become two
    CHECK(hellaswag_preprocess("a [x]b") == "a b");
    CHECK(py_capitalize("hELLO World") == "Hello world");
    CHECK(py_capitalize("\xC3\xA9T\xC3\x89") == "\xC3\x89t\xC3\xA9");  // éTÉ -> Été
    CHECK(py_strip("\xC2\xA0 x\t\n") == "x");                          // NBSP is whitespace to Python
}

TEST_CASE("WinoGrande: an option ending in a no-break space gives it to the continuation, as Python's rstrip does",
          "[eval][tasks]") {
    const std::string p =
        write_temp("skew_eval_wg_nbsp.jsonl",
                   "{\"sentence\":\"The cat chased the mouse until _ was tired.\",\"option1\":\"the cat\","
                   "\"option2\":\"the mouse\\u00a0\",\"answer\":\"1\"}\n");
    const auto items = read_task_file(p, TaskFormat::WINOGRANDE);
    REQUIRE(items.size() == 1);
    CHECK(items[0].contexts[1] == "The cat chased the mouse until the mouse\xC2\xA0");
    // the LM Evaluation Harness scores [1849, 373, 10032, 13]: U+00A0, " was", " tired", "."
    CHECK(continuation_ids(items[0], 1) == std::vector<int32_t>{1849, 373, 10032, 13});
    CHECK(continuation_ids(items[0], 0) == std::vector<int32_t>{373, 10032, 13});
    // every Python whitespace moves, U+3000 and U+0085 too; U+200B (not whitespace) stays
    CHECK(continuation_ids(McItem{{"a\xE3\x80\x80"}, {" b"}, {1}, 0, 1}, 0) == enc("\xE3\x80\x80 b"));
    CHECK(continuation_ids(McItem{{"a\xC2\x85"}, {" b"}, {1}, 0, 1}, 0) == enc("\xC2\x85 b"));
    CHECK(continuation_ids(McItem{{"a\xE2\x80\x8B"}, {" b"}, {1}, 0, 1}, 0) == enc(" b"));
}

TEST_CASE("HellaSwag: capitalize is Python's on every script: title case first, then lower with a final sigma",
          "[eval][tasks]") {
    const auto items = read_task_file(fixture("hellaswag.jsonl"), TaskFormat::HELLASWAG);
    REQUIRE(items.size() == 4);
    // ctx_b "ǆEMAL ΓΡΆΦΕΙ «ΟΔΟΣ» ΚΑΙ ΣΑΣ ΣΤΑ İSTANBUL STRASSE".capitalize()
    CHECK(items[3].contexts[0] ==
          "\xCE\x9C\xCE\xAC\xCE\xB8\xCE\xB7\xCE\xBC\xCE\xB1: \xCE\x9F \xCE\xB4\xCE\xAC\xCF\x83\xCE\xBA\xCE\xB1\xCE\xBB"
          "\xCE\xBF\xCF\x82 \xCE\xB3\xCF\x81\xCE\xAC\xCF\x86\xCE\xB5\xCE\xB9 \xCF\x83\xCF\x84\xCE\xBF\xCE\xBD "
          "\xCF\x80\xCE\xAF\xCE\xBD\xCE\xB1\xCE\xBA\xCE\xB1. \xC7\x85"
          "emal \xCE\xB3\xCF\x81\xCE\xAC\xCF\x86\xCE\xB5"
          "\xCE\xB9 \xC2\xAB\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82\xC2\xBB \xCE\xBA\xCE\xB1\xCE\xB9 \xCF\x83\xCE\xB1\xCF\x82 "
          "\xCF\x83\xCF\x84\xCE\xB1 i\xCC\x87stanbul strasse");
    CHECK(items[3].continuations[2] ==
          " \xCE\xBA\xCE\xB1\xCE\xB9 \xCE\xBA\xCE\xAC\xCE\xB8\xCE\xB5\xCF\x84\xCE\xB1\xCE\xB9");
    CHECK(items[3].gold == 2);
}

TEST_CASE("ARC: both the HuggingFace and the original AI2 layouts, gold by answerKey among the labels",
          "[eval][tasks]") {
    const auto items = read_task_file(fixture("arc.jsonl"), TaskFormat::ARC);
    REQUIRE(items.size() == 3);
    const McItem& it = items[0];
    CHECK(it.contexts[0] == "Question: Which tool is best for measuring the mass of a rock?\nAnswer:");
    CHECK(enc(it.contexts[0]).size() == 17);
    CHECK(it.continuations[1] == " a balance");
    CHECK(it.norm_chars == std::vector<int64_t>{7, 9, 13, 20});
    CHECK(it.gold == 1);
    CHECK(items[1].contexts.size() == 3);
    CHECK(items[1].contexts[0] == "Question: Which of these is a liquid at room temperature?\nAnswer:");
    CHECK(items[1].gold == 0);

    // acc picks A (wrong); dividing by the lengths in characters picks B (right)
    const ItemScore s = score_item(it, {-9.8, -10.2, -16.0, -24.0});
    CHECK_FALSE(s.correct);
    CHECK(s.correct_norm);
    // ties go to the lowest index (np.argmax)
    const ItemScore tie = score_item(it, {-5.0, -5.0, -6.0, -7.0});
    CHECK_FALSE(tie.correct);
}

TEST_CASE("standard error is the sample standard deviation over sqrt(n): WinoGrande's 0.49329 of 1267",
          "[eval][metrics]") {
    std::vector<int> outcomes(1267, 0);
    for (int i = 0; i < 625; ++i) outcomes[size_t(i)] = 1;  // 625 / 1267 = 0.49329
    const MeanStderr m = mean_stderr(outcomes);
    CHECK(std::fabs(m.mean - 0.493291) < 1e-6);
    CHECK(std::fabs(m.standard_error - 0.014051) < 1e-6);
    const MeanStderr small = mean_stderr({1, 0, 1, 1});  // p = 0.75, n = 4: sqrt(p (1 - p) / (n - 1))
    CHECK(std::fabs(small.standard_error - std::sqrt(0.75 * 0.25 / 3.0)) < 1e-12);
    CHECK(mean_stderr({1}).standard_error == 0.0);
}

TEST_CASE("contexts longer than the model's positions lose tokens on the left and are counted", "[eval][scoring]") {
    const std::string ctx = "Question: Which tool is best for measuring the mass of a rock?\nAnswer:";  // 17 tokens
    const TokenRequest full = encode_request(gpt2(), ctx, " a balance", 100);
    CHECK_FALSE(full.truncated);
    REQUIRE(full.tokens.size() == 19);
    const TokenRequest cut = encode_request(gpt2(), ctx, " a balance", 11);  // 10 positions + 1
    CHECK(cut.truncated);
    CHECK(cut.tokens.size() == 11);
    CHECK(std::vector<int32_t>(full.tokens.end() - 11, full.tokens.end()) == cut.tokens);
    CHECK(cut.n_continuation == 2);
    CHECK_THROWS_WITH(encode_request(gpt2(), ctx, " a balance", 2), Catch::Contains("has 2 tokens"));
    // trailing whitespace of the context moves to the continuation
    const TokenRequest ws = encode_request(gpt2(), "Answer: ", "yes", 100);
    CHECK(ws.tokens == encode_request(gpt2(), "Answer:", " yes", 100).tokens);

    // score_task counts the truncated requests and sums the last n log-probabilities
    const auto items = read_task_file(fixture("arc.jsonl"), TaskFormat::ARC);
    auto fake = [](const std::vector<std::vector<int32_t>>& seqs) {
        std::vector<std::vector<float>> out;
        for (const auto& s : seqs) out.push_back(std::vector<float>(s.size() - 1, -1.0f));
        return out;
    };
    const TaskResult r = score_task(items, TaskFormat::ARC, gpt2(), 13, 3, fake);
    CHECK(r.requests == 12);
    CHECK(r.truncated_requests == 12);  // every context is longer than 12 positions allow
    // each choice scores -(its token count): the shortest continuation wins acc
    CHECK(r.items[0].loglik[0] == -2.0);  // " a ruler"
    CHECK(r.n == 3);
}

TEST_CASE("a malformed task line is refused naming the file and the line", "[eval][tasks]") {
    const std::string p = write_temp(
        "skew_eval_bad.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 0}\n\n{\"goal\": 3}\n");
    CHECK_THROWS_WITH(read_task_file(p, TaskFormat::PIQA),
                      Catch::Contains("skew_eval_bad.jsonl:3: field 'goal' is not a string"));
    const std::string q =
        write_temp("skew_eval_bad2.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 2}\n");
    CHECK_THROWS_WITH(read_task_file(q, TaskFormat::PIQA),
                      Catch::Contains(":1: gold label 2 is outside the 2 choices"));
    // a label is read as the harness's int(doc["label"]) reads it: Arabic-Indic one, spaces around
    const std::string u = write_temp("skew_eval_label.jsonl",
                                     "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": \" \u0661 \"}\n");
    CHECK(read_task_file(u, TaskFormat::PIQA).at(0).gold == 1);
    const std::string f = write_temp("skew_eval_label2.jsonl",
                                     "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": \"1.0\"}\n");
    CHECK_THROWS_WITH(read_task_file(f, TaskFormat::PIQA),
                      Catch::Contains(":1: field 'label' is not an integer label (got \"1.0\")"));
    const std::string w =
        write_temp("skew_eval_bad3.jsonl",
                   "{\"sentence\": \"no blank\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"1\"}\n");
    CHECK_THROWS_WITH(read_task_file(w, TaskFormat::WINOGRANDE), Catch::Contains(":1: field 'sentence' has no blank"));
    const std::string j = write_temp("skew_eval_bad4.jsonl", "not json\n");
    CHECK_THROWS_WITH(read_task_file(j, TaskFormat::ARC), Catch::Contains(":1: not valid JSON"));
    CHECK_THROWS_WITH(read_task_file("/nonexistent/x.jsonl", TaskFormat::ARC), Catch::Contains("cannot open"));
    CHECK_THROWS_WITH(task_format_from_name("mmlu"), Catch::Contains("unknown task format"));
}

TEST_CASE("a HellaSwag example without exactly 4 endings is refused naming the file and the line", "[eval][tasks]") {
    const std::string four =
        R"({"activity_label": "A", "ctx_a": "x.", "ctx_b": "y", "endings": ["a", "b", "c", "d"], "label": "1"})";
    const std::string two =
        R"({"activity_label": "A", "ctx_a": "x.", "ctx_b": "y", "endings": ["a", "b"], "label": "1"})";
    const std::string five =
        R"({"activity_label": "A", "ctx_a": "x.", "ctx_b": "y", "endings": ["a", "b", "c", "d", "e"], "label": "0"})";
    CHECK(read_task_file(write_temp("skew_eval_hs4.jsonl", four + "\n"), TaskFormat::HELLASWAG).at(0).contexts.size() ==
          4);
    const std::string p = write_temp("skew_eval_hs2.jsonl", four + "\n" + two + "\n");
    CHECK_THROWS_WITH(read_task_file(p, TaskFormat::HELLASWAG),
                      Catch::Contains(p + ":2: field 'endings' has 2 endings; a HellaSwag example has exactly 4"));
    const std::string q = write_temp("skew_eval_hs5.jsonl", five + "\n");
    CHECK_THROWS_WITH(read_task_file(q, TaskFormat::HELLASWAG),
                      Catch::Contains(q + ":1: field 'endings' has 5 endings"));
}

TEST_CASE("an ARC question with fewer than 3 or more than 5 choices, or two choices of one label, is refused",
          "[eval][tasks]") {
    auto arc_line = [](const std::string& texts, const std::string& labels, const std::string& key) {
        return "{\"question\": \"q?\", \"choices\": {\"text\": [" + texts + "], \"label\": [" + labels +
               "]}, \"answerKey\": \"" + key + "\"}\n";
    };
    const std::string two = write_temp("skew_eval_arc2.jsonl", arc_line("\"a\", \"b\"", "\"A\", \"B\"", "A"));
    CHECK_THROWS_WITH(read_task_file(two, TaskFormat::ARC),
                      Catch::Contains(two + ":1: 2 choices; an ARC question has 3 to 5"));
    const std::string six = write_temp("skew_eval_arc6.jsonl", arc_line("\"a\",\"b\",\"c\",\"d\",\"e\",\"f\"",
                                                                        "\"A\",\"B\",\"C\",\"D\",\"E\",\"F\"", "A"));
    CHECK_THROWS_WITH(read_task_file(six, TaskFormat::ARC),
                      Catch::Contains(":1: 6 choices; an ARC question has 3 to 5"));
    const std::string dup =
        write_temp("skew_eval_arcdup.jsonl", arc_line("\"a\", \"b\", \"c\"", "\"A\", \"B\", \"A\"", "A"));
    CHECK_THROWS_WITH(read_task_file(dup, TaskFormat::ARC), Catch::Contains(":1: choices 1 and 3 share the label 'A'"));
    const std::string ok =
        write_temp("skew_eval_arc3.jsonl", arc_line("\"a\", \"b\", \"c\"", "\"A\", \"B\", \"C\"", "C"));
    CHECK(read_task_file(ok, TaskFormat::ARC).at(0).gold == 2);
}

TEST_CASE("a folder given as the task file is refused as a folder, not read as an empty file", "[eval][tasks]") {
    const std::string dir = (std::filesystem::temp_directory_path() / "skew_eval_task_dir").string();
    std::filesystem::create_directories(dir);
    CHECK_THROWS_WITH(read_task_file(dir, TaskFormat::PIQA),
                      Catch::Contains(dir + ": is a folder; --task takes a JSONL task file"));
}
