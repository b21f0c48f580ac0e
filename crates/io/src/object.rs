//! `ObjectStoreDataset`: item i is an object under the store and prefix of a URL (object_store).

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Certificate, ClientConfigKey, ClientOptions, GetOptions, ObjectStore, ObjectStoreScheme,
    RetryConfig,
};

use crate::dataset::{Capped, Dataset, FetchOptions, Locations};
use crate::error::{Error, reason, request_kind};
use crate::redact::{redact_text, redact_url};
use crate::retry::{self, Failure, RetryOptions};
use crate::stats::IoStats;
use crate::template::{Target, from_template};
use crate::tls;
use dlrs_core::per_process::PerProcess;

/// The per-request timeout when none is given.
pub const DEFAULT_OBJECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The options of an [`ObjectStoreDataset`].
#[derive(Clone, PartialEq, Eq)]
pub struct ObjectStoreOptions {
    /// object_store configuration keys for the URL's store (`aws_region`, `google_service_account`,
    /// `azure_storage_account_key`, client keys such as `allow_http`, ...). An unknown key is an
    /// error, and so is `timeout` (use [`FetchOptions::timeout`]). Given keys win over the
    /// `AWS_*`, `GOOGLE_*` and `AZURE_*` environment variables.
    pub options: Vec<(String, String)>,
    /// Timeout (`None`: 30 s), retries, `max_bytes`. Default [`FetchOptions::OBJECT_STORE`].
    pub fetch: FetchOptions,
}

impl Default for ObjectStoreOptions {
    fn default() -> Self {
        ObjectStoreOptions {
            options: Vec::new(),
            fetch: FetchOptions::OBJECT_STORE,
        }
    }
}

impl std::fmt::Debug for ObjectStoreOptions {
    /// Shows option keys, never their values (they may be credentials).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ObjectStoreOptions")
            .field("options", &keys)
            .field("fetch", &self.fetch)
            .finish()
    }
}

/// Item i is the object whose key, under the prefix of the URL, is the i-th key (from a list or
/// a template). The store is built again in a forked child.
///
/// object_store's own retries are off: every attempt is one request, retried by the retry
/// policy every dataset shares ([`crate::RetryOptions`], the statuses of
/// [`crate::RETRY_STATUSES`]), and classified from object_store's error variants and the
/// status of the last response.
#[derive(Clone)]
pub struct ObjectStoreDataset {
    inner: Arc<Inner>,
}

struct Inner {
    source: Source,
    store: PerProcess<Arc<dyn ObjectStore>>,
    /// The URL (or store and prefix) the keys are under, redacted, for messages.
    base: String,
    prefix: Path,
    keys: Locations,
    max_bytes: u64,
    retry: RetryOptions,
    stats: IoStats,
}

enum Source {
    Config(Config),
    Given(Arc<dyn ObjectStore>),
}

struct Config {
    url: url::Url,
    options: Parsed,
    timeout: Duration,
}

/// Options checked against the keys of the URL's store.
enum Parsed {
    S3(Vec<(AmazonS3ConfigKey, String)>),
    Gcs(Vec<(GoogleConfigKey, String)>),
    Azure(Vec<(AzureConfigKey, String)>),
    Http(Vec<(ClientConfigKey, String)>),
    Local,
}

impl std::fmt::Debug for ObjectStoreDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreDataset")
            .field("base", &self.inner.base)
            .field("prefix", &self.inner.prefix.as_ref())
            .field("len", &self.inner.keys.len())
            .finish_non_exhaustive()
    }
}

impl ObjectStoreDataset {
    /// A dataset of the objects `keys` under `url` (`s3://bucket/prefix`, `gs://`, `az://`,
    /// `https://`, also `file:///dir`). Options are checked here and the store is built.
    pub fn new(
        url: &str,
        keys: Vec<String>,
        options: ObjectStoreOptions,
    ) -> Result<ObjectStoreDataset, Error> {
        ObjectStoreDataset::from_url(url, Locations::List(keys), options)
    }

    from_template!(
        /// A dataset of the objects whose keys, under the prefix of `url`, are made from
        /// `template` (see [`crate::template`]).
        [url: &str] options: ObjectStoreOptions, Target::Key,
        |locations| ObjectStoreDataset::from_url(url, locations, options)
    );

