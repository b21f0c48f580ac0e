"""Writes the fuzz targets' seed corpora into the directories beside this script.

Run with a Python that has Pillow: `python fuzz/seeds/make_seeds.py`. Everything is made from
fixed seeds and settings, so a run with the same Pillow writes the same files.

- jpeg/: JPEGs of every chroma subsampling (4:4:4, 4:2:2, 4:2:0, and 4:1:1 and 4:4:0 by
  relabelling a frame's sampling factors), grayscale, progressive, restart markers, CMYK
  (Adobe), optimised tables, odd sizes, APP segments.
- jpeg_window/, jpeg_reduced/: the same JPEGs behind the parameter bytes of
  decode_jpeg_window (5) and decode_jpeg_reduced (3).
- png/, webp/, tiff/, bmp/: a few images per format and mode.
- tar/: whole shards: ustar (with the name prefix), GNU (long names, base-256 sizes), pax
  (path and size records, global headers), v7, many members, WebDataset layouts.
- tar_gz/: those shards gzipped (for tar_stream, which reads `.tar.gz` shards too).
- tar_fragment/: the samples of those shards as TarDataset reads them (first header to the
  end of the last member's data).
"""

from __future__ import annotations

import gzip
import io
import random
import shutil
import struct
import tarfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

HERE = Path(__file__).resolve().parent


