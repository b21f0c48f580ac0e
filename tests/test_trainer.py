"""Real transformers Trainer (5.x) and Accelerate with a PyDataloader returned by an overridden
``get_train_dataloader``: ``accelerate.skip_first_batches`` (the Trainer's mid-epoch resume)
gives the loader's own batches after the skipped ones, a resumed run sees what the uninterrupted
one saw, and ``TrainingArguments(seed=)`` fixes the order of a loader given no seed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")

from dataloader_rs import FileDataset, PyDataloader, PyDataset  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def same(a, b):
    """Same type and values, through dicts and lists."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


class Counted(PyDataset):
    """0..n-1, counting the items fetched."""

    def __init__(self, n):
        self.n = n
        self.fetched = []  # appends are atomic on worker threads

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.fetched.append(i)
        return i


LOADERS = {
    "transform-collate": lambda ds: PyDataloader(
        ds, batch_size=4, transform=lambda x: x * 100, collate_fn=torch.tensor
    ),
    # Without collate_fn a batch is a list: torch's default_collate would make it a tensor.
    "transform-no-collate": lambda ds: PyDataloader(
        ds, batch_size=4, shuffle=True, seed=3, num_workers=2, transform=lambda i, x: (i, x + 0.5)
    ),
}


@pytest.mark.parametrize("kind", list(LOADERS))
def test_accelerate_skip_first_batches_gives_our_batches_after_the_skipped(kind):
    make = LOADERS[kind]
    reference = list(make(Counted(12)))
    accelerator = accelerate.Accelerator(cpu=True)
    for skip in (accelerate.skip_first_batches, accelerator.skip_first_batches):
        dataset = Counted(12)
        loader = make(dataset)
        skipped = skip(loader, 1)
        assert len(skipped) == 2
        batches = list(skipped)
        assert len(batches) == 2
        assert all(same(a, b) for a, b in zip(batches, reference[1:], strict=True)), (batches, reference[1:])
        assert len(dataset.fetched) == 8  # the skipped batch was never loaded
        # The loader itself still gives whole epochs.
        loader.set_epoch(0)
        assert all(same(a, b) for a, b in zip(loader, reference, strict=True))
    # Any other loader goes to Accelerate's own.
    theirs = accelerate.skip_first_batches(torch.utils.data.DataLoader(list(range(12)), batch_size=4), 2)
    assert isinstance(theirs, torch.utils.data.DataLoader)
    assert [b.tolist() for b in theirs] == [[8, 9, 10, 11]]


def test_a_rust_dataset_is_skipped_by_our_loader(tmp_path):
    paths = []
    for i in range(12):
        path = tmp_path / f"{i}.txt"
        path.write_bytes(str(i).encode())
        paths.append(str(path))

    def make():
        return PyDataloader(FileDataset(paths), batch_size=4, num_workers=2, transform=lambda b: int(bytes(b)) * 100)

    reference = list(make())
    assert reference[1:] == [[400, 500, 600, 700], [800, 900, 1000, 1100]]
    assert list(accelerate.skip_first_batches(make(), 1)) == reference[1:]


def test_a_loader_made_before_accelerate_was_imported_routes_it_when_measured():
    code = """
        from dataloader_rs import PyDataloader
        import dataloader_rs.accelerate as ours
        loader = PyDataloader(list(range(12)), batch_size=4, transform=lambda x: x * 100)
        import accelerate
        assert accelerate.skip_first_batches is not ours.skip_first_batches
        len(loader)  # as the Trainer does before it skips
        print(list(accelerate.skip_first_batches(loader, 1)))
    """
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "[[400, 500, 600, 700], [800, 900, 1000, 1100]]\n"


# --- a Trainer run with a PyDataloader ------------------------------------------------------


