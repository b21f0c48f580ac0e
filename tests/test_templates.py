"""from_template: every rule of the spec, checked on the requests a real server receives."""

from __future__ import annotations

import numpy as np
import pytest

from dataloader_rs import FileDataset, HttpDataset, ObjectStoreDataset, PyDataloader

from servers.http import item_body

pytestmark = pytest.mark.timeout(60)


def _targets(server, ds) -> list[str]:
    """Fetches every item of ``ds`` and returns the request targets the server saw, in order."""
    server.reset()
    for i in range(len(ds)):
        ds[i]
    return [r.target for r in server.requests]


def test_int_and_str_columns_and_index(http_server):
    ds = HttpDataset.from_template(
        http_server.base_url + "/echo?image={image}&x={x}&y={y}&i={index}",
        {"image": ["image 1.tif", "b&c=d/é"], "x": [0, 224], "y": np.array([-3, 448])},
    )
    assert len(ds) == 2
    assert _targets(http_server, ds) == [
        "/echo?image=image%201.tif&x=0&y=-3&i=0",
        "/echo?image=b%26c%3Dd%2F%C3%A9&x=224&y=448&i=1",
    ]


def test_items_load_through_a_loader(http_server):
    xs = np.arange(20)
    ds = HttpDataset.from_template(http_server.base_url + "/item/{x}", {"x": xs[::-1].copy()})
    batches = list(PyDataloader(ds, batch_size=5, num_workers=2, item_concurrency=5))
    assert batches == [[item_body(19 - i) for i in range(b, b + 5)] for b in range(0, 20, 5)]


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "intp"])
def test_numpy_integer_columns_of_every_dtype(http_server, dtype):
    values = np.array([0, 7, 100], dtype=dtype)
    ds = HttpDataset.from_template(http_server.base_url + "/item/{v}", {"v": values})
    assert [ds[i] for i in range(3)] == [item_body(0), item_body(7), item_body(100)]


def test_big_and_negative_ints_are_decimal(http_server):
    ds = HttpDataset.from_template(
        http_server.base_url + "/echo?v={v}", {"v": np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max])}
    )
    assert _targets(http_server, ds) == [f"/echo?v={np.iinfo(np.int64).min}", f"/echo?v={np.iinfo(np.int64).max}"]
    with pytest.raises(ValueError, match="64 bits"):
        HttpDataset.from_template("http://h/{v}", {"v": [2**64]})
    with pytest.raises(ValueError, match="64 bits"):
        HttpDataset.from_template("http://h/{v}", {"v": [-1, 2**63]})


UNSIGNED = [2**63, 2**64 - 1, 5]


@pytest.mark.parametrize(
    "column",
    [np.array(UNSIGNED, dtype=np.uint64), UNSIGNED, [np.uint64(v) for v in UNSIGNED], tuple(UNSIGNED)],
    ids=["array", "list", "numpy-scalars", "tuple"],
)
def test_uint64_values_above_int64_are_decimal(http_server, tmp_path, column):
    ds = HttpDataset.from_template(http_server.base_url + "/echo?v={v}", {"v": column})
    assert _targets(http_server, ds) == [f"/echo?v={v}" for v in UNSIGNED]
    for v in UNSIGNED:
        (tmp_path / f"{v}.bin").write_bytes(str(v).encode())
    files = FileDataset.from_template(str(tmp_path / "{v}.bin"), {"v": column})
    assert [files[i] for i in range(3)] == [str(v).encode() for v in UNSIGNED]
    objects = ObjectStoreDataset.from_template(tmp_path.as_uri(), "{v}.bin", {"v": column})
    assert [objects[i] for i in range(3)] == [str(v).encode() for v in UNSIGNED]


def test_literal_braces_and_index_with_length(http_server):
    ds = HttpDataset.from_template(http_server.base_url + "/echo?a={{b}}&i={index}", length=3)
    assert len(ds) == 3
    targets = _targets(http_server, ds)
    assert [t.replace("%7B", "{").replace("%7D", "}") for t in targets] == [f"/echo?a={{b}}&i={i}" for i in range(3)]
    assert len(HttpDataset.from_template("http://h/{index}", {}, length=0)) == 0


