//! The one way a closed set of names (effects, scopes, codes,
//! `over_access`) is shown and read back: `Display` is the variant's
//! `as_str`, and parsing finds the variant in the type's `ALL` whose name
//! it is, so a name added to `ALL` parses with no second list to keep.

/// `Display` for a type with `fn as_str(self) -> &'static str`; with
/// `parse: ErrorType, "what", "expected …"`, also the parse error type
/// (its message `unknown WHAT "s"` plus the expectation) and `FromStr`
/// over the type's `ALL`.
macro_rules! closed_names {
    ($ty:ident) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    ($ty:ident, parse: $err:ident, $what:literal, $expected:literal) => {
        $crate::closed_names::closed_names!($ty);

        #[doc = concat!("A string that is not a known ", $what, ".")]
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $err(pub String);

        impl ::std::fmt::Display for $err {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!("unknown ", $what, " {:?}", $expected), self.0)
            }
        }

        impl ::std::error::Error for $err {}

        impl ::std::str::FromStr for $ty {
            type Err = $err;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $err(s.to_owned()))
            }
        }
    };
}
pub(crate) use closed_names;
