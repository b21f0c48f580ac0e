//! `HttpDataset`: item i is the body of a GET request, on one reqwest client.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, LOCATION};

use crate::dataset::{Capped, Dataset, FetchOptions, Locations};
use crate::error::{Error, RequestKind, chain, request_kind};
use crate::redact::{redact_text, redact_url};
use crate::retry::{self, Failure};
use crate::stats::IoStats;
use crate::template::{Target, from_template};
use crate::tls;
use dlrs_core::per_process::PerProcess;

/// The options of an [`HttpDataset`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// Headers sent with every request to the origin of the item's URL (not past a redirect that
    /// leaves it).
    pub headers: Vec<(String, String)>,
    /// Timeout, retries, `max_bytes`. Default [`FetchOptions::HTTP`].
    pub fetch: FetchOptions,
    /// The time connecting may take (`None`: no limit). Default 10 s.
    pub connect_timeout: Option<Duration>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            headers: Vec::new(),
            fetch: FetchOptions::HTTP,
            connect_timeout: Some(Duration::from_secs(10)),
        }
    }
}

/// Item i is the body of a GET request to the i-th URL (from a list or a template).
///
/// One client keeps connections open across items; it is built again in a forked child.
#[derive(Clone)]
pub struct HttpDataset {
    inner: Arc<Inner>,
}

struct Inner {
    locations: Locations,
    headers: HeaderMap,
    options: HttpOptions,
    client: PerProcess<reqwest::Client>,
    stats: IoStats,
}

impl std::fmt::Debug for HttpDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpDataset")
            .field("len", &self.inner.locations.len())
            .finish_non_exhaustive()
    }
}

impl HttpDataset {
    /// A dataset of the bodies at `urls`. The first URL is checked here (http or https).
    pub fn new(urls: Vec<String>, options: HttpOptions) -> Result<HttpDataset, Error> {
        HttpDataset::build(Locations::List(urls), options)
    }

    from_template!(
        /// A dataset of the bodies at the URLs made from `template` (see [`crate::template`]).
        [] options: HttpOptions, Target::Url,
        |locations| HttpDataset::build(locations, options)
    );

    fn build(locations: Locations, options: HttpOptions) -> Result<HttpDataset, Error> {
        if locations.len() > 0 {
            check_url(&locations.get(0)?)?;
        }
        let headers = header_map(&options.headers)?;
        let inner = Inner {
            locations,
            headers,
            options,
            client: PerProcess::new(),
            stats: IoStats::default(),
        };
        inner.client()?;
        Ok(HttpDataset {
            inner: Arc::new(inner),
        })
    }

    /// The options given.
    pub fn options(&self) -> &HttpOptions {
        &self.inner.options
    }
}

impl Inner {
    fn client(&self) -> Result<&reqwest::Client, Error> {
        self.client
            .get_or_try_init(|| build_client(self.options.connect_timeout))
    }
}

/// The user's headers, checked.
pub(crate) fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, Error> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Error::invalid(format!("invalid header name {name:?}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| Error::invalid(format!("invalid value for header {name}")))?;
        map.append(name, value);
    }
    Ok(map)
}

/// An HTTP client of this crate: the bundled roots (parsed once per process, see `tls`), no
/// redirects (followed in [`get`], which decides where the headers go), no Referer.
pub(crate) fn build_client(connect_timeout: Option<Duration>) -> Result<reqwest::Client, Error> {
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls::client_config()?)
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .user_agent(concat!("dataloader-rs/", env!("CARGO_PKG_VERSION")));
    if let Some(timeout) = connect_timeout {
        builder = builder.connect_timeout(timeout);
    }
    builder
        .build()
        .map_err(|e| Error::Runtime(format!("cannot build the HTTP client: {}", chain(&e))))
}

impl Dataset for HttpDataset {
    fn len(&self) -> u64 {
        self.inner.locations.len() as u64
    }

    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let url = inner.locations.get(index)?;
            let client = inner.client()?;
            let (url, max_bytes, stats) = (&*url, inner.options.fetch.max_bytes, &inner.stats);
            retry::run(
                inner.options.fetch.retry,
                inner.options.fetch.timeout,
                || redact_url(url),
                |n| {
                    stats.attempt(n);
                    attempt(client, &inner.headers, url, max_bytes, n, stats)
                },
            )
            .await
        })
    }

    fn io_stats(&self) -> Option<&IoStats> {
        Some(&self.inner.stats)
    }

    fn cache_key(&self, index: u64) -> Option<String> {
        let url = self.inner.locations.get(index).ok()?;
        Some(format!("http\0{url}"))
    }
}

