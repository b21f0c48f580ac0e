//! Removing query strings, fragments and credentials from URLs before they reach a message.

/// `url` without its userinfo (user name and password), query string and fragment.
///
/// Works on strings that do not parse as URLs too: everything from the first `?` or `#` is cut,
/// and a `user:password@` after `scheme://` is removed.
pub fn redact_url(url: &str) -> String {
    if let Ok(mut parsed) = url::Url::parse(url)
        && !parsed.cannot_be_a_base()
    {
        // Both only fail for URLs that cannot have credentials (no host): nothing to remove then.
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        parsed.set_query(None);
        parsed.set_fragment(None);
        return parsed.into();
    }
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    match url.find("://") {
        Some(start) => {
            let authority_start = start + 3;
            let authority_end = url[authority_start..]
                .find('/')
                .map_or(url.len(), |i| authority_start + i);
            match url[authority_start..authority_end].rfind('@') {
                Some(at) => format!(
                    "{}{}",
                    &url[..authority_start],
                    &url[authority_start + at + 1..]
                ),
                None => url.to_owned(),
            }
        }
        None => url.to_owned(),
    }
}

/// `text` with every URL in it (a `scheme://` token) passed through [`redact_url`].
///
/// For messages of other libraries (reqwest, object_store) that may quote a URL.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        let start = rest[..sep]
            .char_indices()
            .rev()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let end = rest[sep..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| sep + i);
        let token = &rest[start..end];
        let trimmed = token.trim_end_matches([')', ']', '}', ',', ';', '.', ':']);
        out.push_str(&rest[..start]);
        out.push_str(&redact_url(trimmed));
        out.push_str(&token[trimmed.len()..]);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(input: &str, expected: &str) {
        assert_eq!(redact_url(input), expected, "redact_url({input:?})");
    }

    #[test]
    fn urls() {
        check("https://h.example/a/b.png", "https://h.example/a/b.png");
        check(
            "https://h.example/a?x-amz-signature=abc&b=1",
            "https://h.example/a",
        );
        check(
            "https://user:pw@h.example:8443/a#frag",
            "https://h.example:8443/a",
        );
        check("https://token@h.example/a", "https://h.example/a");
        check("s3://bucket/key?versionId=3", "s3://bucket/key");
        check("http://127.0.0.1:9/x%20y?q", "http://127.0.0.1:9/x%20y");
        // Not parseable as URLs: cut and stripped by hand.
        check("http://us er:p w@bad host/a?q=1", "http://bad host/a");
        check("no scheme?token=1", "no scheme");
        check("/plain/path", "/plain/path");
    }

    #[test]
    fn text() {
        assert_eq!(
            redact_text("error sending request for url (https://u:p@h/a?sig=1): reset"),
            "error sending request for url (https://h/a): reset"
        );
        assert_eq!(
            redact_text("a 'gs://b/k?x=1' and http://h/p#f, done."),
            "a 'gs://b/k' and http://h/p, done."
        );
        assert_eq!(redact_text("nothing here"), "nothing here");
        assert_eq!(redact_text("://odd?x"), "://odd");
        assert_eq!(redact_text("é://h/a?q"), "é://h/a");
        assert_eq!(redact_text("日本https://h/a?q 語"), "日本https://h/a 語");
    }

    proptest! {
        #[test]
        fn any_text_is_handled(text in any::<String>()) {
            // Neither panics (char boundaries), and text without a URL is left alone.
            let _ = redact_url(&text);
            let redacted = redact_text(&text);
            if !text.contains("://") {
                prop_assert_eq!(redacted, text);
            }
        }

        #[test]
        fn secrets_never_survive(
            user in "[a-z]{1,8}",
            password in "[A-Za-z0-9]{1,12}",
            query in "[A-Za-z0-9=&]{1,20}",
            path in "(/[a-z0-9]{0,6}){0,3}",
            prefix in "[ a-z(:]{0,10}",
        ) {
            let url = format!("https://{user}:SECRET{password}@host.example{path}?QUERY{query}");
            let redacted = redact_url(&url);
            prop_assert!(!redacted.contains("SECRET") && !redacted.contains("QUERY"), "{}", redacted);
            let text = redact_text(&format!("{prefix}{url} tail"));
            prop_assert!(!text.contains("SECRET") && !text.contains("QUERY"), "{}", text);
            prop_assert!(text.ends_with(" tail"), "{}", text);
        }
    }
}
