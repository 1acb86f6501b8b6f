"""Crafted answers for the IFBench instructions whose checks changed by the pinned revision, with its verdicts.

Each case is ``(instruction id, kwargs, prompt, response, pinned verdict)``. The verdicts are those of
``instructions_registry.INSTRUCTION_DICT[id]`` at allenai/IFBench@1091c4c3 (``protocol.IFBENCH_CHECKERS``),
built and checked as its ``evaluation_lib.test_instruction_following_strict`` does (None-valued kwargs
dropped, ``build_description(**kwargs)``, again with the prompt when the checker takes one, a blank response
fails) under ``random.seed(0)``, with NLTK 3.9's ``punkt_tab`` and ``stopwords`` data; the comment on each
group names the changed lines of that commit's ``instructions.py``. Every case but the ones marked ``SAME``
gets the other verdict (or an exception) from if-verifiable 0.1.2's older checker. ``PUNKT`` marks the
instructions that read NLTK's ``punkt_tab``.
"""

QUICK = "The quick brown fox jumps over"
STORY = " ".join(f"{chr(ord('A') + i)}lpha{i} went home." for i in range(26))

CASES = [
    # PersonNameCountChecker.check_following: names matched with \b...\b, case kept.
    ("count:person_names", {"N": 2}, "p", "Leonardo and Emmanuel met Ella.", False),
    ("count:person_names", {"N": 2}, "p", "Leo met Emma, then Leo left.", True),  # SAME
    # IncludeKeywordChecker.check_following: whole word, any case, in the N-th sentence.
    ("sentence:keyword", {"word": "art", "N": 2}, "p", "I like cats. The party is here.", False),
    ("sentence:keyword", {"word": "art", "N": 2}, "p", "I like cats. ART is great.", True),  # SAME
    # PronounCountChecker.check_following: the larger set, NLTK word tokens.
    ("count:pronouns", {"N": 3}, "p", "This is what everyone wants.", True),
    ("count:pronouns", {"N": 2}, "p", "Nothing here/there matters to anyone.", True),
    # KeywordSpecificPositionChecker.check_following: punctuation tokens skipped, any case.
    ("words:keywords_specific_position", {"keyword": "blue", "n": 1, "m": 3}, "p", "The sky, BLUE and wide.", True),
    ("words:keywords_specific_position", {"keyword": "blue", "n": 2, "m": 1}, "p", "Sky. Blue it is.", True),
    # WordsPositionChecker.check_following: trailing punctuation token, any case.
    ("words:words_position", {"keyword": "cat"}, "p", "A cat sat by the cat end.", True),
    ("words:words_position", {"keyword": "cat"}, "p", "A Cat sat, the CAT end", True),
    ("words:words_position", {"keyword": "cat"}, "p", "cat .", False),  # SAME
    # QuoteExplanationChecker.check_following: no curly-quote normalisation; digits/punctuation only is fine.
    ("format:quote_unquote", {}, "p", ".", True),
    ("format:quote_unquote", {}, "p", "123", True),
    ("format:quote_unquote", {}, "p", "He said \u201chi\u201d", True),
    ("format:quote_unquote", {}, "p", 'He said "hi"', False),  # SAME
    # SentenceAlphabetChecker.check_following (26 sentences, first letters in order).
    ("custom:sentence_alphabet", {}, "p", STORY, True),  # SAME
    # RepeatSpanChecker: inclusive character indices.
    ("repeat:repeat_span", {"prompt_to_repeat": QUICK, "n_start": 4, "n_end": 8}, "p", "Quick", True),
    ("repeat:repeat_span", {"prompt_to_repeat": QUICK, "n_start": 1, "n_end": 3}, "p", "quick brown", False),
    # instructions_util.split_into_sentences is nltk.sent_tokenize: "!!!" ends one sentence (an unchanged checker).
    ("words:last_first", {}, "p", "Go home!!! Home is near.", True),
    # TitleCaseChecker.check_following: non-letter tokens skipped, one-letter tokens upper case.
    ("format:title_case", {}, "p", "Hello, World: 2024 Is Here", True),  # SAME
    ("format:title_case", {}, "p", "I Love a Good Book", False),
]

PUNKT = {"words:last_first", "sentence:keyword", "count:pronouns", "words:keywords_specific_position",
         "words:words_position", "custom:sentence_alphabet", "format:title_case"}
