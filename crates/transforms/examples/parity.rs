//! Compares the transforms with reference cases written by `tests/pillow_vectors.py` (a
//! development aid: `cargo run --example parity -p dlrs-transforms -- DIR`).

use std::sync::Arc;

use dlrs_transforms::{
    Decode, Image, Interpolation, Item, Layout, Pixels, Resize, ResizeSize, ToGray, Transform,
};

fn main() {
    let dir = std::env::args().nth(1).expect("usage: parity DIR");
    let cases = std::fs::read_to_string(format!("{dir}/cases.txt")).expect("cases.txt");
    let (mut ok, mut bad) = (0, 0);
    for line in cases.lines() {
        let (lhs, rhs) = line.split_once(" -> ").expect("->");
        let f: Vec<&str> = lhs.split(' ').collect();
        let (name, h, w, c) = (
            f[0],
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        let o: Vec<usize> = rhs.split(' ').map(|x| x.parse().unwrap()).collect();
        let input = std::fs::read(format!("{dir}/{name}.in")).unwrap();
        let expected = std::fs::read(format!("{dir}/{name}.out")).unwrap();
        if f[4] == "decode" {
            let got = match Decode::default().decode(&input) {
                Ok(im) => im,
                Err(e) => {
                    bad += 1;
                    println!("ERROR {line}: {e}");
                    continue;
                }
            };
            let shape = [got.height(), got.width(), got.channels()];
            if shape != [o[0], o[1], o[2]] {
                bad += 1;
                println!("SHAPE {line}: got {shape:?}");
                continue;
            }
            let Pixels::U8(got) = got.into_pixels() else {
                panic!()
            };
            if got == expected {
                ok += 1;
            } else {
                bad += 1;
                let max = max_diff(&got, &expected);
                println!("MISMATCH {line}: max {max}");
            }
            continue;
        }
        let im = Image::new(h, w, c, Layout::Hwc, Pixels::U8(input)).unwrap();
        let t: Arc<dyn Transform> = match f[4] {
            "resize" => Arc::new(
                Resize::new(
                    ResizeSize::Exact {
                        height: f[6].parse().unwrap(),
                        width: f[7].parse().unwrap(),
                    },
                    f[5].parse::<Interpolation>().unwrap(),
                    None,
                    true,
                )
                .unwrap(),
            ),
            "gray" => Arc::new(ToGray),
            other => panic!("unknown op {other}"),
        };
        let Item::Image(out) = t.apply(0, Item::Image(im)).unwrap() else {
            panic!()
        };
        assert_eq!(
            [out.height(), out.width(), out.channels()],
            [o[0], o[1], o[2]],
            "{line}"
        );
        let Pixels::U8(got) = out.into_pixels() else {
            panic!()
        };
        let diffs = got.iter().zip(&expected).filter(|(a, b)| a != b).count();
        if diffs == 0 {
            ok += 1;
        } else {
            bad += 1;
            let max = max_diff(&got, &expected);
            println!("MISMATCH {line}: {diffs} values differ, max {max}");
        }
    }
    println!("{ok} equal, {bad} differ");
}

/// The largest difference between values at the same place (`got` and `expected` differ).
fn max_diff(got: &[u8], expected: &[u8]) -> u8 {
    got.iter()
        .zip(expected)
        .map(|(a, b)| a.abs_diff(*b))
        .max()
        .unwrap()
}