    /// A dataset of the objects `keys` under `prefix` of a store built by the caller (an
    /// in-memory store, a wrapped store); it is shared as it is, even after `fork`.
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        keys: Vec<String>,
        max_bytes: u64,
    ) -> Result<ObjectStoreDataset, Error> {
        let prefix = Path::parse(prefix)
            .map_err(|e| Error::invalid(format!("invalid prefix {prefix:?}: {e}")))?;
        let base = if prefix.as_ref().is_empty() {
            store.to_string()
        } else {
            format!("{store}/{prefix}")
        };
        ObjectStoreDataset::build(
            Source::Given(store),
            base,
            prefix,
            Locations::List(keys),
            max_bytes,
            RetryOptions::with_retries(0),
        )
    }

    fn from_url(
        url: &str,
        keys: Locations,
        options: ObjectStoreOptions,
    ) -> Result<ObjectStoreDataset, Error> {
        let (config, prefix) = Config::from_url(url, &options.options, options.fetch.timeout)?;
        let base = redact_url(url).trim_end_matches('/').to_owned();
        ObjectStoreDataset::build(
            Source::Config(config),
            base,
            prefix,
            keys,
            options.fetch.max_bytes,
            options.fetch.retry,
        )
    }

    fn build(
        source: Source,
        base: String,
        prefix: Path,
        keys: Locations,
        max_bytes: u64,
        retry: RetryOptions,
    ) -> Result<ObjectStoreDataset, Error> {
        let inner = Inner {
            source,
            store: PerProcess::new(),
            base,
            prefix,
            keys,
            max_bytes,
            retry,
            stats: IoStats::default(),
        };
        if inner.keys.len() > 0 {
            inner.path(&inner.keys.get(0)?)?;
        }
        inner.store()?;
        Ok(ObjectStoreDataset {
            inner: Arc::new(inner),
        })
    }
}

/// Checks every option key against the store's keys (`K::from_str`, lower case).
fn parse_options<K: FromStr>(
    options: &[(String, String)],
    store: &str,
    is_timeout: impl Fn(&K) -> bool,
) -> Result<Vec<(K, String)>, Error> {
    options
        .iter()
        .map(|(key, value)| {
            let parsed = K::from_str(&key.to_ascii_lowercase()).map_err(|_| {
                Error::invalid(format!("unknown option '{key}' for a {store} store"))
            })?;
            if is_timeout(&parsed) {
                return Err(Error::invalid(format!(
                    "option '{key}': set the timeout with timeout=, not in options"
                )));
            }
            Ok((parsed, value.clone()))
        })
        .collect()
}

/// The process's environment variables that are valid UTF-8.
type Env = Vec<(String, String)>;

fn process_env() -> Env {
    std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

/// The store's keys found in `env` variables named `PREFIX...`, except the timeout.
fn env_options<K: FromStr>(
    env: &Env,
    prefix: &str,
    is_timeout: impl Fn(&K) -> bool,
) -> Vec<(K, String)> {
    env.iter()
        .filter(|(key, _)| key.starts_with(prefix))
        .filter_map(|(key, value)| {
            Some((K::from_str(&key.to_ascii_lowercase()).ok()?, value.clone()))
        })
        .filter(|(key, _)| !is_timeout(key))
        .collect()
}

/// The value of variable `name` in `env`.
fn env_var(env: &Env, name: &str) -> Option<String> {
    env.iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
}

impl Config {
    /// The store of `url` with `options` (checked against its keys) and the path in it.
    fn from_url(
        url: &str,
        options: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<(Config, Path), Error> {
        let parsed = url::Url::parse(url)
            .map_err(|e| Error::invalid(format!("invalid URL {}: {e}", redact_url(url))))?;
        let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|_| {
            Error::invalid(format!(
                "unsupported URL {}: expected s3://, gs://, az://, https:// or file://",
                redact_url(url)
            ))
        })?;
        let store_options = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                Parsed::S3(parse_options(options, "s3", AmazonS3Builder::is_timeout)?)
            }
            ObjectStoreScheme::GoogleCloudStorage => Parsed::Gcs(parse_options(
                options,
                "gs",
                GoogleCloudStorageBuilder::is_timeout,
            )?),
            ObjectStoreScheme::MicrosoftAzure => Parsed::Azure(parse_options(
                options,
                "azure",
                MicrosoftAzureBuilder::is_timeout,
            )?),
            ObjectStoreScheme::Http => Parsed::Http(parse_options(options, "http", |k| {
                matches!(k, ClientConfigKey::Timeout)
            })?),
            ObjectStoreScheme::Local => {
                if let Some((key, _)) = options.first() {
                    return Err(Error::invalid(format!(
                        "unknown option '{key}': file:// URLs take no options"
                    )));
                }
                Parsed::Local
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unsupported URL {}: expected s3://, gs://, az://, https:// or file://",
                    redact_url(url)
                )));
            }
        };
        let config = Config {
            url: parsed,
            options: store_options,
            timeout: timeout.unwrap_or(DEFAULT_OBJECT_TIMEOUT),
        };
        Ok((config, path))
    }

    fn build(&self) -> Result<Arc<dyn ObjectStore>, Error> {
        self.build_with(&process_env())
    }

    /// Builds the store, reading credentials and settings from `env` then the options.
    fn build_with(&self, env: &Env) -> Result<Arc<dyn ObjectStore>, Error> {
        tls::install_crypto_provider();
        let mut client = ClientOptions::new()
            .with_timeout(self.timeout)
            .with_no_system_certificates(true);
        for der in tls::mozilla_roots() {
            let root = Certificate::from_der(der)
                .map_err(|e| Error::Runtime(format!("bad bundled root certificate: {e}")))?;
            client = client.with_root_certificate(root);
        }
        // One request per attempt: the dataset's retry loop makes the attempts.
        let retry = RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        };
        let url = self.url.as_str();
        // object_store's messages include their sources' messages.
        let failed = |e: object_store::Error| {
            Error::invalid(format!(
                "cannot configure the store for {}: {}",
                redact_url(url),
                redact_text(&e.to_string())
            ))
        };
        let store: Arc<dyn ObjectStore> = match &self.options {
            Parsed::S3(options) => {
                build_cloud::<AmazonS3Builder>(client, retry, url, env, options).map_err(failed)?
            }
            Parsed::Gcs(options) => {
                build_cloud::<GoogleCloudStorageBuilder>(client, retry, url, env, options)
                    .map_err(failed)?
            }
            Parsed::Azure(options) => {
                build_cloud::<MicrosoftAzureBuilder>(client, retry, url, env, options)
                    .map_err(failed)?
            }
            Parsed::Http(options) => {
                let mut builder = HttpBuilder::new()
                    .with_client_options(client)
                    .with_http_connector(Observed)
                    .with_retry(retry)
                    .with_url(&self.url[..url::Position::BeforePath]);
                for (key, value) in options {
                    builder = builder.with_config(*key, value.clone());
                }
                Arc::new(builder.build().map_err(failed)?)
            }
            Parsed::Local => Arc::new(LocalFileSystem::new()),
        };
        Ok(store)
    }
}

