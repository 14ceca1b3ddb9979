//! Which of a call's arguments its tool declares (docs/config.md, "Rules
//! see what the tool takes").
//!
//! An operator's rule decides on a call's arguments, and the upstream acts
//! on the arguments it knows. An argument the tool's `inputSchema` does
//! not declare is one the upstream ignores — so a rule reading it would
//! decide on something that does not happen: a `move_file` from
//! `protected/` carrying a decoy `"path": "scratch/x"` would pass a rule
//! about `path`. So an argument the schema does not declare is refused,
//! unless the schema explicitly allows more (`additionalProperties: true`
//! or a schema, `patternProperties`); then it is let through, and the rules
//! are told which top-level arguments carry such values.
//!
//! JSON Schema's own default lets undeclared properties through; plangate
//! does not where a schema lists `properties`, because its rules must see
//! what runs. A schema that lists none (`{}`, `{"type": "object"}`) says
//! nothing of the shape and allows anything; schemas that declare
//! properties through `$ref` or conditional keywords are not resolved
//! here: an object under one allows more (the rules still hear about it).

use serde_json::{Map, Value};

/// What a call's arguments carry beyond what the tool's schema declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Undeclared {
    /// JSON pointers of properties the schema neither declares nor allows:
    /// the call is refused (`invalid_arguments`), naming them.
    pub refused: Vec<String>,
    /// Top-level arguments holding a property the schema does not declare
    /// but allows: forwarded, but no rule that widens what runs may
    /// decide on them.
    pub allowed: Vec<String>,
}

/// At most this many refused pointers are named: enough to fix a call,
/// bounded for a hostile one.
const MAX_NAMED: usize = 10;

/// Checks `arguments` against `schema` (a tool's `inputSchema`): every
/// object's properties must be declared by its schema's `properties`,
/// unless that schema allows more.
pub fn undeclared(schema: &Map<String, Value>, arguments: &Value) -> Undeclared {
    let mut out = Undeclared::default();
    walk(schema, arguments, "", None, &mut out);
    out.allowed.sort();
    out.allowed.dedup();
    out
}

/// What one object schema declares.
struct Declares<'s> {
    properties: Vec<&'s Map<String, Value>>,
    /// `additionalProperties` as a schema to check extra values against.
    extra: Option<&'s Map<String, Value>>,
    /// Whether properties beyond `properties` are allowed.
    allows_more: bool,
}

fn declares(schema: &Map<String, Value>) -> Declares<'_> {
    let mut properties: Vec<&Map<String, Value>> = Vec::new();
    properties.extend(schema.get("properties").and_then(Value::as_object));
    // Properties declared by the branches of a combination count: the
    // upstream takes each of them in some shape.
    for key in ["allOf", "anyOf", "oneOf"] {
        for branch in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            properties.extend(
                branch
                    .as_object()
                    .and_then(|b| b.get("properties"))
                    .and_then(Value::as_object),
            );
        }
    }
    let unresolved = ["$ref", "patternProperties", "if", "dependentSchemas"]
        .iter()
        .any(|k| schema.contains_key(*k));
    // A schema that lists no properties says nothing of the value's shape
    // (`{}`, `{"type": "object"}`, `"properties": {}`: any object): it
    // allows more, unless it says `additionalProperties: false`.
    let silent = properties.iter().all(|p| p.is_empty());
    let (extra, allows_more) = match schema.get("additionalProperties") {
        Some(Value::Bool(true)) => (None, true),
        Some(Value::Object(extra)) => (Some(extra), true),
        Some(Value::Bool(false)) => (None, unresolved),
        _ => (None, unresolved || silent),
    };
    Declares {
        properties,
        extra,
        allows_more,
    }
}