class Recorder(torch.nn.Module):
    """A tiny model that records the batches it is given."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(1, 1)
        self.seen = []

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return {"loss": self.linear(x).pow(2).mean()}


def collate(items):
    return {"x": torch.tensor(items, dtype=torch.float32).unsqueeze(1)}


def trainer_over(**loader_kwargs):
    """A Trainer whose training loader is a shuffled PyDataloader of 0..11 in batches of 2,
    given no seed: its shuffle's seed is drawn from torch's generator, which the Trainer seeds."""

    class LoaderTrainer(transformers.Trainer):
        def get_train_dataloader(self):
            return PyDataloader(list(range(12)), batch_size=2, shuffle=True, **loader_kwargs)

    return LoaderTrainer


def training_args(out, *, max_steps, save_steps, seed=0):
    return transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        save_strategy="steps",
        save_steps=save_steps,
        per_device_train_batch_size=2,
        learning_rate=0.01,
        report_to=[],
        use_cpu=True,
        seed=seed,
        logging_strategy="no",
        disable_tqdm=True,
    )


LoaderTrainer = trainer_over(num_workers=2, transform=lambda x: x * 100 + 1, collate_fn=collate)


def run(out, seed=0, resume=None):
    """The batches the model sees in a run of 10 steps of 6 a epoch, a checkpoint at step 8."""
    args = training_args(out, max_steps=10, save_steps=8, seed=seed)
    model = Recorder()
    LoaderTrainer(model=model, args=args).train(resume_from_checkpoint=resume)
    return model.seen


def test_a_resumed_trainer_sees_the_batches_of_the_uninterrupted_run(tmp_path):
    whole = run(tmp_path)
    assert len(whole) == 10
    # Step 8 is batch 2 of the second epoch: the Trainer skips 2 batches of it.
    resumed = run(tmp_path, resume=str(tmp_path / "checkpoint-8"))
    assert len(resumed) == 2
    assert all(same(a, b) for a, b in zip(resumed, whole[8:], strict=True)), (resumed, whole[8:])


def test_the_trainers_seed_fixes_the_order_of_a_loader_without_one(tmp_path):
    first = run(tmp_path / "a", seed=0)
    again = run(tmp_path / "b", seed=0)
    assert all(same(a, b) for a, b in zip(first, again, strict=True))
    other = run(tmp_path / "c", seed=1)
    assert not all(same(a, b) for a, b in zip(first, other, strict=True))


# --- a transformers model built from a config --------------------------------------------


TokenTrainer = trainer_over(
    transform=lambda i: {"input_ids": [1 + (i * 7 + k) % 60 for k in range(6)], "labels": i % 2},
    collate_fn=lambda items: {
        "input_ids": torch.tensor([x["input_ids"] for x in items]),
        "labels": torch.tensor([x["labels"] for x in items]),
    },
)


def run_bert(out, resume=None):
    """The input_ids a tiny BERT (made from a config, nothing downloaded) is trained on."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = transformers.BertForSequenceClassification(config)
    seen = []
    model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["input_ids"].clone()), with_kwargs=True)
    args = training_args(out, max_steps=9, save_steps=7)
    TokenTrainer(model=model, args=args).train(resume_from_checkpoint=resume)
    return seen


def test_a_model_from_a_config_resumes_on_the_batches_of_the_uninterrupted_run(tmp_path):
    whole = run_bert(tmp_path)
    assert len(whole) == 9
    # Step 7 is batch 1 of the second epoch of 6 batches.
    resumed = run_bert(tmp_path, resume=str(tmp_path / "checkpoint-7"))
    assert len(resumed) == 2
    assert all(torch.equal(a, b) for a, b in zip(resumed, whole[7:], strict=True)), (resumed, whole[7:])


# --- torch.distributed.checkpoint ----------------------------------------------------------


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_distributed_checkpoint_saves_and_loads_a_loader_mid_epoch(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")

    def make():
        return PyDataloader(list(range(20)), batch_size=3, shuffle=True, seed=5, num_workers=2)

    reference = make()
    whole, after = list(reference), list(reference)
    loader = make()
    it = iter(loader)
    seen = [next(it) for _ in range(3)]
    assert seen == whole[:3]
    dcp.save({"loader": loader}, checkpoint_id=str(tmp_path / "ckpt"))
    fresh = make()
    dcp.load({"loader": fresh}, checkpoint_id=str(tmp_path / "ckpt"))
    assert list(fresh) == whole[3:]
    assert list(fresh) == after  # the next epoch is whole, in the order of epoch 1
