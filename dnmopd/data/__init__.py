"""Everything between a dataset row and a token sequence.

    manifest         the pinned dataset revision: files, sizes, sha256
    download         fetching the release files and checking them against the manifest
    sample_data      the embedded sample files and `samples:<file>` data paths
    schema           the row schema of the release files (checked at load, errors name file:line:field)
    loading          reading a prompt file into checked rows (fail or skip bad rows)
    chat             rendering rows with the student's chat template and tokenizing them
    chat_templates   the chat templates of the supported model families
    prompts          the run's prompt set: checked rows, rendered and tokenized once
    sampler          the resumable prompt sampler (per data-parallel rank)
    ifeval_generator IFEval-style constraint rows for the tiny demo tokenizer's corpus
"""
