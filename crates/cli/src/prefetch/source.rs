//! Where the items of a prefetch are: the dataset a template names (HTTP, object store or
//! files, built by dlrs-io with its template rules) and each item's location for messages.

use std::sync::Arc;

use anyhow::Result;
use dlrs_io::{
    Column, Dataset, FetchOptions, FileDataset, HttpDataset, HttpOptions, ObjectStoreDataset,
    ObjectStoreOptions, RetryOptions, Target, Template,
};

use crate::args::PrefetchArgs;
use crate::usage;
use crate::values::{first_placeholder, unescape_braces};

/// The schemes read through object_store.
const OBJECT_SCHEMES: [&str; 7] = ["s3", "s3a", "gs", "az", "abfs", "abfss", "azure"];

/// What kind of location a template makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `http://` or `https://`: [`HttpDataset`].
    Http,
    /// `s3://`, `gs://`, `az://`, ...: [`ObjectStoreDataset`].
    Object,
    /// A path (or `file://`): [`FileDataset`].
    File,
}

/// The kind of `template`, from its scheme.
pub fn kind_of(template: &str) -> Result<Kind> {
    let Some((scheme, _)) = template.split_once("://") else {
        return Ok(Kind::File);
    };
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return Ok(Kind::File);
    }
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "http" | "https" => Ok(Kind::Http),
        "file" => Ok(Kind::File),
        s if OBJECT_SCHEMES.contains(&s) => Ok(Kind::Object),
        other => Err(usage(format!(
            "unsupported scheme {other}:// (use http, https, s3, gs, az or a file path)"
        ))),
    }
}

/// An object-store template split into the store URL and the key template: the URL ends at
/// the last `/` before the first placeholder (`s3://b/tiles/{x}/{index}.png` is
/// `("s3://b/tiles", "{x}/{index}.png")`). The bucket cannot hold a placeholder.
pub fn split_object_template(template: &str) -> Result<(String, String)> {
    let after_scheme = template.find("://").map_or(0, |i| i + 3);
    let end = first_placeholder(template).unwrap_or(template.len());
    let slash = template[..end]
        .rfind('/')
        .filter(|&s| s > after_scheme)
        .ok_or_else(|| {
            usage(format!(
                "{template:?}: the bucket cannot hold a placeholder; write the key after it \
                 (s3://bucket/{{index}}.png)"
            ))
        })?;
    let key = &template[slash + 1..];
    if key.is_empty() {
        return Err(usage(format!(
            "{template:?}: the key template after the bucket is empty"
        )));
    }
    Ok((unescape_braces(&template[..slash]), key.to_owned()))
}

/// The dataset of a prefetch and how its locations are shown.
pub struct Items {
    /// Fetches item i.
    pub dataset: Arc<dyn Dataset>,
    /// The kind of location.
    pub kind: Kind,
    locations: Template,
    /// The redacted store URL of object keys.
    base: Option<String>,
}