/// What the S3, GCS and Azure builders share, so that one path builds the three.
trait Cloud: Sized {
    type Key: FromStr + Clone;
    /// The prefix of the environment variables whose keys the store takes (`AWS_`, ...).
    const ENV: &'static str;
    fn start(client: ClientOptions, retry: RetryConfig, url: &str) -> Self;
    /// Whether `key` is the client timeout (set by `timeout=`, never by a key).
    fn is_timeout(key: &Self::Key) -> bool;
    fn set(self, key: Self::Key, value: String) -> Self;
    /// Settings from variables outside `ENV`, before the keys (so a key wins over them).
    fn before_keys(self, _env: &Env) -> Self {
        self
    }
    /// Settings from variables outside `ENV`, after the keys (so they win over a key).
    fn after_keys(self, _env: &Env) -> Self {
        self
    }
    fn finish(self) -> object_store::Result<Arc<dyn ObjectStore>>;
}

/// A cloud store: the environment's keys first, then the options given (the last setting wins).
fn build_cloud<B: Cloud>(
    client: ClientOptions,
    retry: RetryConfig,
    url: &str,
    env: &Env,
    options: &[(B::Key, String)],
) -> object_store::Result<Arc<dyn ObjectStore>> {
    let mut builder = B::start(client, retry, url).before_keys(env);
    let from_env = env_options(env, B::ENV, B::is_timeout);
    for (key, value) in from_env.into_iter().chain(options.iter().cloned()) {
        builder = builder.set(key, value);
    }
    builder.after_keys(env).finish()
}

/// `impl Cloud` for one of object_store's builders: what they all share (`start`, the timeout
/// key, `set`, `finish`), and the builder's own hooks given as `{ ... }`.
macro_rules! cloud {
    ($builder:ident, $key:ident, $env:literal, { $($hooks:item)* }) => {
        impl Cloud for $builder {
            type Key = $key;
            const ENV: &'static str = $env;
            fn start(client: ClientOptions, retry: RetryConfig, url: &str) -> Self {
                $builder::new()
                    .with_client_options(client)
                    .with_http_connector(Observed)
                    .with_retry(retry)
                    .with_url(url)
            }
            fn is_timeout(key: &Self::Key) -> bool {
                matches!(key, $key::Client(ClientConfigKey::Timeout))
            }
            fn set(self, key: Self::Key, value: String) -> Self {
                self.with_config(key, value)
            }
            fn finish(self) -> object_store::Result<Arc<dyn ObjectStore>> {
                Ok(Arc::new(self.build()?))
            }
            $($hooks)*
        }
    };
}

cloud!(AmazonS3Builder, AmazonS3ConfigKey, "AWS_", {});

cloud!(GoogleCloudStorageBuilder, GoogleConfigKey, "GOOGLE_", {
    fn before_keys(self, env: &Env) -> Self {
        match env_var(env, "SERVICE_ACCOUNT") {
            Some(path) => self.with_service_account_path(path),
            None => self,
        }
    }
});

cloud!(MicrosoftAzureBuilder, AzureConfigKey, "AZURE_", {
    fn after_keys(self, env: &Env) -> Self {
        match env_var(env, "IDENTITY_ENDPOINT") {
            Some(endpoint) => self.with_msi_endpoint(endpoint),
            None => self,
        }
    }
});

impl Inner {
    fn store(&self) -> Result<&Arc<dyn ObjectStore>, Error> {
        self.store.get_or_try_init(|| match &self.source {
            Source::Config(config) => config.build(),
            Source::Given(store) => Ok(store.clone()),
        })
    }

