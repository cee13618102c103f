"""Goldens for kiln/data/bpe_tokenizer.h: a plain byte-pair-encoding trainer
and encoder written here, independent of kiln's (no chunk counts, no
incremental updates, no heap: every merge recounts every pair of every
chunk; slow and obviously correct).

The rules are kiln's documented ones (docs/tokenizers.md):
- pre-tokenization "gpt2": GPT-2's regex with byte classes (letters A-Za-z
  and every byte >= 0x80, digits 0-9, whitespace " \\t\\n\\v\\f\\r", the rest
  punctuation), here through Python's `re` on bytes; "none": one chunk;
- training: merge the adjacent pair with the highest count (every
  occurrence counted, overlapping ones too), ties to the smallest
  (left, right); stop at the vocabulary size or when no pair is left;
- encoding: in each chunk, repeatedly merge every occurrence (left to right)
  of the lowest-ranked pair present.

tests/goldens/tokenizer_bpe.json: {"split": [{"text", "chunks"}], "cases":
[{"name", "pretokenizer", "vocab_size", "train", "merges", "encode": [{"text",
"ids"}]}]}, every text as hex (bytes, not necessarily UTF-8).
"""
import pathlib
import random
import re

from . import common

CORPUS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "tinyshakespeare.txt"

_L, _N, _S = rb"A-Za-z\x80-\xff", rb"0-9", rb" \t\n\x0b\x0c\r"
GPT2 = re.compile(rb"'s|'t|'re|'ve|'m|'ll|'d"
                  rb"| ?[" + _L + rb"]+| ?[" + _N + rb"]+| ?[^" + _S + _L + _N + rb"]+"
                  rb"|[" + _S + rb"]+(?![^" + _S + rb"])|[" + _S + rb"]+")


def split(text, pretokenizer):
    if pretokenizer == "none":
        return [text] if text else []
    chunks = GPT2.findall(text)
    assert b"".join(chunks) == text
    return chunks


def merge(word, pair, new):
    """Every occurrence of `pair` in `word`, left to right, replaced by `new`."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def train(text, vocab_size, pretokenizer):
    words = [list(c) for c in split(text, pretokenizer)]
    merges = []
    while 256 + len(merges) < vocab_size:
        counts = {}
        for w in words:
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        new = 256 + len(merges)
        merges.append(best)
        words = [merge(w, best, new) for w in words]
    return merges


def encode(text, merges, pretokenizer):
    ranks = {pair: r for r, pair in enumerate(merges)}
    ids = []
    for chunk in split(text, pretokenizer):
        w = list(chunk)
        while len(w) >= 2:
            best = min(zip(w, w[1:]), key=lambda p: ranks.get(p, len(merges)))
            if best not in ranks:
                break
            w = merge(w, best, 256 + ranks[best])
        ids += w
    return ids


def decode(ids, merges):
    tokens = [bytes([b]) for b in range(256)]
    for a, b in merges:
        tokens.append(tokens[a] + tokens[b])
    return b"".join(tokens[i] for i in ids)


# Pre-tokenization edge cases: contractions (and near misses), runs with and
# without a leading space, whitespace before words and at the end, CRLF,
# tabs, bytes >= 0x80 (valid and invalid UTF-8), control bytes.
SPLIT_TEXTS = [
    b"", b" ", b"  ", b"a", b" a", b"  a", b"   a", b"a ", b"a  ", b"\n", b"\n\n", b"a\n\nb", b"a \n b", b"\t x",
    b"Hello world", b"Hello  world!!  ", b"don't we'll they're I've you'd I'm it's 's 'S 'x '", b"''s", b"?'s",
    b" 'll", b"x'", b"abc123def 456 7.5", b"a,b;c", b" ,,, ...", b"\r\n\r\nline\r\n", b"tab\there \t\tthere",
    "caf\u00e9 na\u00efve \u2014 \u65e5\u672c".encode(), b"\xff\xfe bad \xc3\x28 \x80x", b"\x00\x01 \x7f!",
    b"First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
]


def random_texts(rng, n, length):
    """Byte strings drawn mostly from the classes' boundaries."""
    alphabet = [b" ", b"  ", b"\n", b"\t", b"a", b"b", b"Z", b"1", b"9", b"'", b"s", b"ll", b"!", b".", b"\xc3\xa9",
                b"\xff", b"\x80", b"\x00"]
    return [b"".join(rng.choice(alphabet) for _ in range(rng.randrange(length))) for _ in range(n)]


def case(name, text, vocab_size, pretokenizer, encode_texts):
    merges = train(text, vocab_size, pretokenizer)
    out = []
    for t in encode_texts:
        ids = encode(t, merges, pretokenizer)
        assert decode(ids, merges) == t
        out.append({"text": t.hex(), "ids": ids})
    return {"name": name, "pretokenizer": pretokenizer, "vocab_size": vocab_size, "train": text.hex(),
            "merges": [list(m) for m in merges], "encode": out}


def generate():
    rng = random.Random(0)
    corpus = CORPUS.read_bytes()
    train_slice, held_out = corpus[:12000], corpus[500000:503000]
    adversarial = [b"", b"aaaaaa", b"aaaaaaa", b"\xff\xfe\x00\x01 bytes never seen \xc3\x28 \x80",
                   "h\u00e9llo w\u00f6rld \u2014".encode(), b"  \n\n\t ", b"The KING'S men, 1234!"]
    cases = [
        # The corpus: a slice to learn on, a held-out slice and the adversarial strings to encode.
        case("shakespeare_gpt2", train_slice, 512, "gpt2", [held_out, train_slice[:2000]] + adversarial),
        case("shakespeare_none", train_slice[:4000], 400, "none", [held_out[:1500]] + adversarial),
        # Repeated characters: overlapping pairs, then an early stop (one token left).
        case("repeats", b"aaaaaa", 300, "none", [b"a", b"aa", b"aaa", b"aaaaaaaaaaa", b"baaab"]),
        case("repeats_odd", b"aaaaaaa bbbb aaa", 270, "gpt2", [b"aaaaaaaaa", b" aaaa bb", b"aaaaaaa bbbb aaa"]),
        # Every pair occurs once: each merge is a tie, broken by the smallest pair.
        case("ties", b"dcba abcd zyx", 270, "none", [b"abcd", b"dcba", b"xyz zyx", b"dcba abcd zyx"]),
        case("ties_chunks", b"ba ab ba ab cd dc", 262, "gpt2", [b"ab ba cd dc", b"abab"]),
        # Training on invalid UTF-8 and control bytes.
        case("bytes", b"\xff\xfe\xff\xfe\x80abc\xc3\x28\x00\x00\x00 \xff\xfe", 266, "gpt2",
             [b"\xff\xfe\xff\xfe", b"\x00\x00\x00\x00\x00", b"\x01\x02", b""]),
        case("random", b"".join(random_texts(rng, 40, 24)), 300, "gpt2", random_texts(rng, 8, 40)),
    ]
    splits = [{"text": t.hex(), "chunks": [c.hex() for c in split(t, "gpt2")]}
              for t in SPLIT_TEXTS + random_texts(rng, 60, 48)]
    common.dump("tokenizer_bpe", {"split": splits, "cases": cases})
