//! Decode and the tile chain (Decode, ToRgb, PadTo, ToFloat, Normalize, ToChw) on a generated
//! 224 x 224 PNG, and the collation of 64 such tiles.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dlrs_transforms::{BatchLayout, Collator, Decode, Dtype, Item, Resize, ResizeSize, Transform};

#[path = "../tests/it/tile_chain.rs"]
mod tile_chain;

/// A 224 x 224 RGB PNG with smooth gradients and some texture, like a photo tile.
fn tile_png() -> Vec<u8> {
    let (w, h) = (224u32, 224u32);
    let mut rgb = Vec::with_capacity((w * h * 3) as usize);
    let mut seed = 0x1234_5678u32;
    for y in 0..h {
        for x in 0..w {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let noise = seed % 24;
            rgb.push(((x + noise) % 256) as u8);
            rgb.push(((y * 2 + noise) % 256) as u8);
            rgb.push((((x + y) / 2 + noise) % 256) as u8);
        }
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
    out
}

fn bench(c: &mut Criterion) {
    let png = bytes::Bytes::from(tile_png());
    let decode = Decode::default();
    c.bench_function("decode_png_224", |b| {
        b.iter(|| decode.decode(black_box(&png)).unwrap())
    });
    let tiles = tile_chain::tile_chain(224, 224);
    c.bench_function("chain_png_224_to_normalized_chw", |b| {
        b.iter(|| tiles.apply(0, Item::Bytes(black_box(png.clone()))).unwrap())
    });
    let Item::Image(rgb) = decode.apply(0, Item::Bytes(png.clone())).unwrap() else {
        unreachable!()
    };
    let resize = Resize::new(
        ResizeSize::Exact {
            height: 160,
            width: 160,
        },
        dlrs_transforms::Interpolation::Bilinear,
        None,
        true,
    )
    .unwrap();
    c.bench_function("resize_bilinear_224_to_160", |b| {
        b.iter(|| {
            resize
                .apply(0, Item::Image(black_box(rgb.clone())))
                .unwrap()
        })
    });
    let Item::Image(tile) = tiles.apply(0, Item::Bytes(png.clone())).unwrap() else {
        unreachable!()
    };
    let collator = Collator::new(BatchLayout::Nchw, Some(Dtype::F32), 2);
    let images: Vec<_> = (0..64).map(|_| tile.clone()).collect();
    c.bench_function("collate_64_f32_chw_pooled", |b| {
        b.iter(|| {
            collator
                .collate_refs(&images.iter().collect::<Vec<_>>())
                .unwrap()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