impl std::fmt::Debug for Items {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Items")
            .field("kind", &self.kind)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl Items {
    /// The dataset the arguments name: headers only for HTTP, options only for object stores.
    pub fn from_args(args: &PrefetchArgs) -> Result<Items> {
        Items::build(
            &args.template,
            args.columns.clone(),
            args.length,
            Settings {
                retries: args.retries,
                timeout: args.timeout,
                headers: args.headers.clone(),
                options: args.options.clone(),
                max_bytes: args.max_bytes,
            },
        )
    }

    fn build(
        template: &str,
        columns: Vec<(String, Column)>,
        length: Option<usize>,
        settings: Settings,
    ) -> Result<Items> {
        let kind = kind_of(template)?;
        if kind != Kind::Http && !settings.headers.is_empty() {
            return Err(usage("--header is for http:// and https:// templates only"));
        }
        if kind != Kind::Object && !settings.options.is_empty() {
            return Err(usage(
                "--option is for s3://, gs:// and az:// templates only",
            ));
        }
        // One set of fetch settings; each kind keeps its own default timeout.
        let (retry, timeout) = (
            RetryOptions::with_retries(settings.retries),
            settings.timeout,
        );
        let fetch = |defaults: FetchOptions| FetchOptions {
            timeout: timeout.or(defaults.timeout),
            retry,
            max_bytes: settings.max_bytes,
        };
        let (dataset, locations, base): (Arc<dyn Dataset>, Template, Option<String>) = match kind {
            Kind::Http => {
                let options = HttpOptions {
                    fetch: fetch(FetchOptions::HTTP),
                    headers: settings.headers,
                    ..HttpOptions::default()
                };
                let locations = Template::new(template, columns.clone(), length, Target::Url)?;
                let dataset = HttpDataset::from_template(template, columns, length, options)?;
                (Arc::new(dataset), locations, None)
            }
            Kind::Object => {
                let (url, key) = split_object_template(template)?;
                let options = ObjectStoreOptions {
                    fetch: fetch(FetchOptions::OBJECT_STORE),
                    options: settings.options,
                };
                let locations = Template::new(&key, columns.clone(), length, Target::Key)?;
                let dataset =
                    ObjectStoreDataset::from_template(&url, &key, columns, length, options)?;
                (
                    Arc::new(dataset),
                    locations,
                    Some(dlrs_io::redact_url(&url)),
                )
            }
            Kind::File => {
                let path = template.strip_prefix("file://").unwrap_or(template);
                let options = fetch(FetchOptions::FILE);
                let locations = Template::new(path, columns.clone(), length, Target::Path)?;
                let dataset = FileDataset::from_template(path, columns, length, options)?;
                (Arc::new(dataset), locations, None)
            }
        };
        Ok(Items {
            dataset,
            kind,
            locations,
            base,
        })
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.locations.len()
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where item `index` is, as a message may show it (no query string, no credentials).
    pub fn location(&self, index: u64) -> String {
        let Ok(rendered) = self.locations.render(index) else {
            return format!("item {index}");
        };
        match (&self.kind, &self.base) {
            (Kind::Http, _) => dlrs_io::redact_url(&rendered),
            (Kind::Object, Some(base)) => format!("{base}/{rendered}"),
            _ => rendered,
        }
    }

    /// The raw location of item `index`, for its file name's extension.
    pub fn raw_location(&self, index: u64) -> Option<String> {
        self.locations.render(index).ok()
    }
}

/// The fetch settings given on the command line.
struct Settings {
    retries: u32,
    timeout: Option<std::time::Duration>,
    headers: Vec<(String, String)>,
    options: Vec<(String, String)>,
    max_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The URL and the key put back together give the template, the key holds every
        /// placeholder and the URL none.
        #[test]
        fn object_templates_split_into_url_and_key(
            bucket in "[a-z][a-z0-9-]{2,10}",
            prefix in proptest::collection::vec("[a-z0-9._-]{1,6}", 0..3),
            lead in "[a-z0-9._-]{0,4}",
            rest in "[a-z0-9._/{}-]{0,12}",
        ) {
            let mut url = format!("gs://{bucket}");
            for p in &prefix {
                url.push('/');
                url.push_str(p);
            }
            let key = format!("{lead}{{index}}{rest}");
            let (u, k) = split_object_template(&format!("{url}/{key}")).unwrap();
            prop_assert_eq!(u, url);
            prop_assert_eq!(k, key);
        }
    }

    fn settings() -> Settings {
        Settings {
            retries: 0,
            timeout: None,
            headers: vec![],
            options: vec![],
            max_bytes: 100,
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_of("http://h/{index}").unwrap(), Kind::Http);
        assert_eq!(kind_of("HTTPS://h/{index}").unwrap(), Kind::Http);
        assert_eq!(kind_of("s3://b/{index}").unwrap(), Kind::Object);
        assert_eq!(kind_of("gs://b/{index}").unwrap(), Kind::Object);
        assert_eq!(kind_of("az://b/{index}").unwrap(), Kind::Object);
        assert_eq!(kind_of("/data/{index}.png").unwrap(), Kind::File);
        assert_eq!(kind_of("file:///data/{index}").unwrap(), Kind::File);
        assert_eq!(kind_of("rel/{a}://x").unwrap(), Kind::File);
        let err = kind_of("ftp://h/{index}").unwrap_err();
        assert!(err.is::<crate::UsageError>());
        assert_eq!(
            err.to_string(),
            "unsupported scheme ftp:// (use http, https, s3, gs, az or a file path)"
        );
    }

    #[test]
    fn object_templates_split_at_the_last_slash_before_a_placeholder() {
        let check = |t: &str, url: &str, key: &str| {
            assert_eq!(
                split_object_template(t).unwrap(),
                (url.to_owned(), key.to_owned()),
                "{t}"
            );
        };
        check(
            "s3://b/tiles/{x}/{index}.png",
            "s3://b/tiles",
            "{x}/{index}.png",
        );
        check("s3://b/{index}", "s3://b", "{index}");
        check("gs://b/p{x}.png", "gs://b", "p{x}.png");
        check("az://c/{{lit}}/{index}", "az://c/{lit}", "{index}");
        check("s3://b/only/one.png", "s3://b/only", "one.png");
        for bad in ["s3://{b}/x", "s3://b{x}", "s3://b/"] {
            assert!(
                split_object_template(bad)
                    .unwrap_err()
                    .is::<crate::UsageError>(),
                "{bad}"
            );
        }
    }

    #[test]
    fn locations_are_redacted() {
        let items = Items::build(
            "http://user:pw@127.0.0.1:9/t/{name}?token=secret&i={index}",
            vec![("name".into(), Column::Strs(vec!["a b".into()]))],
            None,
            settings(),
        )
        .unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items.kind, Kind::Http);
        let shown = items.location(0);
        assert!(
            !shown.contains("secret") && !shown.contains("pw"),
            "{shown}"
        );
        assert!(shown.contains("/t/a%20b"), "{shown}");
        assert_eq!(items.location(5), "item 5");
        let files = Items::build("/d/{index}.bin", vec![], Some(3), settings()).unwrap();
        assert_eq!(files.location(2), "/d/2.bin");
        assert_eq!(files.kind, Kind::File);
    }

    #[test]
    fn settings_for_the_wrong_kind_are_usage_errors() {
        let mut s = settings();
        s.headers = vec![("a".into(), "b".into())];
        let err = Items::build("/d/{index}", vec![], Some(1), s).unwrap_err();
        assert!(err.is::<crate::UsageError>());
        let mut s = settings();
        s.options = vec![("aws_region".into(), "x".into())];
        let err = Items::build("http://h/{index}", vec![], Some(1), s).unwrap_err();
        assert!(err.is::<crate::UsageError>());
        // Template errors come from dlrs-io, as invalid arguments.
        let err = Items::build("/d/{nope}", vec![], Some(1), settings()).unwrap_err();
        assert!(matches!(
            err.downcast_ref::<dlrs_io::Error>(),
            Some(dlrs_io::Error::InvalidArgument(m)) if m.contains("{nope}")
        ));
        let err = Items::build("/d/{index}", vec![], None, settings()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "length is required when there are no columns"
        );
    }
}