    /// The object path of `key` under the prefix.
    fn path(&self, key: &str) -> Result<Path, Error> {
        let prefix = self.prefix.as_ref();
        let full = if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}/{key}")
        };
        Path::parse(&full).map_err(|e| {
            Error::invalid(format!(
                "invalid object key {key:?}: {}",
                redact_text(&e.to_string())
            ))
        })
    }

    /// `key` under the base, for messages.
    fn location(&self, key: &str) -> String {
        redact_text(&format!("{}/{key}", self.base))
    }

    async fn fetch(&self, index: u64) -> Result<Bytes, Error> {
        let key = self.keys.get(index)?;
        let path = self.path(&key)?;
        let store = self.store()?;
        let (key, path) = (&*key, &path);
        retry::run(
            self.retry,
            None,
            || self.location(key),
            |n| {
                self.stats.attempt(n);
                LAST_RESPONSE.scope(Cell::new(None), self.attempt(store, key, path, n))
            },
        )
        .await
    }

    /// One GET of the object at `path`, whose failure is classified as it ran (in the scope of
    /// [`LAST_RESPONSE`]).
    async fn attempt(
        &self,
        store: &Arc<dyn ObjectStore>,
        key: &str,
        path: &Path,
        attempt: u32,
    ) -> Result<Bytes, Failure> {
        let _request = self.stats.request();
        let failed = |e| store_failure(e, &self.location(key), attempt);
        let result = store
            .get_opts(path, GetOptions::default())
            .await
            .map_err(failed)?;
        let too_large = |size| {
            Failure::Fatal(Error::TooLarge {
                location: self.location(key),
                limit: self.max_bytes,
                size,
            })
        };
        let size = result.meta.size;
        if size > self.max_bytes {
            return Err(too_large(Some(size)));
        }
        let mut body = Capped::new(self.max_bytes, Some(size));
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            body.push(chunk.map_err(failed)?)
                .map_err(|()| too_large(None))?;
        }
        let body = body.finish();
        self.stats.fetched(body.len());
        Ok(body)
    }
}

impl Dataset for ObjectStoreDataset {
    fn len(&self) -> u64 {
        self.inner.keys.len() as u64
    }

    fn cache_key(&self, index: u64) -> Option<String> {
        let key = self.inner.keys.get(index).ok()?;
        Some(format!("object\0{}\0{key}", self.inner.base))
    }

    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.fetch(index).await })
    }

    fn io_stats(&self) -> Option<&IoStats> {
        Some(&self.inner.stats)
    }
}

/// The store of one object URL, built on first use and again in a forked child, for the
/// datasets that read parts of objects (tar shards).
pub(crate) struct StoreRef {
    config: Config,
    store: PerProcess<Arc<dyn ObjectStore>>,
}

impl StoreRef {
    /// The store of `url` and the object's path in it; the store is built here once (so a bad
    /// configuration fails now).
    pub(crate) fn open(
        url: &str,
        options: &[(String, String)],
        timeout: Option<Duration>,
    ) -> Result<(StoreRef, Path), Error> {
        let (config, path) = Config::from_url(url, options, timeout)?;
        let store = StoreRef {
            config,
            store: PerProcess::new(),
        };
        store.store()?;
        Ok((store, path))
    }

    pub(crate) fn store(&self) -> Result<&Arc<dyn ObjectStore>, Error> {
        self.store.get_or_try_init(|| self.config.build())
    }

    /// The store's URL up to the path (scheme and bucket), which tells two stores apart.
    pub(crate) fn root(url: &str) -> String {
        match url::Url::parse(url) {
            Ok(parsed) => parsed[..url::Position::BeforePath].to_owned(),
            Err(_) => url.to_owned(),
        }
    }
}

/// Runs one attempt of a request to a store, so that its failure can be classified by
/// [`classify`] from the status the attempt saw.
pub(crate) async fn observed<T>(attempt: impl Future<Output = T>) -> T {
    LAST_RESPONSE.scope(Cell::new(None), attempt).await
}

/// [`store_failure`], for the datasets outside this module (inside [`observed`]).
pub(crate) fn classify(error: object_store::Error, location: &str, attempt: u32) -> Failure {
    store_failure(error, location, attempt)
}

/// What the last HTTP response of an attempt said.
#[derive(Debug, Clone, Copy)]
struct Response {
    status: u16,
    retry_after: Option<Duration>,
}

tokio::task_local! {
    /// The last response of the attempt running in this task, or `None` while a request is
    /// under way or failed without one (set by [`Observed`]). object_store keeps the status of
    /// a failed request in an error type it does not export, so it is seen here instead.
    static LAST_RESPONSE: Cell<Option<Response>>;
}

/// The stores' HTTP client: object_store's reqwest client, noting each response's status in
/// [`LAST_RESPONSE`].
#[derive(Debug)]
struct Observed;

impl HttpConnector for Observed {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(ObservedClient(client)))
    }
}

#[derive(Debug)]
struct ObservedClient(HttpClient);

type Call<'a> = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'a>>;

