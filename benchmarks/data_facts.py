"""Facts of the real data that the tests hold as constants, checked where the data is (the tests never read it).

    ZOO_DATA=../shared/data python benchmarks/data_facts.py

- tinyshakespeare: 1,115,394 characters split 85 / 5 / 10 in reading order into the ranges split.csv names
  (tests/test_llm.py checks the rule on a synthetic text of that length), the first 100,000 bytes of test
  scored, and 361,533 training tokens under the default 1,024-token BPE: ``SHAKESPEARE_TRAIN_TOKENS`` in
  tests/test_llm.py and tests/test_devices.py, what the default depth sizing is tested on.

Prints one line per fact; exit status 1 when one no longer holds, 2 when the data is not in the cache.
"""
from __future__ import annotations

import sys

from recipe_zoo import data as zoo_data
from recipe_zoo.recipes.llm import text_splits, tokenization

SHAKESPEARE_TRAIN_TOKENS = 361_533
SHAKESPEARE_KEYS = {"train": ["input.txt[0:948084]"], "validation": ["input.txt[948084:1003854]"],
                    "test": ["input.txt[1003854:1115394]"]}


def tinyshakespeare() -> list[tuple[str, bool, str]]:
    """(fact, holds, what was found)."""
    path = zoo_data.cache_root() / zoo_data.get("tinyshakespeare").path
    if not path.exists():
        print(f"tinyshakespeare is not in the data cache ({path}): set ZOO_DATA", file=sys.stderr)
        sys.exit(2)
    s = text_splits.load_text(str(path), 0.05, 0.1, log=lambda line: None)
    scored = len(text_splits.eval_text(s, 100_000).encode())
    tokens = len(tokenization.encode_docs(tokenization.train_bpe(s.train, 1024), s.train))
    return [("tinyshakespeare split ranges", s.keys == SHAKESPEARE_KEYS, str(s.keys)),
            ("tinyshakespeare test bytes scored", scored == 100_000, f"{scored:,}"),
            ("tinyshakespeare training tokens", tokens == SHAKESPEARE_TRAIN_TOKENS, f"{tokens:,}")]


def main() -> int:
    facts = tinyshakespeare()
    for fact, holds, found in facts:
        print(f"{'ok  ' if holds else 'FAIL'} {fact}: {found}")
    return 0 if all(holds for _, holds, _ in facts) else 1


if __name__ == "__main__":
    sys.exit(main())
