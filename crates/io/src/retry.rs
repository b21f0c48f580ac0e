//! Retry settings, the retry loop every dataset runs its attempts in (on `backon`), and what
//! the datasets share to decide what is worth another attempt.

// Without a dataset (no feature) nothing runs the loop.
#![cfg_attr(
    not(any(feature = "http", feature = "object-store", feature = "file")),
    allow(dead_code)
)]

use std::future::Future;
use std::io;
use std::time::Duration;
#[cfg(any(feature = "http", feature = "object-store"))]
use std::time::SystemTime;

use backon::{ExponentialBuilder, Retryable};

use crate::error::Error;

/// How transient failures are retried: up to `retries` more attempts, waiting
/// `backoff × 2ⁿ` with jitter, at most `max_backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryOptions {
    /// Attempts after the first one.
    pub retries: u32,
    /// The first wait.
    pub backoff: Duration,
    /// The longest wait (a Retry-After is capped at it too).
    pub max_backoff: Duration,
}

impl RetryOptions {
    /// `retries` with the default waits (0.1 s, at most 5 s).
    pub const fn with_retries(retries: u32) -> RetryOptions {
        RetryOptions {
            retries,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A `Duration` from a number of seconds a caller gives as a float, named in the error.
///
/// Refuses negative, NaN and infinite values and values that overflow a `Duration`.
pub fn seconds(name: &str, value: f64) -> Result<Duration, Error> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        Error::invalid(format!(
            "{name} must be a finite number of seconds >= 0, got {value}"
        ))
    })
}

/// The HTTP statuses that are retried; any other non-success status fails at once.
#[cfg(any(feature = "http", feature = "object-store"))]
pub const RETRY_STATUSES: [u16; 6] = [408, 429, 500, 502, 503, 504];

