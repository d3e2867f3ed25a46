#!/usr/bin/python3
# Independent reference for the request strings of the four multiple-choice tasks, written from the
# LM Evaluation Harness v0.4 task definitions (piqa.yaml, winogrande/preprocess_winogrande.py,
# hellaswag/utils.py, arc_easy.yaml; target_delimiter " ") with Python's own str.strip,
# str.capitalize and re: for each line of tests/fixtures/eval/<task>.jsonl, the contexts,
# continuations, code-point lengths acc_norm divides by, the gold index, and each request as
# HFLM._encode_pair splits it before encoding (the context's trailing whitespace, by str.rstrip,
# moved into the continuation).
#
# Run:  python3 tests/reference/eval/make_task_requests.py
# Writes tests/fixtures/eval/expected_requests.json, read by tests/eval/test_tasks.cpp.
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "fixtures", "eval")


def hellaswag_preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def encode_pair(context, continuation):
    # lm_eval/models/huggingface.py HFLM._encode_pair, before the tokenizer
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    return [context, continuation]


def piqa(doc):
    ctx = "Question: " + doc["goal"] + "\nAnswer:"
    choices = [doc["sol1"], doc["sol2"]]
    return [ctx] * 2, [" " + c for c in choices], [len(c) for c in choices], int(doc["label"])


def winogrande(doc):
    idx = doc["sentence"].index("_")
    contexts = [doc["sentence"][:idx] + doc[k] for k in ("option1", "option2")]
    cont = " " + doc["sentence"][idx + 1:].strip()
    return contexts, [cont] * 2, [len(c) for c in contexts], {"1": 0, "2": 1}[str(doc["answer"])]


def hellaswag(doc):
    ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    query = hellaswag_preprocess(doc["activity_label"] + ": " + ctx)
    choices = [hellaswag_preprocess(e) for e in doc["endings"]]
    return [query] * len(choices), [" " + c for c in choices], [len(c) for c in choices], int(doc["label"])


def arc(doc):
    q = doc["question"]
    if isinstance(q, dict):
        stem, ch = q["stem"], q["choices"]
        texts, labels = [c["text"] for c in ch], [c["label"] for c in ch]
    else:
        stem, texts, labels = q, doc["choices"]["text"], doc["choices"]["label"]
    ctx = "Question: " + stem + "\nAnswer:"
    return [ctx] * len(texts), [" " + t for t in texts], [len(t) for t in texts], labels.index(doc["answerKey"])


def main():
    out = {}
    for name, fn in (("piqa", piqa), ("winogrande", winogrande), ("hellaswag", hellaswag), ("arc", arc)):
        items = []
        with open(os.path.join(FIX, name + ".jsonl"), encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                contexts, continuations, norm, gold = fn(json.loads(line))
                pairs = [encode_pair(c, x) for c, x in zip(contexts, continuations)]
                items.append({"contexts": contexts, "continuations": continuations, "norm_chars": norm, "gold": gold,
                              "encode_pairs": pairs})
        out[name] = items
    with open(os.path.join(FIX, "expected_requests.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print({k: len(v) for k, v in out.items()})


if __name__ == "__main__":
    main()
