"""The teacher self-test (`dnmopd.teachers.self_test`) against real tiny Hugging Face teachers, in-process.

A teacher built like the student passes. Each broken teacher is a real model folder (or a real model) with
one thing wrong, and is refused with that cause named: weights that make every distribution uniform (a zeroed
final norm), a chat template that adds a default system prompt (as Qwen2.5's does), a vocabulary of another
size, and dropout left on (scores that differ between two calls). The SGLang teacher's self-test runs against a
real server in test_weight_sync.py.
"""

import json
import shutil

import pytest
import torch
from tiny_checkpoints import build_qwen3

from dnmopd.data.chat import PromptTokenizer
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.teachers.self_test import TeacherSelfTestError, self_test

QWEN25_SYSTEM = ("{%- if messages[0].role != 'system' %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba "
                 "Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}\n")


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """Model folders: a sound teacher, and copies of it with one defect each."""
    from safetensors.torch import load_file, save_file

    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    root = tmp_path_factory.mktemp("self-test-teachers")
    sound = build_qwen3(root / "sound", seed=1)
    uniform = shutil.copytree(sound, root / "uniform")
    weights = load_file(str(uniform / "model.safetensors"))
    weights["model.norm.weight"] = torch.zeros_like(weights["model.norm.weight"])  # every logit is 0
    save_file(weights, str(uniform / "model.safetensors"), metadata={"format": "pt"})
    template = shutil.copytree(sound, root / "template")
    (template / "chat_template.jinja").write_text(QWEN25_SYSTEM + (sound / "chat_template.jinja").read_text())
    tokenizer = build_tiny_tokenizer(root / "tokenizer-2048", flavor="qwen3", vocab_size=2048)
    vocab = build_tiny_hf_checkpoint(root / "vocab", arch="qwen3", vocab_size=2048, seed=1, num_layers=2,
                                     tie_word_embeddings=True, tokenizer_dir=tokenizer)
    return {"sound": sound, "uniform": uniform, "template": template, "vocab": vocab}


@pytest.fixture(scope="module")
def student(tiny_model_dir):
    return PromptTokenizer.from_pretrained(tiny_model_dir)


def run(path, student, model=None):
    config = InProcessTeacher.Config(name="math", model_path=str(path))
    teacher = InProcessTeacher(config, model=model) if model is not None else config.build()
    return self_test(teacher, teacher_path=path, student=student, student_vocab=1024)


def test_a_sound_teacher_passes_and_its_result_is_plain_data(teachers, student):
    result = run(teachers["sound"], student)
    assert result.passed and result.cause is None, result.detail
    measured = result.measured
    assert measured["student_template_sha256"] == measured["teacher_template_sha256"]
    assert measured["teacher_tokens"] == measured["student_tokens"] == 1024
    assert measured["repeat_max_abs_diff"] == 0.0  # in-process float32 scoring is deterministic
    assert measured["greedy_mean_logprob"] > measured["uniform_baseline"] > measured["mean_logprob"] - 1
    assert json.loads(json.dumps(result.to_dict())) == result.to_dict()


@pytest.mark.parametrize("defect, cause, words", [
    ("uniform", "uniform", "uniform"),
    ("template", "chat_template", "render differently"),
    ("vocab", "vocabulary", "2048 tokens"),
])
def test_a_broken_teacher_folder_is_refused_with_its_cause(teachers, student, defect, cause, words):
    result = run(teachers[defect], student)
    assert not result.passed and result.cause == cause, result.summary()
    assert words in result.detail
    with pytest.raises(TeacherSelfTestError, match=f"failed its self-test \\({cause}\\)"):
        raise TeacherSelfTestError(result)


def test_a_teacher_with_dropout_left_on_is_refused_as_nondeterministic(teachers, student):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(teachers["sound"], dtype=torch.float32, attention_dropout=0.5)
    result = run(teachers["sound"], student, model=model.train())
    assert not result.passed and result.cause == "nondeterministic", result.summary()
    assert result.measured["repeat_mean_abs_diff"] > 0.02
