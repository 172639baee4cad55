//! The prompts built for a scope, kept as records of it: the one record keeping, in the
//! facade ([`ava_memory::prompts`]), which the next prompt of a conversation extends and
//! `/context`, the proxy's explain endpoint and the inspector read.

pub(crate) use ava_memory::prompts::{Builder, Built, PROMPTS_KEPT, keep, newest, previous};
