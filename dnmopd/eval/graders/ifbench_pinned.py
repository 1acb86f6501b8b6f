"""IFBench's checkers as of the published results: allenai/IFBench at ``protocol.IFBENCH_CHECKERS`` (1091c4c3).

``if-verifiable`` 0.1.2 packages an older revision of AllenAI's ``instructions.py``. The checks that changed
by the pinned commit are re-stated here, as subclasses of if-verifiable's checkers (arguments and
descriptions are theirs); every other instruction is if-verifiable's own class. The pinned revision also splits
sentences with NLTK's Punkt model (``nltk.sent_tokenize``) where if-verifiable uses regular expressions:
`pinned_sentences` puts that splitter in if-verifiable's utility module while checks run, so every checker
that splits sentences (ten of them, changed or not) splits as the pinned revision does.

The rules, per instruction id (what the pinned ``check_following`` does):

- ``count:person_names``: a listed name counts when it occurs as a whole word (``\\b`` on both sides, case
  kept), not as a substring ("Leo" in "Leonardo" does not count).
- ``sentence:keyword``: the keyword occurs as a whole word in the N-th sentence, in any case.
- ``count:pronouns``: NLTK word tokens of the lower-cased response (slashes made spaces) counted against a
  larger set that adds demonstrative, interrogative, relative and indefinite pronouns.
- ``words:keywords_specific_position``: the m-th NLTK word token of the n-th sentence, tokens made only of
  punctuation skipped, equals the keyword in any case.
- ``words:words_position``: over NLTK word tokens, the second token and the second-to-last one (the
  third-to-last when the last token is one punctuation character, and then at least three tokens) equal the
  keyword in any case.
- ``format:quote_unquote``: curly quotes are not made straight (the pinned normalisation replaces ``"`` by
  itself); a response that is only digits and punctuation follows the instruction (no IndexError).
- ``custom:sentence_alphabet``: a sentence without a word fails the check (no IndexError).
- ``repeat:repeat_span``: ``n_start``/``n_end`` are inclusive character indices of the prompt (drawn over its
  characters when missing; 0 is a given index); the stripped, lower-cased response equals that span stripped
  and lower-cased.
- ``format:title_case``: over NLTK word tokens, tokens that do not start with a letter are skipped; a
  one-letter token fails when lower case; longer tokens fail when they start lower case and the rest is all
  upper or all lower case.
"""

from __future__ import annotations

import contextlib
import random
import re
import string
from collections.abc import Iterator

PRONOUNS = frozenset((
    "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves", "you", "your", "yours", "yourself",
    "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself", "they",
    "them", "their", "theirs", "themselves", "this", "that", "these", "those", "who", "whom", "whose", "which",
    "what", "whoever", "whomever", "whatever", "whichever", "anybody", "anyone", "anything", "everybody",
    "everyone", "everything", "nobody", "nothing", "somebody", "someone", "something", "each", "either",
    "neither", "both", "all", "some", "any", "none"))
"""The pinned revision's pronoun set."""


def _words(text: str) -> list[str]:
    import nltk

    return nltk.word_tokenize(text)


def _whole_word(word: str, text: str, flags: int = 0) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text, flags) is not None


@contextlib.contextmanager
def pinned_sentences() -> Iterator[None]:
    """if-verifiable's sentence splitter is ``nltk.sent_tokenize`` (the pinned one) inside the block."""
    import nltk
    from if_verifiable.ifbench import instructions_util

    own = instructions_util.split_into_sentences
    instructions_util.split_into_sentences = nltk.sent_tokenize
    try:
        yield
    finally:
        instructions_util.split_into_sentences = own


