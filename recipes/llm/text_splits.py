"""Text cut into train, validation and test: the user's text (a file, a folder of text files, ``hf:NAME``) or a
named dataset, in reading order, or with the data's own held-out part as test; each part a list of documents, each
cut piece named in ``split.csv`` by where it came from; and the text each part is scored on (its first bytes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.llm.textfiles import read_text, sources


@dataclass
class Piece:
    """A document, or the part of one a split cut off: its source (a file relative to the data root, a dataset
    row), its text and where that text starts in the document (characters)."""
    source: str
    text: str
    start: int = 0
    whole: bool = True

    def cut(self, a: int, b: int) -> Piece:
        return self if (a, b) == (0, len(self.text)) else Piece(self.source, self.text[a:b], self.start + a, False)

    @property
    def key(self) -> str:
        """The item's name in ``split.csv``: the source, with the characters it holds where a split cut it."""
        return self.source if self.whole else f"{self.source}[{self.start}:{self.start + len(self.text)}]"


@dataclass
class TextSplits:
    name: str
    train: list[str]  # documents; each starts with <|bos|> once tokenized
    val: list[str]
    test: list[str]
    how: str = ""  # how the parts were made, one line (the leaderboard's split text)
    keys: dict[str, list[str]] = field(default_factory=dict)  # train / validation / test: the items (split.csv)

    @classmethod
    def of(cls, name: str, train: list[Piece], val: list[Piece], test: list[Piece], how: str) -> TextSplits:
        return cls(name, [p.text for p in train], [p.text for p in val], [p.text for p in test], how,
                   {"train": [p.key for p in train], "validation": [p.key for p in val],
                    "test": [p.key for p in test]})

    def sizes(self) -> str:
        return sizes_line({"train": sum(map(len, self.train)), "validation": sum(map(len, self.val)),
                           "test": sum(map(len, self.test))})


def sizes_line(characters: dict[str, int]) -> str:
    return " / ".join(f"{part} {n:,}" for part, n in characters.items()) + " characters"


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise ZooError(f"{name}={value}: must be between 0 and 1")
    if val_fraction + test_fraction >= 1:
        raise ZooError(f"val_fraction={val_fraction} + test_fraction={test_fraction}: leave some data to train on")


def split_tail(docs: list[Piece], val_fraction: float, test_fraction: float = 0.0, whole: bool = False) \
        -> tuple[list[Piece], list[Piece], list[Piece]]:
    """In reading order: the last ``test_fraction`` of the characters is test, the ``val_fraction`` before it
    validation, the rest train. Where a cut falls inside a document, the document is split at that character
    and each side is a document of its own (it starts with <|bos|> once tokenized; its key in ``split.csv`` is
    ``source[start:end]``): no character is on two sides, none is dropped. ``whole``: documents are records, each
    kept whole (``tail_bounds``)."""
    parts: tuple[list[Piece], ...] = ([], [], [])
    for p, bounds in zip(docs, tail_bounds([len(p.text) for p in docs], val_fraction, test_fraction, whole)):
        for part, a, b in zip(parts, bounds, bounds[1:]):
            if b > a:
                part.append(p.cut(a, b))
    return parts


def tail_bounds(lengths: list[int], val_fraction: float, test_fraction: float,
                whole: bool = False) -> list[tuple[int, int, int, int]]:
    """``split_tail``'s cuts from the documents' lengths alone (characters): each document's (0, validation start,
    test start, end); its train part is [0, validation start). ``whole``: each document goes whole to the part its
    middle character falls in, where that leaves every part a document (else the cuts fall inside them)."""
    total = sum(lengths)
    test_at = int(total * (1 - test_fraction) + 1e-6)  # + 1e-6: a whole product never floors one short
    cuts = (max(0, test_at - round(total * val_fraction)), test_at)
    if whole:
        bounds, seen = [], 0
        for n in lengths:
            part = sum(seen + n / 2 >= c for c in cuts)  # 0 train, 1 validation, 2 test
            bounds.append((0, *(n if part < k else 0 for k in (1, 2)), n))
            seen += n
        if all(any(b[k + 1] > b[k] for b in bounds) for k in range(3 if test_fraction else 2)):
            return bounds
    bounds, seen = [], 0
    for n in lengths:
        bounds.append((0, *(min(max(c - seen, 0), n) for c in cuts), n))
        seen += n
    return bounds


