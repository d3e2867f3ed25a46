// The four multiple-choice tasks of the paper's Table 9 as the LM Evaluation Harness v0.4 builds
// their requests (docs/evaluation.md): prompt templates, HellaSwag's preprocessing, WinoGrande's
// partial scoring, and the code-point lengths acc_norm divides by.
#include "eval/tasks.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "engine/error.h"
#include "engine/text.h"
#include "eval/py_text.h"

namespace skew::eval {
namespace {

using nlohmann::json;

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    std::string out;
    size_t i = 0;
    while (true) {
        const size_t j = s.find(from, i);
        if (j == std::string::npos) break;
        out.append(s, i, j - i);
        out += to;
        i = j + from.size();
    }
    out.append(s, i, std::string::npos);
    return out;
}

// A string field of `j`, or an error naming it.
std::string get_string(const json& j, const char* key, const std::string& where) {
    if (!j.contains(key)) fail("{}: missing field '{}'", where, key);
    if (!j[key].is_string()) fail("{}: field '{}' is not a string", where, key);
    return j[key].get<std::string>();
}

// An integer label given as a number or a decimal string.
int64_t get_index(const json& j, const char* key, const std::string& where) {
    if (!j.contains(key)) fail("{}: missing field '{}'", where, key);
    const json& v = j[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    int64_t label = 0;
    if (v.is_string() && py_int(v.get<std::string>(), label)) return label;  // the harness's int(doc["label"])
    fail("{}: field '{}' is not an integer label (got {})", where, key, v.dump());
}

McItem shared_context(std::string context, const std::vector<std::string>& choices, int64_t gold,
                      const std::string& where) {
    if (gold < 0 || gold >= int64_t(choices.size()))
        fail("{}: gold label {} is outside the {} choices", where, gold, choices.size());
    McItem it;
    for (const std::string& c : choices) {
        it.contexts.push_back(context);
        std::string cont(1, ' ');
        cont += c;
        it.continuations.push_back(cont);
        it.norm_chars.push_back(utf8_length(c));
    }
    it.gold = gold;
    return it;
}

McItem piqa(const json& j, const std::string& where) {
    const std::string goal = get_string(j, "goal", where);
    const std::string sol1 = get_string(j, "sol1", where), sol2 = get_string(j, "sol2", where);
    const int64_t label = get_index(j, "label", where);
    return shared_context("Question: " + goal + "\nAnswer:", {sol1, sol2}, label, where);
}

McItem winogrande(const json& j, const std::string& where) {
    const std::string sentence = get_string(j, "sentence", where);
    const size_t blank = sentence.find('_');
    if (blank == std::string::npos) fail("{}: field 'sentence' has no blank '_'", where);
    const int64_t answer = get_index(j, "answer", where);
    if (answer != 1 && answer != 2) fail("{}: field 'answer' must be \"1\" or \"2\" (got {})", where, answer);
    std::string cont(1, ' ');
    cont += py_strip(std::string_view(sentence).substr(blank + 1));
    McItem it;
    for (const char* key : {"option1", "option2"}) {
        std::string ctx(sentence.data(), blank);
        ctx.append(get_string(j, key, where));
        it.contexts.push_back(ctx);
        it.continuations.push_back(cont);
        it.norm_chars.push_back(utf8_length(ctx));  // the harness's "choices" are the contexts here
    }
    it.gold = answer - 1;
    return it;
}

McItem hellaswag(const json& j, const std::string& where) {
    const std::string ctx = get_string(j, "ctx_a", where) + " " + py_capitalize(get_string(j, "ctx_b", where));
    const std::string query = hellaswag_preprocess(get_string(j, "activity_label", where) + ": " + ctx);
    if (!j.contains("endings") || !j["endings"].is_array()) fail("{}: field 'endings' is not a list", where);
    std::vector<std::string> choices;
    for (const json& e : j["endings"]) {
        if (!e.is_string()) fail("{}: field 'endings' holds a non-string", where);
        choices.push_back(hellaswag_preprocess(e.get<std::string>()));
    }
    // HellaSwag has four endings per context (Zellers et al., 2019; the harness scores all four):
    // fewer or more is another file, and chance accuracy would no longer be 25%.
    if (choices.size() != 4)
        fail("{}: field 'endings' has {} ending{}; a HellaSwag example has exactly 4 (is this the right --format?)",
             where, choices.size(), choices.size() == 1 ? "" : "s");
    return shared_context(query, choices, get_index(j, "label", where), where);
}

McItem arc(const json& j, const std::string& where) {
    if (!j.contains("question")) fail("{}: missing field 'question'", where);
    std::string stem;
    json choices;
    if (j["question"].is_object()) {  // original AI2 JSONL: question {stem, choices [{text, label}]}
        stem = get_string(j["question"], "stem", where);
        if (!j["question"].contains("choices")) fail("{}: missing field 'question.choices'", where);
        choices = j["question"]["choices"];
    } else {
        stem = get_string(j, "question", where);
        if (!j.contains("choices")) fail("{}: missing field 'choices'", where);
        choices = j["choices"];
    }
    std::vector<std::string> texts, labels;
    if (choices.is_object()) {  // HuggingFace: {text: [...], label: [...]}
        if (!choices.contains("text") || !choices.contains("label") || !choices["text"].is_array() ||
            !choices["label"].is_array() || choices["text"].size() != choices["label"].size())
            fail("{}: field 'choices' needs lists 'text' and 'label' of one length", where);
        for (size_t i = 0; i < choices["text"].size(); ++i) {
            if (!choices["text"][i].is_string() || !choices["label"][i].is_string())
                fail("{}: field 'choices' holds a non-string", where);
            texts.push_back(choices["text"][i].get<std::string>());
            labels.push_back(choices["label"][i].get<std::string>());
        }
    } else if (choices.is_array()) {
        for (const json& c : choices) {
            if (!c.is_object()) fail("{}: field 'choices' holds a non-object", where);
            texts.push_back(get_string(c, "text", where));
            labels.push_back(get_string(c, "label", where));
        }
    } else {
        fail("{}: field 'choices' is neither an object nor a list", where);
    }
    // ARC questions have 3 to 5 choices (Clark et al., 2018; most have 4): fewer or more is
    // another file, and chance accuracy would no longer be about 25%.
    if (texts.size() < 3 || texts.size() > 5)
        fail("{}: {} choice{}; an ARC question has 3 to 5 (is this the right --format?)", where, texts.size(),
             texts.size() == 1 ? "" : "s");
    for (size_t i = 0; i < labels.size(); ++i)
        for (size_t k = 0; k < i; ++k)
            if (labels[k] == labels[i])
                fail(
                    "{}: choices {} and {} share the label '{}'; each choice needs its own label for answerKey to name "
                    "one",
                    where, k + 1, i + 1, escape_text(labels[i]));
    const std::string key = get_string(j, "answerKey", where);
    // the harness's choices.label.index(answerKey): the position of the label
    int64_t gold = -1;
    for (size_t i = 0; i < labels.size() && gold < 0; ++i)
        if (labels[i] == key) gold = int64_t(i);
    if (gold < 0) fail("{}: answerKey '{}' is not among the choice labels", where, escape_text(key));
    return shared_context("Question: " + stem + "\nAnswer:", texts, gold, where);
}

}  // namespace

TaskFormat task_format_from_name(const std::string& name) {
    if (auto f = parse_choice<TaskFormat>(name)) return *f;
    fail("--format {}: unknown task format (expected {})", name, choice_list<TaskFormat>());
}

std::string hellaswag_preprocess(std::string_view text) {
    std::string s = replace_all(py_strip(text), " [title]", ". ");
    std::string no_tags;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '[') {
            size_t j = i + 1;
            while (j < s.size() && s[j] != ']' && s[j] != '\n') ++j;
            if (j < s.size() && s[j] == ']') {
                i = j;
                continue;
            }
        }
        no_tags += s[i];
    }
    std::string out;
    for (size_t i = 0; i < no_tags.size(); ++i) {
        out += no_tags[i];
        if (no_tags[i] == ' ' && i + 1 < no_tags.size() && no_tags[i + 1] == ' ') ++i;
    }
    return out;
}

McItem make_item(std::string_view line, TaskFormat format, const std::string& where) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) fail("{}: not valid JSON", where);
    if (!j.is_object()) fail("{}: not a JSON object", where);
    switch (format) {
        case TaskFormat::PIQA: return piqa(j, where);
        case TaskFormat::WINOGRANDE: return winogrande(j, where);
        case TaskFormat::HELLASWAG: return hellaswag(j, where);
        case TaskFormat::ARC: return arc(j, where);
    }
    fail("{}: unknown task format", where);
}

std::vector<McItem> read_task_file(const std::string& path, TaskFormat format) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail("{}: is a folder; --task takes a JSONL task file", path);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open the task file", path);
    std::vector<McItem> items;
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (py_strip(line).empty()) continue;  // a blank line, as `if not line.strip()` skips it
        McItem it = make_item(line, format, path + ":" + std::to_string(n));
        it.line = n;
        items.push_back(std::move(it));
    }
    if (items.empty()) fail("{}: no items (an empty task file)", path);
    return items;
}

}  // namespace skew::eval