def test_a_sequence_of_numpy_ints_and_tuples_work():
    ds = HttpDataset.from_template("http://127.0.0.1:9/{a}/{b}", {"a": (np.int32(1), 2), "b": ("x", "y")})
    assert len(ds) == 2


@pytest.mark.parametrize(
    ("template", "columns", "length", "match"),
    [
        ("http://h/{x}", {}, 3, "placeholder|column"),
        ("http://h/{x}", {"x": [1], "y": [2]}, None, "column 'y' is not used"),
        ("http://h/{index}", {}, None, "length is required"),
        ("http://h/{x", {"x": [1]}, None, "unbalanced|unclosed|brace"),
        ("http://h/x}", {}, 1, "unbalanced"),
        ("http://h/{}", {}, 1, "empty|placeholder"),
        ("http://h/{x}/{y}", {"x": [1, 2], "y": [1]}, None, "different lengths"),
        ("http://h/{x}", {"x": [1, 2]}, 3, "length is 3 but the columns have 2 values"),
        ("http://h/{index}", {"index": [1]}, None, "cannot be named 'index'"),
        ("http://h/{x}", {"x": [".."]}, None, "column 'x', item 0"),
        ("http://h/{x}", {"x": ["ok", "."]}, None, "column 'x', item 1"),
        ("ftp://h/{x}", {"x": [1]}, None, "invalid URL"),
        ("not a url {x}", {"x": [1]}, None, "invalid URL"),
    ],
)
def test_template_value_errors(template, columns, length, match):
    with pytest.raises(ValueError, match=match):
        HttpDataset.from_template(template, columns, length=length)


@pytest.mark.parametrize(
    ("column", "match"),
    [
        (np.array([1.0, 2.0]), "dtype float64"),
        (np.array([True, False]), "dtype bool"),
        ([1.5, 2.5], "item 0 is float"),
        ([1, "a"], "item 1 is a str after ints"),
        (["a", 1], "item 1 is int"),
        ([True, 1], "item 0 is bool"),
        ([b"a", b"b"], "item 0 is bytes"),
        ("ab", "single str"),
        (b"ab", "single bytes"),
        (5, "it is a int"),
        ([None], "item 0 is NoneType"),
        (np.array([[1, 2], [3, 4]]), "array of 2 dimensions"),
        ([[1, 2]], "item 0 is list"),
    ],
)
def test_a_column_not_of_ints_or_strs_is_a_type_error(column, match):
    with pytest.raises(TypeError, match=match):
        HttpDataset.from_template("http://h/{x}", {"x": column})


def test_columns_must_be_a_mapping_with_str_names():
    with pytest.raises(TypeError, match="columns must be a mapping"):
        HttpDataset.from_template("http://h/{x}", [("x", [1])])
    with pytest.raises(TypeError, match="column names must be str"):
        HttpDataset.from_template("http://h/{x}", {1: [1]})
    with pytest.raises(ValueError, match="length"):
        HttpDataset.from_template("http://h/{index}", length=-1)


def test_str_values_in_paths_are_written_as_they_are(tmp_path):
    (tmp_path / "a b%20").mkdir()
    (tmp_path / "a b%20" / "0.bin").write_bytes(b"zero")
    ds = FileDataset.from_template(str(tmp_path) + "/{d}/{index}.bin", {"d": ["a b%20"]})
    assert ds[0] == b"zero"


@pytest.mark.parametrize("value", ["a/b", "..", ".", "", "a\x01b"])
def test_object_keys_refuse_values_that_leave_their_directory(value):
    with pytest.raises(ValueError, match="column 'k', item 0"):
        ObjectStoreDataset.from_template("file:///tmp/x", "{k}/0.png", {"k": [value]})


def test_object_store_template_over_file_urls(tmp_path):
    (tmp_path / "tiles" / "a b").mkdir(parents=True)
    (tmp_path / "tiles" / "a b" / "3.png").write_bytes(b"three")
    ds = ObjectStoreDataset.from_template(tmp_path.as_uri() + "/tiles", "{slide}/{n}.png", {"slide": ["a b"], "n": [3]})
    assert ds[0] == b"three"
    assert "tiles" in repr(ds)
