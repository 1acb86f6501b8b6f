"""Small programming tasks with real test cases (for the sample data only).

Each task has a statement, test inputs, an ``expected`` function that computes the right output of one input
(used to write the label), and a separately written reference program (``solution``). The two are
independent implementations: the tests run every reference program against the label it did not produce.

stdin tasks: ``expected(stdin_text) -> stdout_text``. Call-based tasks (``fn_name`` set): ``inputs`` are
argument lists and ``expected(*args) -> value``; the label wraps each value in a one-element list (APPS/TACO).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from math import gcd


@dataclass(frozen=True)
class CodeTask:
    statement: str
    inputs: list
    expected: Callable
    solution: str
    fn_name: str | None = None


def _lines(*values) -> str:
    return "".join(f"{v}\n" for v in values)


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split()]


def _fib(n: int) -> tuple[int, int]:
    """(F(n), F(n+1)) by fast doubling."""
    if n == 0:
        return 0, 1
    a, b = _fib(n // 2)
    c, d = a * (2 * b - a), a * a + b * b
    return (d, c + d) if n % 2 else (c, d)


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def _balanced(s: str) -> bool:
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for ch in s:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack


def _rle(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(f"{s[i]}{j - i}")
        i = j
    return "".join(out)


def _longest_run(xs: list[int]) -> int:
    best = cur = 1
    for a, b in zip(xs, xs[1:], strict=False):
        cur = cur + 1 if b > a else 1
        best = max(best, cur)
    return best


def _inversions(xs: list[int]) -> int:
    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] > xs[j])


def _prefix_queries(text: str) -> str:
    lines = text.split("\n")
    arr = _ints(lines[1])
    queries = (map(int, q.split()) for q in lines[3:3 + int(lines[2])])
    return _lines(*(sum(arr[lo - 1:hi]) for lo, hi in queries))


def _top_word(text: str) -> str:
    counts = Counter(text.split())
    word = min(counts, key=lambda w: (-counts[w], w))
    return _lines(f"{word} {counts[word]}")


def _caesar(text: str) -> str:
    k_line, msg = text.split("\n")[:2]
    k = int(k_line)
    shift = lambda c, base: chr((ord(c) - base + k) % 26 + base)  # noqa: E731
    return _lines("".join(shift(c, 97) if c.islower() else shift(c, 65) if c.isupper() else c for c in msg))


def _max_subarray(nums: list[int]) -> int:
    return max(sum(nums[i:j]) for i in range(len(nums)) for j in range(i + 1, len(nums) + 1))


STDIN_TASKS = [
    CodeTask(
        "Read two integers a and b on one line and print their sum.",
        ["3 4\n", "-5 5\n", "1000000000 1000000000\n", "0 0\n", "-7 -8\n"],
        lambda t: _lines(sum(_ints(t))),
        "a, b = map(int, input().split())\nprint(a + b)\n"),
    CodeTask(
        "Read one line of text and print it reversed.",
        ["hello\n", "abc def\n", "a\n", "racecar\n", "12345\n"],
        lambda t: _lines(t.rstrip("\n")[::-1]),
        "import sys\ns = sys.stdin.readline().rstrip('\\n')\nprint(''.join(reversed(s)))\n"),
    CodeTask(
        "Read one line of text and print how many vowels (a, e, i, o, u, either case) it contains.",
        ["Hello World\n", "xyz\n", "AEIOU aeiou\n", "Programming is fun\n", "\n"],
        lambda t: _lines(sum(c in "aeiouAEIOU" for c in t)),
        "s = input().lower()\nprint(len([c for c in s if c in 'aeiou']))\n"),
    CodeTask(
        "The first line holds N, the second line N integers. Print the largest of them.",
        ["3\n1 5 2\n", "1\n-4\n", "5\n-1 -2 -3 -4 -5\n", "4\n7 7 7 7\n", "6\n10 -20 30 -40 50 0\n"],
        lambda t: _lines(max(_ints(t.split("\n")[1]))),
        "n = int(input())\nvals = list(map(int, input().split()))\nbest = vals[0]\nfor v in vals[1:]:\n"
        "    if v > best:\n        best = v\nprint(best)\n"),
    CodeTask(
        "Read n and print the numbers 1..n one per line, printing Fizz for multiples of 3, Buzz for multiples "
        "of 5 and FizzBuzz for multiples of both.",
        ["5\n", "15\n", "1\n", "3\n"],
        lambda t: _lines(*("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0
                           else i for i in range(1, int(t) + 1))),
        "n = int(input())\nfor i in range(1, n + 1):\n    s = ('Fizz' if i % 3 == 0 else '') + "
        "('Buzz' if i % 5 == 0 else '')\n    print(s or i)\n"),
    CodeTask(
        "Read an integer n (1 <= n <= 10^9) and print YES if it is prime, otherwise NO.",
        ["2\n", "1\n", "97\n", "100\n", "999999937\n", "999999938\n"],
        lambda t: _lines("YES" if _is_prime(int(t)) else "NO"),
        "n = int(input())\nok = n > 1\nd = 2\nwhile d * d <= n and ok:\n    if n % d == 0:\n        ok = False\n"
        "    d += 1\nprint('YES' if ok else 'NO')\n"),
    CodeTask(
        "Read n (0 <= n <= 90) and print the n-th Fibonacci number, where F(0) = 0 and F(1) = 1.",
        ["0\n", "1\n", "10\n", "50\n", "90\n"],
        lambda t: _lines(_fib(int(t))[0]),
        "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)\n"),
    CodeTask(
        "Read one line. Print YES if it reads the same backwards when only letters and digits are kept and "
        "case is ignored, otherwise NO.",
        ["A man, a plan, a canal: Panama\n", "hello\n", "No lemon, no melon\n", "ab\n", "x\n"],
        lambda t: _lines("YES" if (k := [c.lower() for c in t if c.isalnum()]) == k[::-1] else "NO"),
        "s = ''.join(ch.lower() for ch in input() if ch.isalnum())\nprint('YES' if s == s[::-1] else 'NO')\n"),
    CodeTask(
        "The first line holds N, the second line N integers. Print them in non-decreasing order, separated by "
        "single spaces.",
        ["5\n3 1 4 1 5\n", "1\n42\n", "4\n-1 -3 2 0\n", "3\n9 9 1\n"],
        lambda t: _lines(" ".join(map(str, sorted(_ints(t.split("\n")[1]))))),
        "input()\nnums = [int(x) for x in input().split()]\nnums.sort()\nprint(*nums)\n"),
    CodeTask(
        "Read one line of words separated by spaces. Print how many distinct words it has, ignoring case.",
        ["The cat and the hat\n", "a A a\n", "one\n", "Red blue GREEN red Blue green\n"],
        lambda t: _lines(len(set(t.lower().split()))),
        "print(len({w.lower() for w in input().split()}))\n"),
    CodeTask(
        "Read two positive integers and print their greatest common divisor.",
        ["12 18\n", "7 13\n", "100 10\n", "1 1\n", "270 192\n"],
        lambda t: _lines(gcd(*_ints(t))),
        "a, b = map(int, input().split())\nwhile b:\n    a, b = b, a % b\nprint(a)\n"),
    CodeTask(
        "The first line holds R and C, then R lines of C integers follow. Print the transposed matrix: C lines "
        "of R integers separated by spaces.",
        ["2 3\n1 2 3\n4 5 6\n", "1 1\n9\n", "3 2\n1 2\n3 4\n5 6\n"],
        lambda t: _lines(*(" ".join(col) for col in zip(*(r.split() for r in t.split("\n")[1:] if r),
                                                        strict=True))),
        "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\nfor j in range(c):\n"
        "    print(' '.join(m[i][j] for i in range(r)))\n"),
    CodeTask(
        "Read a string of brackets ()[]{}. Print YES if it is balanced, otherwise NO.",
        ["([]{})\n", "([)]\n", "((\n", "{[()()]}\n", ")(\n"],
        lambda t: _lines("YES" if _balanced(t.strip()) else "NO"),
        "s = input().strip()\nst = []\nok = True\nfor ch in s:\n    if ch in '([{':\n        st.append(ch)\n"
        "    elif not st or '([{'.index(st.pop()) != ')]}'.index(ch):\n        ok = False\n        break\n"
        "print('YES' if ok and not st else 'NO')\n"),
    CodeTask(
        "The first line holds N, the second line N integers. Print the second largest distinct value, or -1 "
        "if there is none.",
        ["5\n1 3 3 2 5\n", "3\n4 4 4\n", "2\n-1 -2\n", "1\n8\n"],
        lambda t: _lines(v[-2] if len(v := sorted(set(_ints(t.split("\n")[1])))) > 1 else -1),
        "input()\ns = sorted(set(map(int, input().split())), reverse=True)\nprint(s[1] if len(s) > 1 else -1)\n"),
    CodeTask(
        "Read a non-empty string of lowercase letters and print its run-length encoding: each run of equal "
        "letters becomes the letter followed by the run length.",
        ["aaabb\n", "abc\n", "zzzzzzzzzzzz\n", "aabbaa\n"],
        lambda t: _lines(_rle(t.strip())),
        "from itertools import groupby\ns = input().strip()\n"
        "print(''.join(k + str(len(list(g))) for k, g in groupby(s)))\n"),
    CodeTask(
        "Read a non-negative integer with up to 1000 digits and print the sum of its digits.",
        ["12345\n", "0\n", "9" * 100 + "\n", "1000000000000000000001\n"],
        lambda t: _lines(sum(map(int, t.strip()))),
        "total = 0\nfor ch in input().strip():\n    total += ord(ch) - ord('0')\nprint(total)\n"),
    CodeTask(
        "Read a non-negative integer n and print its binary representation without leading zeros.",
        ["5\n", "0\n", "1\n", "1024\n", "255\n"],
        lambda t: _lines(format(int(t), "b")),
        "n = int(input())\nbits = ''\nwhile n:\n    bits = str(n % 2) + bits\n    n //= 2\nprint(bits or '0')\n"),
    CodeTask(
        "The first line holds N, the second line N integers. Print the number of pairs i < j with a[i] > a[j].",
        ["3\n3 1 2\n", "4\n1 2 3 4\n", "4\n4 3 2 1\n", "5\n2 2 1 1 3\n"],
        lambda t: _lines(_inversions(_ints(t.split("\n")[1]))),
        "n = int(input())\na = list(map(int, input().split()))\ncount = 0\nfor i in range(n):\n"
        "    for j in range(i + 1, n):\n        if a[i] > a[j]:\n            count += 1\nprint(count)\n"),
    CodeTask(
        "The first line holds a shift k (0 <= k < 26), the second a message. Shift every letter k places "
        "forward in the alphabet (wrapping around, keeping case) and print the result.",
        ["3\nabc xyz\n", "1\nHello, World!\n", "0\nsame\n", "25\nBcd\n"],
        _caesar,
        "import string\nk = int(input())\nmsg = input()\nlo, up = string.ascii_lowercase, string.ascii_uppercase\n"
        "table = str.maketrans(lo + up, lo[k:] + lo[:k] + up[k:] + up[:k])\nprint(msg.translate(table))\n"),
    CodeTask(
        "The first line holds N, the second line N integers. Print the length of the longest contiguous "
        "strictly increasing run.",
        ["5\n1 2 2 3 4\n", "1\n7\n", "6\n1 2 3 4 5 6\n", "4\n4 3 2 1\n"],
        lambda t: _lines(_longest_run(_ints(t.split("\n")[1]))),
        "n = int(input())\na = list(map(int, input().split()))\nbest = run = 1\nfor i in range(1, n):\n"
        "    run = run + 1 if a[i] > a[i - 1] else 1\n    best = max(best, run)\nprint(best)\n"),
    CodeTask(
        "The first line holds N, the second N integers, the third Q. Each of the next Q lines holds l and r "
        "(1-based, l <= r). For each query print the sum of elements l..r.",
        ["5\n1 2 3 4 5\n3\n1 5\n2 3\n4 4\n", "1\n-3\n1\n1 1\n", "4\n10 -10 10 -10\n2\n1 2\n1 3\n"],
        _prefix_queries,
        "import sys\ndata = sys.stdin.read().split()\nn = int(data[0])\npre = [0]\nfor x in data[1:1 + n]:\n"
        "    pre.append(pre[-1] + int(x))\nq = int(data[1 + n])\nout = []\nfor i in range(q):\n"
        "    l, r = int(data[2 + n + 2 * i]), int(data[3 + n + 2 * i])\n    out.append(str(pre[r] - pre[l - 1]))\n"
        "print('\\n'.join(out))\n"),
    CodeTask(
        "Read one line of lowercase words. Print the most frequent word and its count, separated by a space; "
        "on a tie print the alphabetically smallest word.",
        ["the cat the dog\n", "b a\n", "x x y y z\n", "solo\n"],
        _top_word,
        "from collections import Counter\nc = Counter(input().split())\n"
        "best = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]\nprint(best[0], best[1])\n"),
]

CALL_TASKS = [
    CodeTask(
        "Write a function max_subarray(nums) that returns the largest sum of a non-empty contiguous subarray "
        "of the list of integers nums.\n\ndef max_subarray(nums):",
        [[[1, -2, 3, 4, -1]], [[-3, -1, -2]], [[5]], [[-2, 1, -3, 4, -1, 2, 1, -5, 4]]],
        _max_subarray,
        "def max_subarray(nums):\n    best = cur = nums[0]\n    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best\n",
        fn_name="max_subarray"),
    CodeTask(
        "Complete the method isAnagram(s, t) of class Solution: return True if the string t is an anagram of "
        "the string s, otherwise False.\n\nclass Solution:\n    def isAnagram(self, s: str, t: str) -> bool:",
        [["listen", "silent"], ["rat", "car"], ["", ""], ["aab", "abb"]],
        lambda s, t: sorted(s) == sorted(t),
        "class Solution:\n    def isAnagram(self, s, t):\n        counts = {}\n        for ch in s:\n"
        "            counts[ch] = counts.get(ch, 0) + 1\n        for ch in t:\n"
        "            counts[ch] = counts.get(ch, 0) - 1\n        return all(v == 0 for v in counts.values())\n",
        fn_name="isAnagram"),
]

ALL_TASKS = STDIN_TASKS + CALL_TASKS
