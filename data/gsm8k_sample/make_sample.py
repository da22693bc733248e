"""Regenerate this sample from the full GSM8K JSONL files (seeded, so the same rows come out every time).

python data/gsm8k_sample/make_sample.py ../shared/data/gsm8k data/gsm8k_sample
"""

import random
import sys
from pathlib import Path

SIZES = {"train": 256, "test": 128}
SEED = 2021

src, dest = Path(sys.argv[1]), Path(sys.argv[2])
for split, size in SIZES.items():
    lines = (src / f"{split}.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    keep = sorted(random.Random(SEED).sample(range(len(lines)), size))  # original order, seeded choice
    (dest / f"{split}.jsonl").write_text("".join(lines[i] for i in keep), encoding="utf-8")
    print(f"{split}: {size} of {len(lines)} rows")
