//! The command line: subcommands, options, help and examples (clap derive).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use dlrs_io::Column;

use crate::values;

const EXAMPLES: &str = "\
Examples:
  dlrs prefetch 'https://tiles.example/{slide}/{x}_{y}.png' -c slide=@slides.txt -c x=@x.txt \\
       -c y=@y.txt --out tiles/
  dlrs bench                      # every workload, a table
  dlrs bench http --concurrency 64 --json
  dlrs parity --images ~/pictures  # the generated images and yours, against Pillow
  dlrs serve --latency-ms 10      # a loopback test server for benchmarks, until stdin closes

Exit codes: 0 success, 1 the work failed (items not fetched, a transform differs), 2 a bad argument.";

const PREFETCH_EXAMPLES: &str = "\
Template rules (those of HttpDataset/FileDataset/ObjectStoreDataset.from_template):
  {name} is the value of column `name` for the item, {index} the item index, {{ and }} braces.
  In a URL a str value is percent-encoded; in a path or an object key it is written as it is
  but cannot hold '/' (nor be '.' or '..'). Ints are written in decimal.
  s3://, gs://, az:// templates: the part before the last '/' that precedes the first
  placeholder is the store URL, the rest the key template (s3://bucket/tiles/{index}.png is the
  key {index}.png under s3://bucket/tiles).

Columns (-c NAME=VALUES): a comma-separated list (a,b,c), a range of ints (0..100, end
excluded; its values are made item by item, never stored), or @FILE with one value per line.
Values that are all plain decimal ints are ints. All columns have one length.

Output: item i is written to OUT/NAME.part, then renamed to OUT/NAME once all its bytes are
written. A file with the final name is complete and is skipped when the command runs again;
a leftover .part file is fetched again from the start. Links inside OUT are not followed
(one at NAME or NAME.part is replaced; a linked subdirectory fails the item). NAME is --name
rendered for the item (a path template over the same columns and {index}), or by default the
index zero-padded to the width of the last index, with the extension of the item's location
(000042.png).

Examples:
  dlrs prefetch 'http://127.0.0.1:8000/item/{index}' --length 1000 --out items/
  dlrs prefetch 'https://tiles.example/{image}/tile?x={x}&y={y}' -c image=a.tif,b.tif \\
       -c x=0,224 -c y=0,0 --name '{image}_{x}_{y}.png' -H 'Authorization: Bearer TOKEN' --out t/
  dlrs prefetch 's3://bucket/tiles/{index}.png' --length 5000 -o aws_region=eu-west-3 --out t/
  dlrs prefetch '/mnt/nfs/tiles/{index}.png' --length 5000 --timeout 10 --retries 2 --out t/";

const BENCH_EXAMPLES: &str = "\
Workloads (all five when none is named):
  overhead  a source that returns its indices: the loader's own cost per batch
  files     files of --item-bytes read through FileDataset (page cache warm)
  images    generated 224x224 PNG tiles: Decode, ToRgb, ToFloat, Normalize, ToChw, collated NCHW
  http      --item-bytes bodies from a loopback server with --latency-ms, through HttpDataset
  tar       --shards tar shards of the images' tiles as <key>.png members (PNG: no JPEG encoder
            is a dependency), served by a loopback server with --latency-ms, read front to back
            in order over HTTP (TarStream, StreamPipeline), each tile through the images' chain

Each batch is loaded on one of --workers threads; its items are fetched --concurrency at a time
(for images, that many tiles of a batch decode at once, on --workers transform threads). For
tar, the workers take turns at the one read of the shards, then each decodes its own batch;
--concurrency does not apply.

Examples:
  dlrs bench overhead --items 10000000 --batch-size 64 --workers 2
  dlrs bench http --items 2048 --concurrency 64 --latency-ms 10 --json
  dlrs bench tar --items 2048 --shards 16 --latency-ms 10";

const SERVE_EXAMPLES: &str = "\
Routes (GET; the query is ignored, so ?i=N makes distinct URLs of the same body):
  /bytes/<n>           n bytes; byte j is (j * 31 + 7) mod 256
  /item/<i>            item-<i>
  /status/<code>       that status
  /flaky/<k>/<path>    503 for the first k requests of this exact path, then /<path>
  anything else        404