fn walk(
    schema: &Map<String, Value>,
    value: &Value,
    pointer: &str,
    top: Option<&str>,
    out: &mut Undeclared,
) {
    match value {
        Value::Object(object) => {
            let declared = declares(schema);
            // Below the top, a property whose schema lists nothing of its
            // shape takes any value: nothing in it is undeclared. (At the
            // top, the tool's own arguments are still told to the rules.)
            if top.is_some()
                && declared.properties.iter().all(|p| p.is_empty())
                && declared.allows_more
            {
                return;
            }
            for (key, item) in object {
                let at = format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
                let top = top.unwrap_or(key);
                let property = declared.properties.iter().find_map(|p| p.get(key));
                match (property, declared.allows_more) {
                    (Some(sub), _) => {
                        if let Some(sub) = sub.as_object() {
                            walk(sub, item, &at, Some(top), out);
                        }
                    }
                    (None, true) => {
                        out.allowed.push(top.to_owned());
                        if let Some(extra) = declared.extra {
                            walk(extra, item, &at, Some(top), out);
                        }
                    }
                    (None, false) => {
                        if out.refused.len() < MAX_NAMED {
                            out.refused.push(at);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").and_then(Value::as_object) {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{pointer}/{i}"), top, out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    /// server-filesystem's `move_file`, as it lists it: no
    /// `additionalProperties`.
    fn move_file() -> Map<String, Value> {
        schema(json!({
            "type": "object",
            "properties": {"source": {"type": "string"}, "destination": {"type": "string"}},
            "required": ["source", "destination"],
        }))
    }

    #[test]
    fn a_decoy_beside_the_declared_arguments_is_refused_by_name() {
        let args = json!({"source": "/a", "destination": "/b", "path": "/scratch/decoy"});
        let u = undeclared(&move_file(), &args);
        assert_eq!(u.refused, ["/path"]);
        assert!(u.allowed.is_empty());
        let args = json!({"source": "/a", "destination": "/b"});
        assert_eq!(undeclared(&move_file(), &args), Undeclared::default());
    }

    #[test]
    fn nested_objects_and_list_items_are_checked_against_their_own_schemas() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "edits": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"oldText": {}, "newText": {}},
                }},
            },
        }));
        let args = json!({"path": "/x", "edits": [{"oldText": "a", "newText": "b"}, {"oldText": "c", "newText": "d", "path": "/y"}]});
        assert_eq!(undeclared(&s, &args).refused, ["/edits/1/path"]);
    }

    #[test]
    fn a_schema_that_allows_more_lets_them_through_and_says_where() {
        let s = schema(json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "opts": {"type": "object", "additionalProperties": true}},
            "additionalProperties": {"type": "string"},
        }));
        let args = json!({"path": "/x", "extra": "y", "opts": {"any": 1}});
        let u = undeclared(&s, &args);
        assert!(u.refused.is_empty());
        assert_eq!(
            u.allowed,
            ["extra"],
            "opts takes any object: nothing in it is undeclared"
        );
        // Declared through a combination: declared.
        let s = schema(json!({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}));
        assert_eq!(
            undeclared(&s, &json!({"a": 1, "b": 2})),
            Undeclared::default()
        );
        // Through a reference plangate does not resolve: allowed, and said.
        let s = schema(json!({"$ref": "#/$defs/args", "$defs": {"args": {}}}));
        assert_eq!(undeclared(&s, &json!({"a": 1})).allowed, ["a"]);
        // Any value: a property whose schema lists no properties takes any
        // object; so does a tool whose schema lists none.
        let s = schema(json!({"properties": {"name": {}, "value": {}}}));
        let u = undeclared(
            &s,
            &json!({"name": "x", "value": {"host": "h", "password": "p"}}),
        );
        assert_eq!(u, Undeclared::default());
        let s = schema(json!({"type": "object"}));
        assert_eq!(undeclared(&s, &json!({"a": 1})).allowed, ["a"]);
        let s = schema(json!({"type": "object", "properties": {}}));
        assert_eq!(undeclared(&s, &json!({"a": 2, "b": 3})).allowed, ["a", "b"]);
        let s = schema(json!({"type": "object", "additionalProperties": false}));
        assert_eq!(undeclared(&s, &json!({"a": 1})).refused, ["/a"]);
    }

    #[test]
    fn names_with_slashes_are_escaped_and_the_list_is_bounded() {
        let mut args = Map::new();
        for i in 0..50 {
            args.insert(format!("a/{i}"), json!(1));
        }
        let u = undeclared(&move_file(), &Value::Object(args));
        assert_eq!(u.refused.len(), MAX_NAMED);
        assert!(u.refused[0].starts_with("/a~1"), "{:?}", u.refused);
    }
}
