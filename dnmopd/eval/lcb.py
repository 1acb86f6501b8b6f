"""LiveCodeBench problems: one line of ``code_generation_lite`` -> prompt messages and official tests.

The official ``lcb_runner`` rules, stated here instead of importing its package (which pulls hosted-model
SDKs): the generic system message and question template for the prompt; the tests are the public tests
followed by the private ones (stored as base64 of zlib of a pickled JSON string), with ``fn_name`` from the
metadata for functional (call-based) problems. The pickle is read by an unpickler that accepts a plain
string and nothing else, so a tampered source cannot run code.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from dataclasses import dataclass
from datetime import datetime

SYSTEM_MESSAGE = ("You are an expert Python programmer. You will be given a question (problem specification) and "
                  "will generate a correct Python program that matches the specification and passes all tests.")
WITH_STARTER = ("You will use the following starter code to write the solution to the problem and enclose your code "
                "within delimiters.")
WITHOUT_STARTER = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
                   "on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
                   "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.")


class _StringOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"private tests may only pickle a string, found a reference to {module}.{name}")


def _private_tests(text: str) -> list:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    decoded = _StringOnly(io.BytesIO(zlib.decompress(base64.b64decode(text.encode("utf-8"))))).load()
    if not isinstance(decoded, str):
        raise ValueError(f"private tests unpickled to {type(decoded).__name__}, expected a JSON string")
    return json.loads(decoded)


@dataclass(frozen=True, slots=True)
class Problem:
    id: str
    """``<platform>:<question_id>``."""
    content: str
    starter_code: str
    date: str
    difficulty: str
    tests: dict
    """``{"inputs": [...], "outputs": [...], "fn_name": str | None}``: public then private tests."""

    @classmethod
    def from_line(cls, line: str, *, where: str = "line") -> Problem:
        try:
            row = json.loads(line)
            tests = json.loads(row["public_test_cases"]) + _private_tests(row["private_test_cases"])
            metadata = json.loads(row["metadata"])
            for test in tests:
                if test["testtype"] not in ("stdin", "functional"):
                    raise ValueError(f"unknown test type {test['testtype']!r}")
            return cls(
                id=f"{row['platform']}:{row['question_id']}", content=row["question_content"],
                starter_code=row["starter_code"], date=datetime.fromisoformat(row["contest_date"]).isoformat(),
                difficulty=row["difficulty"],
                tests={"inputs": [t["input"] for t in tests], "outputs": [t["output"] for t in tests],
                       "fn_name": metadata.get("func_name")})
        except (KeyError, TypeError, ValueError, zlib.error, pickle.UnpicklingError) as exc:
            raise ValueError(f"{where}: not a LiveCodeBench problem ({type(exc).__name__}: {exc})") from exc

    def user_prompt(self) -> str:
        """The official generic question template."""
        prompt = f"### Question:\n{self.content}\n\n"
        if self.starter_code:
            prompt += f"### Format: {WITH_STARTER}\n```python\n{self.starter_code}\n```\n\n"
        else:
            prompt += f"### Format: {WITHOUT_STARTER}\n```python\n# YOUR CODE HERE\n```\n\n"
        return prompt + "### Answer: (use the provided format with backticks)\n\n"

    def messages(self) -> list[dict]:
        return [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": self.user_prompt()}]

    def evaluation_sample(self) -> str:
        """The official evaluation sample as the paper cached it (its sha256 is the catalog's test hash)."""
        sample = {"input_output": json.dumps(self.tests)}
        return json.dumps(sample, ensure_ascii=False, allow_nan=False, indent=2) + "\n"
