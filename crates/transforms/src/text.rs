//! Text tokenising: a Hugging Face tokenizer, read from its `tokenizer.json`, run in Rust.
//!
//! The tokenizer is the `tokenizers` library itself, the one the Python package wraps, so a
//! text gets the ids `tokenizers.Tokenizer.encode(text).ids` gives, with the tokenizer's own
//! truncation and padding. A loader tokenises a batch's texts on its worker without the
//! interpreter.

use std::fmt;

use crate::Error;

/// A tokenizer from a `tokenizer.json` that turns a text into token ids.
///
/// ```
/// use dlrs_transforms::text::Tokenizer;
///
/// // A word-level tokenizer split on whitespace, as `tokenizers` writes one.
/// let json = r#"{
///   "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
///   "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
///   "decoder": null,
///   "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2},
///             "unk_token": "[UNK]"}
/// }"#;
/// let tokenizer = Tokenizer::from_json(json, true)?;
/// assert_eq!(tokenizer.ids("hello brave world")?, [1, 0, 2]);
/// # Ok::<(), dlrs_transforms::Error>(())
/// ```
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    add_special_tokens: bool,
}

impl Tokenizer {
    /// The tokenizer a `tokenizer.json` describes (the text `tokenizers.Tokenizer.to_str()`
    /// returns); `add_special_tokens` as in `encode` (its post-processor's `[CLS]`, `</s>`...).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the text is not a tokenizer's JSON.
    pub fn from_json(json: &str, add_special_tokens: bool) -> Result<Self, Error> {
        let inner = json
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| Error::arg("Tokenize", format!("not a tokenizer.json: {e}")))?;
        Ok(Self {
            inner,
            add_special_tokens,
        })
    }

    /// The ids of `text`.
    ///
    /// # Errors
    /// [`Error::Text`] when the tokenizer fails on it (a truncation it cannot honour, say).
    pub fn ids(&self, text: &str) -> Result<Vec<u32>, Error> {
        // `encode_fast` skips the offsets, which the ids do not depend on.
        self.inner
            .encode_fast(text, self.add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Text {
                reason: e.to_string(),
            })
    }

    /// Whether the special tokens of the post-processor are added.
    pub fn add_special_tokens(&self) -> bool {
        self.add_special_tokens
    }

    /// The number of tokens in the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("add_special_tokens", &self.add_special_tokens)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::Tokenizer;
    use crate::Error;

    /// A WordPiece tokenizer with a BERT post-processor and truncation to `max` tokens.
    fn bert(max: usize) -> String {
        format!(
            r###"{{
  "version": "1.0",
  "truncation": {{"direction": "Right", "max_length": {max}, "strategy": "LongestFirst", "stride": 0}},
  "padding": null,
  "added_tokens": [
    {{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}},
    {{"id": 1, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}},
    {{"id": 2, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}}
  ],
  "normalizer": {{"type": "Lowercase"}},
  "pre_tokenizer": {{"type": "Whitespace"}},
  "post_processor": {{
    "type": "TemplateProcessing",
    "single": [{{"SpecialToken": {{"id": "[CLS]", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}, {{"SpecialToken": {{"id": "[SEP]", "type_id": 0}}}}],
    "pair": [{{"Sequence": {{"id": "A", "type_id": 0}}}}, {{"Sequence": {{"id": "B", "type_id": 1}}}}],
    "special_tokens": {{
      "[CLS]": {{"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]}},
      "[SEP]": {{"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}}
    }}
  }},
  "decoder": null,
  "model": {{
    "type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
    "max_input_chars_per_word": 100,
    "vocab": {{"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "play": 3, "##ing": 4, "cat": 5, "##s": 6}}
  }}
}}"###
        )
    }

    #[test]
    fn word_pieces_get_their_ids_with_the_special_tokens() {
        let t = Tokenizer::from_json(&bert(32), true).unwrap();
        assert_eq!(t.ids("Playing cats").unwrap(), [1, 3, 4, 5, 6, 2]);
        assert_eq!(t.ids("").unwrap(), [1, 2]);
        assert_eq!(t.ids("dogs").unwrap(), [1, 0, 2]);
        let plain = Tokenizer::from_json(&bert(32), false).unwrap();
        assert_eq!(plain.ids("Playing cats").unwrap(), [3, 4, 5, 6]);
        assert!(!plain.add_special_tokens());
        assert_eq!(plain.vocab_size(), 7);
    }

    #[test]
    fn the_tokenizers_truncation_holds() {
        let t = Tokenizer::from_json(&bert(4), true).unwrap();
        assert_eq!(t.ids("playing cats playing").unwrap(), [1, 3, 4, 2]);
    }

    #[test]
    fn text_that_is_no_tokenizer_is_an_invalid_argument() {
        for json in ["", "{}", "[1, 2]", r#"{"model": {"type": "Nope"}}"#] {
            let err = Tokenizer::from_json(json, true).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument { transform: "Tokenize", reason }
                    if reason.starts_with("not a tokenizer.json: ")),
                "{json:?}: {err}"
            );
        }
    }
}
