//! Per-item time of Decode and of the tile chain on one file, single-threaded (a development aid
//! for comparing with Pillow + NumPy: `cargo run --release --example throughput -- FILE [N]`).

use std::time::Instant;

use dlrs_transforms::{Decode, Item, Transform};

#[path = "../tests/it/tile_chain.rs"]
mod tile_chain;

use tile_chain::tile_chain;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: throughput FILE [N]");
    let n: usize = args.next().map_or(2000, |s| s.parse().expect("N"));
    let data = bytes::Bytes::from(std::fs::read(&path).expect("readable file"));
    let decode = Decode::default();
    let chain = tile_chain(224, 224);
    let time = |name: &str, f: &dyn Fn()| {
        f();
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        let per = t.elapsed().as_secs_f64() / n as f64;
        println!("{name}: {:.1} us/item, {:.0} items/s", per * 1e6, 1.0 / per);
    };
    for _ in 0..2 {
        time("decode", &|| drop(decode.decode(&data).expect("decodes")));
        time("chain", &|| {
            drop(chain.apply(0, Item::Bytes(data.clone())).expect("runs"));
        });
    }
}
