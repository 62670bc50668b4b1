"""Tokenizers against independent implementations from the registries:
SentencePiece models (trained here by Debian's spm_train) against Debian's
python3-sentencepiece; byte-level BPE tokenizer.json files (GPT-2's and LLaMA
3's forms, bpe_files.py) against Hugging Face's pure JavaScript tokenizers.js
(npm, tests/oracles); on a multilingual corpus with emoji, unusual whitespace,
special tokens in the text and invalid UTF-8: identical ids, identical text
back. `dstrain tokenize` writes each file's whole encoding (train part + val
part) whatever the chunking and threads; uint32 ids where the vocabulary
needs them, read back by the dataset; generation through a model directory's
tokenizer.
"""
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

import bpe_files

REPO = pathlib.Path(__file__).resolve().parents[2]
ORACLES = REPO / "tests" / "oracles" / "node_modules"


@pytest.fixture(scope="module")
def dstrain(build_dir):
    os.environ["DSTRAIN_LIBRARY"] = str(build_dir / "libdstrain.so")
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain as sdk
    return sdk


def corpus(lines=2500, seed=1):
    """Text in English, German, Japanese, Russian, Arabic digits, emoji."""
    g = random.Random(seed)
    vocab = ["the quick brown fox jumps over lazy dog training engine parallel".split(),
             "über straße müde größer fußball ärger schön".split(),
             "東京 日本語 機械学習 こんにちは 世界".split(),
             "привет мир данные обучение модель".split(),
             ["😀", "🚀", "👍🏽", "🇩🇪", "❤️", "١٢٣"]]
    out = []
    for _ in range(lines):
        words = []
        for _ in range(g.randint(3, 14)):
            words.append(g.choice(g.choice(vocab)))
            if g.random() < 0.1:
                words[-1] += g.choice([",", ".", "!", "?", "'s", "'LL", " 1234567", " 3.14"])
        out.append(" ".join(words))
    return "\n".join(out) + "\n"


ODD = ("\n\n\n  spaces   and\ttabs\t\there\r\nCRLF\x0bvtab\x0cff \u0085nel\u00a0nbsp\u3000ideo"
       "\u2028ls  <|endoftext|> after <|begin_of_text|>x I'm  \n")


def hostile_bytes(text):
    b = text.encode()
    return (b[:4000] + b"\xff\xfe bad \xc3( \xe2\x82 cut \xf0\x9f\x98" + ODD.encode() +
            b[4000:9000] + b"\xed\xa0\x80 surrogate \xc0\xaf overlong" + b[9000:12000])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    text = corpus()
    (d / "corpus.txt").write_text(text)
    (d / "hostile.txt").write_bytes(hostile_bytes(text))
    # trained on the odd whitespace too, so that merges span where the
    # pre-tokenizers' \\s (Unicode White_Space) cuts: a cut misplaced there
    # changes the ids
    train = text + ODD.replace("<|", "").replace("|>", "") * 40
    bpe_files.write(d / "gpt2", train, 400, "gpt2")
    bpe_files.write(d / "llama3", train, 400, "llama3")
    spm_train = shutil.which("spm_train")
    if spm_train is None:
        pytest.fail("spm_train is missing (Debian package sentencepiece; scripts/install-deps.sh)")
    subprocess.run([spm_train, f"--input={d / 'corpus.txt'}", f"--model_prefix={d / 'spm'}",
                    "--vocab_size=400", "--model_type=bpe", "--character_coverage=1.0"],
                   check=True, capture_output=True)
    # LLaMA's kind: whitespace kept (a leading space would gain the dummy prefix)
    subprocess.run([spm_train, f"--input={d / 'corpus.txt'}", f"--model_prefix={d / 'spm_keep'}",
                    "--vocab_size=400", "--model_type=bpe", "--character_coverage=1.0",
                    "--remove_extra_whitespaces=false", "--byte_fallback=true"],
                   check=True, capture_output=True)
    return d