With --dir DIR, the regular files inside DIR come first (GET and HEAD at /<path> below DIR,
percent-decoded), streamed from the file: a single byte range gets 206 with Content-Range (a
last byte past the end is clamped), a first byte past the end 416, any other Range is ignored
(200); each answer has an ETag (size and modification time), and an If-Match with another ETag
gets 412 (tar shards for TarDataset). Nothing outside DIR is served, through links neither, and
nothing but regular files: a FIFO, a device or a directory gets 403.

Every answer waits --latency-ms after the request's head arrived, timed by a thread of the
server (never early, about 0.1 ms late), with connections kept open; each connection is served
on its own (up to 1024 at once), so a slow client or file does not hold up the others. It listens on
127.0.0.1 only. Once listening it prints its base URL (http://127.0.0.1:PORT) and a newline on
stdout, then serves until stdin reaches its end (the parent closed the pipe or exited; Ctrl-D on
a terminal), or until killed with --until-killed. On stopping it prints on stderr the requests
answered, the connections accepted and the most requests answered at once.

With --control it serves the routes and query grammar of the Python tests instead (documented in
tests/servers/http.py: seeded bodies, delays, statuses, faults, scripted replies, files) and
prints a second URL, its control port (JSON; see dlrs_io::test_server).

Examples:
  dlrs serve --latency-ms 10 --port 0
  dlrs serve --latency-ms 10 --dir shards/
  dlrs serve --port 8000 --until-killed &   curl http://127.0.0.1:8000/bytes/65536?i=1";

const PARITY_EXAMPLES: &str = "\
Each image is decoded in Rust; the decoded pixels are the input of every chain on both sides, so
a chain is compared on its own. Decoding is compared too: exact for PNG, BMP, TIFF; JPEG and WebP
(lossy decoders differ) are reported, not required to be equal. Every other chain must be equal
bit for bit; a chain that differs makes the exit code 1.

The Python (--python, else $DLRS_PYTHON, set by the `dlrs` console script to its own
interpreter, else python3) needs numpy and Pillow.

Examples:
  dlrs parity
  dlrs parity --images ./my-tiles --python .venv/bin/python";

/// The `dlrs` command of dataloader-rs.
#[derive(Debug, Parser)]
#[command(name = "dlrs", version, about, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fetch the items named by a template into a directory (resumable).
    #[command(after_help = PREFETCH_EXAMPLES)]
    Prefetch(PrefetchArgs),
    /// Measure loader throughput on Rust-side workloads.
    #[command(after_help = BENCH_EXAMPLES)]
    Bench(BenchArgs),
    /// Compare the transforms with Pillow/NumPy on generated images and yours.
    #[command(after_help = PARITY_EXAMPLES)]
    Parity(ParityArgs),
    /// Serve test bodies on 127.0.0.1 with a fixed latency (the server of the benchmarks).
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
}

/// `dlrs prefetch`.
#[derive(Debug, Args)]
pub struct PrefetchArgs {
    /// Where item i is: an http(s):// URL, an s3:// gs:// az:// object URL, or a file path.
    pub template: String,
    /// A column of values, one per item: NAME=a,b,c | NAME=START..END | NAME=@FILE.
    #[arg(short = 'c', long = "column", value_name = "NAME=VALUES", value_parser = values::parse_column)]
    pub columns: Vec<(String, Column)>,
    /// The number of items (required when there are no columns).
    #[arg(long)]
    pub length: Option<usize>,
    /// The directory the items are written to (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The file name of item i: a path template over the columns and {index}.
    #[arg(long, value_name = "TEMPLATE")]
    pub name: Option<String>,
    /// Requests in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Retries of a transient failure (connection errors, timeouts, 408/429/5xx).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retries: u32,
    /// Seconds one attempt may take, body included (default: 30 for HTTP and object stores,
    /// none for files).
    #[arg(long, value_name = "SECONDS", value_parser = values::parse_seconds)]
    pub timeout: Option<Duration>,
    /// An HTTP header sent with every request (http and https only).
    #[arg(short = 'H', long = "header", value_name = "NAME:VALUE", value_parser = values::parse_header)]
    pub headers: Vec<(String, String)>,
    /// An object_store option such as aws_region=eu-west-3 (s3, gs, az only).
    #[arg(short = 'o', long = "option", visible_alias = "options", value_name = "KEY=VALUE", value_parser = values::parse_option)]
    pub options: Vec<(String, String)>,
    /// The largest item accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = dlrs_io::DEFAULT_MAX_BYTES)]
    pub max_bytes: u64,
}

