//! The results of `dlrs bench`: a readable table, or JSON.

use serde_json::json;

/// One workload's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub workload: &'static str,
    /// Items per epoch.
    pub items: u64,
    pub batch_size: usize,
    pub workers: usize,
    /// Items of one batch fetched at once.
    pub concurrency: usize,
    /// The fastest epoch, in seconds.
    pub seconds: f64,
    /// Bytes of data per epoch (0 for the overhead workload).
    pub bytes: u64,
    /// The first batch of the first epoch, in seconds from its start.
    pub first_batch_seconds: f64,
    /// The loader's live counters over all the epochs run.
    pub stats: Option<dlrs_core::StatsSnapshot>,
}

/// The loader's counters as one line: batches, items, waiting, load latency.
fn stats_line(m: &Measurement) -> Option<String> {
    let s = m.stats.as_ref()?;
    let ms = |d: Option<std::time::Duration>| {
        d.map_or("-".to_owned(), |d| {
            format!("{:.3} ms", d.as_secs_f64() * 1e3)
        })
    };
    Some(format!(
        "{}: {} batches ({} failed), {} items, consumer waited {:.1} ms, batch load p50 {} p99 {}\n",
        m.workload,
        s.batches,
        s.failed_batches,
        s.items,
        s.wait.as_secs_f64() * 1e3,
        ms(s.load_p50),
        ms(s.load_p99),
    ))
}

impl Measurement {
    /// Items per second of the fastest epoch.
    pub fn items_per_second(&self) -> f64 {
        self.items as f64 / self.seconds.max(1e-12)
    }

    /// MiB per second of the fastest epoch.
    pub fn mib_per_second(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.seconds.max(1e-12)
    }
}

/// `n` with a k/M suffix and 3 decimals.
fn short(n: f64) -> String {
    crate::progress::suffixed(n, [3, 3, 1])
}

/// The table: one line per workload.
pub fn table(results: &[Measurement]) -> String {
    let header = [
        "workload",
        "items",
        "batch",
        "workers",
        "conc.",
        "seconds",
        "items/s",
        "MiB/s",
        "1st batch",
    ];
    let mut out = crate::table::render(header, results, &[0], |m| {
        [
            m.workload.to_owned(),
            m.items.to_string(),
            m.batch_size.to_string(),
            m.workers.to_string(),
            m.concurrency.to_string(),
            format!("{:.3}", m.seconds),
            short(m.items_per_second()),
            if m.bytes == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", m.mib_per_second())
            },
            format!("{:.2} ms", m.first_batch_seconds * 1e3),
        ]
    });
    for m in results {
        if let Some(s) = stats_line(m) {
            out.push_str(&s);
        }
    }
    out
}

/// The JSON: an array with one object per workload.
pub fn json(results: &[Measurement]) -> String {
    let list: Vec<serde_json::Value> = results
        .iter()
        .map(|m| {
            json!({
                "workload": m.workload,
                "items": m.items,
                "batch_size": m.batch_size,
                "workers": m.workers,
                "concurrency": m.concurrency,
                "seconds": m.seconds,
                "items_per_second": m.items_per_second(),
                "bytes": m.bytes,
                "mib_per_second": m.mib_per_second(),
                "first_batch_seconds": m.first_batch_seconds,
                "stats": m.stats.as_ref().map(|s| json!({
                    "batches": s.batches,
                    "items": s.items,
                    "failed_batches": s.failed_batches,
                    "wait_seconds": s.wait.as_secs_f64(),
                    "load_p50_seconds": s.load_p50.map(|d| d.as_secs_f64()),
                    "load_p99_seconds": s.load_p99.map(|d| d.as_secs_f64()),
                })),
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Measurement {
        Measurement {
            workload: "http",
            items: 2048,
            batch_size: 64,
            workers: 2,
            concurrency: 32,
            seconds: 0.5,
            bytes: 2048 << 16,
            first_batch_seconds: 0.012,
            stats: None,
        }
    }

    #[test]
    fn figures() {
        assert_eq!(m().items_per_second(), 4096.0);
        assert_eq!(m().mib_per_second(), 256.0);
        assert_eq!(short(4_850_000.0), "4.850M");
        assert_eq!(short(4096.0), "4.096k");
        assert_eq!(short(12.34), "12.3");
    }

    #[test]
    fn table_lines_up() {
        let t = table(&[m()]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("workload  items  batch"), "{t}");
        assert_eq!(lines[0].len(), lines[1].len(), "{t}");
        assert!(
            lines[1].contains("4.096k")
                && lines[1].contains("256.0")
                && lines[1].ends_with("12.00 ms")
        );
    }

    #[test]
    fn json_has_every_field() {
        let v: serde_json::Value = serde_json::from_str(&json(&[m()])).unwrap();
        assert_eq!(v[0]["workload"], "http");
        assert_eq!(v[0]["items_per_second"], 4096.0);
        assert_eq!(v[0]["first_batch_seconds"], 0.012);
        assert_eq!(v.as_array().unwrap().len(), 1);
    }
}