def load_text(data: str, val_fraction: float, test_fraction: float, log=print, text_field: str = "text") -> TextSplits:
    """Train, validation and test text. One text (a named dataset, a file, a folder of text files, read in
    sorted order): its last ``test_fraction`` is test and the ``val_fraction`` before it validation. Where the
    data holds its own held-out part (``NAME.val.txt`` beside the file, a ``val`` subfolder or ``val.txt``
    inside the folder, the ``validation`` split of ``hf:NAME[:CONFIG]``), that part is test and validation
    is the last ``val_fraction`` of the training text."""
    check_fractions(val_fraction, test_fraction)
    if data.startswith("hf:"):
        return _load_hf_text(data, val_fraction, test_fraction)
    found = sources(data, log, text_field)
    docs = [Piece(key, read_text(path)) for key, path in found.docs]
    if found.held:
        return _held_out_split(found.name, docs, [Piece(key, read_text(path)) for key, path in found.held],
                               val_fraction, found.held_how)
    return _tail_split(found.name, docs, val_fraction, test_fraction, found.whole)


def _tail_split(name: str, docs: list[Piece], val_fraction: float, test_fraction: float,
                whole: bool = False) -> TextSplits:
    train, val, test = split_tail(docs, val_fraction, test_fraction, whole)
    kept = whole and all(p.whole for p in train + val + test)
    return TextSplits.of(name, train, val, test, split_how(val_fraction, test_fraction, whole=kept))


def _held_out_split(name: str, docs: list[Piece], held: list[Piece], val_fraction: float, test: str) -> TextSplits:
    train, val, _ = split_tail(docs, val_fraction)
    return TextSplits.of(name, train, val, held, split_how(val_fraction, 0.0, test))


def split_how(val_fraction: float, test_fraction: float, held: str = "", whole: bool = False) -> str:
    """The split in one line (the leaderboard's split text); ``held``: what the data's own held-out part is;
    ``whole``: documents (records) kept whole, each in the part its middle character falls in."""
    if whole:
        return (f"documents in reading order, each whole: about the first {100 * (1 - val_fraction - test_fraction):g}%"
                f" of the characters train, the next {100 * val_fraction:g}% validation, the last "
                f"{100 * test_fraction:g}% test")
    if held:
        return (f"{held}; validation: the last {100 * val_fraction:g}% of the training text's characters, in reading "
                "order")
    return (f"characters in reading order: first {100 * (1 - val_fraction - test_fraction):g}% train, next "
            f"{100 * val_fraction:g}% validation, last {100 * test_fraction:g}% test")


def _load_hf_text(data: str, val_fraction: float, test_fraction: float) -> TextSplits:
    try:
        import datasets
    except ImportError:
        raise ZooError(f"data={data}: needs the Hugging Face datasets package: pip install 'recipe-zoo[hf]'") from None
    name, _, subset = data[3:].partition(":")
    try:
        ds = datasets.load_dataset(name, subset or None)
    except Exception as exc:  # offline, unknown name, gated: one line either way
        raise ZooError(f"data={data}: cannot load from the Hugging Face hub: {str(exc).splitlines()[0]}") from None
    column = "text" if "text" in ds["train"].column_names else ds["train"].column_names[0]

    def rows(split: str) -> list[Piece]:
        return [Piece(f"{split}/{i}", t) for i, t in enumerate(ds[split][column]) if t and t.strip()]

    if "validation" in ds:
        return _held_out_split(data, rows("train"), rows("validation"), val_fraction,
                               "test: the dataset's validation split")
    return _tail_split(data, rows("train"), val_fraction, test_fraction)


def eval_text(splits: TextSplits, eval_bytes: int, part: str = "test") -> str:
    """The text a part is scored on: the first ``eval_bytes`` bytes of test (fewer is an error: runs compare
    only on the same bytes), or of validation (up to ``eval_bytes``: a short validation part is scored whole);
    cut at a character boundary."""
    text = "".join(splits.test if part == "test" else splits.val).encode()
    return scored_prefix(splits.name, text, len(text), eval_bytes, part)


def scored_prefix(name: str, head: bytes, size: int, eval_bytes: int, part: str) -> str:
    """``eval_text`` of a part of ``size`` bytes that starts with ``head`` (its first ``eval_bytes`` at least)."""
    if part == "test" and size < eval_bytes:
        raise ZooError(f"{name}: the test split has {size:,} bytes, fewer than eval_bytes={eval_bytes:,}; "
                       f"set eval_bytes={max(1, size)} (runs then compare only with that size) or give more text")
    if not size:
        raise ZooError(f"{name}: the {part} split is empty; give more text")
    return head[:eval_bytes].decode("utf-8", errors="ignore")