def photo(width: int, height: int, seed: int) -> Image.Image:
    """A natural-looking RGB image: smooth colour fields (value noise at a few octaves), shapes
    with soft and hard edges, and fine grain."""
    rng = random.Random(seed)
    out = Image.new("RGB", (width, height))
    for cells, weight in ((3, 0.55), (9, 0.3), (27, 0.15)):
        grid = Image.new("RGB", (cells + 1, cells + 1))
        grid.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range((cells + 1) ** 2)])
        layer = grid.resize((width, height), Image.Resampling.BICUBIC)
        out = Image.blend(out, layer, weight / (weight + 0.45)) if cells > 3 else layer
    draw = ImageDraw.Draw(out)
    for _ in range(6):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1, y1 = x0 + rng.randrange(4, width // 2 + 5), y0 + rng.randrange(4, height // 2 + 5)
        colour = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        else:
            draw.line((x0, y0, x1, y1), fill=colour, width=rng.randrange(1, 4))
    out = out.filter(ImageFilter.GaussianBlur(0.7))
    grain = bytes(max(0, min(255, v + int(rng.gauss(0, 6)))) for v in out.tobytes())
    return Image.frombytes("RGB", (width, height), grain)


def jpeg(im: Image.Image, **options: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", **options)
    return buf.getvalue()


def relabel_sampling(data: bytes, luma: tuple[int, int]) -> bytes:
    """The JPEG with its luma sampling factors set to `luma` (h, v): a 4:2:0 stream relabelled
    4:1:1 (or 4:2:2 relabelled 4:4:0) stays valid when both give the same MCU count."""
    at = 2
    while at < len(data):
        marker = data[at + 1]
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            factors = at + 4 + 6 + 1  # the first component's sampling byte
            out = bytearray(data)
            out[factors] = (luma[0] << 4) | luma[1]
            return bytes(out)
        at += 2 + length
    raise ValueError("no frame header")


def jpegs() -> dict[str, bytes]:
    a = photo(96, 64, 1)
    b = photo(128, 96, 2)
    c = photo(256, 192, 3)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation
    exif[0x010F] = "dataloader-rs"
    return {
        "444_q90.jpg": jpeg(a, quality=90, subsampling=0),
        "422_q85.jpg": jpeg(a, quality=85, subsampling=1),
        "420_q75.jpg": jpeg(a, quality=75, subsampling=2),
        "411_relabelled.jpg": relabel_sampling(jpeg(b, quality=80, subsampling=2), (4, 1)),
        "440_relabelled.jpg": relabel_sampling(jpeg(b, quality=80, subsampling=1), (1, 2)),
        "gray_q80.jpg": jpeg(b.convert("L"), quality=80),
        "progressive_420.jpg": jpeg(b, quality=80, subsampling=2, progressive=True),
        "progressive_444.jpg": jpeg(a, quality=90, subsampling=0, progressive=True),
        "progressive_gray.jpg": jpeg(a.convert("L"), quality=70, progressive=True),
        "restart_rows_420.jpg": jpeg(b, quality=80, subsampling=2, restart_marker_rows=1),
        "restart_blocks_444.jpg": jpeg(a, quality=85, subsampling=0, restart_marker_blocks=3),
        "restart_progressive.jpg": jpeg(b, quality=75, subsampling=2, progressive=True, restart_marker_blocks=5),
        "cmyk_adobe.jpg": jpeg(a.convert("CMYK"), quality=85),
        "optimized_q95.jpg": jpeg(a, quality=95, optimize=True),
        "q10.jpg": jpeg(a, quality=10),
        "q100_444.jpg": jpeg(a.resize((48, 32)), quality=100, subsampling=0),
        "odd_33x17.jpg": jpeg(photo(33, 17, 4), quality=80, subsampling=2),
        "tiny_1x1.jpg": jpeg(photo(1, 1, 5), quality=80),
        "row_57x3.jpg": jpeg(photo(57, 3, 6), quality=80, subsampling=1),
        "exif_420.jpg": jpeg(a, quality=70, exif=exif.tobytes()),
        "large_420.jpg": jpeg(c, quality=70, subsampling=2, restart_marker_rows=2),
    }


def other_images() -> dict[str, dict[str, bytes]]:
    a = photo(40, 30, 7)
    rgba = a.copy()
    rgba.putalpha(a.convert("L"))
    palette = a.quantize(16)

    def save(im: Image.Image, fmt: str, **options: object) -> bytes:
        buf = io.BytesIO()
        im.save(buf, fmt, **options)
        return buf.getvalue()

    transparent = palette.copy()
    transparent.info["transparency"] = 3
    return {
        "png": {
            "rgb.png": save(a, "PNG"),
            "rgba.png": save(rgba, "PNG"),
            "gray.png": save(a.convert("L"), "PNG"),
            "palette_trns.png": save(transparent, "PNG"),
            "gray16.png": save(a.convert("I").point(lambda v: v * 200).convert("I;16"), "PNG"),
            "interlaced.png": save(a, "PNG", interlace=1),
            "bilevel.png": save(a.convert("1"), "PNG"),
        },
        "webp": {
            "lossy.webp": save(a, "WEBP", quality=70),
            "lossless.webp": save(a, "WEBP", lossless=True),
            "alpha.webp": save(rgba, "WEBP", quality=80),
        },
        "tiff": {
            "raw.tif": save(a, "TIFF"),
            "lzw.tif": save(a, "TIFF", compression="tiff_lzw"),
            "packbits_gray.tif": save(a.convert("L"), "TIFF", compression="packbits"),
            "cmyk.tif": save(a.convert("CMYK"), "TIFF"),
            "palette.tif": save(palette, "TIFF"),
        },
        "bmp": {
            "rgb24.bmp": save(a, "BMP"),
            "palette8.bmp": save(palette, "BMP"),
            "gray.bmp": save(a.convert("L"), "BMP"),
            "bilevel.bmp": save(a.convert("1"), "BMP"),
            "rgba32.bmp": save(rgba, "BMP"),
        },
    }


def tar_of(members: list[tuple[str, bytes]], fmt: int, **extra: object) -> bytes:
    """A tar of regular members (name, data) in `fmt`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, **extra) as tar:  # type: ignore[call-overload]
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return trimmed(buf.getvalue())


def trimmed(shard: bytes) -> bytes:
    """The shard without tarfile's padding to 10 KiB records: its blocks, then two zero ones."""
    end = len(shard.rstrip(b"\x00"))
    return shard[: end + (-end % 512)] + b"\x00" * 1024


def header(name: bytes, size: bytes, kind: bytes, magic: bytes = b"ustar\x0000") -> bytes:
    """One raw header block with a right checksum; `size` is the raw 12-byte field."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\x00"
    block[124:136] = size
    block[136:148] = b"14657000000\x00"
    block[156:157] = kind
    block[257 : 257 + len(magic)] = magic
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % 512)


def special_tars() -> dict[str, bytes]:
    """Shards tarfile does not write: v7 headers, base-256 sizes, a pax size record that
    overrides the header's, directories and links among samples."""
    eoa = b"\x00" * 1024
    v7 = header(b"000000.txt", b"00000000005\x00", b"\x00", magic=b"") + padded(b"hello")
    v7 += header(b"000000.cls", b"00000000001\x00", b"0", magic=b"") + padded(b"7")
    base256 = b"\x80" + b"\x00" * 10 + b"\x03"
    gnu = header(b"000001.cls", base256, b"0", magic=b"ustar  \x00") + padded(b"abc")
    record = b"size=4\n"
    pax_data = b"%d %s" % (len(record) + 3, record)
    pax = header(b"PaxHeaders/000002.bin", b"%011o\x00" % len(pax_data), b"x")
    pax += padded(pax_data)
    pax += header(b"000002.bin", b"00000000000\x00", b"0") + padded(b"\x01\x02\x03\x04")
    links = header(b"000003/", b"00000000000\x00", b"5")
    links += header(b"000003.jpg", b"00000000002\x00", b"0") + padded(b"\xff\xd8")
    links += header(b"000003.lnk", b"00000000000\x00", b"2")
    links += header(b"000003.txt", b"00000000003\x00", b"7") + padded(b"abc")
    return {
        "v7.tar": v7 + eoa,
        "gnu_base256.tar": gnu + eoa,
        "pax_size.tar": pax + eoa,
        "types.tar": links + eoa,
    }


def tars() -> dict[str, bytes]:
    rng = random.Random(11)

    def blob(n: int) -> bytes:
        return bytes(rng.randrange(256) for _ in range(n))

    def samples(count: int, exts: tuple[str, ...], prefix: str = "") -> list[tuple[str, bytes]]:
        return [(f"{prefix}{i:06d}.{ext}", blob(rng.randrange(0, 40))) for i in range(count) for ext in exts]

    long_dir = "train/" + "d" * 90 + "/"
    unicode = "données/échantillon_ü"
    out = {
        "ustar_samples.tar": tar_of(samples(3, ("jpg", "cls", "json")), tarfile.USTAR_FORMAT),
        "ustar_prefix.tar": tar_of(samples(2, ("png", "txt"), long_dir), tarfile.USTAR_FORMAT),
        "gnu_longname.tar": tar_of(samples(2, ("jpg", "cls"), "x" * 120 + "/"), tarfile.GNU_FORMAT),
        "pax_longname.tar": tar_of(
            samples(2, ("jpg", "json"), "p" * 150 + "/") + samples(1, ("txt",), unicode),
            tarfile.PAX_FORMAT,
        ),
        "pax_global.tar": tar_of(
            samples(2, ("cls",)),
            tarfile.PAX_FORMAT,
            pax_headers={"comment": "seed", "dlrs": "1"},
        ),
        "many_members.tar": tar_of(
            [(f"s/{i // 2:05d}.{'jpg' if i % 2 else 'cls'}", b"" if i % 3 else b"x") for i in range(80)],
            tarfile.GNU_FORMAT,
        ),
        "webdataset.tar": tar_of(
            [
                ("shard/000000.seg.png", b"\x89PNG"),
                ("shard/000000.JPG", b"\xff\xd8\xff"),
                ("shard/.hidden", b"dot"),
                ("shard/README", b"no extension"),
                ("shard/000001.jpg", blob(700)),
                ("shard/000001.cls", b"3"),
                ("000002.tar.gz", b"nested"),
            ],
            tarfile.USTAR_FORMAT,
        ),
        "empty.tar": tar_of([], tarfile.USTAR_FORMAT),
    }
    # A GNU long link (K) before a symlink, among samples.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in samples(1, ("jpg",)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("000000.lnk")
        link.type = tarfile.SYMTYPE
        link.linkname = "t" * 130
        tar.addfile(link)
    out["gnu_longlink.tar"] = trimmed(buf.getvalue())
    out.update(special_tars())
    return out


def key_of(name: str) -> str | None:
    """The WebDataset key of a member name: up to the first dot of its last component."""
    base = name.rfind("/") + 1
    dot = name.find(".", base)
    return None if dot <= base else name[:dot]


def fragments(shard: bytes) -> list[bytes]:
    """The samples of a shard as TarDataset reads them, from the first header of a sample's
    first member to the end of its last member's data."""
    try:
        with tarfile.open(fileobj=io.BytesIO(shard)) as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
    except tarfile.TarError:
        return []
    out: list[bytes] = []
    run: list[tarfile.TarInfo] = []
    for m in [*members, None]:
        key = key_of(m.name) if m else None
        if run and (m is None or key != key_of(run[0].name)):
            out.append(shard[run[0].offset : run[-1].offset_data + run[-1].size])
            run = []
        if m is not None and key is not None:
            run.append(m)
    return out


def write(directory: str, files: dict[str, bytes]) -> None:
    target = HERE / directory
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    for name, data in files.items():
        (target / name).write_bytes(data)


def main() -> None:
    images = jpegs()
    write("jpeg", images)
    # decode_jpeg_window: factor byte (bit 6: no window, bit 7: raw offsets), top, left,
    # height, width; decode_jpeg_reduced: factor byte, draft width and height.
    windows = {
        b"\x00\x40\x40\x80\x80": "centre",
        b"\x01\x00\x00\xff\xff": "half_whole",
        b"\x02\xc0\x10\x30\xe0": "quarter_low",
        b"\x83\x00\x00\x02\x02": "eighth_raw",
        b"\x40\x00\x00\x00\x00": "none",
    }
    write(
        "jpeg_window",
        {
            f"{name[:-4]}_{label}.bin": params + data
            for i, (name, data) in enumerate(sorted(images.items()))
            for j, (params, label) in enumerate(windows.items())
            if (i + j) % 3 == 0
        },
    )
    drafts = [b"\x00\x10\x10", b"\x01\x20\x08", b"\x02\x01\x01", b"\x03\x30\x30", b"\x80\x02\x04"]
    write(
        "jpeg_reduced",
        {
            f"{name[:-4]}_{i % len(drafts)}.bin": drafts[i % len(drafts)] + data
            for i, (name, data) in enumerate(sorted(images.items()))
        },
    )
    for fmt, files in other_images().items():
        write(fmt, files)
    shards = tars()
    write("tar", shards)
    write("tar_gz", {f"{name}.gz": gzip.compress(shard, mtime=0) for name, shard in sorted(shards.items())})
    write(
        "tar_fragment",
        {
            f"{name[:-4]}_{i}.bin": frag
            for name, shard in sorted(shards.items())
            for i, frag in enumerate(fragments(shard)[:3])
        },
    )


if __name__ == "__main__":
    main()
