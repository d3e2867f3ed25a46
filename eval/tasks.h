// Zero-shot multiple-choice tasks as the LM Evaluation Harness (v0.4) defines them
// (docs/evaluation.md; paper Appendix D, Table 9): PIQA, WinoGrande (partial scoring), HellaSwag
// (its preprocessing) and ARC, read from their public JSONL exports into context/continuation
// pairs, one per choice.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/choice_names.h"

namespace skew::eval {

enum class TaskFormat : uint8_t { PIQA, WINOGRANDE, HELLASWAG, ARC };

/// "piqa", "winogrande", "hellaswag", "arc" -> TaskFormat; throws skew::Error on another name.
TaskFormat task_format_from_name(const std::string& name);

/// One document: a (context, continuation) request per choice and the gold choice.
/// The continuation carries the target delimiter " " (the harness's default); norm_chars is the
/// choice's length without the delimiter in Unicode code points (acc_norm divides by it).
struct McItem {
    std::vector<std::string> contexts;       // one per choice
    std::vector<std::string> continuations;  // one per choice
    std::vector<int64_t> norm_chars;         // one per choice
    int64_t gold = 0;
    int64_t line = 0;  // 1-based line in the task file
};

/// Read a JSONL task file. Accepted fields (the HuggingFace exports; ARC also the original AI2 one):
///   piqa:       goal, sol1, sol2, label (0/1, number or string)
///   winogrande: sentence (one "_"), option1, option2, answer ("1"/"2")
///   hellaswag:  activity_label, ctx_a, ctx_b, endings (a list of exactly 4), label ("0".."3" or number)
///   arc:        question (string, or {stem, choices}), choices {text, label} (or list of {text,
///               label}), answerKey
/// Blank lines are skipped. Throws skew::Error "FILE:LINE: ..." on a malformed line (not JSON, a
/// missing or mistyped field, a gold label out of range, no blank in a WinoGrande sentence) or an
/// unreadable file.
std::vector<McItem> read_task_file(const std::string& path, TaskFormat format);

/// The item of one parsed JSON document (the text of a line); `where` prefixes errors ("FILE:LINE").
McItem make_item(std::string_view json_line, TaskFormat format, const std::string& where);

/// HellaSwag's preprocess: strip, " [title]" -> ". ", delete each non-greedy "[...]" (not
/// crossing a newline), then "  " -> " " in one left-to-right pass.
std::string hellaswag_preprocess(std::string_view s);

}  // namespace skew::eval

namespace skew {

/// The name of a task format, as `skew eval --format` and results spell it.
template <>
struct ChoiceNames<eval::TaskFormat> {
    static constexpr std::array<std::pair<eval::TaskFormat, std::string_view>, 4> items{
        {{eval::TaskFormat::PIQA, "piqa"},
         {eval::TaskFormat::WINOGRANDE, "winogrande"},
         {eval::TaskFormat::HELLASWAG, "hellaswag"},
         {eval::TaskFormat::ARC, "arc"}}};
};

}  // namespace skew