impl HttpService for ObservedClient {
    // The trait is declared with `async_trait`: this is the signature it expands to.
    fn call<'s, 'f>(&'s self, request: HttpRequest) -> Call<'f>
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let note = |seen: Option<Response>| {
                // Outside an attempt (no scope) there is nothing to note.
                let _ = LAST_RESPONSE.try_with(|last| last.set(seen));
            };
            note(None);
            let response = self.0.execute(request).await?;
            note(Some(Response {
                status: response.status().as_u16(),
                retry_after: retry::retry_after(response.headers(), SystemTime::now()),
            }));
            Ok(response)
        })
    }
}

/// Classifies an object_store error at `location` in attempt `attempt`: from its variant, the
/// status of the attempt's last response, then the typed errors under it.
fn store_failure(error: object_store::Error, location: &str, attempt: u32) -> Failure {
    let failed_status = LAST_RESPONSE
        .try_with(Cell::get)
        .ok()
        .flatten()
        .filter(|r| !(200..300).contains(&r.status));
    // An answer's status says it all (its body, an XML error document, is left out);
    // object_store's messages include their sources'.
    let message = match failed_status {
        Some(r) => format!("HTTP status {}{}", r.status, reason(r.status)),
        None => cap(redact_text(&error.to_string())),
    };
    let io_error = |kind: io::ErrorKind| Error::Io {
        location: location.to_owned(),
        kind,
        source: io::Error::new(kind, message.clone()),
    };
    match &error {
        object_store::Error::NotFound { .. } => {
            return Failure::Fatal(io_error(io::ErrorKind::NotFound));
        }
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            return Failure::Fatal(io_error(io::ErrorKind::PermissionDenied));
        }
        object_store::Error::InvalidPath { .. } => {
            return Failure::Fatal(Error::invalid(message));
        }
        _ => {}
    }
    if let Some(response) = failed_status {
        let error = Error::Http {
            status: response.status,
            url: location.to_owned(),
            attempts: attempt,
        };
        return Failure::status(error, response.status, response.retry_after);
    }
    let http = crate::error::causes(&error).find_map(|e| e.downcast_ref::<HttpError>());
    if let Some(http) = http {
        if http.kind() == HttpErrorKind::Timeout {
            return Failure::TimedOut;
        }
        let kind = request_kind(http);
        let error = Error::Request {
            location: location.to_owned(),
            kind,
            message: redact_text(&crate::error::chain(http)),
        };
        return Failure::new(error, kind.is_transient());
    }
    if let Some(io) = crate::error::causes(&error).find_map(|e| e.downcast_ref::<io::Error>()) {
        let kind = io.kind();
        return Failure::new(io_error(kind), retry::is_transient_io(kind));
    }
    Failure::Fatal(Error::Request {
        location: location.to_owned(),
        kind: crate::RequestKind::Other,
        message,
    })
}

/// The longest object-store message kept.
const MAX_MESSAGE: usize = 400;