/// Whether an I/O error of `kind` (a file or object read) is worth another attempt.
#[cfg_attr(not(any(feature = "file", feature = "object-store")), allow(dead_code))]
pub(crate) fn is_transient_io(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::TimedOut | io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

/// The wait a Retry-After header asks for (seconds or an HTTP date), if any.
#[cfg(any(feature = "http", feature = "object-store"))]
pub(crate) fn retry_after(headers: &http::HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// How one attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Worth another attempt; `retry_after` is the server's wish, if it said one.
    Transient {
        error: Error,
        retry_after: Option<Duration>,
    },
    /// Not worth another attempt.
    Fatal(Error),
    /// The attempt ran out of time (worth another attempt).
    TimedOut,
}

impl Failure {
    pub(crate) fn transient(error: Error) -> Failure {
        Failure::Transient {
            error,
            retry_after: None,
        }
    }

    /// `error`, worth another attempt or not.
    pub(crate) fn new(error: Error, transient: bool) -> Failure {
        if transient {
            Failure::transient(error)
        } else {
            Failure::Fatal(error)
        }
    }

    /// `error` for an answer of HTTP status `status`: worth another attempt, after the wait the
    /// server asked for if any, when the status is one of [`RETRY_STATUSES`].
    #[cfg(any(feature = "http", feature = "object-store"))]
    pub(crate) fn status(error: Error, status: u16, retry_after: Option<Duration>) -> Failure {
        if RETRY_STATUSES.contains(&status) {
            Failure::Transient { error, retry_after }
        } else {
            Failure::Fatal(error)
        }
    }
}

/// Runs `attempt(n)` for n = 1, 2, ... until it succeeds, fails fatally, or the retries run out.
///
/// Each attempt is cut at `timeout` if one is given. The last attempt's failure is returned; a
/// last attempt that ran out of time becomes [`Error::Timeout`] at `location()`.
pub(crate) async fn run<T, F, Fut>(
    options: RetryOptions,
    timeout: Option<Duration>,
    location: impl FnOnce() -> String,
    mut attempt: F,
) -> Result<T, Error>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let policy = ExponentialBuilder::default()
        .with_min_delay(options.backoff)
        .with_max_delay(options.max_backoff)
        .with_factor(2.0)
        .with_max_times(options.retries as usize)
        .with_jitter();
    let max_backoff = options.max_backoff;
    let mut attempts = 0u32;
    let result = (|| {
        attempts += 1;
        let fut = attempt(attempts);
        async move {
            match timeout {
                Some(timeout) => tokio::time::timeout(timeout, fut)
                    .await
                    .unwrap_or(Err(Failure::TimedOut)),
                None => fut.await,
            }
        }
    })
    .retry(policy)
    .sleep(tokio::time::sleep)
    .when(|failure| !matches!(failure, Failure::Fatal(_)))
    .adjust(move |failure, delay| {
        // `delay` is None when the retries are used up; jitter may take it past max_backoff.
        let delay = delay?;
        Some(match failure {
            Failure::Transient {
                retry_after: Some(wish),
                ..
            } => (*wish).min(max_backoff),
            _ => delay.min(max_backoff),
        })
    })
    .await;
    result.map_err(|failure| match failure {
        Failure::Transient { error, .. } | Failure::Fatal(error) => error,
        Failure::TimedOut => Error::Timeout {
            location: location(),
            attempts,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn fast(retries: u32) -> RetryOptions {
        RetryOptions {
            retries,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
        }
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Runs a scripted sequence of attempt outcomes; returns the result and attempts made.
    fn script(retries: u32, outcomes: Vec<Result<u32, Failure>>) -> (Result<u32, Error>, Vec<u32>) {
        let outcomes = Mutex::new(outcomes.into_iter());
        let seen = Mutex::new(Vec::new());
        let result = block_on(run(
            fast(retries),
            Some(Duration::from_secs(60)),
            || "loc".into(),
            |n| {
                seen.lock().unwrap().push(n);
                let next = outcomes
                    .lock()
                    .unwrap()
                    .next()
                    .expect("an outcome per attempt");
                async move { next }
            },
        ));
        (result, seen.into_inner().unwrap())
    }

    fn transient(status: u16) -> Failure {
        Failure::transient(Error::Http {
            status,
            url: "u".into(),
            attempts: 0,
        })
    }

    #[test]
    fn succeeds_after_transient_failures() {
        let (result, attempts) =
            script(3, vec![Err(transient(503)), Err(Failure::TimedOut), Ok(7)]);
        assert_eq!(result.unwrap(), 7);
        assert_eq!(attempts, vec![1, 2, 3]);
    }

    #[test]
    fn fatal_fails_at_once() {
        let (result, attempts) = script(3, vec![Err(Failure::Fatal(Error::invalid("no"))), Ok(1)]);
        assert_eq!(result.unwrap_err().to_string(), "no");
        assert_eq!(attempts, vec![1]);
    }

    #[test]
    fn last_failure_wins_when_retries_run_out() {
        let (result, attempts) = script(1, vec![Err(Failure::TimedOut), Err(transient(502))]);
        assert!(matches!(result, Err(Error::Http { status: 502, .. })));
        assert_eq!(attempts, vec![1, 2]);
        let (result, attempts) = script(
            2,
            vec![
                Err(transient(502)),
                Err(transient(502)),
                Err(Failure::TimedOut),
            ],
        );
        match result {
            Err(Error::Timeout { location, attempts }) => {
                assert_eq!((location.as_str(), attempts), ("loc", 3));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(attempts, vec![1, 2, 3]);
    }

    #[test]
    fn no_retries_means_one_attempt() {
        let (result, attempts) = script(0, vec![Err(transient(503))]);
        assert!(matches!(result, Err(Error::Http { status: 503, .. })));
        assert_eq!(attempts, vec![1]);
    }

    #[test]
    fn an_attempt_over_its_timeout_is_cut() {
        let result: Result<(), Error> = block_on(run(
            fast(1),
            Some(Duration::from_millis(5)),
            || "slow".into(),
            |_| std::future::pending(),
        ));
        match result {
            Err(Error::Timeout { location, attempts }) => {
                assert_eq!((location.as_str(), attempts), ("slow", 2))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn waits_are_capped_and_honour_retry_after() {
        // A Retry-After far beyond max_backoff must be capped, or this test would sleep an hour.
        let (result, attempts) = script(
            1,
            vec![
                Err(Failure::Transient {
                    error: Error::invalid("429"),
                    retry_after: Some(Duration::from_secs(3600)),
                }),
                Ok(2),
            ],
        );
        assert_eq!(result.unwrap(), 2);
        assert_eq!(attempts, vec![1, 2]);
    }

    #[cfg(any(feature = "http", feature = "object-store"))]
    #[test]
    fn retry_after_values() {
        use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let header = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
            retry_after(&headers, now)
        };
        assert_eq!(header("7"), Some(Duration::from_secs(7)));
        assert_eq!(header(" 0 "), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(header(&later), Some(Duration::from_secs(90)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(header(&earlier), Some(Duration::ZERO));
        assert_eq!(header("soon"), None);
        assert_eq!(header("-1"), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn transient_io_kinds() {
        for kind in [
            io::ErrorKind::TimedOut,
            io::ErrorKind::Interrupted,
            io::ErrorKind::WouldBlock,
        ] {
            assert!(is_transient_io(kind), "{kind:?}");
        }
        for kind in [io::ErrorKind::NotFound, io::ErrorKind::PermissionDenied] {
            assert!(!is_transient_io(kind), "{kind:?}");
        }
    }

    #[test]
    fn seconds_are_checked() {
        assert_eq!(
            seconds("timeout", 1.5).unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(seconds("timeout", 0.0).unwrap(), Duration::ZERO);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let error = seconds("backoff", bad).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)));
            assert!(
                error
                    .to_string()
                    .starts_with("backoff must be a finite number of seconds >= 0, got ")
            );
        }
    }
}
