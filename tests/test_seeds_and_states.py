"""Where the shuffle's seed comes from without ``seed=`` (torch's global RNG, else ``random``'s),
what ``load_state_dict`` accepts (every field checked against the loader, a drawn seed given way
to the state's), and the datasets the constructor refuses (iterable ones)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataloader_rs import PyDataloader

from conftest import Range

torch = pytest.importorskip("torch")

U64 = 1 << 64
LAST_EPOCH = U64 - 2  # the last epoch number: the next would not fit in 64 bits


def flat(batches):
    return [x for b in batches for x in b]


def shuffled(n=40, batch_size=4, **kw):
    return PyDataloader(Range(n), batch_size=batch_size, shuffle=True, **kw)


# --- the seed drawn without seed= -----------------------------------------------------------


def test_torch_manual_seed_fixes_the_shuffle():
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        loader = shuffled(num_workers=2)
        runs.append([list(loader), list(loader)])  # two epochs
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # each epoch its own order
    torch.manual_seed(1)
    assert list(shuffled()) != runs[0][0]


def test_the_seed_is_drawn_as_torchs_random_sampler_draws_its_own():
    torch.manual_seed(5)
    expected = int(torch.empty((), dtype=torch.int64).random_().item()) % U64
    torch.manual_seed(5)
    assert shuffled().seed == expected


def run_python(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_two_seeded_runs_give_the_same_batches():
    code = """
        import torch
        from dataloader_rs import PyDataloader
        torch.manual_seed(0)
        loader = PyDataloader(list(range(50)), batch_size=5, shuffle=True, num_workers=2)
        print([list(loader) for _ in range(2)])
    """
    first, second = run_python(code), run_python(code)
    assert first == second
    torch.manual_seed(0)  # and this process, seeded so, gives them too
    loader = PyDataloader(list(range(50)), batch_size=5, shuffle=True, num_workers=2)
    assert first == f"{[list(loader) for _ in range(2)]}\n"


def test_without_torch_the_seed_comes_from_random():
    code = """
        import random, sys
        from dataloader_rs import PyDataloader
        random.seed(3)
        loader = PyDataloader(list(range(50)), batch_size=5, shuffle=True)
        assert "torch" not in sys.modules
        print(loader.seed, list(loader))
    """
    first = run_python(code)
    assert first == run_python(code)
    assert first != run_python(code.replace("random.seed(3)", "random.seed(4)"))


def test_a_generator_or_seed_is_the_users_and_draws_nothing():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    assert shuffled(seed=7).seed == 7
    assert shuffled(generator=torch.Generator().manual_seed(9)).seed == 9
    assert torch.equal(torch.random.get_rng_state(), before)


# --- a drawn seed is part of the state ------------------------------------------------------


def test_a_state_of_a_seeded_run_is_taken_by_a_fresh_loader_in_a_rerun():
    torch.manual_seed(1)
    first = shuffled(num_workers=2)
    it = iter(first)
    received = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))
    del it

    torch.manual_seed(1)  # the same script run again
    again = shuffled(num_workers=2)
    again.load_state_dict(state)
    rest = list(again)

    torch.manual_seed(1)
    reference = shuffled()
    whole = list(reference)
    assert received + rest == whole
    assert list(again) == list(reference)  # and the next epoch


def test_a_drawn_seed_gives_way_to_the_states_even_unseeded():
    torch.manual_seed(2)
    first = shuffled()
    expected = [list(first), list(first)]
    list(shuffled())  # unrelated draws: the next loader draws another seed
    fresh = shuffled()
    assert fresh.seed != first.seed
    state = {**first.state_dict(), "epoch": 1, "position": 2}
    fresh.load_state_dict(state)
    assert fresh.seed == first.seed
    assert list(fresh) == expected[1][2:]
    assert fresh.state_dict()["seed"] == first.seed
    # It travels with the loader: a pickled copy still takes another state's seed.
    clone = pickle.loads(pickle.dumps(fresh))
    assert clone.seed == first.seed
    clone.load_state_dict({**state, "seed": 12345})
    assert clone.seed == 12345


def test_only_a_seed_the_user_gave_must_match():
    state = shuffled(seed=1).state_dict()
    with pytest.raises(ValueError, match=r"seed=1, this loader has 2"):
        shuffled(seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        shuffled(generator=torch.Generator().manual_seed(2)).load_state_dict(state)
    with pytest.raises(ValueError, match="seed=None"):
        shuffled().load_state_dict({**state, "seed": None})
    with pytest.raises(ValueError, match="seed=1, this loader has None"):
        PyDataloader(Range(40), batch_size=4).load_state_dict(state)
    shuffled().load_state_dict(state)  # a drawn seed gives way


# --- torchdata's StatefulDataLoader contract ------------------------------------------------


def as_list(batch):
    return batch if isinstance(batch, list) else batch.tolist()


def resumed_after(make, cut, epochs=2):
    """The batches of ``epochs`` uninterrupted epochs, and those a loader made in a run seeded
    otherwise gives after taking the state of a run stopped after ``cut`` batches."""
    torch.manual_seed(4)
    loader = make()
    whole = [as_list(b) for _ in range(epochs) for b in loader]
    torch.manual_seed(4)
    loader = make()
    seen, state = 0, None
    while state is None:
        for _ in loader:
            seen += 1
            if seen == cut:
                state = loader.state_dict()
                break
    torch.manual_seed(99)  # the state decides, not the new run's seed
    resumed = make()
    resumed.load_state_dict(state)
    rest: list[list[int]] = []
    for _ in range(epochs + 1):
        if len(rest) < len(whole) - cut:
            rest.extend(as_list(b) for b in resumed)
    return whole, rest


# torchdata 0.11 asks torch for a deprecated attribute.
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("cut", [2, 4, 5], ids=["mid-epoch", "after-the-last-batch", "into-the-next-epoch"])
def test_resume_across_an_epoch_boundary_as_stateful_dataloader(cut):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    data = list(range(10))  # 4 batches of 3 an epoch
    theirs, theirs_rest = resumed_after(
        lambda: stateful.StatefulDataLoader(data, batch_size=3, shuffle=True, collate_fn=list), cut
    )
    assert theirs_rest == theirs[cut:]  # torchdata's contract
    ours, ours_rest = resumed_after(lambda: PyDataloader(data, batch_size=3, shuffle=True, num_workers=2), cut)
    assert ours_rest == ours[cut:]  # is ours


# --- every field of a state is checked ------------------------------------------------------


def five_batches(**kw):
    return PyDataloader(Range(10), batch_size=2, **kw)


@pytest.mark.parametrize("position", [6, 1000, U64 - 1])
def test_a_position_past_the_end_of_the_epoch_is_refused(position):
    loader = five_batches()
    with pytest.raises(ValueError, match=r"state\['position'\].*5 batches"):
        loader.load_state_dict({**loader.state_dict(), "position": position})
    assert flat(loader) == list(range(10))  # nothing changed


def test_the_end_of_an_epoch_is_the_start_of_the_next():
    loader = five_batches(shuffle=True, seed=3)
    reference = five_batches(shuffle=True, seed=3)
    list(reference)
    loader.load_state_dict({**loader.state_dict(), "position": 5})
    assert loader.state_dict()["epoch"] == 1
    assert list(loader) == list(reference)


def test_skip_first_batches_starts_every_epoch_at_a_batch():
    reference = five_batches(shuffle=True, seed=3)
    epochs = [list(reference) for _ in range(3)]
    loader = five_batches(shuffle=True, seed=3)
    skipped = loader.skip_first_batches(2)
    assert len(skipped) == 3
    assert list(skipped) == epochs[0][2:]
    assert list(skipped) == epochs[1][2:]  # each epoch, numbered as the loader's
    assert list(skipped.skip_first_batches(2)) == epochs[2][4:]
    loader.set_epoch(0)
    assert list(loader) == epochs[0]  # the loader itself is whole
    loader.set_epoch(1)
    assert list(loader.skip_first_batches(9)) == []  # past the end: an empty epoch
    with pytest.raises(ValueError, match="num_batches"):
        loader.skip_first_batches(-1)


def test_skip_first_batches_after_a_loaded_state_skips_more():
    reference = five_batches(shuffle=True, seed=3)
    whole = list(reference)
    loader = five_batches(shuffle=True, seed=3)
    loader.load_state_dict({**loader.state_dict(), "position": 1})
    assert list(loader.skip_first_batches(2)) == whole[3:]


def test_the_last_epoch_number_never_wraps():
    loader = five_batches(shuffle=True, seed=3)
    with pytest.raises(ValueError, match=r"state\['epoch'\] must be at most"):
        loader.load_state_dict({**loader.state_dict(), "epoch": U64 - 1})
    loader.load_state_dict({**loader.state_dict(), "epoch": LAST_EPOCH})
    assert len(list(loader)) == 5
    with pytest.raises(RuntimeError, match="last"):
        iter(loader)
    with pytest.raises(ValueError, match="epoch must be at most"):
        loader.set_epoch(U64 - 1)


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("epoch", 1 << 64, ValueError),
        ("epoch", 1 << 200, ValueError),
        ("epoch", -1, ValueError),
        ("epoch", "3", TypeError),
        ("epoch", 1.0, TypeError),
        ("epoch", True, TypeError),
        ("epoch", None, TypeError),
        ("position", 1 << 64, ValueError),
        ("position", -1, ValueError),
        ("position", [1], TypeError),
        ("seed", 1 << 64, ValueError),
        ("seed", -1, ValueError),
        ("seed", "1", TypeError),
        ("base_seed", 1 << 64, ValueError),
        ("base_seed", -1, ValueError),
        ("base_seed", 2.5, TypeError),
        ("batch_size", 0, ValueError),
        ("batch_size", 3, ValueError),
        ("batch_size", "2", TypeError),
        ("drop_last", 0, TypeError),
        ("drop_last", True, ValueError),
        ("rank", -1, ValueError),
        ("rank", "0", TypeError),
        ("world_size", 0, ValueError),
        ("world_size", 2, ValueError),
        ("version", 2, ValueError),
        ("version", "1", TypeError),
    ],
)
def test_a_bad_field_is_refused_with_its_name(key, value, error):
    loader = five_batches(shuffle=True, seed=3)
    list(loader)
    before = loader.state_dict()
    with pytest.raises(error, match=key):
        loader.load_state_dict({**before, "epoch": 7, "position": 2, key: value})
    assert loader.state_dict() == before  # nothing changed


def test_a_missing_or_unknown_key_is_named():
    loader = five_batches()
    state = loader.state_dict()
    for key in ("version", "epoch", "position", "seed", "batch_size", "drop_last", "rank", "world_size"):
        with pytest.raises(ValueError, match=f"lacks the key '{key}'"):
            loader.load_state_dict({k: v for k, v in state.items() if k != key})
    with pytest.raises(ValueError, match="unknown key 'epochs'"):
        loader.load_state_dict({**state, "epochs": 1})
    loader.load_state_dict({k: v for k, v in state.items() if k != "base_seed"})  # older states


@st.composite
def valid_states(draw):
    n = draw(st.integers(0, 30))
    batch_size = draw(st.integers(1, 7))
    drop_last = draw(st.booleans())
    shuffle = draw(st.booleans())
    seed = draw(st.integers(0, U64 - 1)) if shuffle else None
    batches = n // batch_size if drop_last else -(-n // batch_size)
    state = {
        "version": 1,
        "epoch": draw(st.integers(0, LAST_EPOCH)),
        "position": draw(st.integers(0, max(0, batches - 1))),
        "seed": seed,
        "batch_size": batch_size,
        "drop_last": drop_last,
        "rank": None,
        "world_size": None,
        "base_seed": draw(st.integers(0, U64 - 1)),
    }
    return n, shuffle, state


def loader_for(n, shuffle, state):
    return PyDataloader(Range(n), batch_size=state["batch_size"], drop_last=state["drop_last"], shuffle=shuffle)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_states())
def test_any_valid_state_round_trips(case):
    n, shuffle, state = case
    loader = loader_for(n, shuffle, state)
    loader.load_state_dict(state)
    assert loader.state_dict() == state
    remaining = list(loader)
    batches = len(loader)
    assert len(remaining) == batches - state["position"]
    if n:
        # The epoch that was resumed, by a loader of the same seed started at that epoch.
        reference = loader_for(n, shuffle, state)
        reference.load_state_dict({**state, "position": 0})
        assert list(reference)[state["position"] :] == remaining


OUT_OF_RANGE = {
    "epoch": st.one_of(st.integers(max_value=-1), st.integers(min_value=LAST_EPOCH + 1)),
    "seed": st.one_of(st.integers(max_value=-1), st.integers(min_value=U64)),
    "base_seed": st.one_of(st.integers(max_value=-1), st.integers(min_value=U64)),
    "batch_size": st.integers().filter(lambda v: v != 0),  # shifted from the loader's below
    "position": st.integers(min_value=1),  # past the end, shifted below
    "rank": st.integers(max_value=-1),
    "world_size": st.integers(max_value=0),
    "version": st.integers().filter(lambda v: v != 1),
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_states(), st.sampled_from(sorted(OUT_OF_RANGE)), st.data())
def test_any_out_of_range_field_is_refused_with_its_name(case, key, data):
    n, shuffle, state = case
    value = data.draw(OUT_OF_RANGE[key])
    if key == "batch_size":
        value = state["batch_size"] + value  # any other batch size
    if key == "position":
        value = max(1, len(loader_for(n, shuffle, state))) + value  # beyond the epoch's end
    if key == "seed" and not shuffle:
        value = abs(value)  # any seed where the loader has none
    loader = loader_for(n, shuffle, state)
    before = loader.state_dict()
    with pytest.raises(ValueError, match=key):
        loader.load_state_dict({**state, key: value})
    assert loader.state_dict() == before


# --- datasets refused by the constructor ----------------------------------------------------


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(10))


class SizedStream(Stream):
    def __len__(self):
        return 10


@pytest.mark.parametrize("dataset", [Stream(), SizedStream()], ids=["unsized", "sized"])
def test_an_iterable_dataset_is_read_as_a_stream(dataset):
    assert flat(PyDataloader(dataset, batch_size=4)) == list(range(10))


def test_a_stream_of_ones_own_is_read_in_order():
    class Lines:
        def __iter__(self):
            return iter(["a", "b"])

    assert flat(PyDataloader(Lines())) == ["a", "b"]
    # Map-style containers iterate too, and are datasets.
    assert flat(PyDataloader([1, 2, 3], batch_size=2)) == [1, 2, 3]
