"""``dataloader_rs.text.Tokenize``: Hugging Face tokenizers run in Rust give the ids of the
``tokenizers`` package, for every kind of model, text and setting; in a loader, over streams,
map-style and Rust datasets, with errors that name the item."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataloader_rs import FileDataset, PyDataloader, PyDataset, PyIterableDataset
from dataloader_rs.text import Tokenize

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs!",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "東京は日本の首都です。 北京是中国的首都。",
    "naïve café façade — déjà vu, coöperate; résumé 3.14 1,000,000",
    "emoji 🙂👍🏽 and symbols ∑ ∞ ≠ ≤ ≥ £ € ¥",
    "tabs\tand\nnewlines  and   runs of spaces",
] * 20

TEXTS = [
    "",
    " ",
    "The lazy dog.",
    "unseen wordsxyz qqq",
    "Zwölf Boxkämpfer 🙂 東京",
    "  leading and trailing  ",
    "a" * 300,
    "\u0301combining first",
    "CAPS lower MiXeD",
    "tab\tnewline\nend",
]


def word_level() -> Tokenizer:
    words = sorted({w for line in CORPUS for w in line.split()})
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def bpe_byte_level() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))]
    )
    return tok


def word_piece() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"])
    tok.train_from_iterator(CORPUS, trainer)
    sep, cls = ("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]"))
    tok.post_processor = processors.BertProcessing(sep, cls)
    return tok


def unigram() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=200, special_tokens=["<unk>"], unk_token="<unk>")
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def truncated_and_padded() -> Tokenizer:
    tok = word_piece()
    tok.enable_truncation(max_length=8)
    tok.enable_padding(length=8, pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    return tok


MAKERS = {
    "word_level": word_level,
    "bpe_byte_level": bpe_byte_level,
    "word_piece": word_piece,
    "unigram": unigram,
    "truncated_and_padded": truncated_and_padded,
}
BUILT = {name: make() for name, make in MAKERS.items()}


@pytest.mark.parametrize("name", MAKERS)
@pytest.mark.parametrize("special", [True, False])
def test_the_ids_are_those_of_the_tokenizers_package(name, special):
    tok = BUILT[name]
    ours = Tokenize(tok, add_special_tokens=special)
    for text in TEXTS + CORPUS[:7]:
        expected = tok.encode(text, add_special_tokens=special).ids
        got = ours(text)
        assert type(got) is list
        assert all(type(i) is int for i in got)
        assert got == expected, (name, text)
        assert ours(text.encode()) == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=200), name=st.sampled_from(sorted(MAKERS)))
def test_any_text_gets_the_ids_of_the_tokenizers_package(text, name):
    tok = BUILT[name]
    assert Tokenize(tok)(text) == tok.encode(text).ids


def test_a_transformers_fast_tokenizer_and_a_json_text_are_taken():
    transformers = pytest.importorskip("transformers")
    tok = BUILT["word_piece"]
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    for text in TEXTS:
        expected = fast(text)["input_ids"]
        assert Tokenize(fast)(text) == expected
        assert Tokenize(tok.to_str())(text) == expected


def test_a_dict_item_gets_its_ids_beside_its_other_fields():
    tok = BUILT["word_level"]
    t = Tokenize(tok, field="text")
    row = {"text": "The lazy dog.", "label": 3}
    out = t(row)
    assert out == {"text": "The lazy dog.", "label": 3, "input_ids": tok.encode("The lazy dog.").ids}
    assert row == {"text": "The lazy dog.", "label": 3}  # the item itself is left as it was
    named = Tokenize(tok, field="text", into="ids")(row)
    assert list(named) == ["text", "label", "ids"]


def test_bad_arguments_and_items_raise_typed_errors_that_name_them():
    tok = BUILT["word_level"]
    with pytest.raises(TypeError, match=r"tokenizer must be a tokenizers\.Tokenizer.*got int"):
        Tokenize(3)
    with pytest.raises(ValueError, match=r"^Tokenize: invalid argument: not a tokenizer\.json: "):
        Tokenize("{}")
    with pytest.raises(TypeError, match="field must be a str, got 1"):
        Tokenize(tok, field=1)
    with pytest.raises(TypeError, match="add_special_tokens must be True or False, got 1"):
        Tokenize(tok, add_special_tokens=1)
    with pytest.raises(TypeError):
        Tokenize(tok, "text")  # the options are keywords
    t = Tokenize(tok)
    with pytest.raises(TypeError, match=r"^Tokenize takes a str \(or UTF-8 bytes\); an item is int$"):
        t(5)
    with pytest.raises(ValueError, match=r"^Tokenize takes UTF-8 text; an item is bytes: invalid utf-8"):
        t(b"\xff\xfe")
    by_field = Tokenize(tok, field="text")
    with pytest.raises(TypeError, match=r"Tokenize\(field='text'\) takes dict items, got str"):
        by_field("The dog")
    with pytest.raises(KeyError, match=r"the item has no key 'text' \(its keys: \['body'\]\)"):
        by_field({"body": "The dog"})
    with pytest.raises(TypeError, match=r"item\['text'\] is NoneType"):
        by_field({"text": None})


def test_it_pickles_and_shows_its_settings():
    tok = BUILT["bpe_byte_level"]
    t = Tokenize(tok, field="text", into="ids", add_special_tokens=False)
    assert repr(t) == (
        f"Tokenize(<tokenizer of {tok.get_vocab_size()} tokens>, field='text', into='ids', add_special_tokens=False)"
    )
    assert (t.vocab_size, t.field, t.into, t.add_special_tokens) == (tok.get_vocab_size(), "text", "ids", False)
    back = pickle.loads(pickle.dumps(t))
    assert repr(back) == repr(t)
    assert back({"text": "The fox"}) == t({"text": "The fox"})


class Rows(PyIterableDataset[dict]):
    def __init__(self, texts: list[object]) -> None:
        self.texts = texts

    def __iter__(self):
        return iter({"text": t, "n": i} for i, t in enumerate(self.texts))


class Texts(PyDataset[str]):
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> str:
        return self.texts[i]


class BatchTexts(Texts):
    def __getitems__(self, indices: list[int]) -> list[str]:
        return [self.texts[i] for i in indices]


class Failing(Texts):
    """Item 5 cannot be fetched."""

    def __getitem__(self, i: int) -> str:
        if i == 5:
            raise LookupError("no item 5")
        return self.texts[i]


def test_a_map_style_batch_fails_at_its_first_failing_item_fetched_or_tokenised():
    tok = BUILT["word_level"]
    texts: list = ["The dog"] * 8
    texts[2] = 3.5  # tokenising item 2 fails, before item 5 fails to be fetched
    for first_fails, error, message in (
        (texts, TypeError, "an item is float"),
        (["The dog"] * 8, LookupError, "no item 5"),
    ):
        loader = PyDataloader(Failing(first_fails), batch_size=8, transform=Tokenize(tok))
        with pytest.raises(error, match=message):
            next(iter(loader))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loader_tokenises_a_stream_and_a_map_style_dataset(num_workers):
    tok = BUILT["bpe_byte_level"]
    texts = [CORPUS[i % len(CORPUS)] + f" {i}" for i in range(203)]
    stream = PyDataloader(Rows(texts), batch_size=16, num_workers=num_workers, transform=Tokenize(tok, field="text"))
    rows = [r for batch in stream for r in batch]
    assert [r["n"] for r in rows] == list(range(203))
    assert [r["input_ids"] for r in rows] == [e.ids for e in tok.encode_batch(texts)]
    for kind in (Texts, BatchTexts):
        mapped = PyDataloader(kind(texts), batch_size=16, num_workers=num_workers, transform=Tokenize(tok))
        assert [ids for batch in mapped for ids in batch] == [e.ids for e in tok.encode_batch(texts)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_bad_item_of_a_stream_fails_its_batch_or_is_skipped_with_a_record(num_workers):
    tok = BUILT["word_level"]
    texts = ["The dog"] * 10 + [7] + ["The fox"] * 10
    loader = PyDataloader(Rows(texts), batch_size=4, num_workers=num_workers, transform=Tokenize(tok, field="text"))
    it = iter(loader)
    assert [len(next(it)) for _ in range(2)] == [4, 4]
    with pytest.raises(TypeError, match=r"item\['text'\] is int"):
        next(it)
    skipping = PyDataloader(
        Rows(texts), batch_size=4, num_workers=num_workers, transform=Tokenize(tok, field="text"), max_failures=1
    )
    rows = [r for batch in skipping for r in batch]
    assert [r["n"] for r in rows] == [n for n in range(21) if n != 10]
    (failure,) = skipping.failures
    assert (failure.index, failure.type) == (10, "TypeError")
    assert "is int" in failure.message


def test_a_rust_dataset_of_text_files_is_tokenised_without_python(tmp_path):
    tok = BUILT["word_piece"]
    texts = [f"{CORPUS[i]} {i}" for i in range(12)]
    paths = []
    for i, text in enumerate(texts):
        p = tmp_path / f"{i}.txt"
        p.write_text(text, encoding="utf-8")
        paths.append(str(p))
    (tmp_path / "bad.txt").write_bytes(b"ok \xff")
    loader = PyDataloader(FileDataset(paths), batch_size=5, num_workers=2, transform=Tokenize(tok))
    assert [ids for batch in loader for ids in batch] == [tok.encode(t).ids for t in texts]
    bad = PyDataloader(FileDataset([paths[0], str(tmp_path / "bad.txt")]), batch_size=2, transform=Tokenize(tok))
    with pytest.raises(ValueError, match="Tokenize takes UTF-8 text; the item's bytes: invalid utf-8"):
        list(bad)
    by_field = PyDataloader(FileDataset(paths[:2]), batch_size=2, transform=Tokenize(tok, field="text"))
    with pytest.raises(TypeError, match=r"Tokenize\(field='text'\) takes dict items, got bytes"):
        list(by_field)


def test_a_hugging_face_stream_of_parquet_rows_is_tokenised(tmp_path):
    datasets = pytest.importorskip("datasets")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    tok = BUILT["unigram"]
    paths = []
    texts = [f"{CORPUS[i % 7]} row {i}" for i in range(90)]
    for s in range(3):
        path = tmp_path / f"shard{s}.parquet"
        rows = range(s * 30, (s + 1) * 30)
        pq.write_table(pa.table({"text": [texts[i] for i in rows], "label": list(rows)}), path)
        paths.append(str(path))
    ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
    loader = PyDataloader(ds, batch_size=8, num_workers=2, transform=Tokenize(tok, field="text"))
    rows = [r for batch in loader for r in batch]
    assert [r["label"] for r in rows] == list(range(90))
    assert [r["input_ids"] for r in rows] == [tok.encode(t).ids for t in texts]
