"""The injection bank of annealed teacher-trajectory injection: one verified teacher answer per student prompt.

Built once before a run by `launch/build_injection_bank.py` (`builder.py`). Entries are keyed
by the sha256 of the prompt's token ids, so a bank only matches prompts rendered with the same tokenizer and
template. The file is written atomically with its own sha256 beside it (`<bank>.sha256`), which loading checks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from dnmopd.io import atomic_write, sha256_file

FORMAT = "dnmopd-injection-bank/1"


def prompt_key(prompt_ids) -> str:
    return hashlib.sha256(",".join(str(int(t)) for t in prompt_ids).encode()).hexdigest()


@dataclass(frozen=True)
class BankEntry:
    domain: str
    teacher: str
    response_ids: tuple[int, ...]
    teacher_logp: torch.Tensor


class InjectionBank:
    def __init__(self, entries: dict[str, BankEntry]):
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, prompt_ids) -> BankEntry | None:
        return self.entries.get(prompt_key(prompt_ids))

    @classmethod
    def load(cls, path: str | Path) -> InjectionBank:
        path = Path(path)
        digest_file = path.with_name(path.name + ".sha256")
        if not path.is_file():
            raise FileNotFoundError(f"injection bank {path} not found; build it with "
                                    "`python launch/build_injection_bank.py --config <run.yaml> --output <bank>`")
        if digest_file.is_file() and digest_file.read_text().split()[0] != sha256_file(path):
            raise ValueError(f"injection bank {path} does not match its checksum {digest_file}")
        payload = torch.load(path, weights_only=False)
        if payload.get("format") != FORMAT:
            raise ValueError(f"{path}: format {payload.get('format')!r} is not {FORMAT!r}")
        entries = {}
        for key, entry in payload["entries"].items():
            logp = torch.as_tensor(entry["teacher_logp"], dtype=torch.float32)
            if logp.shape != (len(entry["response_ids"]),) or not torch.isfinite(logp).all() or (logp > 0).any():
                raise ValueError(f"{path}: entry {key[:12]} has invalid teacher log-probs")
            entries[key] = BankEntry(entry["domain"], entry["teacher"], tuple(entry["response_ids"]), logp)
        return cls(entries)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        payload = {"format": FORMAT, "entries": {k: {"domain": e.domain, "teacher": e.teacher,
                                                     "response_ids": list(e.response_ids),
                                                     "teacher_logp": e.teacher_logp} for k, e in self.entries.items()}}
        with atomic_write(path, "wb") as f:
            torch.save(payload, f)
        with atomic_write(path.with_name(path.name + ".sha256")) as f:
            f.write(f"{sha256_file(path)}  {path.name}\n")
        return path
