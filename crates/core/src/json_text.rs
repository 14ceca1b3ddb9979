//! [`JsonText`]: a JSON value held as its compact text.
//!
//! A plan step's arguments are written once, when planned, and then only
//! shown, digested or sent upstream on apply — never edited. Held as a
//! [`serde_json::Value`] a small object costs far more than its text (a
//! two-field object is a `BTreeMap` node of about 600 bytes plus a heap
//! string per key and value), and a gateway keeps the folded plans of
//! every recently used key in memory. Held as text it costs its length.
//! It is parsed back only where a value is needed (a view, a digest, the
//! call on apply); the text it holds is valid JSON by construction, so
//! that parse cannot fail.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON value held as compact JSON text (see the module docs).
///
/// It serializes as the JSON value itself (not as a string), so a record
/// holding one has the same wire form as one holding a [`Value`], and it
/// reads one from text or from a [`Value`] alike, keeping `serde_json`'s
/// compact text (object keys sorted); [`JsonText::from_text`] keeps text
/// as given. Two are equal when their values are.
#[derive(Clone)]
pub struct JsonText(Box<RawValue>);

/// Any JSON value: what it holds is the tool's own (arguments, a result).
impl schemars::JsonSchema for JsonText {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "JsonValue".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::Schema::from(true)
    }
}

impl JsonText {
    /// The compact text of `value`.
    pub fn from_value(value: &Value) -> JsonText {
        // Writing a `Value` to text cannot fail: its keys are strings and
        // its numbers finite (it has no other way to hold them); `null`
        // rather than a panic if it ever did.
        JsonText(
            serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned()),
        )
    }

    /// Holds `text` as it is, after checking it is one JSON value (a scan,
    /// not a parse into a tree): text read back from storage, kept as
    /// written so that whoever needs a value parses it once, straight into
    /// the type it wants.
    pub fn from_text(text: String) -> Result<JsonText, serde_json::Error> {
        RawValue::from_string(text).map(JsonText)
    }

    /// The value, parsed from the text.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for JsonText {
    /// Equal values: at once when the texts are equal (`serde_json` writes
    /// equal values alike), else by parsing both — text kept as another
    /// writer wrote it ([`JsonText::from_text`]) may differ in layout or
    /// key order and still be equal.
    fn eq(&self, other: &JsonText) -> bool {
        self.as_str() == other.as_str() || self.value() == other.value()
    }
}

impl PartialEq<Value> for JsonText {
    fn eq(&self, other: &Value) -> bool {
        self.value() == *other
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonText, D::Error> {
        // Through a `Value`, not `RawValue`'s own deserializer: events are
        // internally tagged enums, which serde buffers, and a buffered
        // value cannot hand out its raw text. The value is short-lived;
        // what is kept is its compact text.
        Value::deserialize(d).map(|value| JsonText::from_value(&value))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn it_serializes_as_the_value_itself() {
        let v = json!({"b": [1, 2.5, "x"], "a": {"z": null, "y": true}});
        let t = JsonText::from_value(&v);
        assert_eq!(t.as_str(), r#"{"a":{"y":true,"z":null},"b":[1,2.5,"x"]}"#);
        assert_eq!(serde_json::to_string(&t).unwrap(), t.as_str());
        assert_eq!(serde_json::to_value(&t).unwrap(), v);
        assert_eq!(t.value(), v);
        assert_eq!(t, v);
    }

    #[test]
    fn it_reads_from_text_and_from_a_value_alike() {
        let v = json!({"title": "t", "id": 7});
        let from_text: JsonText = serde_json::from_str(r#"{"id":7,"title":"t"}"#).unwrap();
        let from_value: JsonText = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(from_text, from_value);
        assert_eq!(from_text.value(), v);
    }

    #[test]
    fn text_from_another_writer_is_held_as_serde_json_writes_it() {
        let ours = JsonText::from_value(&json!({"a": [1, 2], "b": 1}));
        let spaced: JsonText = serde_json::from_str("{ \"b\" : 1,\n \"a\" : [ 1 , 2 ] }").unwrap();
        assert_eq!(spaced.as_str(), r#"{"a":[1,2],"b":1}"#);
        assert_eq!(spaced, ours);
        assert_ne!(spaced, JsonText::from_value(&json!({"a": [1, 2], "b": 2})));
        // Whitespace inside strings is content, not layout.
        let s: JsonText = serde_json::from_str(r#"{"a":"x y\" {z"}"#).unwrap();
        assert_eq!(s.as_str(), r#"{"a":"x y\" {z"}"#);
        assert_eq!(s.value(), json!({"a": "x y\" {z"}));
    }

    #[test]
    fn stored_text_is_kept_as_written_and_compares_by_value() {
        let stored = JsonText::from_text("{ \"b\": 1, \"a\": [1, 2] }".to_owned()).unwrap();
        assert_eq!(stored.as_str(), "{ \"b\": 1, \"a\": [1, 2] }");
        assert_eq!(stored, JsonText::from_value(&json!({"a": [1, 2], "b": 1})));
        assert_ne!(stored, JsonText::from_value(&json!({"a": [1, 2], "b": 2})));
        assert_eq!(stored.value(), json!({"a": [1, 2], "b": 1}));
        assert!(JsonText::from_text("{\"a\":".to_owned()).is_err());
        assert!(JsonText::from_text("1 2".to_owned()).is_err());
    }

    #[test]
    fn numbers_survive_the_round_trip() {
        let v = json!({"big": 9007199254740993u64, "neg": -3, "f": 0.1, "e": 1e300});
        let t = JsonText::from_value(&v);
        assert_eq!(t.value(), v);
        let back: JsonText = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.value(), v);
    }

    #[test]
    fn scalars_and_empty_values_are_held_too() {
        for v in [json!(null), json!("s"), json!(1), json!([]), json!({})] {
            let t = JsonText::from_value(&v);
            assert_eq!(t.value(), v);
            let back: JsonText = serde_json::from_str(t.as_str()).unwrap();
            assert_eq!(back, t);
        }
    }
}
