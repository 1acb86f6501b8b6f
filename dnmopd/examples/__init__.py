"""The CPU demo's tiny models, built locally and deterministically (the tests build theirs with them too).

    tiny            tiny Qwen3 / Qwen3.5 Hugging Face checkpoints
    tiny_tokenizer  a Qwen3.5-style byte-level tokenizer with the real chat template
    demo_models     the demo's student and its three one-skill teachers
"""
