"""The experience of an update: what the student answered and how it was judged.

    collector        prompts -> sampled responses -> each needed teacher's log-probs (+ verdicts), overlapped
    verification     the run's verifiers as one service: verdicts, no-verdict policy and counts
    teacher_answers  one in-process answer per prompt from its label-routed teacher (SeqKD-SFT data, the
                     injection bank)
"""
