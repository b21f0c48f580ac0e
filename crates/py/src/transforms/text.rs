//! `dataloader_rs.text.Tokenize`: a Hugging Face tokenizer run in Rust as a loader's
//! `transform`. A batch's texts are read under the interpreter, tokenised with it released (on
//! the worker, in parallel with the other workers), and their ids made into lists under it again.

use std::sync::Arc;

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use dlrs_transforms::text::Tokenizer;

use crate::args::{bool_arg, str_arg};
use crate::errors::image_error;
use crate::text::{shown, type_name, wrong_type};

/// What a `Tokenize` does to an item, shared with the loaders it is given to.
#[derive(Debug)]
pub struct TextStep {
    tokenizer: Tokenizer,
    /// The key of a dict item's text; None: the item is the text.
    field: Option<String>,
    /// The key of the ids in the dict made from a dict item.
    into: String,
    /// `repr(field)`, for messages.
    field_repr: String,
}

impl TextStep {
    /// The text of `item`, borrowed from it.
    fn text_of<'a>(&self, item: &'a Bound<'_, PyAny>) -> PyResult<TextOf<'a>> {
        match &self.field {
            None => text_in(item, "an item"),
            Some(field) => {
                let f = &self.field_repr;
                let dict = item.cast::<PyDict>().map_err(|_| {
                    wrong_type(&format!("Tokenize(field={f}) takes dict items"), item)
                })?;
                let value = dict.get_item(field)?.ok_or_else(|| {
                    PyKeyError::new_err(format!(
                        "Tokenize(field={f}): the item has no key {f} (its keys: {})",
                        shown(&dict.keys().into_any())
                    ))
                })?;
                text_in(&value, &format!("item[{f}]")).map(TextOf::owned)
            }
        }
    }

    /// The transformed item: the ids as a list, or for a dict item a copy of it with the ids
    /// under `into`.
    fn output<'py>(&self, item: Bound<'py, PyAny>, ids: &[u32]) -> PyResult<Bound<'py, PyAny>> {
        let py = item.py();
        let list = PyList::new(py, ids)?.into_any();
        if self.field.is_none() {
            return Ok(list);
        }
        let dict = item.cast_into::<PyDict>()?.copy()?;
        dict.set_item(&self.into, list)?;
        Ok(dict.into_any())
    }

    /// One item, on a thread that holds the interpreter (released while it tokenises).
    pub fn apply_attached<'py>(&self, item: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = item.py();
        let ids = {
            let text = self.text_of(&item)?;
            let text = text.as_str();
            crate::seam::run_detached(py, || self.tokenizer.ids(text))
                .map_err(|e| image_error(&e))?
        };
        self.output(item, &ids)
    }

    /// The items of a batch, on a thread that holds the interpreter: their texts read, then all
    /// tokenised in one release of it, then made into outputs. An error stays with its item.
    pub fn apply_batch_attached<'py>(
        &self,
        py: Python<'py>,
        items: Vec<(u64, PyResult<Bound<'py, PyAny>>)>,
    ) -> Vec<(u64, PyResult<Bound<'py, PyAny>>)> {
        let ids: Vec<Option<PyResult<Vec<u32>>>> = {
            let texts: Vec<Option<PyResult<TextOf<'_>>>> = items
                .iter()
                .map(|(_, item)| item.as_ref().ok().map(|x| self.text_of(x)))
                .collect();
            let tokenised = crate::seam::run_detached(py, || {
                texts
                    .iter()
                    .map(|t| match t {
                        Some(Ok(text)) => Some(self.tokenizer.ids(text.as_str())),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
            });
            texts
                .into_iter()
                .zip(tokenised)
                .map(|(text, ids)| match (text, ids) {
                    (Some(Err(e)), _) => Some(Err(e)),
                    (_, Some(r)) => Some(r.map_err(|e| image_error(&e))),
                    _ => None,
                })
                .collect()
        };
        items
            .into_iter()
            .zip(ids)
            .map(|((index, item), ids)| {
                let out = match (item, ids) {
                    (Ok(item), Some(Ok(ids))) => self.output(item, &ids),
                    (Ok(_), Some(Err(e))) | (Err(e), _) => Err(e),
                    (Ok(_), None) => unreachable!("every item read has its ids"),
                };
                (index, out)
            })
            .collect()
    }

    /// The ids of UTF-8 bytes fetched in Rust, on a thread that does not hold the interpreter.
    pub fn ids_of_bytes(&self, bytes: &[u8]) -> PyResult<Vec<u32>> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            PyValueError::new_err(format!("Tokenize takes UTF-8 text; the item's bytes: {e}"))
        })?;
        self.tokenizer.ids(text).map_err(|e| image_error(&e))
    }

    /// Whether the items are dicts whose `field` is tokenised.
    pub fn takes_dicts(&self) -> bool {
        self.field.is_some()
    }
}

/// The text of an item: borrowed from a `str` or `bytes` it is, or owned when read from a dict.
enum TextOf<'a> {
    Borrowed(&'a str),
    Owned(String),
}

