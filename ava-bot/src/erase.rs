//! Erasing a person (`ava erase`, the bot's `/erase`): the facade's
//! [`ava_memory::erase`], the one definition of what it takes, and the lease names it ends.

pub(crate) use ava_memory::erase::{confirmation_lease, delete_each, erase_person};