/// A `dlrs bench` workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    Overhead,
    Files,
    Images,
    Http,
    Tar,
}

impl Workload {
    /// Every workload, in the order of the table.
    pub const ALL: [Workload; 5] = [
        Workload::Overhead,
        Workload::Files,
        Workload::Images,
        Workload::Http,
        Workload::Tar,
    ];

    /// The name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Overhead => "overhead",
            Workload::Files => "files",
            Workload::Images => "images",
            Workload::Http => "http",
            Workload::Tar => "tar",
        }
    }
}

/// `dlrs bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The workloads to run (all when none is named).
    #[arg(value_enum)]
    pub workloads: Vec<Workload>,
    /// Worker threads, each loading one batch at a time (0: on the calling thread).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub workers: u32,
    /// Items per batch.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub batch_size: u32,
    /// Items per epoch (default: 2,000,000 overhead, 4,096 files, 2,048 images, 2,048 http,
    /// 2,048 tar).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub items: Option<u64>,
    /// Items of one batch fetched or decoded at once (default: 32 for files and http, --workers
    /// for images, which are CPU-bound).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: Option<u32>,
    /// The most items fetched at once across the batches in flight, the earliest batch first
    /// (files and http; default: workers × concurrency).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub items_in_flight: Option<u32>,
    /// Bytes per item of the files and http workloads.
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(0..=(64 << 20)))]
    pub item_bytes: u64,
    /// The loopback server's latency per request, in milliseconds (http, tar).
    #[arg(long, default_value_t = 10.0, value_parser = values::parse_millis)]
    pub latency_ms: f64,
    /// The tar shards the items are spread over (tar; at most one per item).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub shards: u32,
    /// Epochs per workload; the table shows the fastest, the first batch of the first.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub epochs: u32,
    /// Print JSON (one object per workload) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `dlrs serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The time every answer waits, in milliseconds.
    #[arg(long, default_value_t = 0.0, value_parser = values::parse_millis)]
    pub latency_ms: f64,
    /// The port on 127.0.0.1 (0: a free one, printed).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Serve until killed, not until stdin closes.
    #[arg(long)]
    pub until_killed: bool,
    /// Also serve the regular files inside DIR, each at its path below DIR, with byte ranges and
    /// ETags.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Serve the Python tests' routes and query grammar instead, and print a second URL: the
    /// control port that scripts replies, puts files and reports the requests.
    #[arg(long, conflicts_with_all = ["dir", "latency_ms", "port", "until_killed"])]
    pub control: bool,
    /// With --control: close a connection idle this long without a request.
    #[arg(long, value_name = "SECONDS", requires = "control", value_parser = values::parse_seconds)]
    pub idle_timeout: Option<Duration>,
}

/// `dlrs parity`.
#[derive(Debug, Args)]
pub struct ParityArgs {
    /// A folder of images (png, jpg, jpeg, webp, tif, tiff, bmp) checked besides the generated ones.
    #[arg(long, value_name = "DIR")]
    pub images: Option<PathBuf>,
    /// The Python with numpy and Pillow (default: $DLRS_PYTHON, else python3).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Keep the arrays of both sides in DIR (default: a temporary directory, removed).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Print JSON (one object per chain) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Testing aid: change one value of the Rust output of this chain.
    #[arg(long, hide = true, value_name = "CHAIN")]
    pub inject_difference: Option<String>,
}
