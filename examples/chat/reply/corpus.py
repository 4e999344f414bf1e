"""The real conversations the demo replays: the dialogues of the PyPI package
``chatterbot-corpus`` (YAML files, one folder per language).

A *source* names one file, like ``"english/greetings"``. Its script is the
file's conversations one after another, as turns: each line a user says, and
the line that answers it in the conversation (None where the conversation
ends on the user's line).

``python corpus.py [--limit N]`` prints every source as JSON for the replay:
``[{"source", "language", "topic", "lines": [user line, ...]}]``, each
capped at its first N turns.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

import yaml
from chatterbot_corpus.corpus import DATA_DIRECTORY


class Turn(NamedTuple):
    said: str
    answer: Optional[str]


def sources() -> List[str]:
    """Every source of the corpus, sorted: ``["bengali/ai", ...]``."""
    root = Path(DATA_DIRECTORY)
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yml"))


@lru_cache(maxsize=None)
def script(source: str) -> List[Turn]:
    """The turns of one source, in the file's order."""
    path = Path(DATA_DIRECTORY, source + ".yml")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    turns: List[Turn] = []
    for conversation in data.get("conversations") or []:
        # YAML reads some lines as numbers or booleans: a chat line is text.
        lines = [str(line).strip() for line in conversation if line is not None and str(line).strip()]
        for i in range(0, len(lines), 2):
            turns.append(Turn(lines[i], lines[i + 1] if i + 1 < len(lines) else None))
    return turns


@lru_cache(maxsize=None)
def answers(source: str) -> Dict[str, str]:
    """The first answer the source gives to each line said in it."""
    found: Dict[str, str] = {}
    for turn in script(source):
        if turn.answer is not None:
            found.setdefault(turn.said, turn.answer)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="at most this many turns of each source (0: all)")
    args = parser.parse_args()
    out = []
    for source in sources():
        lines = [t.said for t in script(source)]
        if args.limit:
            lines = lines[: args.limit]
        if lines:
            language, _, topic = source.partition("/")
            out.append({"source": source, "language": language, "topic": topic, "lines": lines})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