def js_oracle(tokenizer_json, text_file, add_special):
    if not (ORACLES / "@huggingface" / "tokenizers").is_dir():
        pytest.fail(f"{ORACLES} has no @huggingface/tokenizers (npm ci --prefix tests/oracles)")
    r = subprocess.run(["node", str(REPO / "tests" / "python" / "tokenizer_oracle.mjs"),
                        str(ORACLES), str(tokenizer_json), str(text_file),
                        "1" if add_special else "0"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize("model", ["spm.model", "spm_keep.model"])
def test_sentencepiece_equals_python_sentencepiece(files, dstrain, model):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=str(files / model))
    tok = dstrain.Tokenizer(files / model)
    assert tok.info == {"kind": "sentencepiece", "vocab_size": 400, "bos_id": 1, "eos_id": 2}
    for name in ("corpus.txt", "hostile.txt"):
        data = (files / name).read_bytes()
        text = data.decode("utf-8", errors="replace")
        want = sp.encode(text)
        got = tok.encode(data)
        assert got == want, name
        assert tok.encode(data, add_special_tokens=True) == [sp.bos_id()] + want
        assert tok.decode(got) == sp.decode(want)


@pytest.mark.parametrize("style", ["gpt2", "llama3"])
def test_byte_level_bpe_equals_tokenizers_js(files, dstrain, style):
    tok = dstrain.Tokenizer(files / style / "tokenizer.json")
    assert tok.info["kind"] == "bpe"
    if style == "gpt2":
        # tokenizers.js runs ByteLevel's own regex with JavaScript's \s, which
        # lacks U+0085 (Oniguruma's, and so Hugging Face's, has it): that
        # character is compared apart, against Oniguruma's rule.
        data = (files / "hostile.txt").read_bytes().replace("\u0085".encode(), b"")
        (files / "hostile_gpt2.txt").write_bytes(data)
        pieces = ["x", " ", "\u0085", "y"]  # "x \u0085y": the space, then NEL alone
        assert tok.encode("x \u0085y") == sum((tok.encode(p) for p in pieces), [])
        assert tok.encode("x \u0085y") != tok.encode("x") + tok.encode(" \u0085") + \
            tok.encode("y")  # a merge spans " \u0085": the cut shows
    for name in ("corpus.txt", "hostile_gpt2.txt" if style == "gpt2" else "hostile.txt"):
        data = (files / name).read_bytes()
        for add in (False, True):
            want = js_oracle(files / style / "tokenizer.json", files / name, add)
            got = tok.encode(data, add_special_tokens=add)
            if got != want["ids"]:
                i = next(k for k in range(min(len(got), len(want["ids"])))
                         if got[k] != want["ids"][k])
                pytest.fail(f"{style} {name}: ids differ at {i}: dstrain {got[i - 2:i + 4]} "
                            f"tokenizers.js {want['ids'][i - 2:i + 4]}")
            assert tok.decode(got) == want["decoded"]
    if style == "llama3":  # the template's <|begin_of_text|>, the config's eos
        assert tok.encode("hi", add_special_tokens=True)[0] == tok.bos_id
        assert tok.eos_id == tok.encode("<|end_of_text|>")[0]
    else:  # vocab.json + merges.txt is the same tokenizer
        same = dstrain.Tokenizer(files / style / "vocab.json")
        assert same.encode((files / "hostile.txt").read_bytes()) == \
            tok.encode((files / "hostile.txt").read_bytes())


def read_token_file(path):
    raw = path.read_bytes()
    header = np.frombuffer(raw[:12], np.int32)
    ids = np.frombuffer(raw[1024:], np.uint16 if header[1] == 1 else np.uint32)
    assert header[0] == 20240520 and header[2] == ids.size
    return int(header[1]), [int(x) for x in ids]


def match_parts(train, val, wholes, eos):
    """The cut of each file's whole encoding between the train and the
    validation stream: both streams are the files' parts, each followed by
    eos (which the text itself may hold too). Returns the val shares."""
    t = v = 0
    shares = []
    for whole in wholes:
        candidates = [c for c in range(min(len(whole), len(train) - t - 1) + 1)
                      if train[t + c] == eos]
        for c in candidates:
            if (train[t:t + c] == whole[:c] and
                    val[v:v + len(whole) - c] == whole[c:] and
                    val[v + len(whole) - c:v + len(whole) - c + 1] == [eos]):
                break
        else:
            raise AssertionError("the token files are not the files' whole encodings")
        t, v = t + c + 1, v + len(whole) - c + 1
        shares.append((len(whole) - c) / len(whole))
    assert t == len(train) and v == len(val)
    return shares


@pytest.mark.parametrize("tokenizer", ["spm.model", "spm_keep.model", "llama3",
                                       "gpt2/vocab.json"])
def test_tokenize_writes_each_files_whole_encoding(files, dstrain, build_dir, tmp_path,
                                                    tokenizer):
    big = tmp_path / "big.txt"
    big.write_text(corpus(6000, seed=2))
    inputs = [big, files / "hostile.txt"]
    tok = dstrain.Tokenizer(files / tokenizer)
    if tokenizer == "spm_keep.model":
        # No cut is safe for a model that keeps whitespace: each file is one
        # piece of work (and a validation part starts a text of its own).
        r = subprocess.run([str(build_dir / "dstrain"), "tokenize", "--tokenizer",
                            str(files / tokenizer), "--out", str(tmp_path / "train.bin"),
                            "--threads", "2", "--chunk-bytes", "3000", "--quiet",
                            *map(str, inputs)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        _, train = read_token_file(tmp_path / "train.bin")
        assert train == sum((tok.encode(f.read_bytes()) + [tok.eos_id] for f in inputs), [])
        return
    r = subprocess.run([str(build_dir / "dstrain"), "tokenize", "--tokenizer",
                        str(files / tokenizer), "--out", str(tmp_path / "train.bin"),
                        "--val-out", str(tmp_path / "val.bin"), "--val-fraction", "0.1",
                        "--threads", "2", "--chunk-bytes", "3000", "--json", *map(str, inputs)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    version, train = read_token_file(tmp_path / "train.bin")
    _, val = read_token_file(tmp_path / "val.bin")
    assert version == 1 and report["train_tokens"] == len(train) and report["val_tokens"] == len(val)
    shares = match_parts(train, val, [tok.encode(f.read_bytes()) for f in inputs], tok.eos_id)
    assert all(0.05 < share < 0.15 for share in shares), shares
    # the dataset reads what was written
    with dstrain.Dataset.open_tokens(tmp_path / "train.bin", 0.1) as data:
        assert data.read("train").tolist() + data.read("val").tolist() == train


def test_uint32_ids_where_the_vocabulary_needs_them(files, dstrain, build_dir, tmp_path):
    tj = json.loads((files / "gpt2" / "tokenizer.json").read_text())
    tj["added_tokens"].append(dict(tj["added_tokens"][0], id=70000, content="<|big|>"))
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    text = tmp_path / "t.txt"
    text.write_text("hello <|big|> world " * 50)
    r = subprocess.run([str(build_dir / "dstrain"), "tokenize", "--tokenizer",
                        str(tmp_path / "big"), "--out", str(tmp_path / "t.bin"), "--quiet",
                        str(text)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    version, ids = read_token_file(tmp_path / "t.bin")
    assert version == 2 and ids.count(70000) == 50
    with dstrain.Dataset.open_tokens(tmp_path / "t.bin", 0.1) as data:
        assert data.max_token == 70000


def test_unsupported_components_are_named(files, dstrain, tmp_path):
    base = json.loads((files / "gpt2" / "tokenizer.json").read_text())
    cases = {
        "WordPiece": dict(base, model={"type": "WordPiece", "vocab": {}}),
        "Metaspace": dict(base, pre_tokenizer={"type": "Metaspace", "replacement": "▁"}),
        "byte-fallback": dict(base, model=dict(base["model"], byte_fallback=True)),
        "NFKC": dict(base, normalizer={"type": "NFKC"}),
    }
    for word, content in cases.items():
        path = tmp_path / f"{word}.json"
        path.write_text(json.dumps(content, ensure_ascii=False))
        with pytest.raises(dstrain.NotSupportedError, match=word):
            dstrain.Tokenizer(path)
    with pytest.raises(dstrain.DstrainIOError, match="does not exist"):
        dstrain.Tokenizer(tmp_path / "missing.model")
    (tmp_path / "garbage.model").write_bytes(b"not a model")
    with pytest.raises(dstrain.DstrainIOError, match="could not be read"):
        dstrain.Tokenizer(tmp_path / "garbage.model")


def test_generate_speaks_through_the_models_tokenizer(files, dstrain, build_dir, tmp_path):
    import hf_files
    import torch_families
    tok = dstrain.Tokenizer(files / "llama3" / "tokenizer.json")
    config = {"model_type": "llama", "vocab_size": tok.vocab_size, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64}
    model = hf_files.randomize_(torch_families.model_for(config), 3, 0.5)
    directory = tmp_path / "model"
    hf_files.write_model_dir(directory, config, hf_files.hf_state_dict(model))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(files / "llama3" / name, directory / name)
    prompt = "über the quick 🚀"
    r = subprocess.run([str(build_dir / "dstrain"), "generate", "--model", str(directory),
                        "--prompt", prompt, "--max-new-tokens", "12", "--temperature", "0",
                        "--ignore-eos"], capture_output=True, env=dict(os.environ,
                                                                       OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr
    with dstrain.Generator(model=directory, threads=1) as g:
        new = g.generate(tok.encode(prompt, add_special_tokens=True), 12, temperature=0,
                         stop_at_eos=False)
    assert r.stdout.decode("utf-8", errors="replace") == prompt + tok.decode(new) + "\n"
