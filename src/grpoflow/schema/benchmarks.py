"""The built-in math benchmarks: ``evaluation.benchmarks.<name>: {builtin: math500}`` and nothing else to write.

Each entry pins where the problems come from (a Hub dataset repo at a commit, and the file or split that holds
them), which columns hold the question and the answer and how the answer is read, the prompt they are asked
with, the decoding the field reports them with, and columns worth a per-group breakdown in the report. A
built-in benchmark becomes an ordinary dataset (``datasets.<name>``, fetched once by ``download_data`` into
``resources/data/<name>/`` with a manifest, offline afterwards) and a benchmark on its ``test`` split. A dataset
of that name defined under ``datasets`` is used instead (a local copy, a mirror, another revision), and any
setting written on the benchmark (prompt, decoding, limit, ...) wins over the built-in one.

Revisions are commits of the Hub repos, as pinned in public evaluation code (the sources are in
docs/evaluation.md); each download records the commit it resolved in its manifest.
"""

from __future__ import annotations

import copy

# The prompt of DeepSeek-R1, Qwen2.5-Math and open-r1's evaluations of these benchmarks.
BOXED_PROMPT = {
    "system": None,
    "template": "{question}\nPlease reason step by step, and put your final answer within \\boxed{}.",
}
# OlympiadBench asks for every answer of a multi-answer problem, and its grader wants them all (format
# answer_list): the prompt says how to give several, as OlympiadBench's own English prompt does ("\boxed{multiple
# answers connected with commas}"; lighteval's olympiade_bench.py).
ALL_ANSWERS_PROMPT = {
    "system": None,
    "template": "{question}\nPlease reason step by step, and put your final answer within \\boxed{}. If the problem "
    "has more than one answer, put all of them in that \\boxed{}, separated by commas.",
}
GREEDY = {"preset": "greedy"}
# Small competition sets (30-40 problems) are reported as the mean accuracy over n samples per problem
# (avg@n, "pass@1" in DeepSeek-R1's and open-r1's tables): one greedy answer per problem is too noisy. Their
# solutions run to thousands of tokens: open-r1 evaluates AIME with lighteval at max_new_tokens 32768 (README
# and Makefile at 1416fa0; lighteval's aime24/aime25 tasks leave generation_size to it), and the global default
# of 1,024 cuts most of them off. AMC 2023 gets the same limit (neither lighteval nor open-r1 has an AMC task).
SAMPLED = {
    "preset": "standard",
    "temperature": 0.6,
    "top_p": 0.95,
    "top_k": -1,
    "samples": 16,
    "max_new_tokens": 32768,
}

