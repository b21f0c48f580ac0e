"""Text tokenising in Rust: ``Tokenize`` runs a Hugging Face tokenizer (the ``tokenizers``
library itself, read from its ``tokenizer.json``) as a loader's ``transform``.

A worker reads a batch's texts, releases the interpreter while it tokenises them, and takes it
again to make the lists of ids: with ``num_workers=2`` two batches are tokenised at once, on
any build of CPython. The ids are those of ``tokenizer.encode(text).ids``, with the tokenizer's
own truncation and padding; ``add_special_tokens=False`` leaves out its ``[CLS]``, ``</s>``...

``Tokenize(tok)`` takes text items (``str``, or ``bytes`` holding UTF-8) and returns
``list[int]``. ``Tokenize(tok, field="text")`` takes dict items (the rows of a Hugging Face
dataset) and returns a copy of each with the ids under ``into`` (``"input_ids"``).

    from tokenizers import Tokenizer
    from dataloader_rs import PyDataloader
    from dataloader_rs.text import Tokenize

    tok = Tokenizer.from_file("tokenizer.json")
    loader = PyDataloader(rows, batch_size=64, num_workers=2, transform=Tokenize(tok, field="text"))
"""

from dataloader_rs._native import Tokenize

__all__ = ["Tokenize"]