/// `message`, cut to at most about [`MAX_MESSAGE`] bytes (a store given by the caller may
/// quote a whole error document).
fn cap(mut message: String) -> String {
    message.truncate(message.trim_end().len());
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Runtime;
    use crate::template::Column;
    use crate::test_server::{LoopbackServer, Reply};
    use crate::test_util::{
        TempDir, assert_http, assert_io, assert_request, assert_resets_retried, assert_too_large,
        fetch, refused_port,
    };
    use crate::{ErrorKind, RequestKind};
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    fn fast(retries: u32) -> RetryOptions {
        RetryOptions {
            retries,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        }
    }

    fn memory_store(runtime: &Runtime, objects: &[(&str, &[u8])]) -> Arc<dyn ObjectStore> {
        let store = Arc::new(InMemory::new());
        for (key, body) in objects {
            let payload = PutPayload::from(body.to_vec());
            runtime
                .block_on(store.put(&Path::parse(key).unwrap(), payload))
                .unwrap()
                .unwrap();
        }
        store
    }

    #[test]
    fn in_memory_store() {
        let runtime = Runtime::new(Some(1)).unwrap();
        let store = memory_store(
            &runtime,
            &[("tiles/a.svs/0.png", b"zero"), ("tiles/big", &[0; 11])],
        );
        let keys = vec!["a.svs/0.png".into(), "missing".into(), "big".into()];
        let dataset = ObjectStoreDataset::with_store(store, "tiles", keys, 10).unwrap();
        assert_eq!(dataset.len(), 3);
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"zero"[..]);
        let missing = fetch(&runtime, &dataset, 1).unwrap_err();
        assert_io(&missing, io::ErrorKind::NotFound);
        assert!(
            missing.to_string().starts_with("InMemory/tiles/missing: "),
            "{missing}"
        );
        assert_eq!(missing.kind(), ErrorKind::Io(io::ErrorKind::NotFound));
        assert_eq!(missing.raw_os_error(), None);
        let big = fetch(&runtime, &dataset, 2).unwrap_err();
        assert_too_large(&big, 10, Some(11));
        assert!(matches!(
            fetch(&runtime, &dataset, 3),
            Err(Error::IndexOutOfRange { index: 3, len: 3 })
        ));
    }

    #[test]
    fn bad_keys() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let error = ObjectStoreDataset::with_store(store.clone(), "p", vec!["a//b".into()], 10)
            .unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
        assert!(
            error.to_string().starts_with("invalid object key \"a//b\""),
            "{error}"
        );
        // A list is checked item by item when fetched.
        let runtime = Runtime::new(Some(1)).unwrap();
        let dataset =
            ObjectStoreDataset::with_store(store, "", vec!["ok".into(), "../x".into()], 10)
                .unwrap();
        assert!(matches!(
            fetch(&runtime, &dataset, 1),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn file_urls_with_templates() {
        let runtime = Runtime::new(Some(1)).unwrap();
        let dir = TempDir::new();
        std::fs::create_dir_all(dir.join("tiles/b c.svs")).unwrap();
        std::fs::write(dir.join("tiles/b c.svs/0.png"), b"b0").unwrap();
        std::fs::write(dir.join("tiles/b c.svs/1.png"), b"b1").unwrap();
        let url = format!("file://{}/tiles", dir.display());
        let dataset = ObjectStoreDataset::from_template(
            &url,
            "{slide}/{index}.png",
            vec![("slide".into(), Column::Strs(vec!["b c.svs".into(); 2]))],
            None,
            ObjectStoreOptions::default(),
        )
        .unwrap();
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"b0"[..]);
        assert_eq!(fetch(&runtime, &dataset, 1).unwrap(), &b"b1"[..]);
        let listed =
            ObjectStoreDataset::new(&url, vec!["nope.png".into()], ObjectStoreOptions::default())
                .unwrap();
        let error = fetch(&runtime, &listed, 0).unwrap_err();
        assert_io(&error, io::ErrorKind::NotFound);
        let escape = ObjectStoreDataset::from_template(
            &url,
            "{slide}/x",
            vec![("slide".into(), Column::Strs(vec!["..".into()]))],
            None,
            ObjectStoreOptions::default(),
        );
        assert!(matches!(escape, Err(Error::InvalidArgument(_))));
    }

    /// `pairs` as owned strings, collected into `C`.
    fn owned<C: FromIterator<(String, String)>>(pairs: &[(&str, &str)]) -> C {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn options_are_checked_per_store() {
        let options = |pairs: &[(&str, &str)]| ObjectStoreOptions {
            options: owned(pairs),
            ..ObjectStoreOptions::default()
        };
        let check = |url: &str, pairs: &[(&str, &str)], expected: Result<(), &str>| {
            let result = ObjectStoreDataset::new(url, vec!["k".into()], options(pairs));
            match (result, expected) {
                (Ok(_), Ok(())) => {}
                (Err(Error::InvalidArgument(message)), Err(expected)) => {
                    assert_eq!(message, expected)
                }
                (other, expected) => panic!("{url} {pairs:?}: {other:?}, expected {expected:?}"),
            }
        };
        check(
            "s3://bucket/prefix",
            &[
                ("aws_region", "eu-west-3"),
                ("ALLOW_HTTP", "true"),
                ("aws_access_key_id", "x"),
                ("aws_secret_access_key", "y"),
            ],
            Ok(()),
        );
        check(
            "s3://bucket",
            &[("timeout", "5s")],
            Err("option 'timeout': set the timeout with timeout=, not in options"),
        );
        check("gs://bucket/p", &[("google_bucket", "bucket")], Ok(()));
        check(
            "az://container/p",
            &[
                ("azure_storage_account_name", "acct"),
                ("azure_storage_account_key", "a2V5"),
            ],
            Ok(()),
        );
        check("https://example.com/p", &[("allow_http", "true")], Ok(()));
        // An option of another store, or misspelt, is refused naming the store.
        for (url, key, store) in [
            ("s3://bucket/prefix", "aws_regoin", "s3"),
            ("gs://bucket/p", "aws_region", "gs"),
            ("az://container/p", "region", "azure"),
            ("https://example.com/p", "aws_region", "http"),
        ] {
            let message = format!("unknown option '{key}' for a {store} store");
            check(url, &[(key, "x")], Err(&message));
        }
        check(
            "file:///tmp",
            &[("allow_http", "true")],
            Err("unknown option 'allow_http': file:// URLs take no options"),
        );
        // An unsupported URL is named without its query.
        for (url, shown) in [
            ("memory:///", "memory:///"),
            ("ftp://h/x?k=SECRET", "ftp://h/x"),
        ] {
            let message = format!(
                "unsupported URL {shown}: expected s3://, gs://, az://, https:// or file://"
            );
            check(url, &[], Err(&message));
        }
        check(
            "nope",
            &[],
            Err("invalid URL nope: relative URL without a base"),
        );
        let debug = format!("{:?}", options(&[("aws_secret_access_key", "SECRET")]));
        assert!(
            debug.contains("aws_secret_access_key") && !debug.contains("SECRET"),
            "{debug}"
        );
    }

    #[test]
    fn credentials_from_the_environment_then_options() {
        let config = |options: &[(&str, &str)]| Config {
            url: url::Url::parse("s3://bucket/prefix").unwrap(),
            options: Parsed::S3(
                parse_options(&owned::<Vec<_>>(options), "s3", |_: &AmazonS3ConfigKey| {
                    false
                })
                .unwrap(),
            ),
            timeout: DEFAULT_OBJECT_TIMEOUT,
        };
        let env = owned::<Env>;
        let key_only = env(&[
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_TIMEOUT", "1ns"),
            ("OTHER", "x"),
        ]);
        // Only a key id in the environment: the builder asks for the secret, so it read the id.
        let error = config(&[]).build_with(&key_only).err().unwrap();
        assert!(
            error.to_string().contains("Missing SecretAccessKey"),
            "{error}"
        );
        let both = env(&[
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "SECRET"),
        ]);
        config(&[]).build_with(&both).unwrap();
        config(&[("aws_secret_access_key", "s")])
            .build_with(&key_only)
            .unwrap();
        let found: Vec<(AmazonS3ConfigKey, String)> = env_options(&key_only, "AWS_", |k| {
            matches!(k, AmazonS3ConfigKey::Client(ClientConfigKey::Timeout))
        });
        assert_eq!(
            found,
            vec![(AmazonS3ConfigKey::AccessKeyId, "id".to_owned())]
        );
        let google: Vec<(GoogleConfigKey, String)> = env_options(
            &env(&[("GOOGLE_BUCKET", "b"), ("AWS_BUCKET", "a")]),
            "GOOGLE_",
            |_| false,
        );
        assert_eq!(google, vec![(GoogleConfigKey::Bucket, "b".to_owned())]);
        assert_eq!(env_var(&both, "AWS_ACCESS_KEY_ID").as_deref(), Some("id"));
        assert_eq!(env_var(&both, "NOPE"), None);
    }

    fn http_dataset(
        server: &LoopbackServer,
        keys: &[&str],
        timeout: Option<Duration>,
        max_bytes: u64,
    ) -> ObjectStoreDataset {
        let options = ObjectStoreOptions {
            options: vec![("allow_http".into(), "true".into())],
            fetch: FetchOptions {
                timeout,
                retry: fast(2),
                max_bytes,
            },
        };
        ObjectStoreDataset::new(
            &server.url("/bucket/pre"),
            keys.iter().map(|k| (*k).to_owned()).collect(),
            options,
        )
        .unwrap()
    }

    #[test]
    fn http_store_against_a_local_server() {
        let runtime = Runtime::new(Some(2)).unwrap();
        let server = LoopbackServer::scripted(|path, n| match (path, n) {
            ("/bucket/pre/ok", _) => Reply::Body(b"object".to_vec()),
            ("/bucket/pre/flaky", 1) => Reply::Status(503, vec![]),
            ("/bucket/pre/flaky", _) => Reply::Body(b"second".to_vec()),
            ("/bucket/pre/big", _) => Reply::Body(vec![0; 100]),
            ("/bucket/pre/down", _) => Reply::Status(500, vec![]),
            ("/bucket/pre/denied", _) => Reply::Status(403, vec![]),
            ("/bucket/pre/busy", _) => Reply::Status(503, vec![("Retry-After", "0".into())]),
            ("/bucket/pre/unsupported", _) => Reply::Status(501, vec![]),
            ("/bucket/pre/anonymous", _) => Reply::Status(401, vec![]),
            _ => Reply::Status(404, vec![]),
        })
        .unwrap();
        let dataset = http_dataset(
            &server,
            &[
                "ok",
                "flaky",
                "big",
                "missing",
                "down",
                "denied",
                "busy",
                "unsupported",
                "anonymous",
            ],
            None,
            99,
        );
        let retries = || dataset.io_stats().unwrap().snapshot().retries;
        assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), &b"object"[..]);
        assert_eq!(fetch(&runtime, &dataset, 1).unwrap(), &b"second"[..]);
        assert_eq!(server.hits("/bucket/pre/flaky"), 2);
        assert_eq!(retries(), 1);
        let big = fetch(&runtime, &dataset, 2).unwrap_err();
        assert_too_large(&big, 99, Some(100));
        let missing = fetch(&runtime, &dataset, 3).unwrap_err();
        assert_io(&missing, io::ErrorKind::NotFound);
        assert_eq!(
            missing.to_string(),
            format!(
                "{}/bucket/pre/missing: HTTP status 404 Not Found",
                server.base_url()
            )
        );
        assert_eq!(server.hits("/bucket/pre/missing"), 1);
        let down = fetch(&runtime, &dataset, 4).unwrap_err();
        assert_http(&down, 500, 3);
        assert_eq!(server.hits("/bucket/pre/down"), 3);
        assert_eq!(
            down.to_string(),
            format!(
                "{}/bucket/pre/down: HTTP status 500 Internal Server Error (attempt 3)",
                server.base_url()
            )
        );
        assert_eq!(retries(), 3);
        let denied = fetch(&runtime, &dataset, 5).unwrap_err();
        assert_io(&denied, io::ErrorKind::PermissionDenied);
        assert_eq!(server.hits("/bucket/pre/denied"), 1);
        let busy = fetch(&runtime, &dataset, 6).unwrap_err();
        assert_eq!(busy.kind(), ErrorKind::Http(503), "{busy:?}");
        assert!(matches!(busy, Error::Http { attempts: 3, .. }), "{busy:?}");
        assert_eq!(server.hits("/bucket/pre/busy"), 3);
        // Only the statuses every dataset retries: object_store alone would retry any 5xx.
        let unsupported = fetch(&runtime, &dataset, 7).unwrap_err();
        assert_http(&unsupported, 501, 1);
        assert_eq!(server.hits("/bucket/pre/unsupported"), 1);
        let anonymous = fetch(&runtime, &dataset, 8).unwrap_err();
        assert_eq!(
            anonymous.kind(),
            ErrorKind::Io(io::ErrorKind::PermissionDenied),
            "{anonymous:?}"
        );
        assert_eq!(server.hits("/bucket/pre/anonymous"), 1);
        assert_eq!(retries(), 5);
    }

    #[test]
    fn http_store_request_failures_are_typed_and_retried() {
        let runtime = Runtime::new(Some(2)).unwrap();
        let server = LoopbackServer::scripted(|path, n| match (path, n) {
            ("/bucket/pre/once", 1) => Reply::Reset,
            ("/bucket/pre/once", _) => Reply::Body(b"back".to_vec()),
            ("/bucket/pre/cut", _) => Reply::Truncated {
                announced: 10,
                sent: b"abc".to_vec(),
            },
            ("/bucket/pre/huge", _) => Reply::Truncated {
                announced: 16 << 40,
                sent: vec![5; 256 << 10],
            },
            _ => Reply::Reset,
        })
        .unwrap();
        let dataset = http_dataset(&server, &["once", "reset", "cut"], None, 99);
        let (once, always) = (
            (0, "/bucket/pre/once", &b"back"[..]),
            (1, "/bucket/pre/reset"),
        );
        assert_resets_retried(&runtime, &server, &dataset, once, always);
        let cut = fetch(&runtime, &dataset, 2).unwrap_err();
        assert_request(&cut, RequestKind::Truncated);
        assert_eq!(server.hits("/bucket/pre/cut"), 3);
        // A declared 16 TiB is not reserved: the body is read as it comes, and ends short.
        let huge = http_dataset(&server, &["huge"], None, 1 << 62);
        let cut = fetch(&runtime, &huge, 0).unwrap_err();
        assert_request(&cut, RequestKind::Truncated);
        assert_eq!(server.hits("/bucket/pre/huge"), 3);

        let port = refused_port();
        let nobody = ObjectStoreDataset::new(
            &format!("http://127.0.0.1:{port}/bucket"),
            vec!["k".into()],
            ObjectStoreOptions {
                options: vec![("allow_http".into(), "true".into())],
                fetch: FetchOptions {
                    retry: fast(2),
                    ..FetchOptions::OBJECT_STORE
                },
            },
        )
        .unwrap();
        let refused = fetch(&runtime, &nobody, 0).unwrap_err();
        assert_request(&refused, RequestKind::ConnectionRefused);
        // Each error of the chain once (object_store's messages repeat their sources').
        let message = refused.to_string();
        assert!(message.contains("Connection refused"), "{message}");
        assert_eq!(
            message.matches("error sending request").count(),
            1,
            "{message}"
        );
        assert!(!message.contains("HTTP error"), "{message}");
        assert_eq!(nobody.io_stats().unwrap().snapshot().retries, 2);
    }

    #[test]
    fn the_last_response_of_an_attempt_is_seen() {
        let runtime = Runtime::new(Some(2)).unwrap();
        let server =
            LoopbackServer::scripted(|_, _| Reply::Status(429, vec![("Retry-After", "7".into())]))
                .unwrap();
        let dataset = http_dataset(&server, &["k"], None, 99);
        let store = dataset.inner.store().unwrap().clone();
        let seen = runtime
            .block_on(LAST_RESPONSE.scope(Cell::new(None), async move {
                let path = Path::from("bucket/pre/k");
                assert!(store.get_opts(&path, GetOptions::default()).await.is_err());
                LAST_RESPONSE.with(Cell::get)
            }))
            .unwrap()
            .unwrap();
        assert_eq!(
            (seen.status, seen.retry_after),
            (429, Some(Duration::from_secs(7)))
        );
        assert_eq!(
            server.hits("/bucket/pre/k"),
            1,
            "object_store retries nothing"
        );
    }

    #[test]
    fn http_store_timeout() {
        let runtime = Runtime::new(Some(2)).unwrap();
        let server = LoopbackServer::scripted(|_, _| Reply::Stall).unwrap();
        let dataset = http_dataset(&server, &["slow"], Some(Duration::from_millis(100)), 10);
        let error = fetch(&runtime, &dataset, 0).unwrap_err();
        assert!(matches!(&error, Error::Timeout { .. }), "{error:?}");
        assert_eq!(error.kind(), ErrorKind::TimedOut);
    }

    #[test]
    fn long_messages_are_capped() {
        assert_eq!(cap("short \n".into()), "short");
        let long = cap("é".repeat(300));
        assert!(
            long.len() <= MAX_MESSAGE + '…'.len_utf8() && long.ends_with('…'),
            "{long}"
        );
    }
}