BUILTIN: dict[str, dict] = {
    "gsm8k": {
        # The split (and config) of the Hub repo the file or split below is, for the model card.
        "hub_split": "test",
        "hub_config": "main",
        "title": "GSM8K test (1,319 grade-school word problems)",
        "license": "MIT",
        "dataset": {
            "source": "hub",
            "hub": {
                "repo_id": "openai/gsm8k",
                "revision": "cc7b047b6e5bb11b4f1af84efc572db110a51b3c",
                "files": {"test": "main/test-00000-of-00001.parquet"},
            },
            "format": "gsm8k",
            "prompt_key": "question",
            "response_key": "answer",
        },
        "decoding": GREEDY,
    },
    "math500": {
        # The split (and config) of the Hub repo the file or split below is, for the model card.
        "hub_split": "test",
        "hub_config": None,
        "title": "MATH-500 (500 MATH test problems, 'Let's Verify Step by Step')",
        "license": "MIT",
        "dataset": {
            "source": "hub",
            "hub": {
                "repo_id": "HuggingFaceH4/MATH-500",
                "revision": "ff5b20257d8185524591543f8ff5993951537bb8",
                "files": {"test": "test.jsonl"},
            },
            "format": "plain",
            "prompt_key": "problem",
            "response_key": "answer",
            "id_key": "unique_id",
        },
        "decoding": GREEDY,
        "breakdown": ["subject", "level"],
    },
    "aime2024": {
        # The split (and config) of the Hub repo the file or split below is, for the model card.
        "hub_split": "train",
        "hub_config": None,
        "title": "AIME 2024 I and II (30 problems)",
        "license": None,
        "dataset": {
            "source": "hub",
            "hub": {
                "repo_id": "HuggingFaceH4/aime_2024",
                "revision": "2fe88a2f1091d5048c0f36abc874fb997b3dd99a",
                "files": {"test": "data/train-00000-of-00001.parquet"},
            },
            "format": "plain",
            "prompt_key": "problem",
            "response_key": "answer",
            "id_key": "id",
        },
        "decoding": SAMPLED,
    },
    "aime2025": {
        # The split (and config) of the Hub repo the file or split below is, for the model card.
        "hub_split": "test",
        "hub_config": None,
        "title": "AIME 2025 I and II (30 problems)",
        "license": None,
        "dataset": {
            "source": "hub",
            "hub": {
                "repo_id": "math-ai/aime25",
                "revision": "563bb8404243c5f09de6ec262f2db674fe5bce9b",
                "splits": {"test": "test"},
            },
            "format": "plain",
            "prompt_key": "problem",
            "response_key": "answer",
        },
        "decoding": SAMPLED,
    },
    "amc23": {
        # The split (and config) of the Hub repo the file or split below is, for the model card.
        "hub_split": "test",
        "hub_config": None,
        "title": "AMC 2023 (40 problems)",
        "license": None,
        "dataset": {
            "source": "hub",
            "hub": {
                "repo_id": "math-ai/amc23",
                "revision": "80815d37005feb82cd7f8fbc6901d5d3eff43057",
                "splits": {"test": "test"},
            },
            "format": "plain",
            "prompt_key": "question",
            "response_key": "answer",
        },
        "decoding": SAMPLED,
    },
    "olympiadbench": {
        # The split (and config) of the Hub repo the file or split below is, for the model card.
        "hub_split": "train",
        "hub_config": "OE_TO_maths_en_COMP",
        "title": "OlympiadBench, English open-ended text-only maths competition problems (OE_TO_maths_en_COMP, 674)",
        "license": "Apache-2.0",
        "dataset": {
            "source": "hub",
            "hub": {
                "repo_id": "Hothan/OlympiadBench",
                "revision": "91184b52131e7fc9455fef848035173aea8cc01a",
                "files": {"test": "OlympiadBench/OE_TO_maths_en_COMP/OE_TO_maths_en_COMP.parquet"},
            },
            # final_answer is a list (one entry per answer of a multi-answer problem), in $...$.
            "format": "answer_list",
            "prompt_key": "question",
            "response_key": "final_answer",
            "id_key": "id",
        },
        "decoding": GREEDY,
        "prompt": ALL_ANSWERS_PROMPT,
        "breakdown": ["subfield"],
    },
    "minerva": {
        # The split (and config) of the Hub repo the file or split below is, for the model card.
        "hub_split": "test",
        "hub_config": None,
        "title": "Minerva Math (272 undergraduate STEM problems, OCWCourses)",
        "license": None,
        "dataset": {
            "source": "hub",
            "hub": {
                "repo_id": "math-ai/minervamath",
                "revision": "ee46ddc498933b1977577953250ca5c66be64f96",
                "splits": {"test": "test"},
            },
            "format": "plain",
            "prompt_key": "question",
            "response_key": "answer",
        },
        "decoding": GREEDY,
    },
}

# Benchmark keys that set decoding for that benchmark only (over evaluation.<key>).
DECODING_KEYS = ("preset", "samples", "temperature", "top_p", "top_k", "max_new_tokens", "chat_template_kwargs")


def builtin_datasets(evaluation: dict, datasets: dict) -> dict[str, dict]:
    """The dataset entries the config's built-in benchmarks need and does not define itself (name -> spec)."""
    out = {}
    for bench in (evaluation.get("benchmarks") or {}).values():
        name = (bench or {}).get("builtin")
        if name in BUILTIN and bench.get("dataset", name) == name and name not in datasets:
            out[name] = {
                **copy.deepcopy(BUILTIN[name]["dataset"]),
                "prompt": dict(BUILTIN[name].get("prompt", BOXED_PROMPT)),
            }
    return out


def resolve_builtin_benchmarks(evaluation: dict) -> dict:
    """``evaluation`` with each built-in benchmark completed: its dataset and split, its recommended decoding and
    breakdown, except where the benchmark sets them itself (and its token limit, except where
    ``evaluation.max_new_tokens`` is set)."""
    evaluation = copy.deepcopy(evaluation)
    for bench in evaluation.get("benchmarks", {}).values():
        name = bench.get("builtin")
        if name not in BUILTIN:
            continue
        entry = BUILTIN[name]
        bench.setdefault("dataset", name)
        bench["split"] = "test"
        for key, value in entry["decoding"].items():
            # A token limit set for the whole evaluation is the user's: the built-in one only fills its absence.
            if key == "max_new_tokens" and evaluation.get("max_new_tokens") is not None:
                continue
            bench.setdefault(key, value)
        if entry.get("breakdown"):
            bench.setdefault("breakdown", list(entry["breakdown"]))
    return evaluation


def hub_source(name: str) -> dict | None:
    """Where a built-in benchmark comes from, for model cards: {repo_id, revision, split, config, title, license},
    the split and config being the Hub repo's own (AIME 2024's problems are the Hub's ``train`` split, which
    grpoflow evaluates as its ``test`` split)."""
    entry = BUILTIN.get(name)
    if entry is None:
        return None
    hub = entry["dataset"]["hub"]
    return {
        "repo_id": hub["repo_id"],
        "revision": hub["revision"],
        "split": entry["hub_split"],
        "config": entry["hub_config"],
        "title": entry["title"],
        "license": entry["license"],
    }
