"""Weight-sync time into a real SGLang server: from disk against a broadcast over a process group, by bucket size.

    python launch/bench_sync.py --sglang-python ~/.cache/dnmopd/sglang-0.5.23-cpu-r1/bin/python
    python launch/bench_sync.py --sglang-url http://127.0.0.1:30000 --model /ckpt/student --device cuda

Each mode is one rollout engine doing whole weight updates, as the trainer does (`update_weights`: tensors in,
the probe of every server out): `disk` writes a Hugging Face folder and asks the server to load it (`rollout.sync:
disk`); `broadcast` sends the tensors over the weight-update group (`rollout.sync: distributed`) in buckets of
`--bucket-mb` MiB, each as one flat broadcast, and `per tensor` with one broadcast per tensor. Updates alternate
between two perturbed copies of the model, so the server's weights really change and the probe (transformers'
log-probs of a fixed sequence, tolerance 1e-4) checks every one. Each mode is warmed up once, then timed
`--repeats` times; the median is reported with its ratio to `disk`, all in one run. The default model is a
Qwen3 of ~150 MiB in fp32 built on the fly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from dnmopd.io import atomic_write
from dnmopd.rollout.base import WeightProbe
from dnmopd.rollout.sglang import SGLangRollout
from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.servers import ServerProcess, ServerSpec
from dnmopd.serving.weight_group import WeightGroup, free_port
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher

PROBE = ScoreRequest(tuple(range(40, 72)), 16)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="HF model folder (default: a ~150 MiB fp32 Qwen3 built in a temp dir)")
    parser.add_argument("--sglang-url", help="an SGLang server already serving --model")
    parser.add_argument("--sglang-python", help="start an SGLang server with this interpreter for the benchmark")
    parser.add_argument("--device", default="cpu", help="the server's device, cpu or cuda (default: %(default)s)")
    parser.add_argument("--bucket-mb", type=float, nargs="+", default=[16.0, 64.0, 256.0],
                        help="broadcast bucket sizes to time, MiB (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="timed updates per mode (default: %(default)s)")
    parser.add_argument("--update-dir", type=Path, help="where `disk` writes its folders (default: a temp dir); put it "
                                                         "on the filesystem the servers would read")
    parser.add_argument("--output", type=Path, help="also write the results as JSON here")
    return parser.parse_args(argv)


def build_model(out_dir: Path) -> Path:
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(out_dir / "tokenizer", flavor="qwen3", vocab_size=1024)
    shape = {"hidden_size": 512, "intermediate_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 4,
             "head_dim": 64}
    return build_tiny_hf_checkpoint(out_dir / "model", arch="qwen3", vocab_size=1024, num_layers=9,
                                    tie_word_embeddings=True, tokenizer_dir=tokenizer, overrides=shape)


def perturbed(model: Path, seed: int) -> tuple[dict[str, torch.Tensor], WeightProbe]:
    """A copy of the model's weights plus noise, and the probe of exactly those weights."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    generator = torch.Generator().manual_seed(seed)
    state = {}
    for shard in sorted(model.glob("*.safetensors")):
        state.update({name: t + 0.02 * torch.randn(t.shape, generator=generator, dtype=t.dtype)
                      for name, t in load_file(str(shard)).items()})
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    hf.load_state_dict(state, strict=False)
    teacher = InProcessTeacher(InProcessTeacher.Config(name="reference", model_path=str(model)), model=hf)
    expected = teacher.score_batch([PROBE])[0].logprobs
    return state, WeightProbe(PROBE.token_ids, PROBE.prompt_len, expected, tolerance=1e-4)


def time_mode(label: str, engine: SGLangRollout, versions, repeats: int) -> dict:
    """Whole updates (tensors to probed servers); for a broadcast also its send alone (pause .. continue)."""
    seconds, sends = [], []
    for update in range(repeats + 1):  # the first is the warm-up
        state, probe = versions[update % 2]
        start = time.perf_counter()
        engine.update_weights(state.items(), probe)
        if update:
            seconds.append(time.perf_counter() - start)
            sends.append(engine.last_send.seconds if engine.last_send is not None else None)
    result = {"mode": label, "median_s": statistics.median(seconds), "min_s": min(seconds), "runs_s": seconds}
    if engine.last_send is not None:
        result |= {"send_median_s": statistics.median(sends), "buckets": engine.last_send.buckets,
                   "bytes": engine.last_send.bytes}
    return result


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.sglang_url and not args.sglang_python:
        raise SystemExit("give --sglang-url or --sglang-python")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = Path(args.model) if args.model else build_model(work)
        size = sum(f.stat().st_size for f in model.glob("*.safetensors"))
        print(f"model {model}: {size / 2**20:.0f} MiB of safetensors", flush=True)
        versions = [perturbed(model, seed) for seed in (1, 2)]
        server = None
        if not args.sglang_url:
            spec = ServerSpec(name="bench", backend="sglang", model_path=str(model), port=free_port(),
                              python=args.sglang_python, device=args.device,
                              extra_args=["--context-length", "256", "--skip-server-warmup"],
                              env={"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor")})
            print(f"starting SGLang on port {spec.port} (one to three minutes on CPU) ...", flush=True)
            server = ServerProcess(spec, work / "sglang.log").start()
            server.wait_healthy(timeout_s=900)
        url = args.sglang_url or server.spec.url
        updates = args.update_dir or work / "updates"
        modes = [("disk", None)]
        modes += [(f"broadcast, {mb:g} MiB buckets", WeightGroup.Config(bucket_mb=mb)) for mb in args.bucket_mb]
        modes += [("broadcast, per tensor", WeightGroup.Config(bucket_mb=max(args.bucket_mb), flatten=False))]
        results = []
        try:
            for label, group in modes:
                pool = ReplicaPool.Config(urls=[url], request_timeout_s=600)
                engine = SGLangRollout.Config(model_path=str(model), pool=pool, update_dir=str(updates)).build()
                try:
                    if group is not None:
                        engine.join_weight_group(group)
                    results.append(time_mode(label, engine, versions, args.repeats))
                finally:
                    engine.close()
                disk = results[0]["median_s"]
                r = results[-1]
                send = f"  (send {r['send_median_s']:.3f} s, {r['buckets']} buckets)" if "buckets" in r else ""
                print(f"  {label:<30} median {r['median_s']:7.3f} s  min {r['min_s']:7.3f} s  "
                      f"disk/this {disk / r['median_s']:5.2f}x{send}", flush=True)
        finally:
            if server is not None:
                server.stop()
        if args.output:
            with atomic_write(args.output) as handle:
                handle.write(json.dumps({"model_bytes": size, "repeats": args.repeats, "results": results}, indent=2))


if __name__ == "__main__":
    main()