impl TextOf<'_> {
    fn owned(t: TextOf<'_>) -> TextOf<'static> {
        TextOf::Owned(t.as_str().to_owned())
    }

    fn as_str(&self) -> &str {
        match self {
            TextOf::Borrowed(s) => s,
            TextOf::Owned(s) => s,
        }
    }
}

/// `obj` as text: a `str`, or `bytes` holding UTF-8; `what` names it in errors.
fn text_in<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<TextOf<'a>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return s.to_str().map(TextOf::Borrowed);
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return std::str::from_utf8(b.as_bytes())
            .map(TextOf::Borrowed)
            .map_err(|e| {
                PyValueError::new_err(format!("Tokenize takes UTF-8 text; {what} is bytes: {e}"))
            });
    }
    Err(PyTypeError::new_err(format!(
        "Tokenize takes a str (or UTF-8 bytes); {what} is {}",
        type_name(obj)
    )))
}

/// `Tokenize(tokenizer, *, field=None, into="input_ids", add_special_tokens=True)`.
///
/// `tokenizer`: a `tokenizers.Tokenizer`, a `transformers` fast tokenizer (its
/// `backend_tokenizer`), or the text of a `tokenizer.json`.
#[pyclass(frozen, module = "dataloader_rs.text", name = "Tokenize")]
pub struct Tokenize {
    step: Arc<TextStep>,
    /// The tokenizer's JSON, for pickling.
    json: Arc<str>,
}

impl Tokenize {
    /// What the loader runs.
    pub fn step(&self) -> Arc<TextStep> {
        Arc::clone(&self.step)
    }
}

/// The JSON of `tokenizer`: a str is taken as it is; otherwise its `to_str()`, or that of its
/// `backend_tokenizer`.
fn tokenizer_json(tokenizer: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = tokenizer.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    let backend = match tokenizer.getattr("backend_tokenizer") {
        Ok(b) => b,
        Err(_) => tokenizer.clone(),
    };
    let Ok(to_str) = backend.getattr("to_str") else {
        return Err(wrong_type(
            "Tokenize: tokenizer must be a tokenizers.Tokenizer, a transformers fast tokenizer \
             or the text of a tokenizer.json",
            tokenizer,
        ));
    };
    to_str.call0()?.extract::<String>()
}

#[pymethods]
impl Tokenize {
    #[new]
    #[pyo3(
        signature = (tokenizer, *, field = None, into = None, add_special_tokens = None),
        text_signature = "(tokenizer, *, field=None, into='input_ids', add_special_tokens=True)"
    )]
    fn new(
        tokenizer: &Bound<'_, PyAny>,
        field: Option<&Bound<'_, PyAny>>,
        into: Option<&Bound<'_, PyAny>>,
        add_special_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let owner = "Tokenize";
        let field = match field.filter(|f| !f.is_none()) {
            Some(f) => Some(str_arg(owner, "field", f)?),
            None => None,
        };
        let into = match into {
            Some(i) => str_arg(owner, "into", i)?,
            None => "input_ids".to_owned(),
        };
        let special = match add_special_tokens {
            Some(b) => bool_arg(owner, "add_special_tokens", b)?,
            None => true,
        };
        let field_repr = field.as_deref().map_or_else(
            || "None".to_owned(),
            |f| shown(&PyString::new(tokenizer.py(), f).into_any()),
        );
        let json = tokenizer_json(tokenizer)?;
        let tokenizer = Tokenizer::from_json(&json, special).map_err(|e| image_error(&e))?;
        Ok(Self {
            step: Arc::new(TextStep {
                tokenizer,
                field,
                into,
                field_repr,
            }),
            json: json.into(),
        })
    }

    /// Tokenises one item as the loader does: the ids of a text as a list, or for a dict item
    /// (with `field`) a copy of it with the ids under `into`.
    #[pyo3(signature = (item, /))]
    fn __call__<'py>(&self, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.step.apply_attached(item.clone())
    }

    /// The number of tokens in the vocabulary, added tokens included.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.step.tokenizer.vocab_size()
    }

    #[getter]
    fn field(&self) -> Option<&str> {
        self.step.field.as_deref()
    }

    #[getter]
    fn into(&self) -> &str {
        &self.step.into
    }

    #[getter]
    fn add_special_tokens(&self) -> bool {
        self.step.tokenizer.add_special_tokens()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let py_str = |s: &str| shown(&PyString::new(py, s).into_any());
        let field = &self.step.field_repr;
        let special = if self.add_special_tokens() {
            "True"
        } else {
            "False"
        };
        format!(
            "Tokenize(<tokenizer of {} tokens>, field={field}, into={}, add_special_tokens={special})",
            self.vocab_size(),
            py_str(&self.step.into)
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.get();
        let kwargs = PyDict::new(py);
        kwargs.set_item("field", this.field())?;
        kwargs.set_item("into", this.into())?;
        kwargs.set_item("add_special_tokens", this.add_special_tokens())?;
        // `Tokenize(json, **kwargs)` through functools.partial: __reduce__ passes no keywords.
        let partial = py.import("functools")?.getattr("partial")?;
        let make = partial.call((slf.get_type(),), Some(&kwargs))?;
        PyTuple::new(py, [make, PyTuple::new(py, [&*this.json])?.into_any()])
    }
}