def pinned_registry() -> dict:
    """Instruction id -> checker class of the pinned revision."""
    from if_verifiable.ifbench import instructions as older
    from if_verifiable.ifbench.instructions_registry import INSTRUCTION_DICT

    def sentences(text: str) -> list[str]:
        import nltk

        return nltk.sent_tokenize(text)

    class PersonNames(older.PersonNameCountChecker):
        def check_following(self, value):
            listed = self._description_pattern.split(": ", 1)[1].rstrip(" .").split(", ")
            return sum(_whole_word(name, value) for name in listed) >= self._num_person_names

    class KeywordInSentence(older.IncludeKeywordChecker):
        def check_following(self, value):
            found = sentences(value)
            return len(found) >= self._keyword_position and \
                _whole_word(self._keyword, found[int(self._keyword_position - 1)], re.IGNORECASE)

    class Pronouns(older.PronounCountChecker):
        def check_following(self, value):
            tokens = _words(value.replace("/", " ").lower())
            return sum(token in PRONOUNS for token in tokens) >= self._num_pronouns

    class KeywordAtPosition(older.KeywordSpecificPositionChecker):
        def check_following(self, value):
            found = sentences(value)
            if len(found) < self._n:
                return False
            tokens = [t for t in _words(found[self._n - 1]) if any(c.isalnum() for c in t)]
            return len(tokens) >= self._m and tokens[self._m - 1].lower() == self._keyword.lower()

    class SecondWords(older.WordsPositionChecker):
        def check_following(self, value):
            tokens = [t.lower() for t in _words(value)]
            keyword = self._keyword.lower()
            if len(tokens) < 2:
                return False
            if tokens[-1] in string.punctuation:
                return len(tokens) >= 3 and tokens[1] == tokens[-3] == keyword
            return tokens[1] == tokens[-2] == keyword

    class QuoteUnquote(older.QuoteExplanationChecker):
        def check_following(self, value):
            compact = "".join(value.replace("'\"'", "").split())
            if '""' in compact:
                return False
            rest = compact.strip(string.digits + string.punctuation.replace('"', ""))
            return not rest.endswith('"')

    class SentenceAlphabet(older.SentenceAlphabetChecker):
        def check_following(self, value):
            found = sentences(value)
            if len(found) != 26:
                return False
            firsts = [sentence.split()[:1] for sentence in found]
            return all(first and first[0].lower().startswith(chr(ord("a") + i)) for i, first in enumerate(firsts))

    class RepeatSpan(older.RepeatSpanChecker):
        def build_description(self, prompt_to_repeat=None, n_start=None, n_end=None):
            if not prompt_to_repeat:
                raise ValueError("prompt_to_repeat must be set.")
            self._prompt_to_repeat = prompt_to_repeat
            self._n_start = random.randint(0, len(prompt_to_repeat) - 2) if n_start is None else n_start
            self._n_end = random.randint(self._n_start + 1, len(prompt_to_repeat) - 1) if n_end is None else n_end
            self._description_pattern = ("Copy the span of words that lies between (and including) index {n_start} "
                                         "and {n_end}, the indices are character indices!")
            return self._description_pattern.format(n_start=self._n_start, n_end=self._n_end)

        def check_following(self, value):
            span = self._prompt_to_repeat[self._n_start:self._n_end + 1]
            return value.strip().lower() == span.strip().lower()

    class TitleCase(older.TitleCaseChecker):
        def check_following(self, value):
            for token in _words(value):
                if not token[:1].isalpha():
                    continue
                if len(token) == 1:
                    if token.islower():
                        return False
                elif token[0].islower() and (token[1:].isupper() or token[1:].islower()):
                    return False
            return True

    pinned = {"count:person_names": PersonNames, "sentence:keyword": KeywordInSentence, "count:pronouns": Pronouns,
              "words:keywords_specific_position": KeywordAtPosition, "words:words_position": SecondWords,
              "format:quote_unquote": QuoteUnquote, "custom:sentence_alphabet": SentenceAlphabet,
              "repeat:repeat_span": RepeatSpan, "format:title_case": TitleCase}
    return {**INSTRUCTION_DICT, **pinned}