/// Refuses a URL that does not parse or is not http(s).
pub(crate) fn check_url(url: &str) -> Result<(), Error> {
    match url::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(()),
        Ok(parsed) => Err(Error::invalid(format!(
            "invalid URL {}: the scheme must be http or https, not {}",
            redact_url(url),
            parsed.scheme()
        ))),
        Err(e) => Err(Error::invalid(format!(
            "invalid URL {}: {e}",
            redact_url(url)
        ))),
    }
}

/// The most redirects followed for one item (as reqwest's default policy).
const MAX_REDIRECTS: usize = 10;

/// GETs `url`, following redirects itself: the user's headers go to `url`'s origin (scheme,
/// host, port) only, and never again once a hop has left it; `extra` (a range, preconditions)
/// goes to every hop; no Referer is ever sent.
pub(crate) async fn get(
    client: &reqwest::Client,
    headers: &HeaderMap,
    extra: &HeaderMap,
    url: &str,
) -> Result<reqwest::Response, Failure> {
    let mut response = client
        .get(url)
        .headers(headers.clone())
        .headers(extra.clone())
        .send()
        .await
        .map_err(|e| failure(e, url))?;
    let origin = response.url().origin();
    let mut trusted = true;
    for _ in 0..MAX_REDIRECTS {
        if !matches!(response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
            return Ok(response);
        }
        let Some(location) = response.headers().get(LOCATION) else {
            return Ok(response);
        };
        let next = std::str::from_utf8(location.as_bytes())
            .ok()
            .and_then(|l| response.url().join(l).ok())
            .filter(|next| matches!(next.scheme(), "http" | "https"))
            .ok_or_else(|| {
                Failure::Fatal(Error::Request {
                    location: redact_url(url),
                    kind: RequestKind::Redirect,
                    message: "redirected to an invalid or non-HTTP URL".into(),
                })
            })?;
        trusted &= next.origin() == origin;
        let mut request = client.get(next).headers(extra.clone());
        if trusted {
            request = request.headers(headers.clone());
        }
        response = request.send().await.map_err(|e| failure(e, url))?;
    }
    Err(Failure::Fatal(Error::Request {
        location: redact_url(url),
        kind: RequestKind::Redirect,
        message: format!("more than {MAX_REDIRECTS} redirects"),
    }))
}

async fn attempt(
    client: &reqwest::Client,
    headers: &HeaderMap,
    url: &str,
    max_bytes: u64,
    attempt: u32,
    stats: &IoStats,
) -> Result<Bytes, Failure> {
    let _request = stats.request();
    let mut response = get(client, headers, &HeaderMap::new(), url).await?;
    let status = response.status();
    if !status.is_success() {
        let error = Error::Http {
            status: status.as_u16(),
            url: redact_url(url),
            attempts: attempt,
        };
        let retry_after = retry::retry_after(response.headers(), SystemTime::now());
        return Err(Failure::status(error, status.as_u16(), retry_after));
    }
    let too_large = |size| {
        Failure::Fatal(Error::TooLarge {
            location: redact_url(url),
            limit: max_bytes,
            size,
        })
    };
    let expected = response.content_length();
    if let Some(size) = expected.filter(|&size| size > max_bytes) {
        return Err(too_large(Some(size)));
    }
    let mut body = Capped::new(max_bytes, expected);
    while let Some(chunk) = response.chunk().await.map_err(|e| failure(e, url))? {
        body.push(chunk).map_err(|()| too_large(None))?;
    }
    let body = body.finish();
    stats.fetched(body.len());
    Ok(body)
}

