"""The reply worker's model: a deterministic stand-in for a language model.

It answers with the conversation's own next line where there is one, so a
replayed chat reads like the corpus it comes from, and every run of the
demo gives the same replies.
"""

from __future__ import annotations

import corpus


def reply(source: str, turn: int, said: str) -> str:
    """The answer to ``said``, the chat's turn number ``turn`` (from 0).

    - The chat replays ``source`` and ``said`` is that turn's line: the
      conversation's next line.
    - Else the first answer the source gives to that line anywhere.
    - Else a reply that says it has no line for it.
    """
    if source:
        turns = corpus.script(source)
        if turn < len(turns):
            this = turns[turn]
            if this.said == said and this.answer is not None:
                return this.answer
        known = corpus.answers(source).get(said)
        if known is not None:
            return known
    return f"I have no line after “{said}” yet."
