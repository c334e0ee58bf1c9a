"""Text answers, multiple-choice letters and units: the word rules of the grammar.

A text answer is its letters in lower case ("text:monday"); a capital letter
alone is a choice ("choice:B"); a short text group after a value is a unit and
dropped (:func:`is_unit`); unit words at the end of an answer are removed
before tokenizing (``UNIT_WORDS``).
"""

from __future__ import annotations

import re

MAX_TEXT_TOKEN = 40
"""Longest content of one ``\\text{...}`` (or ``\\mbox``, ``\\mathrm``...) group."""

MAX_UNIT_WORDS = 3
"""Most words in a text group read as a unit after a value ("5\\text{ square units}")."""
NOT_UNIT_WORDS = frozenset({"not", "no", "never", "or", "and", "nor", "except", "none", "plus", "minus", "times"})
# Trailing unit words (after whitespace, at the end of an item) that are dropped [choice].
UNIT_WORDS = re.compile(
    r"[ \t]+(?:square[ \t]+|sq[ \t]+|cubic[ \t]+)?(?:units?|cm|centimeters?|meters?|km|kilometers?|mm|inches|inch|"
    r"feet|foot|ft|yards?|miles?|degrees?|dollars?|cents?|seconds?|minutes?|hours?|days?|"
    r"pounds?|ounces?|grams?|kg|liters?|mph)\.?(?:\^\{?[23]\}?)?(?=[ \t]*(?:,|$))"
)
WORDS = re.compile(r"[A-Za-z]+(?:[ '\-]+[A-Za-z]+)*\.?")


def is_unit(content: str) -> bool:
    """A text group after a value is a unit [choice] when it is 1-3 words with no word that changes the value.

    "5\\text{ cm}", "18\\text{ square units}" are units; "5\\text{ or }" (then
    more), "5\\text{ is not right}" are not, so the answer has no class.
    """
    words = content.replace(".", " ").split()
    return (
        1 <= len(words) <= MAX_UNIT_WORDS
        and all(word.isascii() and word.isalpha() for word in words)
        and not {word.lower() for word in words} & NOT_UNIT_WORDS
    )
