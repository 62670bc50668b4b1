"""Byte-level BPE tokenizer files for the tests, written here (no model hub):
a small BPE trained on a corpus by the textbook algorithm, saved as a
Hugging Face tokenizer.json in GPT-2's form (ByteLevel pre-tokenizer with
its regex, <|endoftext|>) or LLaMA 3's (a Split with LLaMA 3's regex, then
ByteLevel without one; <|begin_of_text|> added by a TemplateProcessing,
ignore_merges), and as GPT-2's vocab.json + merges.txt. The files only have
to be valid tokenizers: the oracle reading them is another implementation.
"""
import collections
import json
import re

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train(text, merges_wanted):
    """(vocab {token: id}, merges [(a, b)]) of a byte-level BPE on `text`."""
    table = bytes_to_unicode()
    words = collections.Counter(re.findall(r" ?\w+| ?[^\w\s]+|\s+", text))
    seqs = {w: [table[b] for b in w.encode("utf-8")] for w in words}
    vocab = {table[b]: i for i, b in enumerate(sorted(table, key=lambda b: ord(table[b])))}
    merges = []
    while len(merges) < merges_wanted:
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        vocab.setdefault(a + b, len(vocab))
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return vocab, merges


def _added(content, id_):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def tokenizer_json(vocab, merges, style="gpt2"):
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": style == "gpt2"}
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": style == "llama3", "vocab": vocab,
             "merges": [f"{a} {b}" for a, b in merges]}
    n = len(vocab)
    if style == "gpt2":
        return {"version": "1.0", "truncation": None, "padding": None,
                "added_tokens": [_added("<|endoftext|>", n)], "normalizer": None,
                "pre_tokenizer": byte_level, "post_processor": dict(byte_level),
                "decoder": dict(byte_level), "model": model}
    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [_added(bos, n), _added(eos, n + 1)], "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
                 "invert": False}, byte_level]},
            "post_processor": {"type": "Sequence", "processors": [
                dict(byte_level, use_regex=True),
                {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                            {"Sequence": {"id": "A", "type_id": 0}}],
                 "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                          {"Sequence": {"id": "A", "type_id": 0}},
                          {"SpecialToken": {"id": bos, "type_id": 1}},
                          {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {bos: {"id": bos, "ids": [n], "tokens": [bos]}}}]},
            "decoder": dict(byte_level, use_regex=True), "model": model}


def write(directory, text, merges_wanted=300, style="gpt2"):
    """DIR/tokenizer.json (+ tokenizer_config.json; GPT-2: vocab.json and
    merges.txt too). Returns the tokenizer.json path."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab, merges = train(text, merges_wanted)
    tj = tokenizer_json(vocab, merges, style)
    (directory / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    eos = "<|endoftext|>" if style == "gpt2" else "<|end_of_text|>"
    config = {"eos_token": eos, "bos_token": eos if style == "gpt2" else "<|begin_of_text|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    if style == "gpt2":
        full = dict(vocab, **{"<|endoftext|>": len(vocab)})
        (directory / "vocab.json").write_text(json.dumps(full, ensure_ascii=False))
        (directory / "merges.txt").write_text(
            "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return directory / "tokenizer.json"
