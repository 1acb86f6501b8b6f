"""Hugging Face folders: what leaves megatron for transformers, vLLM and SGLang, and what the engines read.

* ``release``: the release folder of a trained student (``write_release``; the trainer at the end of a run,
  ``launch/convert_to_hf.py`` on a checkpoint), checked against transformers before it is moved into place;
* ``config``: the engine-ready ``config.json`` and ``generation_config.json`` of a release;
* ``model_card``: its Hub model card (``README.md``) and the card options (``CardConfig``);
* ``merge``: weight-space merges of Hugging Face folders (the paper's ParamMerge baselines);
* ``models``: what the rollout and teacher backends share about a Hugging Face model: loading it in process,
  its vocabulary size, whether a server serves the expected folder;
* ``inprocess``: what the in-process rollout engine and teacher share: the options that load their model
  (``InProcessModel``) and the log-probs of a sequence's response tokens (``score_responses``).

The megatron model itself, and the HF <-> megatron tensor mapping it loads with, stay in ``dnmopd.student``.
"""