/// Classifies a reqwest error: a timeout, a bad URL, or a failed request of the kind its
/// source errors show (worth another attempt unless [`RequestKind::is_transient`] says no).
pub(crate) fn failure(error: reqwest::Error, url: &str) -> Failure {
    if error.is_timeout() {
        return Failure::TimedOut;
    }
    let (builder, kind) = (error.is_builder(), request_kind(&error));
    let message = redact_text(&chain(&error.without_url()));
    if builder {
        return Failure::Fatal(Error::invalid(format!(
            "invalid URL {}: {message}",
            redact_url(url)
        )));
    }
    let error = Error::Request {
        location: redact_url(url),
        kind,
        message,
    };
    Failure::new(error, kind.is_transient())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Runtime;
    use crate::test_server::{LoopbackServer, Reply};
    use crate::test_util::{
        assert_http, assert_request, assert_resets_retried, assert_too_large, fetch, refused_port,
    };
    use crate::{ErrorKind, RequestKind, RetryOptions, template::Column};
    use futures::StreamExt;

    fn fast(retries: u32) -> HttpOptions {
        let mut options = HttpOptions::default();
        options.fetch.retry = RetryOptions {
            retries,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        };
        options
    }

    /// `fast(retries)` refusing items over `max_bytes`.
    fn fast_capped(retries: u32, max_bytes: u64) -> HttpOptions {
        let mut options = fast(retries);
        options.fetch.max_bytes = max_bytes;
        options
    }

    fn setup(
        route: impl Fn(&str, u32) -> Reply + Send + Sync + 'static,
    ) -> (Runtime, LoopbackServer) {
        let runtime = Runtime::new(Some(2)).unwrap();
        let server = LoopbackServer::scripted(route).unwrap();
        (runtime, server)
    }

    #[test]
    fn fetches_bodies_on_kept_connections_with_headers() {
        let (runtime, server) =
            setup(|path, _| Reply::Body(format!("body of {path}").into_bytes()));
        let urls = (0..10).map(|i| server.url(&format!("/item/{i}"))).collect();
        let options = HttpOptions {
            headers: vec![("Authorization".into(), "Bearer t0ken".into())],
            ..fast(0)
        };
        let dataset = HttpDataset::new(urls, options).unwrap();
        assert_eq!(dataset.len(), 10);
        for i in 0..10 {
            assert_eq!(
                fetch(&runtime, &dataset, i).unwrap(),
                format!("body of /item/{i}").as_bytes()
            );
        }
        // A connection goes back to the pool a moment after its body is read, so a request
        // may now and then open another one; without keep-alive there would be 10.
        assert!(
            server.connections() <= 5,
            "{} connections for 10 requests",
            server.connections()
        );
        let headers = server.request_headers();
        assert_eq!(headers.len(), 10);
        assert!(
            headers
                .iter()
                .all(|h| h.get("authorization").map(String::as_str) == Some("Bearer t0ken"))
        );
        assert!(headers[0]["user-agent"].starts_with("dataloader-rs/"));
    }

    #[test]
    fn datasets_sharing_the_tls_roots_keep_their_own_settings() {
        let (runtime, server) = setup(|path, _| Reply::Body(path.as_bytes().to_vec()));
        let dataset = |token: &str, connect_timeout| {
            let options = HttpOptions {
                headers: vec![("X-Token".into(), token.into())],
                connect_timeout,
                ..fast(0)
            };
            HttpDataset::new(vec![server.url(&format!("/{token}"))], options).unwrap()
        };
        let (a, b) = (
            dataset("a", Some(Duration::from_secs(1))),
            dataset("b", None),
        );
        assert_eq!(a.options().connect_timeout, Some(Duration::from_secs(1)));
        assert_eq!(b.options().connect_timeout, None);
        for (dataset, token) in [(&a, "a"), (&b, "b"), (&a, "a")] {
            assert_eq!(
                fetch(&runtime, dataset, 0).unwrap(),
                format!("/{token}").as_bytes()
            );
        }
        let tokens: Vec<_> = server
            .request_headers()
            .iter()
            .map(|h| h["x-token"].clone())
            .collect();
        assert_eq!(tokens, ["a", "b", "a"]);
    }

    #[test]
    fn a_fresh_runtime_after_a_dropped_one_keeps_the_connections() {
        // Slow replies keep all 8 requests of a loader in flight at once, so a loader that could
        // not reuse the kept connections would open about 8 more (found flaky with instant
        // replies: the first loader reused its own connections and opened only 5).
        let server = LoopbackServer::scripted(|path, _| {
            Reply::Delayed(Duration::from_millis(30), path.as_bytes().to_vec())
        })
        .unwrap();
        let dataset =
            HttpDataset::from_template(&server.url("/k/{index}"), vec![], Some(8), fast(0))
                .unwrap();
        let indices: Vec<u64> = (0..8).collect();
        let mut opened = Vec::new();
        // 6 threads: no other test uses this size, so the idle runtime is this test's.
        for _ in 0..3 {
            let runtime = Runtime::new(Some(6)).unwrap();
            let bodies = runtime
                .block_on(crate::fetch_many(&dataset, &indices, 8))
                .unwrap();
            assert!(bodies.iter().all(Result::is_ok));
            opened.push(server.connections());
            drop(runtime);
        }
        // The first loader opens up to 8 connections; the next two reuse them (a connection
        // goes back to the pool a moment after its body is read, so a few more may be opened;
        // without reuse they would open about 16).
        assert!(opened[0] <= 8, "{opened:?}");
        assert!(opened[2] <= opened[0] + 4, "{opened:?}");
    }

    #[test]
    fn many_in_flight_spawned_and_buffered() {
        let (runtime, server) =
            setup(|path, _| Reply::Delayed(Duration::from_millis(5), path.as_bytes().to_vec()));
        let dataset =
            HttpDataset::from_template(&server.url("/t/{index}"), vec![], Some(64), fast(0))
                .unwrap();
        let bodies: Vec<Bytes> = runtime
            .block_on(
                futures::stream::iter(0..64u64)
                    .map(|i| runtime.spawn(dataset.fetch(i)).unwrap())
                    .buffered(16)
                    .map(|joined| joined.unwrap().unwrap())
                    .collect(),
            )
            .unwrap();
        for (i, body) in bodies.iter().enumerate() {
            assert_eq!(body, format!("/t/{i}").as_bytes());
        }
    }

    #[test]
    fn mixed_faults_in_flight_give_every_item_or_a_typed_error() {
        let (runtime, server) = setup(|path, n| {
            let i: usize = path.trim_start_matches("/m/").parse().unwrap();
            match (i % 5, n) {
                (0, 1) => Reply::Status(503, vec![("Retry-After", "0".into())]),
                (1, 1) => Reply::Reset,
                (2, _) => Reply::Truncated {
                    announced: 10,
                    sent: b"abc".to_vec(),
                },
                (3, _) => Reply::Stall,
                _ => Reply::Body(format!("item {i}").into_bytes()),
            }
        });
        // Long enough that no healthy request of a loaded machine runs out of time.
        let options = {
            let mut o = fast(1);
            o.fetch.timeout = Some(Duration::from_secs(1));
            o
        };
        let dataset =
            HttpDataset::from_template(&server.url("/m/{index}"), vec![], Some(40), options)
                .unwrap();
        let indices: Vec<u64> = (0..40).collect();
        let results = runtime
            .block_on(crate::fetch_many(&dataset, &indices, 16))
            .unwrap();
        assert_eq!(results.len(), 40);
        for (i, result) in results.into_iter().enumerate() {
            match (i % 5, result) {
                (0 | 1 | 4, Ok(body)) => assert_eq!(body, format!("item {i}").as_bytes()),
                (2, Err(Error::Request { .. })) | (3, Err(Error::Timeout { attempts: 2, .. })) => {}
                (_, other) => panic!("item {i}: {other:?}"),
            }
            let expected_hits = if i % 5 == 4 { 1 } else { 2 };
            assert_eq!(server.hits(&format!("/m/{i}")), expected_hits, "item {i}");
        }
    }

    #[test]
    fn retries_503_then_succeeds() {
        let (runtime, server) = setup(|_, n| {
            if n == 1 {
                Reply::Status(503, vec![])
            } else {
                Reply::Body(b"ok".to_vec())
            }
        });
        let dataset = HttpDataset::new(vec![server.url("/a")], fast(3)).unwrap();
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"ok"[..]);
        assert_eq!(server.hits("/a"), 2);
    }

    #[test]
    fn retries_429_with_retry_after() {
        let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(60));
        let (runtime, server) = setup(move |path, n| match (path, n) {
            ("/seconds", 1) => Reply::Status(429, vec![("Retry-After", "0".into())]),
            ("/date", 1) => Reply::Status(429, vec![("Retry-After", past.clone())]),
            // Far beyond max_backoff: capped, or this test would wait an hour.
            ("/long", 1) => Reply::Status(429, vec![("Retry-After", "3600".into())]),
            _ => Reply::Body(b"ok".to_vec()),
        });
        for path in ["/seconds", "/date", "/long"] {
            let dataset = HttpDataset::new(vec![server.url(path)], fast(1)).unwrap();
            assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"ok"[..], "{path}");
            assert_eq!(server.hits(path), 2, "{path}");
        }
    }

    #[test]
    fn gives_up_after_the_retries_with_the_last_status() {
        let (runtime, server) = setup(|_, _| Reply::Status(502, vec![]));
        let dataset = HttpDataset::new(vec![server.url("/down")], fast(2)).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_http(&error, 502, 3);
        assert_eq!(server.hits("/down"), 3);
    }

    #[test]
    fn a_404_fails_at_once_without_showing_secrets() {
        let (runtime, server) = setup(|_, _| Reply::Status(404, vec![]));
        let url = server
            .url("/private?token=SECRET")
            .replace("http://", "http://user:PASSWORD@");
        let dataset = HttpDataset::new(vec![url], fast(3)).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_http(&error, 404, 1);
        assert_eq!(
            error.to_string(),
            format!(
                "{}/private: HTTP status 404 Not Found (attempt 1)",
                server.base_url()
            )
        );
        assert_eq!(error.kind(), ErrorKind::Http(404));
        assert!(error.is_not_found());
        assert_eq!(server.hits("/private?token=SECRET"), 1);
        let headers = &server.request_headers()[0];
        assert!(
            headers["authorization"].starts_with("Basic "),
            "userinfo is sent as basic auth"
        );
    }

    #[test]
    fn other_statuses_fail_at_once() {
        let (runtime, server) =
            setup(|path, _| Reply::Status(path.trim_start_matches('/').parse().unwrap(), vec![]));
        for status in [400u16, 401, 403, 410, 501] {
            let dataset =
                HttpDataset::new(vec![server.url(&format!("/{status}"))], fast(3)).unwrap();
            let error = fetch(&runtime, &dataset, 0).unwrap_err();
            assert!(
                matches!(error, Error::Http { status: s, .. } if s == status),
                "{error:?}"
            );
            assert_eq!(server.hits(&format!("/{status}")), 1);
        }
    }

    #[test]
    fn content_length_over_max_bytes() {
        let (runtime, server) = setup(|_, _| Reply::Body(vec![7; 1000]));
        let options = fast_capped(3, 999);
        let dataset = HttpDataset::new(vec![server.url("/big")], options).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_too_large(&error, 999, Some(1000));
        assert_eq!(error.kind(), ErrorKind::TooLarge);
        assert_eq!(server.hits("/big"), 1, "not retried");
        let exact = fast_capped(0, 1000);
        let dataset = HttpDataset::new(vec![server.url("/big")], exact).unwrap();
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap().len(), 1000);
    }

    /// A server that declares 16 TiB and sends 256 KiB: the fetch fails as a truncated body,
    /// it does not reserve the declared length (which aborts the process).
    #[test]
    fn a_declared_length_is_a_claim_not_an_allocation() {
        let (runtime, server) = setup(|_, _| Reply::Truncated {
            announced: 16 << 40,
            sent: vec![5; 256 << 10],
        });
        let options = fast_capped(0, 1 << 62);
        let dataset = HttpDataset::new(vec![server.url("/huge")], options).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_request(&error, RequestKind::Truncated);
        assert_eq!(server.hits("/huge"), 1);
    }

    #[test]
    fn chunked_body_over_max_bytes() {
        let (runtime, server) =
            setup(|_, _| Reply::Chunked(vec![vec![1; 300], vec![2; 300], vec![3; 300]]));
        let small = fast_capped(3, 899);
        let dataset = HttpDataset::new(vec![server.url("/chunked")], small).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_too_large(&error, 899, None);
        assert_eq!(server.hits("/chunked"), 1, "not retried");
        let enough = fast_capped(0, 900);
        let dataset = HttpDataset::new(vec![server.url("/chunked")], enough).unwrap();
        let body = fetch(&runtime, &dataset, 0).unwrap();
        assert_eq!(body.len(), 900);
        assert_eq!((body[0], body[300], body[899]), (1, 2, 3));
    }

    #[test]
    fn stalled_server_times_out() {
        let (runtime, server) = setup(|_, _| Reply::Stall);
        let options = {
            let mut o = fast(1);
            o.fetch.timeout = Some(Duration::from_millis(100));
            o
        };
        let dataset = HttpDataset::new(vec![server.url("/slow?sig=SECRET")], options).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert!(
            matches!(&error, Error::Timeout { attempts: 2, .. }),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!("{}/slow: timed out (attempt 2 of 2)", server.base_url())
        );
        assert_eq!(error.kind(), ErrorKind::TimedOut);
        assert_eq!(server.hits("/slow?sig=SECRET"), 2);
    }

    #[test]
    fn connection_resets_are_retried() {
        let (runtime, server) = setup(|path, n| match (path, n) {
            ("/flaky", 1) => Reply::Reset,
            ("/flaky", _) => Reply::Body(b"ok".to_vec()),
            _ => Reply::Reset,
        });
        let dataset =
            HttpDataset::new(vec![server.url("/flaky"), server.url("/reset")], fast(2)).unwrap();
        assert_resets_retried(
            &runtime,
            &server,
            &dataset,
            (0, "/flaky", b"ok"),
            (1, "/reset"),
        );
    }

    #[test]
    fn truncated_bodies_are_retried() {
        let (runtime, server) = setup(|path, n| match (path, n) {
            ("/once", 1) | ("/always", _) => Reply::Truncated {
                announced: 100,
                sent: vec![0; 50],
            },
            _ => Reply::Body(vec![1; 100]),
        });
        let dataset =
            HttpDataset::new(vec![server.url("/once"), server.url("/always")], fast(1)).unwrap();
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), vec![1; 100]);
        assert_eq!(server.hits("/once"), 2);
        let error = fetch(&runtime, &dataset, 1).unwrap_err();
        assert_request(&error, RequestKind::Truncated);
        assert_eq!(server.hits("/always"), 2);
    }

    #[test]
    fn connection_refused_is_retried_and_typed() {
        let runtime = Runtime::new(Some(1)).unwrap();
        let port = refused_port();
        let dataset =
            HttpDataset::new(vec![format!("http://127.0.0.1:{port}/x")], fast(2)).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_request(&error, RequestKind::ConnectionRefused);
        assert!(error.to_string().contains("Connection refused"), "{error}");
        assert_eq!(dataset.io_stats().unwrap().snapshot().retries, 2);
    }

    /// A TLS handshake to a server that answers in plain HTTP: a TLS failure, retried (only a
    /// refused certificate is not).
    #[test]
    fn a_tls_handshake_to_a_plain_server_is_a_tls_error() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = stream.read(&mut [0; 4096]);
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            }
        });
        let runtime = Runtime::new(Some(1)).unwrap();
        let dataset =
            HttpDataset::new(vec![format!("https://127.0.0.1:{port}/x")], fast(1)).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_request(&error, RequestKind::Tls);
        assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn templates_make_encoded_urls() {
        let (runtime, server) = setup(|path, _| Reply::Body(path.as_bytes().to_vec()));
        let dataset = HttpDataset::from_template(
            &server.url("/images/{image}/tile?x={x}&i={index}"),
            vec![
                (
                    "image".into(),
                    Column::Strs(vec!["image 1.tif".into(), "a/b".into()]),
                ),
                ("x".into(), Column::Ints(vec![0, 224])),
            ],
            None,
            fast(0),
        )
        .unwrap();
        assert_eq!(dataset.len(), 2);
        assert_eq!(
            fetch(&runtime, &dataset, 0).unwrap(),
            &b"/images/image%201.tif/tile?x=0&i=0"[..]
        );
        assert_eq!(
            fetch(&runtime, &dataset, 1).unwrap(),
            &b"/images/a%2Fb/tile?x=224&i=1"[..]
        );
        let error = fetch(&runtime, &dataset, 2).unwrap_err();
        assert!(matches!(error, Error::IndexOutOfRange { index: 2, len: 2 }));
        assert_eq!(error.kind(), ErrorKind::IndexOutOfRange);
    }

    fn user_headers() -> HttpOptions {
        HttpOptions {
            headers: vec![
                ("Authorization".into(), "Bearer t0ken".into()),
                ("X-Api-Key".into(), "k3y".into()),
                ("Cookie".into(), "session=c00kie".into()),
            ],
            ..fast(0)
        }
    }

    /// No user header and no Referer may reach another origin (another port here).
    #[test]
    fn a_cross_origin_redirect_sends_nothing_of_the_users() {
        let runtime = Runtime::new(Some(2)).unwrap();
        let other = LoopbackServer::scripted(|_, _| Reply::Body(b"landed".to_vec())).unwrap();
        let target = other.url("/land");
        let first = LoopbackServer::scripted(move |_, _| {
            Reply::Status(302, vec![("Location", target.clone())])
        })
        .unwrap();
        let dataset =
            HttpDataset::new(vec![first.url("/start?sig=SECRET")], user_headers()).unwrap();
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"landed"[..]);
        assert_eq!(first.request_headers()[0]["x-api-key"], "k3y");
        let seen = &other.request_headers()[0];
        for name in ["authorization", "x-api-key", "cookie", "referer"] {
            assert!(
                !seen.contains_key(name),
                "{name} sent to another origin: {seen:?}"
            );
        }
        assert!(seen["user-agent"].starts_with("dataloader-rs/"));
    }

    #[test]
    fn a_same_origin_redirect_keeps_the_user_headers_without_a_referer() {
        let runtime = Runtime::new(Some(2)).unwrap();
        let server = LoopbackServer::scripted(|path, _| match path {
            "/same?sig=SECRET" => Reply::Status(301, vec![("Location", "/there".into())]),
            _ => Reply::Body(path.as_bytes().to_vec()),
        })
        .unwrap();
        let dataset =
            HttpDataset::new(vec![server.url("/same?sig=SECRET")], user_headers()).unwrap();
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"/there"[..]);
        let headers = server.request_headers();
        assert_eq!(headers.len(), 2);
        assert_eq!(headers[1]["authorization"], "Bearer t0ken");
        assert_eq!(headers[1]["x-api-key"], "k3y");
        assert_eq!(headers[1]["cookie"], "session=c00kie");
        assert!(!headers[1].contains_key("referer"), "{:?}", headers[1]);
    }

    #[test]
    fn a_redirect_back_from_another_origin_stays_without_the_user_headers() {
        let runtime = Runtime::new(Some(2)).unwrap();
        let first =
            LoopbackServer::scripted(|path, _| Reply::Body(path.as_bytes().to_vec())).unwrap();
        let back = first.url("/back");
        let other = LoopbackServer::scripted(move |_, _| {
            Reply::Status(307, vec![("Location", back.clone())])
        })
        .unwrap();
        let dataset = HttpDataset::new(vec![other.url("/away")], user_headers()).unwrap();
        // The dataset's URL is on `other`: `first` is the other origin here.
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"/back"[..]);
        let seen = &first.request_headers()[0];
        assert!(!seen.contains_key("x-api-key"), "{seen:?}");
    }

    #[test]
    fn redirect_loops_fail_at_once() {
        let (runtime, server) = setup(|path, _| {
            let n: u32 = path[2..].split('?').next().unwrap().parse().unwrap();
            Reply::Status(302, vec![("Location", format!("/r{}", n + 1))])
        });
        let dataset = HttpDataset::new(vec![server.url("/r0?sig=SECRET")], fast(3)).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert_request(&error, RequestKind::Redirect);
        assert!(error.to_string().contains("redirect"), "{error}");
        assert!(!error.to_string().contains("SECRET"), "{error}");
        assert_eq!(
            server.request_headers().len(),
            11,
            "10 redirects followed, no retry"
        );
    }

    #[test]
    fn bad_arguments() {
        let check = |result: Result<HttpDataset, Error>, expected: &str| {
            let error = result.unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
            assert_eq!(error.to_string(), expected);
        };
        check(
            HttpDataset::new(vec!["ftp://h/a?k=SECRET".into()], fast(0)),
            "invalid URL ftp://h/a: the scheme must be http or https, not ftp",
        );
        check(
            HttpDataset::new(vec!["not a url".into()], fast(0)),
            "invalid URL not a url: relative URL without a base",
        );
        check(
            HttpDataset::from_template(
                "{host}/a",
                vec![("host".into(), Column::Strs(vec!["h".into()]))],
                None,
                fast(0),
            ),
            "invalid URL h/a: relative URL without a base",
        );
        for (name, value, expected) in [
            ("bad header", "v", "invalid header name \"bad header\""),
            ("x-token", "a\nb", "invalid value for header x-token"),
        ] {
            let options = HttpOptions {
                headers: vec![(name.into(), value.into())],
                ..fast(0)
            };
            check(
                HttpDataset::new(vec!["http://h/".into()], options),
                expected,
            );
        }
        // Only the first URL is checked when the dataset is built; the others when fetched.
        let runtime = Runtime::new(Some(1)).unwrap();
        let later = HttpDataset::new(
            vec!["http://h/".into(), "http://[bad/?k=SECRET".into()],
            fast(3),
        )
        .unwrap();
        let error = fetch(&runtime, &later, 1).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
        assert!(
            error.to_string().starts_with("invalid URL http://[bad/: "),
            "{error}"
        );
        let empty = HttpDataset::new(vec![], fast(0)).unwrap();
        assert!(empty.is_empty());
    }

    /// A self-signed certificate for 127.0.0.1 and its throwaway key, made for this test with
    /// `openssl req -x509 -newkey ec ...`: no root store trusts it.
    const SELF_SIGNED_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBkTCCATagAwIBAgIUdYrDVV+J/ZIGMiLxI4UEhvMdcmMwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEzMDA4MDQ1MFoYDzIxMjYxMTA2
MDgwNDUwWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAASN5pqP5WO6eg9J9U3RjAjHqhSjGaqq70hTst1nFTmFtnMp1XtrChYs
qPa0azg++Gg0i6by+SjaE/bNpLorr7gto2QwYjAdBgNVHQ4EFgQUzkDkPvnbjp4y
IaTKZwTIuBpOONkwHwYDVR0jBBgwFoAUzkDkPvnbjp4yIaTKZwTIuBpOONkwDwYD
VR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0kAMEYC
IQCHt/hDxkibqiliYBBZArtKZecGUHl3k+3coX7xifA7OQIhANMQYOKiwdcwyxSk
Y0KDV7/g8TLA2/hFfoSGTSbazOsD
-----END CERTIFICATE-----
";
    const SELF_SIGNED_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgSkjLCVFGzUs0/iGM
pUVRYcvGv0pfNA9meJxLPXgjURahRANCAASN5pqP5WO6eg9J9U3RjAjHqhSjGaqq
70hTst1nFTmFtnMp1XtrChYsqPa0azg++Gg0i6by+SjaE/bNpLorr7gt
-----END PRIVATE KEY-----
";

    #[test]
    fn an_untrusted_certificate_fails_at_once() {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use std::io::Read;
        use std::sync::atomic::{AtomicU32, Ordering};

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(SELF_SIGNED_CERT.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(SELF_SIGNED_KEY.as_bytes()).unwrap(),
            )
            .unwrap();
        let config = Arc::new(config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicU32::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let connection = rustls::ServerConnection::new(config.clone()).unwrap();
                let mut tls = rustls::StreamOwned::new(connection, stream);
                // Runs the handshake until the client refuses the certificate.
                let _ = tls.read(&mut [0; 1]);
            }
        });
        let runtime = Runtime::new(Some(1)).unwrap();
        let url = format!("https://127.0.0.1:{port}/secure?token=SECRET");
        let dataset = HttpDataset::new(vec![url], fast(3)).unwrap();
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        match &error {
            Error::Request {
                location,
                kind: RequestKind::Certificate,
                message,
            } => {
                assert_eq!(location, &format!("https://127.0.0.1:{port}/secure"));
                assert!(message.contains("certificate"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!error.to_string().contains("SECRET"), "{error}");
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "a refused certificate is not retried"
        );
    }
}
